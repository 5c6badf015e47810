"""Snapshots by member: a snapshot lists its members, each value is stored once per member
revision, an as-of read decodes only the members it asks for, and a missing value fails closed."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from stateflow.errors import CorruptData
from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.store.sqlite import SqliteStore

A = DocKey("notes", "a")
BIG = "b" * 40_000


def _fill(store: SqlStore, revisions: int) -> dict[int, dict[str, Any]]:
    """A large member that never changes beside a small one rewritten each revision (large
    enough edits that a snapshot falls due every few revisions)."""
    bodies: dict[int, dict[str, Any]] = {}
    doc: dict[str, Any] | None = None
    for r in range(1, revisions + 1):
        new = {"big": BIG, "small": f"{r:05d}" * 1600, "n": r}
        store.commit([Write.between(A, doc, new, expect=r - 1)])
        doc = bodies[r] = new
    return bodies


def _rows(store: SqlStore, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with store._read_tx() as tx:
        return tx.all(sql, params)


def test_an_unchanged_large_member_is_stored_once_however_many_snapshots(store: SqlStore) -> None:
    bodies = _fill(store, 30)
    snapshots = _rows(store, "SELECT revision, body FROM snapshots ORDER BY revision")
    assert len(snapshots) >= 3
    for revision, body in snapshots:  # directories, not bodies
        assert json.loads(bytes(body)) == [["big", 1], ["small", revision], ["n", revision]]
    copies = _rows(store, "SELECT revision FROM snapshot_members WHERE name = 'big'")
    assert copies == [(1,)]
    for r, body in bodies.items():
        assert store.read_at(A, revision=r).body == body, r
        assert store.read_at(A, revision=r, members=["n"]).body == {"n": r}, r


def test_an_old_revision_of_a_wide_document_is_read_in_work_linear_in_its_members(store: SqlStore) -> None:
    """A document of n members, every one rewritten once: reading revision 1 decodes a
    snapshot of n member rows. They were looked up 200 pairs at a time with the pairs OR-ed,
    which SQLite tested against every member row of the document, so the read cost n² (8,000
    members: 9 s, 50,000: 5 minutes). Each pair is now a key lookup: the database's work grows
    with n (counted in SQLite's virtual-machine steps), and both revisions read back as written."""
    work: dict[int, int] = {}
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0  # (go on)

    for n in (600, 2400):
        key = DocKey("notes", f"wide{n}")
        first = {f"m{i}": i for i in range(n)}
        second = {f"m{i}": i + 1 for i in range(n)}
        store.commit([Write.between(key, None, first, 0)])
        store.commit([Write.between(key, first, second, 1)])
        (listed,) = _rows(
            store,
            "SELECT count(*) FROM snapshot_members m JOIN documents d ON d.doc_id = m.doc_id "
            "WHERE d.subject = ? AND m.revision = 1",
            (key.subject,),
        )[0]
        assert listed == n  # (revision 1 is read from a snapshot of its n members)
        assert store.get(key).value == second  # (this thread's reading connection is open)
        steps[0] = 0
        traced = list(store._all) if isinstance(store, SqliteStore) else []
        for conn in traced:
            conn.set_progress_handler(step, 100)
        try:
            assert store.read_at(key, revision=1).body == first
        finally:
            for conn in traced:
                conn.set_progress_handler(None, 0)
        assert store.read_at(key, revision=2).body == second
        work[n] = steps[0]
    if isinstance(store, SqliteStore):  # four times the members: about four times the work, not 16
        assert work[2400] < 6 * work[600], work


def test_a_missing_snapshot_member_fails_closed_and_check_names_it(store: SqlStore, backend: str) -> None:
    _fill(store, 12)
    (revision,) = _rows(store, "SELECT MIN(revision) FROM snapshots")[0]
    with store._write_tx() as tx:
        assert tx.run("DELETE FROM snapshot_members WHERE name = 'small' AND revision = ?", (revision,)) == 1
    store.close()
    reopened = open_store(backend)  # nothing cached
    try:
        with pytest.raises(CorruptData, match=f"snapshot at revision {revision} is corrupt: member 'small'"):
            reopened.read_at(A, revision=revision)
        assert reopened.read_at(A, revision=revision, members=["n"]).body == {"n": revision}
    finally:
        reopened.close()
    out = subprocess.run(
        ["stateflow", "check", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, STATEFLOW_STORE=backend),
    )
    assert out.returncode != 0
    report = json.loads(out.stdout)
    assert report["ok"] is False
    assert any(f"revision {revision}: corrupt-data" in p and "'small'" in p for p in report["problems"])


def test_pruning_drops_the_member_values_no_snapshot_lists(store: SqlStore) -> None:
    bodies = _fill(store, 30)
    before = _rows(store, "SELECT COUNT(*) FROM snapshot_members")[0][0]
    assert store.prune_history("notes", "9999-01-01T00:00:00Z") == 30
    (cut,) = _rows(store, "SELECT revision FROM snapshots")[0]
    assert cut == 30
    listed = json.loads(bytes(_rows(store, "SELECT body FROM snapshots")[0][0]))
    kept = _rows(store, "SELECT name, revision FROM snapshot_members ORDER BY name")
    assert sorted((n, int(r)) for n, r in kept) == sorted((n, r) for n, r in listed)
    assert len(kept) < before
    assert store.read_at(A, revision=30).body == bodies[30]
    store.commit([Write.between(A, bodies[30], dict(bodies[30], n=31), expect=30)])
    assert store.read_at(A, revision=30).body == bodies[30]
    assert store.read_at(A, revision=31).body == dict(bodies[30], n=31)
