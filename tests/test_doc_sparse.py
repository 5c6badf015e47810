"""An array held along paths only (``doc.sparse.Sparse``) goes through the algebra's steps
along those paths as the whole array does: the same results at the elements held, the same
length, the same refusals — and reaching an element not held is refused, never guessed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.diff import Edit, apply_below, diff_within, within
from stateflow.doc.merge import merge_patch, patch_within
from stateflow.doc.sparse import NotHeld, Sparse
from stateflow.errors import Conflict, PatchError

ARRAY = [{"n": i, "tags": [i, i + 1]} for i in range(12)]
INDICES = st.integers(min_value=0, max_value=14)  # (12 is an append, past it a refusal)
TAILS = st.sampled_from([(), ("n",), ("tags", 0), ("tags", 2), ("tags", 5), ("new", "deep")])
VALUES = st.sampled_from(["s", 1, None, {"a": [1]}, [2, 3]])


def _outcome(step: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", step(*args, **kwargs)
    except (Conflict, PatchError) as exc:
        return type(exc).__name__, str(exc)


def _as_held(value: Any, indices: set[int]) -> Any:
    """``value`` as its sparse form would hold it along paths through ``indices``."""
    if type(value) is Sparse:
        assert all(i in value.held for i in indices if i < len(value))
        return {i: value.held[i] for i in indices if i < len(value)}, len(value)
    return {i: value[i] for i in indices if i < len(value)}, len(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(INDICES, TAILS, VALUES, st.booleans()), min_size=1, max_size=4))
def test_edits_along_paths_apply_to_a_sparse_array_as_to_the_array(
    drawn: list[tuple[int, tuple[Any, ...], Any, bool]],
) -> None:
    edits = [
        Edit(("a", i, *tail)) if delete else Edit(("a", i, *tail), value) for i, tail, value, delete in drawn
    ]
    indices = {i for i, _, _, _ in drawn}
    whole: Any = {"a": ARRAY}
    sparse: Any = {"a": Sparse(len(ARRAY), {i: ARRAY[i] for i in indices if i < len(ARRAY)})}
    for edit in edits:
        got_whole = _outcome(apply_below, whole["a"], edit.path, 1, edit.value)
        got_sparse = _outcome(apply_below, sparse["a"], edit.path, 1, edit.value)
        assert got_whole[0] == got_sparse[0]
        if got_whole[0] != "ok":
            assert got_whole == got_sparse
            return
        whole, sparse = {"a": got_whole[1]}, {"a": got_sparse[1]}
        assert _as_held(whole["a"], indices) == _as_held(sparse["a"], indices)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(INDICES.map(lambda i: f"[{i}]"), st.sampled_from([{"n": -1}, {"x": {"y": 1}}, "v", None]))
)
def test_an_index_patch_merges_into_a_sparse_array_as_into_the_array(patch: dict[str, Any]) -> None:
    if not patch:
        return
    indices = {int(k[1:-1]) for k in patch}
    sparse = Sparse(len(ARRAY), {i: ARRAY[i] for i in indices if i < len(ARRAY)})
    got_whole = _outcome(merge_patch, {"a": ARRAY}, {"a": patch}, prune=True)
    got_sparse = _outcome(merge_patch, {"a": sparse}, {"a": patch}, prune=True)
    assert got_whole[0] == got_sparse[0]
    if got_whole[0] != "ok":
        assert got_whole == got_sparse
        return
    assert _as_held(got_whole[1]["a"], indices) == _as_held(got_sparse[1]["a"], indices)
    where = patch_within({"a": patch}, {})
    assert diff_within({"a": ARRAY}, got_whole[1], where) == diff_within({"a": sparse}, got_sparse[1], where)


def test_an_element_not_held_is_refused_not_guessed() -> None:
    sparse = Sparse(5, {1: "one"})
    with pytest.raises(NotHeld):
        sparse[2]
    with pytest.raises(NotHeld):
        list(sparse)
    with pytest.raises(NotHeld):  # (a diff that would need them)
        diff_within({"a": sparse}, {"a": Sparse(6, {1: "one", 5: "x"})}, within([("a",)]))
    # replaced by another kind: one set, no element needed
    assert diff_within({"a": sparse}, {"a": {"k": 1}}, within([("a", "k")])) == [Edit(("a",), {"k": 1})]
