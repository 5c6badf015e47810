"""Commands that only read never upgrade a SQLite store written by an older stateflow: `check`
("reads only"), `dump`, the reading tools and `states` reads answer `store-not-migrated` and
leave the file as it was (the version that wrote it can still open it); `backup` copies it as
it is; `migrate` (or a write) upgrades it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

from stateflow.store.migrations import SCHEMA_VERSION

from .test_store_upgrade import _store_at


def sf(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATEFLOW_STORE=str(store))
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=120, env=env)


def rows(path: Path) -> list[str]:
    """Every table's schema and rows (the file's bytes may differ: a writable open switches an
    older store's journal to WAL mode, which changes nothing the older version reads)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        out = list(conn.iterdump())
    conn.close()
    return out


def version(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT value FROM stateflow_meta WHERE key = 'schema_version'").fetchone()
    conn.close()
    return int(row[0])


def test_reading_commands_refuse_an_older_store_and_leave_it_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _store_at(6, str(path), tmp_path)
    before = rows(path)
    for args in (
        ("check",),
        ("dump", str(tmp_path / "d.jsonl")),
        ("doc", "get", "notes", "a"),
        ("tool", "read_state", '{"path": "session"}'),
        ("states", "list"),
    ):
        out = sf(path, *args)
        assert out.returncode == 1, (args, out.stdout)
        assert out.stderr.startswith("error[store-not-migrated]: "), (args, out.stderr)
        assert "schema version 6" in out.stderr and "migrate" in out.stderr, out.stderr
    assert rows(path) == before and version(path) == 6
    assert not (tmp_path / "d.jsonl").exists()

    out = sf(path, "backup", str(tmp_path / "copy.db"))
    assert out.returncode == 0, out.stderr
    assert version(tmp_path / "copy.db") == 6 and version(path) == 6

    assert sf(path, "migrate").returncode == 0
    assert version(path) == SCHEMA_VERSION
    out = sf(path, "check")
    assert out.returncode == 0, out.stdout + out.stderr
