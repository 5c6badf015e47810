"""Property tests for the JSON algebra."""

import copy
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stateflow.doc.canonical import decode, encode, equality_key, identical, json_equal
from stateflow.doc.diff import Edit, apply_edits, diff, to_patch
from stateflow.doc.merge import merge_patch, overlay
from stateflow.doc.ops import apply_ops, parse_ops
from stateflow.doc.paths import Range
from stateflow.doc.select import select
from stateflow.errors import OpError, SelectionError

keys = st.text(alphabet="abcxyz", min_size=1, max_size=3)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
documents = st.dictionaries(keys, json_values, max_size=5)

null_free_scalars = st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5)
null_free_values = st.recursive(
    null_free_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
null_free_documents = st.dictionaries(keys, null_free_values, max_size=5)


@given(documents, documents)
def test_diff_then_apply_reconstructs_exactly(old: dict[str, Any], new: dict[str, Any]) -> None:
    frozen = copy.deepcopy(old)
    assert identical(apply_edits(old, diff(old, new)), new)
    assert identical(old, frozen)


@given(documents, documents)
def test_edits_survive_their_storage_encoding(old: dict[str, Any], new: dict[str, Any]) -> None:
    edits = diff(old, new)
    stored = [Edit.from_json(e) for e in decode(encode([e.to_json() for e in edits]))]
    assert identical(apply_edits(old, stored), new)


@given(documents)
def test_diff_of_a_document_with_itself_is_empty(doc: dict[str, Any]) -> None:
    assert diff(doc, copy.deepcopy(doc)) == []


@given(null_free_documents, null_free_documents)
def test_the_semantic_patch_rebuilds_null_free_documents(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert merge_patch(old, to_patch(diff(old, new))) == new


@given(null_free_documents, null_free_documents)
def test_merge_patch_is_idempotent(doc: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(doc, patch)
    assert merge_patch(once, patch) == once


@given(documents, documents, documents)
def test_overlay_folds_layers_broadest_first(a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]) -> None:
    # Not associative in general: a non-object in the middle layer hides the broadest layer's
    # object, so only the left fold (global, then cwd, then session) is the definition.
    assert overlay(a, b, c) == overlay(overlay(a, b), c)


def test_a_middle_non_object_hides_the_broadest_object() -> None:
    assert overlay({"x": {"a": 1}}, {"x": "s"}, {"x": {"b": 2}}) == {"x": {"b": 2}}


@given(st.lists(st.integers(), max_size=30), st.integers(0, 40), st.integers(0, 40))
def test_range_selection_matches_python_slicing_or_fails(items: list[int], a: int, b: int) -> None:
    assume(a <= b)
    if b <= len(items):
        assert select(items, [Range(a, b)], "p") == items[a:b]
        assert len(select(items, [Range(a, b)], "p")) == b - a
    else:
        with pytest.raises(SelectionError):
            select(items, [Range(a, b)], "p")


op_paths = st.lists(keys | st.integers(0, 3), min_size=1, max_size=3)
simple_ops = st.lists(
    st.one_of(
        st.builds(lambda p, v: {"op": "set", "path": p, "value": v}, op_paths, json_values),
        st.builds(lambda p: {"op": "remove", "path": p}, op_paths),
        st.builds(
            lambda p, items: {"op": "set_by_key", "path": p, "key_field": "id", "value": items},
            st.lists(keys, min_size=1, max_size=2),
            st.lists(
                st.builds(lambda k, v: {"id": k, "v": v}, st.integers(0, 3), json_values),
                max_size=3,
                unique_by=lambda i: i["id"],
            ),
        ),
    ),
    max_size=6,
)


@settings(max_examples=200)
@given(documents, simple_ops)
def test_op_batches_never_mutate_their_input(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    frozen = copy.deepcopy(doc)
    parsed = parse_ops(ops)
    try:
        result = apply_ops(doc, parsed)
    except OpError:
        result = None
    assert identical(doc, frozen)
    if result is not None:
        # applying the same batch again from the same input gives the same document
        assert identical(apply_ops(doc, parsed).document, result.document)


@given(documents, null_free_documents, documents)
def test_merge_patches_with_disjoint_keys_compose_in_either_order(
    doc: dict[str, Any], p: dict[str, Any], q: dict[str, Any]
) -> None:
    q = {k: v for k, v in q.items() if k not in p}
    both = {**p, **q}
    assert merge_patch(merge_patch(doc, p), q) == merge_patch(doc, both)
    assert merge_patch(merge_patch(doc, q), p) == merge_patch(doc, both)


@given(documents, st.dictionaries(keys, null_free_values, max_size=4))
def test_object_only_patches_associate(doc: dict[str, Any], p: dict[str, Any]) -> None:
    """Where both patches only nest objects, applying p then its own sub-patch equals one merged patch."""
    q = {k: v for k, v in p.items() if type(v) is dict}
    combined = merge_patch(p, q)
    assert merge_patch(merge_patch(doc, p), q) == merge_patch(doc, combined)


small_scalars = st.none() | st.booleans() | st.sampled_from([0, 1, 1.0, -0.0, 2, 2.5, "1", "a", ""])
small_values = st.recursive(
    small_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("ab"), inner, max_size=2),
    max_leaves=6,
)


@given(small_values, small_values)
def test_equality_keys_agree_with_json_equality(a: Any, b: Any) -> None:
    """``equality_key`` matches values by one hash lookup: equal keys exactly for JSON-equal
    values (``1`` and ``1.0`` alike, ``true`` and ``1`` apart, key order ignored)."""
    assert (equality_key(a) == equality_key(b)) is json_equal(a, b)
    assert json_equal(a, b) <= (hash(equality_key(a)) == hash(equality_key(b)))
