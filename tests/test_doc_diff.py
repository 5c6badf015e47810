import dataclasses
import pickle
import random
from typing import Any

import pytest

from stateflow.doc.diff import Edit, apply_edits, diff, diff_paths, to_patch
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


def _random_json(rng: random.Random, depth: int) -> Any:
    """A small JSON value whose parts repeat often, so two draws share keys, kinds and values."""
    pick = rng.random()
    if depth <= 0 or pick < 0.35:
        return rng.choice([0, 1, 1.0, True, False, None, "a", "b", "", 2**63])
    if pick < 0.7:
        keys = rng.sample(["a", "b", "c", "d", "[0]"], rng.randint(0, 4))
        return {k: _random_json(rng, depth - 1) for k in keys}
    return [_random_json(rng, depth - 1) for _ in range(rng.randint(0, 3))]


def _mutated(rng: random.Random, value: Any, depth: int) -> Any:
    """``value`` with a few random changes; untouched containers are shared, as a write's are."""
    if rng.random() < 0.25:
        return _random_json(rng, depth)
    if type(value) is dict:
        out = dict(value)
        for key in list(out):
            roll = rng.random()
            if roll < 0.15:
                del out[key]
            elif roll < 0.5:
                out[key] = _mutated(rng, out[key], depth - 1)
        if rng.random() < 0.3:
            out[rng.choice(["a", "e", "f"])] = _random_json(rng, depth - 1)
        return out
    if type(value) is list and value and rng.random() < 0.6:
        copy = list(value)
        i = rng.randrange(len(copy))
        copy[i] = _mutated(rng, copy[i], depth - 1)
        return copy
    return value


def test_diff_paths_are_the_diffs_edit_paths_in_order() -> None:
    rng = random.Random(17)
    for _ in range(3000):
        old = _random_json(rng, 4) if rng.random() < 0.9 else MISSING
        new = _mutated(rng, old, 4) if old is not MISSING and rng.random() < 0.8 else _random_json(rng, 4)
        if rng.random() < 0.05:
            new = MISSING
        assert diff_paths(old, new) == [edit.path for edit in diff(old, new)]


def test_an_edit_built_by_its_constructor_is_the_frozen_dataclass_it_was() -> None:
    edit = Edit(("a", 1), {"x": [1]})
    assert edit == Edit(path=("a", 1), value={"x": [1]}) and edit != Edit(("a", 1))
    assert Edit(("a",)).value is MISSING and Edit(("a",)).is_delete
    assert hash(Edit(("a", 1), 2)) == hash(Edit(("a", 1), 2))
    assert repr(edit) == "Edit(path=('a', 1), value={'x': [1]})"
    assert pickle.loads(pickle.dumps(edit)) == edit
    assert dataclasses.replace(edit, value=3) == Edit(("a", 1), 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        edit.path = ()  # type: ignore[misc]
