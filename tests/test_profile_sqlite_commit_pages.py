"""``benchmarks/profile_sqlite_commit_pages.py``: each write it prices makes its rows on a real
store, and its ``documents' key descending`` variant rebuilds the table with every row, id and
trigger kept (dropped with foreign keys on, the table would take its members and changes with
it) — or the frames it reports are of another store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from benchmarks.profile_sqlite_commit_pages import WRITES, _service, _vary, frames, writer

from stateflow.store.sqlite import SqliteStore


@pytest.mark.parametrize("kind", WRITES)
def test_each_write_is_priced_by_the_b_trees_it_writes(kind: str) -> None:
    per_write, by_tree = frames(kind, "as written", 3, 4)
    assert per_write >= 3  # (a transition, a document and a change a write at least)
    assert {"transitions", "documents", "changes"} <= set(by_tree), by_tree


def test_the_descending_key_keeps_every_row_and_trigger(tmp_path: Path) -> None:
    service = _service(str(tmp_path))
    write = writer("saver put", service, str(tmp_path))
    for i in range(6):
        write(i)
    path = str(tmp_path / "pages.db")

    def rows() -> tuple[object, ...]:
        conn = sqlite3.connect(path)
        try:
            return (
                conn.execute("SELECT * FROM documents ORDER BY doc_id").fetchall(),
                conn.execute("SELECT count(*) FROM members").fetchone(),
                conn.execute("SELECT count(*) FROM changes").fetchone(),
                conn.execute("SELECT * FROM state_counts ORDER BY state, counter, name").fetchall(),
                sorted(conn.execute("SELECT name FROM sqlite_schema WHERE type = 'trigger'").fetchall()),
            )
        finally:
            conn.close()

    before = rows()
    _vary(path, "documents' key descending")
    assert rows() == before
    write(6)  # (one more checkpoint, counted by its writer)
    conn = sqlite3.connect(path)
    try:
        (index,) = conn.execute(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'documents'"
        ).fetchone()
        assert "subject DESC" in index
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()
    store = SqliteStore(path)
    try:
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
        assert stored == recounted
        assert [
            n for (_, counter, name), n in stored.items() if (counter, name) == ("kind", "checkpoint")
        ] == [7]
    finally:
        store.close()
    service.close()
    service.store.close()
