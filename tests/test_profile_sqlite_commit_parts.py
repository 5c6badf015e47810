"""``benchmarks/profile_sqlite_commit_parts.py`` replays a new checkpoint's commit as the saver
sends it: its transition's check must hold on a real store the saver filled (the aliases' row,
the declaration's, the parent's), or the replay writes nothing and prices nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from benchmarks.profile_sqlite_commit_parts import fill, replay


@pytest.mark.parametrize("variant", ["as written", "no count triggers", "change without its edits"])
def test_each_replayed_commit_writes_a_checkpoints_rows(tmp_path: Path, variant: str) -> None:
    source = str(tmp_path / "filled.db")
    rows = fill(source, 12)
    assert rows.aliases is not None  # (a saver's state has its aliases' row: the check names it)
    cpu, frames = replay(source, str(tmp_path), variant, rows, 5, "OFF")
    assert cpu > 0
    assert frames >= 4  # (a page of each of transitions, documents, members, changes)
    conn = sqlite3.connect(tmp_path / "replay.db")
    try:
        (transitions,) = conn.execute("SELECT count(*) FROM transitions").fetchone()
        (documents,) = conn.execute(
            "SELECT count(*) FROM documents WHERE state = ?", (rows.state,)
        ).fetchone()
    finally:
        conn.close()
    assert documents == 12 + 5
    assert transitions >= 12 + 5
