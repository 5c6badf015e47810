"""`stateflow backup`: a consistent, checked, private copy of a SQLite store taken while a
writer in another process keeps committing."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from stateflow.store import open_store
from stateflow.store.backup import sqlite_backup

from .conftest import ROOT
from .workers import A, B


def sf(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=120, env=env)


def test_backup_of_a_store_under_writes_is_consistent_and_private(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    env = dict(os.environ, STATEFLOW_STORE=str(path))
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.workers", "forever", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        copies = [tmp_path / f"copy{i}.db" for i in range(2)]
        for copy in copies:
            out = sf(env, "backup", str(copy))
            assert out.returncode == 0, out.stderr
            assert "checked" in out.stderr
    finally:
        writer.kill()
        writer.wait()
    seen = []
    for copy in copies:
        assert oct(copy.stat().st_mode & 0o777) == "0o600"
        assert not Path(f"{copy}-wal").exists()  # one self-contained file
        store = open_store(str(copy))
        try:
            a, b = store.get(A).body, store.get(B).body
        finally:
            store.close()
        assert a is not None and b is not None and a["n"] == b["n"]  # one commit, never half
        seen.append(a["n"])
        assert sf(dict(env, STATEFLOW_STORE=str(copy)), "check").returncode == 0
    assert seen[1] >= seen[0] >= 1


def test_backup_refuses_to_overwrite_and_names_pg_dump_for_postgresql(
    tmp_path: Path, pg_schema_url: str
) -> None:
    path = tmp_path / "s.db"
    env = dict(os.environ, STATEFLOW_STORE=str(path))
    assert sf(env, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    target = tmp_path / "copy.db"
    target.write_text("precious")
    out = sf(env, "backup", str(target))
    assert out.returncode == 1 and out.stderr.startswith("error[invalid-input]: ") and "--force" in out.stderr
    assert target.read_text() == "precious"
    assert sf(env, "backup", "--force", str(target)).returncode == 0

    # the store's own files are never a backup's target, --force or not: the first answer says
    # so, rather than suggesting a --force that would be refused in turn
    def files() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db")}

    before = files()
    for own in (path, Path(f"{path}-wal"), Path(f"{path}-writer")):
        for force in ([], ["--force"]):
            out = sf(env, "backup", *force, str(own))
            assert out.returncode == 1, (own, force)
            assert out.stderr == (
                f"error[invalid-input]: {own} is a file of the store being backed up; "
                "the backup must go to another file\n"
            ), (own, force, out.stderr)
    assert files() == before
    assert sf(env, "doc", "get", "notes", "a").stdout.strip() == '{"x":1}'
    out = sf(dict(env, STATEFLOW_STORE=pg_schema_url), "backup", str(tmp_path / "pg.db"))
    assert out.returncode == 1 and "pg_dump" in out.stderr and not (tmp_path / "pg.db").exists()


def test_backup_copies_one_snapshot_once_while_every_step_meets_a_commit(tmp_path: Path) -> None:
    """A commit by another connection between every two steps of the copy: the copy still goes
    through the store's pages once (steps restarting from the first page at each commit never
    finished while writes kept coming), its progress adds up to its pages, and it holds the
    store as it was when the copy began."""
    from stateflow.store import DocKey, Write
    from stateflow.store.backup import sqlite_backup

    path = tmp_path / "live.db"
    store = open_store(str(path), auto_migrate=True)
    try:
        for part in range(4):  # a few thousand pages: several steps of 1024
            store.commit(
                [
                    Write.between(DocKey("bulk", f"d{part}-{i}"), None, {"t": "x" * 900}, expect=0)
                    for i in range(1500)
                ]
            )
        reported: list[int] = []

        def progress(what: str, n: int) -> None:
            assert len(reported) < 50, "the copy keeps starting over"
            reported.append(n)
            store.commit([Write.between(DocKey("live", f"k{len(reported)}"), None, {"n": 1}, expect=0)])

        pages = sqlite_backup(path, tmp_path / "copy.db", progress=progress)
    finally:
        store.close()
    assert pages > 3 * 1024 and len(reported) == -(-pages // 1024) and sum(reported) == pages
    copy = open_store(str(tmp_path / "copy.db"))
    try:
        assert copy.get(DocKey("bulk", "d3-1499")).revision == 1
        assert copy.get(DocKey("live", "k1")).revision == 0  # committed after the copy began
    finally:
        copy.close()


def test_a_backup_leaves_out_the_pages_deletes_freed(tmp_path: Path) -> None:
    """The store keeps the pages a purge freed (its file does not shrink); its backup is
    rebuilt without them and still holds every record left."""
    from stateflow.store import DocKey, Write

    path = tmp_path / "live.db"
    store = open_store(str(path), auto_migrate=True)
    try:
        store.commit(
            [Write.between(DocKey("big", f"k{i}"), None, {"t": "x" * 20000}, expect=0) for i in range(200)]
        )
        store.commit([Write.between(DocKey("kept", "one"), None, {"n": 1}, expect=0)])
        store.purge("big")
    finally:
        store.close()
    out = sf(dict(os.environ, STATEFLOW_STORE=str(path)), "backup", str(tmp_path / "copy.db"))
    assert out.returncode == 0, out.stderr
    copy = tmp_path / "copy.db"
    assert copy.stat().st_size * 10 < path.stat().st_size
    conn = sqlite3.connect(copy)
    try:
        assert (
            conn.execute("PRAGMA freelist_count").fetchone()[0] * 4
            < conn.execute("PRAGMA page_count").fetchone()[0]
        )
    finally:
        conn.close()
    restored = open_store(str(copy))
    try:
        assert restored.get(DocKey("kept", "one")).body == {"n": 1}
        assert restored.get(DocKey("big", "k1")).body is None
    finally:
        restored.close()


def test_a_backup_is_never_written_through_a_file_planted_beside_it(tmp_path: Path) -> None:
    # a link planted at the partial copy's name (by another user who may write in the folder)
    # must neither receive the copy nor become the backup
    source = tmp_path / "s.db"
    open_store(str(source)).close()
    planted = tmp_path / "planted"
    planted.write_bytes(b"")
    target = tmp_path / "copy.db"
    os.symlink(planted, tmp_path / f".{target.name}.{os.getpid()}.partial")
    assert sqlite_backup(source, target) > 0
    assert planted.read_bytes() == b""
    assert not target.is_symlink() and oct(target.stat().st_mode & 0o777) == "0o600"
    assert sqlite3.connect(target).execute("PRAGMA quick_check").fetchone() == ("ok",)


def test_a_backup_never_replaces_a_pipe_or_a_link_even_with_force(tmp_path: Path) -> None:
    source = tmp_path / "s.db"
    open_store(str(source)).close()
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "real.db").write_bytes(b"kept")
    os.symlink(tmp_path / "real.db", tmp_path / "link")
    env = dict(os.environ, STATEFLOW_STORE=str(source))
    for name, kind in [("pipe", "a named pipe"), ("link", "a symbolic link")]:
        for force in ([], ["--force"]):
            out = sf(env, "backup", str(tmp_path / name), *force)
            assert out.returncode == 1, (name, force, out.stderr)
            assert out.stderr.startswith(
                f"error[target-unwritable]: cannot write {tmp_path / name}: it is {kind}, "
            )
    assert (tmp_path / "pipe").is_fifo() and (tmp_path / "link").is_symlink()
    assert (tmp_path / "real.db").read_bytes() == b"kept"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")]
