"""A SQLite writer's turn hands the documents its commit left on to the next turn
(``WriterQueue.hand_on``): the next writer's own memory patch is merged on them without reading
them, only while the database's WAL-index header shows no commit since — the rows written are
those the locked path writes, and a commit in between (by any other path) makes it read again.

Each store object here has its own connection and writer-queue ticket, as separate processes
have; the contended mark makes every patch take its turn (``patch_on_server``)."""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from stateflow.memory import Identity, MemoryView
from stateflow.store import DocKey, open_store
from stateflow.store import sqlite as backend
from stateflow.store.plan import Fresh
from stateflow.store.rows import DocRow, whole_heads
from stateflow.store.writer_queue import WriterQueue
from tests.test_store_write_rows import _TABLES, _plain
from tests.test_writer_requests import acknowledged, holder_and_requesters


def _reads(statements: list[str]) -> int:
    return sum(1 for s in statements if "FROM documents" in s or "FROM members" in s)


def _patched(store: Any, view: MemoryView, key: DocKey, name: str, value: str) -> tuple[int | None, int]:
    """One contended patch of ``name``; its transition and the documents' and members' reads
    its turn made."""
    statements: list[str] = []
    store._contended[key] = time.monotonic() + 3600  # as a writer that just lost to another
    store._writer().set_trace_callback(statements.append)
    try:
        receipt = view.patch_state({"session": {"tactics": {name: value}}})
    finally:
        store._writer().set_trace_callback(None)
    return receipt.seq, _reads(statements)


@contextmanager
def _writers(db: Path, n: int) -> Iterator[tuple[list[Any], list[MemoryView], DocKey]]:
    """``n`` store objects on ``db`` (each as a process of its own), a view of one shared scope
    in each, and the scope's key; the scope seeded by a plain write (nothing handed on)."""
    stores = [open_store(db) for _ in range(n)]
    try:
        views = [MemoryView(s, Identity.of("t", "/t", "shared")) for s in stores]
        key = views[0].keys["session"]
        views[0].patch_state({"session": {"tactics": {"seed": "s"}}})
        yield stores, views, key
    finally:
        for store in stores:
            store.close()


def _drive(db: Path) -> tuple[list[int], dict[str, Any]]:
    """Three writers patching one scope in turn, twice round; each turn's reads and the body."""
    with _writers(db, 3) as (stores, views, key):
        reads: list[int] = []
        seqs: list[int | None] = []
        for i in range(6):
            seq, n = _patched(stores[i % 3], views[i % 3], key, f"w{i % 3}", f"v{i}")
            reads.append(n)
            seqs.append(seq)
        first = seqs[0]
        assert first is not None and seqs == list(range(first, first + 6))  # one transition each, in turn
        body = stores[0].get(key).body
        assert body is not None
        return reads, body


def _rows(db: Path) -> dict[str, list[list[Any]]]:
    conn = sqlite3.connect(db)
    try:
        tables = {**_TABLES, "transitions": "seq, origin, changed", "change_paths": "*", "state_counts": "*"}
        return {
            table: [
                [_plain(v) for v in row] for row in conn.execute(f"SELECT {cols} FROM {table} ORDER BY 1, 2")
            ]
            for table, cols in tables.items()
        }
    finally:
        conn.close()


def test_a_turns_own_patch_is_merged_on_the_documents_the_turn_before_handed_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads, body = _drive(tmp_path / "handed.db")
    # the first contended turn follows a plain write (nothing handed on): it reads; every later
    # one finds what the turn before it left, and reads no document or member
    assert reads[0] > 0
    assert reads[1:] == [0] * 5
    assert body["tactics"] == {"seed": "s", "w0": "v3", "w1": "v4", "w2": "v5"}
    # the very rows the locked path writes, each write read under the lock instead
    monkeypatch.setattr(WriterQueue, "handed", lambda self, header: None)
    locked_reads, locked_body = _drive(tmp_path / "locked.db")
    assert all(n > 0 for n in locked_reads)
    assert locked_body == body
    assert _rows(tmp_path / "handed.db") == _rows(tmp_path / "locked.db")


def test_a_commit_since_the_documents_were_handed_on_makes_the_next_turn_read_them(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    with _writers(db, 3) as (stores, views, key):
        _patched(stores[0], views[0], key, "a", "1")  # reads: nothing handed on yet
        _, reads = _patched(stores[1], views[1], key, "b", "1")  # on what the turn before left
        assert reads == 0
        # a write by another path commits without handing anything on: what was handed on is
        # no longer the committed state, and a turn merging on it would lose this write
        stores[2]._contended.clear()
        views[2].patch_state({"session": {"tactics": {"c": "1"}}})
        _, reads = _patched(stores[0], views[0], key, "a", "2")
        assert reads > 0
        _, reads = _patched(stores[1], views[1], key, "b", "2")  # (handed on again since)
        assert reads == 0
        body = stores[2].get(key).body
        assert body is not None and body["tactics"] == {"seed": "s", "a": "2", "b": "2", "c": "1"}


def test_a_header_read_after_a_commit_is_handed_on_only_if_it_is_that_commits() -> None:
    def header(count: int) -> bytes:
        return bytes(8) + count.to_bytes(4, sys.byteorder) + bytes(36)

    assert backend._after(header(7), header(8)) == header(8)
    assert backend._after(header(7), header(9)) is None  # another commit came in between
    assert backend._after(header(0xFFFFFFFF), header(0)) == header(0)  # (the counter wraps)
    assert backend._after(header(7), None) is None


def test_what_a_turn_hands_on_is_each_document_as_its_last_write_left_it() -> None:
    """``SqliteStore._held``: each document as the transaction's last write planned it whole —
    its heads as planned, or, for a whole-form body held without them (a checkpoint's), made
    from the body now —; a deleted one with no members; one holding a tree, or read only,
    left to the locked path (dropped), unless held already at the revision read. Each write is
    folded in once."""

    def key(n: int) -> DocKey:
        return DocKey("s", f'["agent","a","record","{n}"]')

    def row(doc_id: int, revision: int, present: bool = True) -> DocRow:
        return DocRow(doc_id, revision, present, 9, 0, 0, 10, 1)

    pending = backend._Pending()
    first = Fresh()
    first.rows = {key(1): row(1, 2), key(2): row(2, 1), key(3): row(3, 4), key(4): row(4, 1)}
    heads_2 = {"a": (2, "a", 0, 1, 1, None)}
    first.heads = {
        1: (2, None, {"n": 1}, 7),  # (a body held alone: its heads made from it)
        2: (1, heads_2, {"a": 1}, 7),
        3: (4, heads_2, {"a": 1}, 7),  # (held as a tree below)
    }
    first.roots = {3: (4, {"a": b"root"})}
    pending.written.append(first)
    held = backend.SqliteStore._held(pending)
    assert held == {
        key(1): (row(1, 2), {"n": 1}, whole_heads(1, 2, {"n": 1})),
        key(2): (row(2, 1), {"a": 1}, heads_2),
    }
    assert pending.folded == 1
    second = Fresh()  # (a later write: key 1 deleted, key 2 read only at the revision held)
    second.rows = {key(1): row(1, 3, present=False), key(2): row(2, 1), key(4): row(4, 2)}
    pending.written.append(second)
    held = backend.SqliteStore._held(pending)
    assert held == {key(1): (row(1, 3, present=False), None, {}), key(2): (row(2, 1), {"a": 1}, heads_2)}
    assert pending.folded == 2 and backend.SqliteStore._held(pending) is held  # (nothing new folded)


def test_a_turn_that_carried_other_processes_requests_hands_their_writes_on_too(tmp_path: Path) -> None:
    names = ["r1", "r2", "r3"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "reads", names)
    # (connected before they finish: the last connection to close would remove the WAL index,
    # and a new one's header is no earlier commit's)
    with open_store(db) as store:
        view = MemoryView(store, Identity.of("t", "/t", "shared"))
        view.read_state({"path": "session"})
        Path(f"{db}-go").touch()
        assert [entry[:2] for entry in acknowledged(holder)] == [("reads", "0"), ("holder", "h")]
        acked = [entry for proc in requesters for entry in acknowledged(proc)]
        assert sorted(name for name, _, _ in acked) == names
        _, reads = _patched(store, view, key, "next", "y")
        assert reads == 0  # the documents as the holder's commit left them, its requests' writes in
        body = store.get(key).body
        assert body is not None and body["tactics"] == {
            "w0": "seed",
            "holder": "h",
            "r1": "x",
            "r2": "x",
            "r3": "x",
            "next": "y",
        }


def test_a_record_whose_two_headers_differ_is_not_taken(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    with _writers(db, 2) as (stores, views, key):
        _patched(stores[0], views[0], key, "a", "1")
        handed = stores[0]._group.queue._handed
        size = int.from_bytes(handed[48:52], "little")
        assert size > 0 and handed[52 + size : 100 + size] == handed[:48]
        handed[52 + size] ^= 0xFF  # (as a record put together from two turns' writes)
        _, reads = _patched(stores[1], views[1], key, "b", "1")
        assert reads > 0
        body = stores[1].get(key).body
        assert body is not None and body["tactics"] == {"seed": "s", "a": "1", "b": "1"}
