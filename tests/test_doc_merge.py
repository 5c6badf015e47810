import copy
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.diff import apply_edits, diff_within
from stateflow.doc.merge import Emitted, is_index_patch, merge_patch, overlay, patch_within, prune_value
from stateflow.doc.select import MISSING
from stateflow.errors import PatchError
from stateflow.store.spares import Spares


def test_objects_merge_scalars_and_arrays_replace_null_deletes() -> None:
    target = {"a": {"x": 1, "y": 2}, "b": [1, 2], "c": "keep", "d": 5}
    patch = {"a": {"y": 3, "z": 4}, "b": [9], "d": None}
    assert merge_patch(target, patch) == {"a": {"x": 1, "y": 3, "z": 4}, "b": [9], "c": "keep"}


def test_inputs_are_never_mutated_and_untouched_subtrees_are_shared() -> None:
    target = {"a": {"x": [1, 2]}, "b": {"y": 1}}
    before = copy.deepcopy(target)
    out = merge_patch(target, {"b": {"y": 2}})
    assert target == before
    assert out["a"] is target["a"]


def test_indexed_array_patch_replaces_existing_elements() -> None:
    target = {"memory": ["a", "b", "c", "d", "e"]}
    out = merge_patch(target, {"memory": {"[1]": "B", "[4]": "E"}})
    assert out == {"memory": ["a", "B", "c", "d", "E"]}


def test_nested_indexed_patch_reaches_into_elements() -> None:
    target = {"groups": [{"notes": ["n0", "n1"], "k": 1}]}
    out = merge_patch(target, {"groups": {"[0]": {"notes": {"[1]": "fixed"}}}})
    assert out == {"groups": [{"notes": ["n0", "fixed"], "k": 1}]}


def test_indexed_object_element_is_patched_recursively_and_array_element_replaced() -> None:
    target = [{"a": 1, "b": 2}, [1, 2]]
    assert merge_patch(target, {"[0]": {"b": None, "c": 3}, "[1]": [7]}) == [{"a": 1, "c": 3}, [7]]


def test_out_of_range_index_fails_naming_the_index() -> None:
    with pytest.raises(PatchError, match=r"array index \[5\] is out of bounds for length 2"):
        merge_patch({"m": [1, 2]}, {"m": {"[0]": 0, "[5]": 1}})


def test_an_element_cannot_be_deleted() -> None:
    with pytest.raises(PatchError, match="cannot be deleted"):
        merge_patch({"m": [1, 2]}, {"m": {"[0]": None}})


@pytest.mark.parametrize(
    ("target", "patch", "message"),
    [
        ({"m": {"x": 1}}, {"m": {"[0]": "v"}}, r"index key '\[0\]' at \$\.m: the value there is an object"),
        ({}, {"m": {"[0]": "v"}}, r"index key '\[0\]' at \$\.m: the value there is absent"),
        ({"m": 3}, {"m": {"[ 1]": "v"}}, r"index key '\[ 1\]' at \$\.m: the value there is a number"),
        ({"m": [1, 2]}, {"m": {"[-1]": "v"}}, r"index key '\[-1\]' at \$\.m is not a valid array index"),
        ({"m": [1, 2]}, {"m": {"[01]": "v"}}, r"index key '\[01\]' at \$\.m is not a valid array index"),
        (
            {"m": [1, 2]},
            {"m": {"[0]": 1, "x": 2}},
            r"index key '\[0\]' at \$\.m is beside the object key 'x'",
        ),
        (
            {"m": [1, 2]},
            {"m": {"x": 2, "[0]": None}},
            r"index key '\[0\]' at \$\.m is beside the object key 'x'",
        ),
    ],
)
def test_index_keys_are_reserved_never_literal_keys(target: Any, patch: Any, message: str) -> None:
    # index syntax addresses existing array elements only (seed 000, "patch_state and arrays")
    with pytest.raises(PatchError, match=message):
        merge_patch(target, patch)


def test_ordinary_keys_against_an_array_replace_it_with_an_object() -> None:
    assert not is_index_patch({"[0]": 1, "x": 2})
    assert merge_patch({"m": [1]}, {"m": {"x": 2}}) == {"m": {"x": 2}}
    assert merge_patch({"m": [1]}, {"m": {"[note]": 2}}) == {"m": {"[note]": 2}}  # not index form


def test_leading_zero_index_is_not_an_index_selector() -> None:
    assert not is_index_patch({"[01]": 1})


def test_deleting_through_absent_ancestors_creates_no_empty_parents() -> None:
    missing: list[tuple[str | int, ...]] = []
    out = merge_patch({"a": 1}, {"x": {"y": {"z": None}}}, missing_deletions=missing)
    assert out == {"a": 1}
    assert missing == [("x", "y", "z")]


def test_null_on_an_absent_key_is_a_reported_no_op() -> None:
    missing: list[tuple[str | int, ...]] = []
    target = {"a": 1}
    assert merge_patch(target, {"b": None}, missing_deletions=missing) is target
    assert missing == [("b",)]


def test_object_onto_scalar_starts_from_an_empty_object() -> None:
    assert merge_patch({"a": 5}, {"a": {"x": 1, "y": None}}) == {"a": {"x": 1}}


def test_top_level_null_deletes_the_target() -> None:
    assert merge_patch({"a": 1}, None) is MISSING


def test_overlay_objects_merge_arrays_and_scalars_replace() -> None:
    g = {"rules": {"a": 1, "b": [1, 2]}, "name": "g"}
    c = {"rules": {"b": [3]}, "extra": True}
    s = {"rules": {"c": {"deep": 1}}}
    assert overlay(g, c, s) == {
        "rules": {"a": 1, "b": [3], "c": {"deep": 1}},
        "name": "g",
        "extra": True,
    }


def test_overlay_skips_absent_layers_and_never_deletes() -> None:
    assert overlay(MISSING, {"a": 1}, MISSING) == {"a": 1}
    assert overlay(MISSING, MISSING) is MISSING
    assert overlay({"a": {"x": 1}}, {"a": "scalar"}) == {"a": "scalar"}
    assert overlay({"a": "scalar"}, {"a": {"x": 1}}) == {"a": {"x": 1}}


# ------------------------------------------------------------------ pruning merge


def _prune_along(value: Any, patch: Any, before: Any) -> Any:
    """The reference: merge first, then prune empty objects along the patch's paths (how a
    patch_state's scope was pruned before the merge pruned as it went). An object patch left
    empty where ``before`` (the value merged onto) held a scalar or an array set nothing: that
    value is kept (an empty patch is a no-op; only null deletes)."""
    if type(patch) is not dict:
        return prune_value(value)
    if type(value) is list and is_index_patch(patch):
        out = list(value)
        for key, sub in patch.items():
            i = int(key[1:-1])
            out[i] = _kept(_prune_along(value[i], sub, before[i]), sub, before[i])
        return out
    if type(value) is not dict:
        return value
    out_obj = dict(value)
    for key, sub in patch.items():
        if key in value:
            prior = before.get(key, MISSING) if type(before) is dict else MISSING
            pv = _kept(_prune_along(value[key], sub, prior), sub, prior)
            if pv == {} and type(pv) is dict:
                del out_obj[key]
            else:
                out_obj[key] = pv
    return out_obj


def _kept(pruned: Any, sub: Any, prior: Any) -> Any:
    """``prior`` where an object patch ``sub`` onto that scalar or array left nothing."""
    emptied = pruned == {} and type(pruned) is dict and type(sub) is dict
    return prior if emptied and prior is not MISSING and type(prior) is not dict else pruned


PRUNE_KEYS = st.sampled_from(["a", "b", "c", "[0]", "[1]"])
PRUNE_SCALARS = st.booleans() | st.integers(-3, 3) | st.text(max_size=2)
PRUNE_VALUES = st.recursive(
    PRUNE_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(PRUNE_KEYS, inner, max_size=3),
    max_leaves=14,
)
PRUNE_PATCHES: st.SearchStrategy[Any] = st.recursive(
    st.none() | PRUNE_SCALARS | st.lists(PRUNE_VALUES, max_size=2) | st.just({}),
    lambda inner: st.dictionaries(PRUNE_KEYS, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(PRUNE_KEYS, PRUNE_VALUES, max_size=4),
    st.dictionaries(PRUNE_KEYS, PRUNE_PATCHES, min_size=1, max_size=3),
    st.booleans(),
)
def test_a_pruning_merge_is_the_merge_pruned_along_the_patch(
    doc: dict[str, Any], patch: dict[str, Any], spares: bool
) -> None:
    before = copy.deepcopy(doc)
    missing: list[Any] = []
    try:
        expected = _prune_along(merge_patch(doc, patch, missing_deletions=missing), patch, doc)
    except PatchError as exc:
        with pytest.raises(PatchError, match=re.escape(str(exc))):
            merge_patch(doc, patch, prune=True)
        return
    found: list[Any] = []
    copies = Spares(min_elements=0) if spares else None
    got = merge_patch(doc, patch, missing_deletions=found, copies=copies, prune=True)
    assert orjson.dumps(got) == orjson.dumps(expected)  # key order too
    assert found == missing
    assert doc == before
    if copies is not None:  # a spare brought up to date by the recorded steps is the same value
        again = merge_patch(got, {"z": 1}, copies=copies, prune=True)
        assert orjson.dumps(again) == orjson.dumps({**expected, "z": 1})


def test_a_pruning_merge_drops_what_it_leaves_empty_and_keeps_array_slots() -> None:
    doc = {"t": {"a": {"b": 1}, "e": {}, "l": [{"x": 1}, 2]}, "u": {"k": 1}}
    patch = {
        "t": {"a": {"b": None}, "e": {"gone": None}, "l": {"[0]": {"x": None}}, "n": {"m": {}}},
        "u": {"k": None},
    }
    assert merge_patch(doc, patch, prune=True) == {"t": {"l": [{}, 2]}}
    assert merge_patch(doc, {"t": {"v": [{"a": {}}, {}]}}, prune=True)["t"]["v"] == [{}, {}]


# ------------------------------------------------------------------ the merge's own edits


@settings(max_examples=800, deadline=None)
@given(
    st.dictionaries(PRUNE_KEYS, PRUNE_VALUES, max_size=4),
    st.dictionaries(PRUNE_KEYS, PRUNE_PATCHES, min_size=1, max_size=3),
    st.dictionaries(PRUNE_KEYS, PRUNE_PATCHES, max_size=2),
)
def test_the_edits_a_pruning_merge_lists_are_the_diff_along_its_patches(
    doc: dict[str, Any], first: dict[str, Any], second: dict[str, Any]
) -> None:
    """Where a merge says its edits are exact, they are ``diff_within``'s along the patches'
    trie, edit for edit and in order, over one patch or two merged in turn (as ``patch_state``
    merges intents, then the other planes), the values' identity included."""
    second = {k: v for k, v in second.items() if k not in first}  # two planes' patches: disjoint
    edits = Emitted()
    try:
        got = merge_patch(doc, first, copies=Spares(min_elements=0), prune=True, edits=edits)
        if second:
            got = merge_patch(got, second, prune=True, edits=edits)
    except PatchError:
        return
    where = patch_within(second, patch_within(first, {}))
    expected = diff_within(doc, got, where)
    if edits.exact:
        assert list(edits) == expected
        assert all(a.value is b.value for a, b in zip(edits, expected, strict=True))
    assert apply_edits(doc, expected) == got


def test_a_merge_lists_its_edits_unless_it_deletes_or_patches_elements() -> None:
    doc = {"t": {"a": 1, "l": [1, 2], "o": {"x": 1}}, "s": "v"}
    edits = Emitted()
    merge_patch(
        doc, {"t": {"a": 2, "o": {"y": [1]}, "n": {"m": {"k": 1}}}, "s": {"z": 1}}, prune=True, edits=edits
    )
    assert edits.exact
    assert [(e.path, e.value) for e in edits] == [
        (("t", "a"), 2),
        (("t", "o", "y"), [1]),
        (("t", "n"), {"m": {"k": 1}}),
        (("s",), {"z": 1}),
    ]
    for patch in ({"t": {"a": None}}, {"t": {"l": {"[0]": 5}}}, {"t": {"o": {"x": None}}}):
        edits = Emitted()
        merge_patch(doc, patch, prune=True, edits=edits)
        assert not edits.exact, patch
    no_ops: list[dict[str, Any]] = [
        {"t": {"o": {"x": {"gone": None}}}},
        {"t": {"a": {}}},
        {"t": {"l": {"[0]": {}}}},
    ]
    for patch in no_ops:
        edits = Emitted()  # an object that sets nothing onto a scalar or an array: no change
        assert merge_patch(doc, patch, prune=True, edits=edits) is doc, patch
        assert not edits, patch
    edits = Emitted()
    merge_patch(
        doc, {"t": {"a": 1, "gone": None}}, prune=True, edits=edits
    )  # nothing deleted, nothing changed
    assert edits.exact
    assert not edits


def test_a_merge_lists_nothing_once_its_edits_cannot_be_exact() -> None:
    """Once a merge patched an array's elements or deleted something, the caller diffs along the
    patch's trie instead: the merge lists no edit after that, so it never diffs a whole array
    whose elements it patched (a large plane's ``big[5]`` walked every element for nothing)."""
    doc = {"lazy": {"big": list(range(1000)), "o": {"x": 1}}, "s": "v"}
    for patch in (
        {"lazy": {"big": {"[5]": "y"}}},
        {"lazy": {"big": {"[5]": "y"}, "o": {"x": 2}}, "s": "w"},
        {"lazy": {"o": {"x": None}}, "s": "w"},
    ):
        edits = Emitted()
        got = merge_patch(doc, patch, prune=True, edits=edits)
        assert not edits.exact, patch
        assert list(edits) == [], patch
        where = patch_within(patch, {})
        assert apply_edits(doc, diff_within(doc, got, where)) == got
