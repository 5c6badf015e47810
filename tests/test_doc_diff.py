import pytest

from stateflow.doc.diff import Edit, apply_edits, diff, to_patch
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict


def test_equal_length_array_edits_are_recorded_per_index() -> None:
    old = {"m": ["a", "b", "c"]}
    new = {"m": ["a", "B", "c"]}
    edits = diff(old, new)
    assert edits == [Edit(("m", 1), "B")]
    assert to_patch(edits) == {"m": {"[1]": "B"}}


def test_length_changes_replace_the_whole_array() -> None:
    edits = diff({"m": [1, 2]}, {"m": [1, 2, 3]})
    assert edits == [Edit(("m",), [1, 2, 3])]
    assert to_patch(edits) == {"m": [1, 2, 3]}


def test_deletions_render_as_null_and_no_change_as_empty_object() -> None:
    assert to_patch(diff({"a": 1, "b": 2}, {"a": 1})) == {"b": None}
    assert to_patch(diff({"a": 1}, {"a": 1})) == {}
    assert to_patch(diff({"a": 1}, MISSING)) is None
    assert to_patch(diff(MISSING, {"a": 1})) == {"a": 1}


def test_null_values_reconstruct_exactly() -> None:
    old = {"a": {"b": 1}, "keep": None}
    new = {"a": {"b": None}, "keep": None, "c": [None]}
    assert apply_edits(old, diff(old, new)) == new
    assert apply_edits(old, diff(old, new))["a"] == {"b": None}


def test_int_and_float_and_bool_changes_are_not_lost() -> None:
    for old, new in [({"a": 1}, {"a": 1.0}), ({"a": 1}, {"a": True}), ({"a": 0}, {"a": False})]:
        out = apply_edits(old, diff(old, new))
        assert isinstance(out, dict) and out == new and type(out["a"]) is type(new["a"])


def test_touched_paths_and_json_round_trip() -> None:
    edits = diff({"a": {"x": 1}, "l": [1, 2]}, {"a": {"y": 2}, "l": [1, 5]})
    assert [e.path for e in edits] == [("a", "x"), ("a", "y"), ("l", 1)]
    assert [Edit.from_json(e.to_json()) for e in edits] == edits


def test_apply_to_a_newer_head_keeps_concurrent_fields() -> None:
    basis = {"a": 1}
    head = {"a": 1, "other": "kept"}
    assert apply_edits(head, diff(basis, {"a": 2})) == {"a": 2, "other": "kept"}


def test_apply_creates_missing_intermediate_objects() -> None:
    assert apply_edits({}, [Edit(("a", "b"), 1)]) == {"a": {"b": 1}}


def test_apply_refuses_edits_that_no_longer_fit() -> None:
    with pytest.raises(Conflict, match="index 3 is outside"):
        apply_edits({"m": [1]}, [Edit(("m", 3), 1)])
    with pytest.raises(Conflict, match="expects an object"):
        apply_edits({"a": 5}, [Edit(("a", "b"), 1)])


def test_apply_is_copy_on_write() -> None:
    old = {"a": {"b": [1, 2]}, "c": {"d": 1}}
    new = apply_edits(old, [Edit(("a", "b", 0), 9)])
    assert old == {"a": {"b": [1, 2]}, "c": {"d": 1}}
    assert new["c"] is old["c"]
