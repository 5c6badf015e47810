"""A store on a read-only medium (a directory or file this process may not write) still serves
reads, refuses writes with `store-read-only`, and is left exactly as it was.

File permissions do not bind root, so as root the CLI and the server run with the capabilities
that bypass them dropped (``setpriv``, util-linux): what an unprivileged operator would see."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from stateflow.store import DocKey, Write, open_store
from tests.servers import base_env, start

UNPRIVILEGED = (
    ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner,-linux_immutable", "--"]
    if os.geteuid() == 0
    else []
)


def sf(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATEFLOW_STORE=str(store))
    return subprocess.run(
        [*UNPRIVILEGED, "stateflow", *args], capture_output=True, text=True, timeout=60, env=env
    )


def fill(path: Path) -> None:
    store = open_store(str(path))
    try:
        for i in range(3):
            key = DocKey("notes", f"n{i}")
            store.commit([Write.between(key, None, {"n": i}, 0)], {"door": "test"})
    finally:
        store.close()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture
def medium() -> Iterator[Path]:
    """A directory of its own (pytest's temporary tree is private to the user running it)."""
    directory = Path(tempfile.mkdtemp(prefix="stateflow-ro-"))
    directory.chmod(0o755)
    try:
        yield directory / "store"
    finally:
        for p in [directory, *directory.rglob("*")]:
            p.chmod(0o700 if p.is_dir() else 0o600)
        shutil.rmtree(directory)


def _read_only(directory: Path) -> None:
    for p in directory.iterdir():
        p.chmod(0o444)
    directory.chmod(0o555)


@pytest.mark.parametrize("directory_writable", [False, True], ids=["read-only-dir", "read-only-file"])
def test_a_read_only_store_serves_reads_and_refuses_writes(medium: Path, directory_writable: bool) -> None:
    medium.mkdir()
    path = medium / "s.db"
    fill(path)
    _read_only(medium)
    if directory_writable:
        medium.chmod(0o777)  # only the store file is read-only
    before = snapshot(medium)

    out = sf(path, "doc", "get", "notes", "n2")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"n": 2}
    out = sf(path, "states", "list")
    assert out.returncode == 0, out.stderr
    out = sf(path, "check", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["checked"]["documents"] == 3

    out = sf(path, "doc", "put", "notes", "n2", '{"n": 99}')
    assert out.returncode == 1
    assert out.stderr.startswith("error[store-read-only]: "), out.stderr
    after = snapshot(medium)
    assert after["s.db"] == before["s.db"]
    if not directory_writable:
        assert after == before  # not even a lock file appeared


def test_a_wal_that_cannot_be_read_is_refused_not_served_stale(medium: Path) -> None:
    medium.mkdir()
    path = medium / "s.db"
    fill(path)
    # a copy taken while a writer had commits in the WAL, without its index (-shm)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE later (x)")
    copy = medium / "copy"
    copy.mkdir()
    shutil.copy(path, copy / "s.db")
    shutil.copy(f"{path}-wal", copy / "s.db-wal")
    writer.close()
    assert (copy / "s.db-wal").stat().st_size > 0
    _read_only(copy)
    out = sf(copy / "s.db", "doc", "get", "notes", "n1")
    assert out.returncode == 1
    assert out.stderr.startswith("error[store-read-only]: ") and "-wal" in out.stderr, out.stderr


def test_a_server_on_a_read_only_medium_answers_reads(medium: Path, tmp_path: Path) -> None:
    medium.mkdir()
    path = medium / "s.db"
    store = open_store(str(path))
    from stateflow.states import StatesService

    service = StatesService(store)
    service.install_builtins()
    service.declare(
        "notes",
        {
            "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "subject_kinds": ["note"],
            "default_subject_kind": "note",
        },
    )
    subject = {"target_kind": "agent", "target_name": "a", "kind": "note", "key": "k"}
    service.replace("notes", subject, {"text": "kept"})
    store.close()
    _read_only(medium)
    before = snapshot(medium)

    server = start(base_env(tmp_path, str(path)), prefix=UNPRIVILEGED)
    try:
        status, body, _ = server.call("GET", "/api/ready")
        assert status == 200, body
        status, body, _ = server.call("GET", "/api/states/notes/records/agent/a/note/k")
        assert status == 200 and body["data"]["data"] == {"text": "kept"}, body
        status, body, _ = server.call("PUT", "/api/states/notes/records/agent/a/note/k", {"text": "lost"})
        assert status == 503 and body["code"] == "store-read-only", body
    finally:
        server.stop()
    assert snapshot(medium) == before


def test_a_store_on_a_read_only_medium_is_backed_up_as_it_reads(medium: Path, tmp_path: Path) -> None:
    # reads open the file alone where no -shm can be made; the backup opens it the same way
    medium.mkdir()
    path = medium / "s.db"
    fill(path)
    _read_only(medium)
    before = snapshot(medium)
    out_dir = Path(tempfile.mkdtemp(prefix="stateflow-copy-"))
    out_dir.chmod(0o777)
    try:
        out = sf(path, "backup", str(out_dir / "copy.db"))
        assert out.returncode == 0, out.stderr
        copy = open_store(str(out_dir / "copy.db"))
        try:
            assert copy.get(DocKey("notes", "n2")).body == {"n": 2}
        finally:
            copy.close()
    finally:
        shutil.rmtree(out_dir)
    assert snapshot(medium) == before
