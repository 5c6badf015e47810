"""The least writes by hand of ``benchmarks/bench_langgraph_floor.py`` must keep what ours keeps —
every revision of every record readable (from its changes, the last one equal to its member
rows), one audit row per write, one change row per document written — or the floor compares
ours against a write that loses history. The saver's ``put`` and ``put_writes`` and the store's
``put``, each through the by-hand side, on a real SQLite file and on PostgreSQL; the leaner
layouts' saver and store ``put`` (``LeanHand``, SQLite only), whose bodies live in the document's
row and whose creating change may keep none; and ``OurRows``, a saver put's own statements sent
by hand, which the store must read back as a put of its own."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from benchmarks.bench_langgraph_adapters import THREADS
from benchmarks.bench_langgraph_floor import LEAN_LAYOUTS, ByHand, LeanHand, OurRows, PostgresHand, SqliteHand

from stateflow.store import DocKey, open_store


@pytest.fixture
def hand(backend: str) -> Iterator[ByHand]:
    if backend.startswith("postgresql"):
        with psycopg.connect(backend, autocommit=True) as conn:
            yield PostgresHand(conn)
        return
    lite = sqlite3.connect(backend, isolation_level=None)
    lite.execute("PRAGMA journal_mode = WAL")
    lite.execute("PRAGMA synchronous = FULL")
    try:
        yield SqliteHand(lite)
    finally:
        lite.close()


def _set(body: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    at = body
    for name in path[:-1]:
        at = at[name]
    at[path[-1]] = value
    return body


def _revisions(hand: ByHand, subject: str) -> list[dict[str, Any]]:
    """Every revision of ``subject``'s record rebuilt from its change rows, checking each
    change's audit row, the document's row and that its member rows hold the newest."""
    conn = hand.conn
    ((doc_id, revision, updated_seq),) = conn.execute(
        f"SELECT doc_id, revision, updated_seq FROM documents WHERE subject = '{subject}'"
    ).fetchall()
    changes = conn.execute(
        f"SELECT revision, seq, edits FROM changes WHERE doc_id = {doc_id} ORDER BY revision"
    ).fetchall()
    assert [r for r, _, _ in changes] == list(range(1, revision + 1))  # one change per revision
    assert changes[-1][1] == updated_seq
    seqs = {seq for (seq,) in conn.execute("SELECT seq FROM transitions").fetchall()}
    assert {seq for _, seq, _ in changes} <= seqs  # each change's audit row
    bodies: list[dict[str, Any]] = []
    body: Any = None
    for _, _, edits in changes:
        for path, value in orjson.loads(bytes(edits)):
            body = _set(body, path, value)
        bodies.append(orjson.loads(orjson.dumps(body)))
    members = {
        name: orjson.loads(bytes(b))
        for name, b in conn.execute(f"SELECT name, body FROM members WHERE doc_id = {doc_id}").fetchall()
    }
    assert members == bodies[-1]  # the newest revision is what the member rows hold
    return bodies


def test_by_hand_writes_keep_every_revision_an_audit_row_and_a_change(hand: ByHand) -> None:
    heads = []
    for n in range(2):  # two new checkpoints
        checkpoint = {"v": 4, "id": f"c{n}", "ts": "t", "channel_values": {"step": n}, "channel_versions": {}}
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        heads.append(hand.put(config, checkpoint, {"step": n}, {"step": 1}))
    made: dict[str, list[tuple[str, int, str, Any]]] = {"c0": [], "c1": []}
    for task in range(40):  # 20 tasks a checkpoint: some share a bucket (16), some add one
        head = heads[task % 2]
        writes = [("messages", f"reply {task}"), ("step", task)]
        hand.put_writes(head, writes, f"task-{task}")
        made[head["configurable"]["checkpoint_id"]] += [
            (f"task-{task}", i, c, v) for i, (c, v) in enumerate(writes)
        ]
    for n in range(5):  # an item written five times
        hand.store_put(("ns",), "k", {"n": n})
    transitions = hand.conn.execute("SELECT count(*) FROM transitions").fetchone()[0]
    assert transitions == 2 + 40 + 5  # one audit row per write

    for n in range(2):
        (saved,) = _revisions(hand, f"t/c{n}")
        assert saved["config"]["checkpoint_id"] == f"c{n}"
        assert saved["saved"]["channel_values"] == {"step": {"json": n}}
    added = rewritten = 0
    for checkpoint_id, wrote in made.items():
        bodies = _revisions(hand, f"writes/t//{checkpoint_id}")
        assert len(bodies) == 20  # a revision per call
        for k, body in enumerate(bodies):  # revision k+1 holds exactly the first k+1 calls' writes
            entries = [(name, e) for bucket in body.values() for name, e in bucket.items()]
            held = sorted(
                (name.rpartition(":")[0], int(name.rpartition(":")[2]), channel, value["json"])
                for name, (channel, value, _) in entries
            )
            assert held == sorted(wrote[: 2 * (k + 1)])
            if k:
                added += len(body) > len(bodies[k - 1])
                rewritten += len(body) == len(bodies[k - 1])
    assert added and rewritten  # both ways of writing onto an existing record ran
    bodies = _revisions(hand, "ns/k")
    assert [b["value"] for b in bodies] == [{"n": n} for n in range(5)]


def _lean_revisions(hand: LeanHand, subject: str) -> list[dict[str, Any]]:
    """Every revision of ``subject``'s record rebuilt from a lean layout's rows: each change's
    edits (a creating change without any: the document's body, only while it is the newest), its
    audit row with the origin, the newest equal to the document's body."""
    conn = hand.conn
    if hand.log:  # one row a revision: its whole body and its audit
        rows = conn.execute(
            "SELECT revision, body, origin FROM log WHERE subject = ? ORDER BY revision", (subject,)
        ).fetchall()
        assert [r for r, _, _ in rows] == list(range(1, len(rows) + 1))
        assert all(orjson.loads(origin)["consumer"] == "langgraph" for _, _, origin in rows)
        return [orjson.loads(body) for _, body, _ in rows]
    ((doc_id, revision, body),) = conn.execute(
        "SELECT doc_id, revision, body FROM documents WHERE subject = ?", (subject,)
    ).fetchall()
    if hand.audit_apart:
        changes = conn.execute(
            "SELECT c.revision, c.edits, t.origin FROM changes c JOIN transitions t ON t.seq = c.seq "
            "WHERE c.doc_id = ? ORDER BY c.revision",
            (doc_id,),
        ).fetchall()
    else:
        changes = conn.execute(
            "SELECT revision, edits, origin FROM changes WHERE doc_id = ? ORDER BY revision", (doc_id,)
        ).fetchall()
    assert [r for r, _, _ in changes] == list(range(1, revision + 1))  # one change (and audit) each
    assert all(orjson.loads(origin)["consumer"] == "langgraph" for _, _, origin in changes)
    newest = orjson.loads(body)
    bodies: list[dict[str, Any]] = []
    at: Any = None
    for r, edits, _ in changes:
        if edits is None:  # only a creating change, and only while its revision is the newest
            assert r == revision == 1
            at = orjson.loads(body)
        else:
            for path, value in orjson.loads(edits):
                at = _set(at, path, value)
        bodies.append(orjson.loads(orjson.dumps(at)))
    assert bodies[-1] == newest
    return bodies


@pytest.mark.parametrize("layout", LEAN_LAYOUTS)
def test_lean_writes_keep_every_revision_and_an_audit_row(tmp_path: Path, layout: str) -> None:
    lite = sqlite3.connect(tmp_path / "lean.db", isolation_level=None)
    lite.execute("PRAGMA journal_mode = WAL")
    lite.execute("PRAGMA synchronous = FULL")
    try:
        hand = LeanHand(lite, layout)
        for n in range(2):
            checkpoint = {
                "v": 4,
                "id": f"c{n}",
                "ts": "t",
                "channel_values": {"step": n},
                "channel_versions": {},
            }
            hand.put(
                {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                checkpoint,
                {"step": n},
                {"step": 1},
            )
        for n in range(5):  # an item written five times, another once
            hand.store_put(("ns",), "k", {"n": n})
        hand.store_put(("ns",), "once", {"n": 0})
        audit = "transitions" if hand.audit_apart else "log" if hand.log else "changes"
        assert lite.execute(f"SELECT count(*) FROM {audit}").fetchone()[0] == 2 + 5 + 1
        for n in range(2):
            (saved,) = _lean_revisions(hand, f"t/c{n}")
            assert saved["config"]["checkpoint_id"] == f"c{n}"
            assert saved["saved"]["channel_values"] == {"step": {"json": n}}
        assert [b["value"] for b in _lean_revisions(hand, "ns/k")] == [{"n": n} for n in range(5)]
        assert [b["value"] for b in _lean_revisions(hand, "ns/once")] == [{"n": 0}]
    finally:
        lite.close()


def test_our_rows_are_read_back_by_the_store_as_a_put_of_its_own(tmp_path: Path) -> None:
    """``OurRows`` sends a put's statements with nothing of ours around them: what it writes must
    be what a put writes — the record readable, its one revision in the history with the put's
    audit row — or its side measures rows the store does not keep."""
    rows = OurRows(tmp_path / "rows.db")
    try:
        for i in (5000, 5001):
            rows.put(i)
    finally:
        rows.conn.close()
    store = open_store(f"sqlite:///{tmp_path}/rows.db")
    try:
        key = DocKey(rows.state, f'{rows.thread}{5001 % THREADS}//{5001:064x}"]')
        document = store.get(key)
        assert document.revision == 1 and document.body == orjson.loads(rows.body)
        (change,) = store.history([key])
        assert change.revision == 1 and change.seq == document.seq
        (transition,) = store.transitions(after_seq=document.seq - 1, limit=1)
        assert transition.origin["consumer"] == "langgraph"
        assert [c.key for c in transition.changes] == [key]
        assert store.kind_counts(rows.state)["checkpoint"] == 9 + 2  # (the store's nine puts, and these)
    finally:
        store.close()
