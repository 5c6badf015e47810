"""The WAL frame counts of ``benchmarks/profile_store_put_sides.py`` and
``profile_sqlite_commit_pages``: every frame of a real ``-wal`` file read back as the page it
holds, in the order written, and a store ``put``'s frames named by the b-trees it writes — or
the map of where a commit's pages go is made up."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from benchmarks.profile_sqlite_commit_pages import wal_pages
from benchmarks.profile_store_put_sides import frames


def test_each_frame_of_the_wal_is_read_back_as_the_page_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "pages.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE a (x)")
    conn.execute("CREATE TABLE b (y)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    roots = dict(conn.execute("SELECT name, rootpage FROM sqlite_schema"))
    assert roots["a"] != roots["b"]
    conn.execute("INSERT INTO b VALUES (1)")
    for n in range(3):  # each a commit of its own: a frame of a's one page each
        conn.execute("INSERT INTO a VALUES (?)", (n,))
    assert wal_pages(path) == [roots["b"], roots["a"], roots["a"], roots["a"]]
    conn.close()


def test_a_store_puts_frames_are_named_by_the_b_trees_it_writes() -> None:
    for side, tables in (
        ("stateflow", {"transitions", "documents", "changes"}),  # (an item whole in its row)
        ("by hand", {"transitions", "documents", "members", "changes"}),
        ("langgraph", {"store"}),
    ):
        per_write, by_tree = frames(side, 30, 20)
        assert per_write >= len(tables)  # (a commit writes a page of every table it changes)
        assert tables <= set(by_tree), (side, by_tree)
        assert sum(by_tree.values()) == round(per_write * 20)
