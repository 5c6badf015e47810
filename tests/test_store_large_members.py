"""Large members as trees of nodes: exact reads (current, cold, as of), small writes, shrinking
back inline, fail-closed reads and `stateflow check` on damaged nodes, and node collection."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from stateflow.doc.diff import Edit
from stateflow.errors import CorruptData
from stateflow.store import DocKey, Document, SqlStore, Write, open_store
from stateflow.store.plan import TREE_MIN

A = DocKey("notes", "a")


def _lazy(count: int = 14_000) -> dict[str, Any]:
    return {
        "big": [f"{i:06d} " + "x" * 60 for i in range(count)],
        "obj": {f"k{i}": {"n": i, "s": "y" * 30} for i in range(count // 2)},
    }


def _rows(store: SqlStore, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with store._read_tx() as tx:
        return tx.all(sql, params)


def _nodes(store: SqlStore) -> set[bytes]:
    return {bytes(r[0]) for r in _rows(store, "SELECT id FROM nodes")}


def _write(store: SqlStore, edits: list[Edit]) -> None:
    store.commit([Write(A, edits)])


def test_a_large_member_is_a_tree_and_a_small_edit_writes_a_few_nodes(store: SqlStore, backend: str) -> None:
    lazy = _lazy()
    store.commit([Write.between(A, None, {"tactics": {"next": "a"}, "lazy": lazy})])
    (root, body, size), *_ = _rows(store, "SELECT root, body, size FROM members WHERE name = 'lazy'")
    assert root is not None and bytes(body) == b"" and size > TREE_MIN
    bodies = {1: {"tactics": {"next": "a"}, "lazy": lazy}}
    edits: list[Callable[[dict[str, Any]], list[Edit]]] = [
        lambda _: [Edit(("lazy", "big", 5), "of another length")],
        lambda _: [Edit(("lazy", "obj", "brand new"), {"n": -1})],
        lambda now: [Edit(("lazy", "big"), [*now["lazy"]["big"], "appended"])],  # as a diff gives it
        lambda _: [Edit(("lazy", "obj", "k17", "s"), "deep")],
        lambda _: [Edit(("tactics", "next"), "b")],
    ]
    current: dict[str, Any] = bodies[1]
    for revision, make in enumerate(edits, start=2):
        before = _nodes(store)
        change = make(current)
        _write(store, change)
        added = _nodes(store) - before
        assert len(added) <= 12, (change, len(added))
        assert sum(len(bytes(b)) for b in _added_bodies(store, added)) < 40_000
        current = bodies[revision] = store.get(A).body or {}
    assert current["lazy"]["big"][5] == "of another length" and current["lazy"]["big"][-1] == "appended"
    # the whole-array edit of the append is kept as a ref to the subtree the member holds
    (edits_raw, roots), *_ = _rows(store, "SELECT edits, roots FROM change_edits WHERE revision = 4")
    assert len(bytes(edits_raw)) < 200 and len(bytes(roots)) == 16
    (appended,) = [c for c in store.history([A], limit=10) if c.revision == 4]
    assert [e.to_json() for e in appended.edits] == [[["lazy", "big"], bodies[4]["lazy"]["big"]]]
    store.close()
    cold = open_store(backend)  # nothing cached: every value read from its nodes
    try:
        assert cold.get(A).body == current
        assert cold.get(A, ["lazy"]).body == {"lazy": current["lazy"]}
        for revision, body in bodies.items():
            assert cold.read_at(A, revision=revision).body == body, revision
    finally:
        cold.close()


def _added_bodies(store: SqlStore, ids: set[bytes]) -> list[Any]:
    out = []
    for ident in ids:
        out += [r[0] for r in _rows(store, "SELECT body FROM nodes WHERE id = ?", (ident,))]
    return out


def test_a_shrunk_member_goes_back_inline_and_a_grown_one_becomes_a_tree(store: SqlStore) -> None:
    lazy = _lazy()
    store.commit([Write.between(A, None, {"lazy": lazy})])
    _write(store, [Edit(("lazy",), {"small": True})])
    assert _rows(store, "SELECT root, body FROM members")[0][0] is None
    assert store.get(A).body == {"lazy": {"small": True}}
    _write(store, [Edit(("lazy",), lazy)])
    assert _rows(store, "SELECT root FROM members")[0][0] is not None
    assert store.get(A).body == {"lazy": lazy}
    assert store.read_at(A, revision=2).body == {"lazy": {"small": True}}
    assert store.read_at(A, revision=1).body == {"lazy": lazy}


def test_an_optimistic_write_of_a_tree_member_takes_the_locked_path(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"lazy": _lazy(), "n": 0})])
    store.get(A)

    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write(A, [Edit(("lazy", "big", 1), "changed"), Edit(("n",), 1)], docs[A].revision)], None

    commit, _ = store.update([A], compute, optimistic=True)
    assert commit.applied
    body = store.get(A).body or {}
    assert body["lazy"]["big"][1] == "changed" and body["n"] == 1


def _damage(backend: str, store: SqlStore, how: str) -> None:
    leaf = next(
        bytes(i) for i, b in _rows(store, "SELECT id, body FROM nodes") if bytes(b).startswith(b'{"a":')
    )
    with store._write_tx() as tx:
        if how == "delete":
            tx.run("DELETE FROM nodes WHERE id = ?", (leaf,))
        else:
            tx.run("UPDATE nodes SET body = ? WHERE id = ?", (b'{"a":["tampered"],"r":[]}', leaf))
    store.close()


@pytest.mark.parametrize("how", ["delete", "tamper"])
def test_a_missing_or_damaged_node_fails_reads_closed_and_check_names_it(
    open_migrated: Any, backend: str, how: str
) -> None:
    store = open_migrated()
    store.commit([Write.between(A, None, {"lazy": _lazy(), "n": 1})])
    _damage(backend, store, how)
    cold = open_store(backend)
    try:
        with pytest.raises(
            CorruptData,
            match=f"member 'lazy' is corrupt: node [0-9a-f]{{32}} is {'missing' if how == 'delete' else 'corrupt'}",
        ):
            cold.get(A)
        assert cold.get(A, ["n"]).body == {"n": 1}  # other members still read
    finally:
        cold.close()
    out = subprocess.run(
        ["stateflow", "check", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, STATEFLOW_STORE=backend),
    )
    assert out.returncode != 0, out.stdout
    problems = json.loads(out.stdout)["problems"]
    word = "missing" if how == "delete" else "corrupt"
    assert any(p.startswith("nodes: node ") and word in p for p in problems), problems


def test_prune_and_purge_collect_the_nodes_nothing_reaches(store: SqlStore) -> None:
    lazy = _lazy()
    store.commit([Write.between(A, None, {"lazy": lazy})])
    for i in range(6):
        _write(store, [Edit(("lazy", "big", i), f"edit {i}")])
    grown = len(_nodes(store))
    store.prune_history("notes", "9999-01-01T00:00:00Z")
    kept = _nodes(store)
    assert len(kept) < grown
    body = store.get(A).body
    assert body is not None and body["lazy"]["big"][5] == "edit 5"
    assert store.read_at(A, revision=7).body == body
    other = DocKey("other", "b")
    store.commit([Write.between(other, None, {"lazy": _lazy(15_000)})])
    assert len(_nodes(store)) > len(kept)
    store.purge("other")
    assert _nodes(store) == kept
    store.purge("notes")
    assert _nodes(store) == set()


def test_existing_keys_of_a_large_object_are_replaced_and_deleted_by_position(
    store: SqlStore, backend: str
) -> None:
    """Replacing or deleting an existing key of a large object finds its position in the key
    index the store carries from one version of the object to the next (built once), writes a
    few nodes, and every version reads back exactly — now, cold, as of each revision, after a
    prune — and `check` finds nothing wrong."""
    from stateflow.store.check import check_store

    store.commit([Write.between(A, None, {"lazy": _lazy(), "n": 0})])
    bodies = {1: store.get(A).body}
    changes = [
        [Edit(("lazy", "obj", "k6998"), "late, replaced")],
        [Edit(("lazy", "obj", "k3"))],
        [Edit(("lazy", "obj", "k6990"))],
        [Edit(("lazy", "obj", "k10", "s"), "deep")],
        [Edit(("lazy", "obj", "new one"), 1)],
        [Edit(("lazy", "obj", "k5")), Edit(("lazy", "obj", "k6000"), 2)],
        [Edit(("lazy", "obj", "k6997"), {"n": 1})],
        # a key deleted and set again (it moves to the end): the range is found by comparison
        [Edit(("lazy", "obj", "k7")), Edit(("lazy", "obj", "k7"), "set again")],
    ]
    for revision, change in enumerate(changes, start=2):
        before = _nodes(store)
        _write(store, change)
        added = _nodes(store) - before
        assert len(added) <= 12, (change, len(added))
        bodies[revision] = store.get(A).body
        if revision == len(changes):  # the index followed every version after the first lookup
            assert store._positions.built == 1
    current = bodies[len(changes) + 1] or {}
    keys = list(current["lazy"]["obj"])
    assert "k3" not in keys and "k6990" not in keys and keys[-1] == "k7" and keys[-2] == "new one"
    assert current["lazy"]["obj"]["k6998"] == "late, replaced"
    store.close()
    cold = open_store(backend)
    try:
        assert cold.get(A).body == current
        for revision, body in bodies.items():
            assert cold.read_at(A, revision=revision).body == body, revision
        cold.prune_history("notes", "9999-01-01T00:00:00Z")
        assert cold.get(A).body == current
        report = check_store(cold)
        assert report.ok, report.problems
    finally:
        cold.close()


def test_writes_of_thousands_of_keys_into_a_large_object_read_back_exactly(
    store: SqlStore, backend: str
) -> None:
    """Thousands of existing keys deleted or changed in one write — their positions found in one
    pass over the keys, then by the index the next write builds — and every version reads back
    exactly, key order included, now, cold, as of each revision, and `check` finds nothing."""
    from stateflow.store.check import check_store

    store.commit([Write.between(A, None, {"lazy": _lazy(), "n": 0})])
    obj = _lazy()["obj"]
    changes = [
        [Edit(("lazy", "obj", f"k{i}")) for i in range(0, 7_000, 3)],
        [Edit(("lazy", "obj", f"k{i}", "n"), -i) for i in range(1, 7_000, 3)],
        [Edit(("lazy", "obj", f"k{i}")) for i in range(2, 7_000, 6)] + [Edit(("lazy", "obj", "k0"), "back")],
    ]
    bodies: dict[int, Any] = {1: store.get(A).body}
    for revision, change in enumerate(changes, start=2):
        _write(store, change)
        for edit in change:
            if edit.is_delete:
                obj.pop(str(edit.path[2]), None)
            elif len(edit.path) == 4:
                obj[str(edit.path[2])] = dict(obj[str(edit.path[2])], n=edit.value)
            else:
                obj[str(edit.path[2])] = edit.value
        body = store.get(A).body or {}
        assert list(body["lazy"]["obj"].items()) == list(obj.items()), revision
        bodies[revision] = body
    store.close()
    cold = open_store(backend)
    try:
        assert list(cold.get(A).body["lazy"]["obj"].items()) == list(obj.items())  # type: ignore[index]
        for revision, body in bodies.items():
            assert cold.read_at(A, revision=revision).body == body, revision
        report = check_store(cold)
        assert report.ok, report.problems
    finally:
        cold.close()
