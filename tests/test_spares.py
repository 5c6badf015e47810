"""Copies of large containers made from their previous version (``store.spares``): an edit
beside a large member no longer copies the container it changes once nothing else holds the
version before, values anyone still holds never change, and every result is the value a plain
copy gives."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.merge import merge_patch
from stateflow.doc.ops import apply_ops, parse_ops
from stateflow.errors import PatchError
from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.store import SqlStore
from stateflow.store.spares import SPARES, Spares

KEYS = st.sampled_from(["a", "b", "c", "[0]", "[1]", "[2]"])
SCALARS = st.none() | st.integers(-3, 3) | st.text(max_size=2)
PATCHES = st.recursive(SCALARS, lambda inner: st.dictionaries(KEYS, inner, max_size=3), max_leaves=6)
START = {"a": [1, 2, 3], "b": {"a": 1, "b": [4, 5, 6]}, "c": {"c": {"a": [7, 8, 9]}}}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(KEYS, PATCHES, max_size=3), st.booleans()), max_size=8))
def test_patches_through_spares_give_plain_results_and_never_change_a_held_value(
    steps: list[tuple[dict[str, Any], bool]],
) -> None:
    spares = Spares(min_elements=1)  # every container goes through the registry
    current: Any = START
    plain: Any = START
    held: list[tuple[Any, bytes]] = [(START, orjson.dumps(START))]
    for patch, keep in steps:
        try:
            plain = merge_patch(plain, patch)
        except PatchError:
            continue
        current = merge_patch(current, patch, copies=spares)
        if keep:  # a reader that still holds this version
            held.append((current, orjson.dumps(current)))
    assert orjson.dumps(current) == orjson.dumps(plain)
    for value, encoded in held:
        assert orjson.dumps(value) == encoded


def test_a_previous_version_is_reused_only_when_nothing_else_holds_it() -> None:
    spares = Spares(min_elements=5)  # the array goes through the registry, the objects do not
    v1 = {"big": list(range(10)), "obj": {"x": 1}}
    v2 = merge_patch(v1, {"big": {"[3]": "three"}}, copies=spares)
    old_big = v1["big"]
    del v1
    v3 = merge_patch(v2, {"big": {"[4]": "four"}}, copies=spares)
    # ``old_big`` is still held here: it is not touched, the copy is a fresh list
    assert old_big == list(range(10)) and v3["big"] is not old_big
    assert spares.reused == 0
    del old_big
    v2_big = v2["big"]
    del v2
    v4 = merge_patch(v3, {"big": {"[5]": "five"}, "obj": {"y": 2}}, copies=spares)
    # v2's array was held by ``v2_big`` only: not reused; v3's array is held by v3, not reused
    assert v2_big == [0, 1, 2, "three", 4, 5, 6, 7, 8, 9] and spares.reused == 0
    del v2_big, v3
    v5 = merge_patch(v4, {"big": {"[6]": "six"}}, copies=spares)
    assert v5["big"] == [0, 1, 2, "three", "four", "five", "six", 7, 8, 9]
    assert v4["big"] == [0, 1, 2, "three", "four", "five", 6, 7, 8, 9]
    assert spares.reused == 1  # v5's array is v3's, brought up to date


def _plane(n: int) -> dict[str, Any]:
    return {
        "big": [f"{i:06d} " + "x" * 60 for i in range(n)],
        "obj": {f"k{i:06d}": f"{i:06d} " + "y" * 40 for i in range(n // 2)},
    }


def test_edits_beside_a_large_plane_reuse_the_previous_version(open_migrated: Any) -> None:
    store: SqlStore = open_migrated()
    view = MemoryView(store, Identity.of("a", "/", "s"))
    plane = _plane(20_000)  # ~1.9 MB: a tree member
    view.patch_state({"session": {"lazy": plane}})
    key = view.keys["session"]
    # a reader that got the member before the edits (the cached value itself)
    before = store.get(key, ["lazy"]).body
    assert before is not None
    seen = orjson.dumps(before["lazy"])
    expected: Any = plane
    start = SPARES.reused
    for i in range(10):
        patch = {"big": {"[5]": "v" * (i + 1)}} if i % 2 else {"obj": {f"new{i}": i}}
        view.patch_state({"session": {"lazy": patch}})
        expected = merge_patch(expected, patch)
    # from each container's third edit on, its copy came from the version before last (the
    # first version is held by ``before``): those edits copied neither the 20,000-element
    # array nor the 10,000-key object
    assert SPARES.reused - start >= 6
    assert orjson.dumps(before["lazy"]) == seen  # what a reader holds never changes
    body = store.get(key, ["lazy"]).body
    assert body is not None and orjson.dumps(body["lazy"]) == orjson.dumps(expected)
    cold = open_migrated().get(key, ["lazy"]).body  # as stored, read by another store
    assert cold is not None and orjson.dumps(cold["lazy"]) == orjson.dumps(expected)


def test_appends_by_op_reuse_the_previous_version() -> None:
    doc: Any = {"items": [str(i) for i in range(5_000)]}
    start = SPARES.reused
    for i in range(4):
        ops = parse_ops([{"op": "set", "path": ["items", "-"], "value": f"a{i}"}])
        doc = apply_ops(doc, ops, copies=SPARES).document
    assert SPARES.reused - start == 3
    assert doc["items"][-4:] == ["a0", "a1", "a2", "a3"] and len(doc["items"]) == 5_004


def test_records_keep_their_values_when_appended_through_spares(store: SqlStore) -> None:
    service = StatesService(store)
    service.declare(
        "log",
        {
            "schema": {"type": "object", "properties": {"items": {"type": "array"}}},
            "subject_kinds": ["thread"],
            "default_subject_kind": "thread",
        },
    )
    subject = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "t"}
    items = [f"{i:06d} " + "x" * 60 for i in range(20_000)]
    service.replace("log", subject, {"items": items})
    held = service.read("log", subject)
    assert held is not None
    for i in range(3):
        service.apply("log", subject, [{"op": "set", "path": ["items", "-"], "value": f"a{i}"}])
    assert held["data"]["items"] == items  # a record read before is unchanged
    record = service.read("log", subject)
    assert record is not None and record["data"]["items"] == [*items, "a0", "a1", "a2"]
