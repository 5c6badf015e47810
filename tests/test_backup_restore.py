"""Backups name exactly the store they copy, and a backup put back under the old store's
write-ahead log is refused before anything reads or writes it (through the CLI)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from stateflow.store import DocKey, Write, open_store


def sf(cwd: Path, store: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATEFLOW_STORE=store)
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def _notes(path: Path, count: int, pad: int) -> str:
    """A store at ``path`` of ``count`` documents of ``pad`` characters, each its own commit."""
    store = open_store(str(path))
    try:
        for i in range(count):
            store.commit(
                [Write.between(DocKey("notes", f"k{i}"), None, {"pad": "p" * pad}, 0)], {"door": "t"}
            )
    finally:
        store.close()
    return str(path)


def test_a_backup_copies_the_store_named_even_with_percent_or_hash_in_its_name(tmp_path: Path) -> None:
    # 'one%41.db' is not 'oneA.db' and 'r#1.db' is not 'r': a URI built from the name unquoted
    # would read those other files (or create an empty one) and report the copy good
    for name, other in (("one%41.db", "oneA.db"), ("r#1.db", None)):
        assert sf(tmp_path, name, "doc", "put", "notes", "who", json.dumps({"who": name})).returncode == 0
        if other is not None:
            assert sf(tmp_path, other, "doc", "put", "notes", "who", '{"who": "other"}').returncode == 0
        target = f"copy-of-{name.replace('%', 'pct').replace('#', 'hash')}"
        out = sf(tmp_path, name, "backup", target)
        assert out.returncode == 0, out.stderr
        got = sf(tmp_path, target, "doc", "get", "notes", "who")
        assert got.returncode == 0 and json.loads(got.stdout) == {"who": name}, got.stdout + got.stderr
    assert not (tmp_path / "r").exists()  # no stray file named after the part before '#'
    assert sf(tmp_path, "r#1.db", "check").returncode == 0


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name.startswith("live.db")}


def test_a_backup_restored_under_the_old_wal_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    live = tmp_path / "live.db"
    assert sf(tmp_path, str(live), "doc", "put", "notes", "v", '{"v": "backed up"}').returncode == 0
    assert sf(tmp_path, str(live), "backup", "bk.db").returncode == 0
    # the backup checked and read as the docs advise leaves it as it was: a rollback-journal
    # file (header bytes 18-19: 1, 1), which is what makes the restore below refused — a read
    # that switched it to WAL mode let the stale log be replayed over it
    backup = tmp_path / "bk.db"
    for read in (("check",), ("doc", "get", "notes", "v"), ("dump", "bk.jsonl")):
        assert sf(tmp_path, str(backup), *read).returncode == 0, read
    assert backup.read_bytes()[18:20] == b"\x01\x01"
    assert not Path(f"{backup}-wal").exists() and not Path(f"{backup}-shm").exists()
    # the store carries on; its WAL (and index) as a crash leaves them, commits not yet in the file
    store = open_store(str(live))
    try:
        for i in range(20):
            key = DocKey("notes", "v")
            store.commit([Write.between(key, store.get(key).body, {"v": f"after {i}"}, i + 1)], {"door": "t"})
        wal, shm = Path(f"{live}-wal").read_bytes(), Path(f"{live}-shm").read_bytes()
    finally:
        store.close()
    assert len(wal) > 0
    # the operator restores the backup over the file, forgetting its -wal and -shm
    shutil.copy(tmp_path / "bk.db", live)
    Path(f"{live}-wal").write_bytes(wal)
    Path(f"{live}-shm").write_bytes(shm)
    before = _files(tmp_path)

    for args in (
        ("doc", "get", "notes", "v"),
        ("tool", "read_state", '{"path": "session"}'),
        ("doc", "put", "notes", "v", '{"v": "written on a stale log"}'),
        ("dump",),
        ("backup", "again.db"),
    ):
        out = sf(tmp_path, str(live), *args)
        assert out.returncode == 1, (args, out.stdout)
        assert (
            out.stderr.startswith("error[corrupt-store]: ")
            and "replaced under its write-ahead log" in out.stderr
        )
        assert "live.db-wal" in out.stderr, out.stderr
    out = sf(tmp_path, str(live), "check")
    assert out.returncode == 1 and "replaced under its write-ahead log" in out.stdout, out.stdout
    assert "each line above says what fixes it" in out.stderr and "backup" not in out.stderr, out.stderr
    assert _files(tmp_path) == before  # nothing read the stale log into the file
    assert not (tmp_path / "again.db").exists()

    # the fix the refusal names: the old log goes, and the backup is the store
    Path(f"{live}-wal").unlink()
    Path(f"{live}-shm").unlink()
    out = sf(tmp_path, str(live), "doc", "get", "notes", "v")
    assert out.returncode == 0 and json.loads(out.stdout) == {"v": "backed up"}, out.stderr
    assert sf(tmp_path, str(live), "check").returncode == 0


def test_an_output_that_cannot_be_written_is_the_targets_fault_not_the_stores(tmp_path: Path) -> None:
    store = str(tmp_path / "ok.db")
    assert sf(tmp_path, store, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    for args in (("dump", "missing/x.jsonl"), ("backup", "missing/x.db")):
        out = sf(tmp_path, store, *args)
        assert out.returncode == 1
        assert out.stderr.startswith("error[target-unwritable]: cannot write missing/x."), out.stderr
        assert "No such file or directory" in out.stderr
    assert not (tmp_path / "missing").exists()
    assert sf(tmp_path, store, "check").returncode == 0


def test_a_backup_that_fails_midway_leaves_nothing_beside_its_target(tmp_path: Path) -> None:
    """A copy cut short (here by a file size limit, as a full disk would) is refused naming
    the target, and leaves neither the partial copy nor the journal SQLite kept beside it."""
    store = _notes(tmp_path / "big.db", 1500, 2000)
    out = tmp_path / "out"
    out.mkdir()

    def limited() -> None:  # (writes past 1 MiB fail with EFBIG instead of killing the process)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    env = dict(os.environ, STATEFLOW_STORE=store)
    done = subprocess.run(
        ["stateflow", "backup", str(out / "bk.db")], capture_output=True, text=True, timeout=120, env=env,
        preexec_fn=limited,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.startswith("error[target-unwritable]: "), done.stderr
    assert sorted(p.name for p in out.iterdir()) == []
    assert sf(tmp_path, store, "check").returncode == 0


def test_a_dump_stopped_by_sigterm_leaves_nothing_beside_its_target(tmp_path: Path) -> None:
    """SIGTERM (a service manager, ``timeout``) is taken as a Ctrl-C is: the command removes
    what it was writing and exits 143 saying so — the default action left the partial file."""
    store = str(tmp_path / "big.db")
    s = open_store(store)
    try:
        s.commit([Write.between(DocKey("notes", f"k{i}"), None, {"pad": "p" * 500}, 0) for i in range(30000)])
    finally:
        s.close()
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, STATEFLOW_STORE=store)
    proc = subprocess.Popen(
        ["stateflow", "dump", str(out / "all.jsonl")], stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 60
    while not any(out.iterdir()):  # (its partial file begun)
        assert proc.poll() is None and time.monotonic() < deadline, "the dump ended before it was stopped"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.startswith("terminated: nothing was dumped"), (proc.returncode, err)
    assert sorted(p.name for p in out.iterdir()) == []


def test_checks_advice_on_a_damaged_file_is_one_that_works(tmp_path: Path) -> None:
    # `dump` refuses a damaged file: the advice must not send the operator there
    store = _notes(tmp_path / "d.db", 300, 300)
    with open(store, "r+b") as fh:
        for page in range(10, 100, 10):
            fh.seek(4096 * page + 100)
            fh.write(b"\xff" * 200)
    out = sf(tmp_path, store, "check")
    assert out.returncode == 1 and "damaged: " in out.stdout
    assert out.stderr.startswith("error[corrupt-store]: ") and "restore the store from a backup" in out.stderr
    assert "dump" not in out.stderr, out.stderr
    assert sf(tmp_path, store, "dump", "out.jsonl").returncode == 1


def test_a_file_of_another_page_size_under_a_wal_is_refused(tmp_path: Path) -> None:
    # a store file in WAL mode, but not the one the log beside it was written for
    live = tmp_path / "live.db"
    store = open_store(str(live))
    try:
        store.commit([Write.between(DocKey("notes", "v"), None, {"v": 1}, 0)], {"door": "t"})
        wal = Path(f"{live}-wal").read_bytes()
    finally:
        store.close()
    live.unlink()
    other = sqlite3.connect(live)
    other.execute("PRAGMA page_size = 8192")
    other.execute("PRAGMA journal_mode = WAL")
    other.execute("CREATE TABLE t (x)")
    other.close()
    Path(f"{live}-wal").write_bytes(wal)
    before = _files(tmp_path)
    out = sf(tmp_path, str(live), "doc", "get", "notes", "v")
    assert out.returncode == 1 and out.stderr.startswith("error[corrupt-store]: "), out.stderr
    assert "its pages are 8192 bytes, the log's 4096" in out.stderr, out.stderr
    assert _files(tmp_path) == before


def test_a_store_file_replaced_under_a_running_server_is_refused_not_written_to_a_lost_file(
    tmp_path: Path,
) -> None:
    """A restore done while `stateflow serve` runs (the docs say to stop it first): the server's
    open connections still held the unlinked old file, so writes were acknowledged into it and
    lost at the stop, and /api/ready said 200. The readiness probe now finds the path names
    another file, answers 503, and every write is refused from then on."""
    from . import servers

    store = tmp_path / "s.db"
    state = {
        "schema": {"type": "object", "properties": {"a": {}}},
        "subject_kinds": ["thread"],
        "default_subject_kind": "thread",
    }
    record = "/api/states/t/records/agent/bot/thread/{key}"
    assert sf(tmp_path, str(store), "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    assert sf(tmp_path, str(store), "backup", "bk.db").returncode == 0
    server = servers.start(servers.base_env(tmp_path, str(store)))
    try:
        assert server.call("PUT", "/api/states/t", state)[0] == 200
        assert server.call("PUT", record.format(key="before"), {"a": 1})[0] == 200
        shutil.copy(tmp_path / "bk.db", tmp_path / "restored.db")
        os.replace(tmp_path / "restored.db", store)  # the documented restore, the server still up
        for leftover in ("s.db-wal", "s.db-shm"):
            (tmp_path / leftover).unlink(missing_ok=True)
        # the readiness probe (an orchestrator's, every few seconds) finds the file replaced
        status, body, _ = server.call("GET", "/api/ready")
        assert status == 503 and body["code"] == "store-unavailable" and body["ready"] is False, body
        assert (
            f"the store file {store} was replaced or removed while this process had it open" in body["error"]
        )
        # and from then on every write is refused, nothing written to the unlinked old file
        for key in ("after", "before"):
            status, body, _ = server.call("PUT", record.format(key=key), {"a": 2})
            assert status == 503 and body["code"] == "store-unavailable", body
    finally:
        server.stop()
    # the restored file is the store, whole, and holds nothing the refused write would have put
    got = sf(tmp_path, str(store), "doc", "get", "notes", "a")
    assert got.returncode == 0 and json.loads(got.stdout) == {"x": 1}, got.stderr
    assert (
        sf(tmp_path, str(store), "states", "read", "t", "--target-name", "bot", "--key", "after").returncode
        == 1
    )
    assert sf(tmp_path, str(store), "check").returncode == 0
