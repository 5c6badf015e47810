"""Path-copying tree updates: every edit reads back exactly, with the right size, writing only
a few nodes however large the value."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.diff import Edit, apply_edits, within
from stateflow.store.key_positions import KeyPositions, Positions
from stateflow.store.tree import Builder, load
from stateflow.store.tree_update import _located, update, where_of

NODES: dict[bytes, bytes] = {}


def _get(ident: bytes) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(NODES[ident])
    return data


def _fetch(ids: Any) -> dict[bytes, bytes]:
    return {i: NODES[i] for i in ids if i in NODES}


def _big() -> dict[str, Any]:
    return {
        "big": [f"{i:06d} " + "x" * 60 for i in range(20_000)],
        "obj": {f"k{i}": {"n": i, "s": "y" * 30} for i in range(5_000)},
        "deep": {"inner": [{"i": i, "t": "z" * 200} for i in range(2_000)]},
    }


BASE = _big()
BUILT = Builder().build(BASE)
NODES.update(BUILT.nodes)
assert BUILT.root is not None
ROOT: bytes = BUILT.root


def _edit(edits: list[Edit], *, by_path: bool = False) -> tuple[Any, Any]:
    """Update the tree by the edits — its changed ranges found by identity, or (``by_path``)
    from the edits' paths — and check it reads back exactly."""
    new = apply_edits(BASE, edits)
    where = where_of((e.path, e.is_delete) for e in edits) if by_path else None
    out = update(ROOT, BUILT.size, BASE, new, _get, where)
    NODES.update(out.nodes)
    assert out.root is not None
    assert load(out.root, _fetch) == new
    assert orjson.dumps(load(out.root, _fetch)) == orjson.dumps(new)  # key order too
    assert out.size == len(orjson.dumps(new))
    return out, new


def test_a_small_edit_writes_a_few_small_nodes() -> None:
    cases = [
        [Edit(("big", 5), "changed, and of another length")],
        [Edit(("obj", "brand new"), 1)],
        [Edit(("obj", "k17", "n"), -1)],
        [Edit(("deep", "inner", 1500, "t"), "short")],
        [Edit(("big",), BASE["big"][1:])],
        [Edit(("obj", "k4999"))],
        [Edit(("big", len(BASE["big"])), "appended")],
        [Edit(("obj", "k2500", "s"), "in the middle")],
    ]
    for edits in cases:
        for by_path in (False, True):
            out, _ = _edit(edits, by_path=by_path)
            assert len(out.nodes) <= 12, (edits, len(out.nodes))
            assert sum(len(b) for b in out.nodes.values()) < 40_000, edits


def test_a_key_deleted_and_set_again_moves_to_the_end_by_path_too() -> None:
    for by_path in (False, True):
        _, new = _edit([Edit(("obj", "k17")), Edit(("obj", "k17"), "set again")], by_path=by_path)
        assert list(new["obj"])[-1] == "k17"


def test_a_whole_array_replaced_by_its_append_writes_only_the_tail() -> None:
    new = dict(BASE, big=[*BASE["big"], "one more"])
    out = update(ROOT, BUILT.size, BASE, new, _get)
    NODES.update(out.nodes)
    assert out.root is not None and load(out.root, _fetch) == new
    assert len(out.nodes) <= 12


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["big", "obj", "deep"]),
            st.integers(0, 25_000),
            st.text(max_size=300) | st.none(),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
)
def test_any_sequence_of_edits_reads_back_exactly(
    steps: list[tuple[str, int, Any, bool]], by_path: bool
) -> None:
    edits: list[Edit] = []
    value = BASE
    for member, n, text, delete in steps:
        target = value[member] if member != "deep" else value["deep"]["inner"]
        prefix: tuple[Any, ...] = (member,) if member != "deep" else ("deep", "inner")
        if isinstance(target, list):
            index = n % (len(target) + 1)
            if delete and index < len(target):  # an element removed: the whole array
                edit = Edit(prefix, target[:index] + target[index + 1 :])
            elif index < len(target):
                edit = Edit((*prefix, index), text)
            elif delete:  # an append, as a diff of the whole array gives it
                edit = Edit(prefix, [*target, text])
            else:  # an append edit: a set at the array's length
                edit = Edit((*prefix, index), text)
        else:
            key = f"k{n % 6000}"
            edit = Edit((*prefix, key)) if delete and key in target else Edit((*prefix, key), text)
        edits.append(edit)
        value = apply_edits(value, [edit])
    _edit(edits, by_path=by_path)


def test_an_emptied_container_and_a_replaced_kind_read_back() -> None:
    _edit([Edit(("big",), [])])
    _edit([Edit(("obj",), "now a string")])
    small = update(ROOT, BUILT.size, BASE, {"only": 1}, _get)
    assert small.root is None and small.inline == b'{"only":1}'


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["set", "delete", "new", "two"]), st.integers(0, 10_000), st.text(max_size=40)
        ),
        min_size=1,
        max_size=12,
    )
)
def test_key_positions_follow_every_version_and_change_nothing_written(
    steps: list[tuple[str, int, str]],
) -> None:
    """Edits of a large object, one version after the next, with its keys' positions looked up
    in an index carried from version to version: every version reads back exactly (key order
    included), with the same root as the update that scans for positions, and the index is
    built once."""
    positions = Positions(min_keys=1_000)
    value: Any = BASE
    root, size = ROOT, BUILT.size
    for n, (kind, at, text) in enumerate(steps):
        keys = list(value["obj"])
        key = keys[at % len(keys)]
        if kind == "set":
            edits = [Edit(("obj", key), text)]
        elif kind == "delete":
            edits = [Edit(("obj", key))]
        elif kind == "new":
            edits = [Edit(("obj", f"new {n} {text}"), text)]
        else:  # a deleted key and a replaced one in one write
            edits = [Edit(("obj", key)), Edit(("obj", keys[(at * 7 + 1) % len(keys)]), text)]
        new = apply_edits(value, edits)
        where = where_of((e.path, e.is_delete) for e in edits)
        scanned = update(root, size, value, new, _get, where)
        looked_up = update(root, size, value, new, _get, where, positions)
        NODES.update(looked_up.nodes)
        assert looked_up.root is not None and looked_up.root == scanned.root
        assert orjson.dumps(load(looked_up.root, _fetch)) == orjson.dumps(new)
        assert looked_up.size == len(orjson.dumps(new))
        value, root, size = new, looked_up.root, looked_up.size
    assert positions.built <= 1


def test_an_existing_key_is_replaced_or_deleted_by_a_few_nodes_with_an_index() -> None:
    """With the index, replacing or deleting one key of a large object reads the nodes on its
    path and writes a few — nothing proportional to the object."""
    positions = Positions(min_keys=1_000)
    read: list[bytes] = []

    def counting(ident: bytes) -> dict[str, Any]:
        read.append(ident)
        return _get(ident)

    value: Any = BASE
    root, size = ROOT, BUILT.size
    for edits in (
        [Edit(("obj", "k4998"), "late")],
        [Edit(("obj", "k3"))],
        [Edit(("obj", "k4990"))],
        [Edit(("obj", "k10"), {"n": 0})],
    ):
        new = apply_edits(value, edits)
        read.clear()
        out = update(
            root, size, value, new, counting, where_of((e.path, e.is_delete) for e in edits), positions
        )
        NODES.update(out.nodes)
        assert out.root is not None
        assert len(read) <= 8 and len(out.nodes) <= 8, edits
        assert orjson.dumps(load(out.root, _fetch)) == orjson.dumps(new)
        value, root, size = new, out.root, out.size
    assert positions.built == 1  # the first edit scanned, the second built the index


def test_key_positions() -> None:
    index = KeyPositions(["a", "b", "c", "d"])
    index.delete("b")
    index.append("e")
    index.delete("a")
    assert [index.position(k) for k in "cdeab"] == [0, 1, 2, None, None]
    assert len(index) == 3


def _gets_of(root: bytes, size: int, old: Any, new: Any, where: Any) -> int:
    """How many nodes an update gets (with no key index: the same nodes, scanned)."""
    read: list[bytes] = []

    def get(ident: bytes) -> dict[str, Any]:
        read.append(ident)
        return _get(ident)

    update(root, size, old, new, get, where, Positions(min_keys=10**9))
    return len(read)


def test_an_update_that_cannot_get_a_node_leaves_the_key_index_as_it_found_it() -> None:
    """A write staged with no transaction gets only cached nodes and, on a miss, is staged again
    under the lock: the attempt that failed must not take the index (or the mark that says to
    build one) away from the update that follows."""
    positions = Positions(min_keys=1_000)

    def failing_at(last: int) -> Any:
        """A node getter that fails at its ``last``-th node (the deepest of the path)."""
        calls = [0]

        def get(ident: bytes) -> dict[str, Any]:
            calls[0] += 1
            if calls[0] == last:
                raise LookupError("not cached")
            return _get(ident)

        return get

    value: Any = BASE
    root, size = ROOT, BUILT.size
    for step, edits in enumerate(
        ([Edit(("obj", "k4998"), "late")], [Edit(("obj", "k3"))], [Edit(("obj", "k7"))])
    ):
        new = apply_edits(value, edits)
        where = where_of((e.path, e.is_delete) for e in edits)
        if step:  # (the first finds no index and no mark: nothing to keep)
            gets = _gets_of(root, size, value, new, where)
            with pytest.raises(LookupError):
                update(root, size, value, new, failing_at(gets), where, positions)
        out = update(root, size, value, new, _get, where, positions)
        NODES.update(out.nodes)
        assert out.root is not None
        assert orjson.dumps(load(out.root, _fetch)) == orjson.dumps(new)
        value, root, size = new, out.root, out.size
    # the first edit scanned; the failed attempt at the second built the index from the mark and
    # gave it back, so neither the second edit nor the third (nor its failed attempt) built again
    assert positions.built == 1


class _Counted(str):
    """A key that counts the comparisons made with it (a scan compares every key it passes)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _Counted.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_thousands_of_keys_in_one_write_are_located_without_a_scan_each() -> None:
    """A write of thousands of keys into a large object found each existing key's position by a
    scan of the object's keys, and checked each set path against every deleted one: both
    quadratic (3,000 deletes from a 30,000-key lazy object took 58 s; 10,000 nested sets 75 s).
    Now one pass over the keys finds them all, and each path's prefixes are looked up among
    the deletes."""
    old = {_Counted(f"k{i}"): i for i in range(5_000)}
    gone = [f"k{i}" for i in range(0, 5_000, 5)]
    new = {k: v for k, v in old.items() if k not in set(gone)}
    _Counted.compared = 0
    located = _located(old, new, within([(k,) for k in gone]))
    assert located == (0, 4_996, 3_996, None)
    assert _Counted.compared < 10_000, _Counted.compared  # (a scan each: ~2.5 million)

    deletes = [((_Counted(f"d{i}"),), True) for i in range(2_000)]
    sets = [((_Counted(f"s{i}"), "x"), False) for i in range(2_000)]
    _Counted.compared = 0
    assert where_of([*deletes, *sets]) != {}
    assert where_of([*deletes, ((_Counted("d7"), "y"), False)]) == {}  # set below a delete: compared whole
    assert _Counted.compared < 10_000, _Counted.compared  # (every delete per set: 4 million)


def test_a_write_of_thousands_of_keys_into_a_large_object_reads_back_exactly() -> None:
    obj = BASE["obj"]
    edits = [Edit(("obj", f"k{i}")) for i in range(0, 5_000, 3)]
    edits += [Edit(("obj", f"k{i}", "n"), -i) for i in range(1, 5_000, 3)]
    edits += [Edit(("obj", f"new{i}"), i) for i in range(500)]
    for by_path in (False, True):
        _, new = _edit(edits, by_path=by_path)
        assert len(new["obj"]) == len(obj) - len(range(0, 5_000, 3)) + 500
