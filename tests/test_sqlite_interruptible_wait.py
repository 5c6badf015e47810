"""A SQLite write waiting for the file's write lock held by another program (a ``sqlite3``
shell, a backup tool — not a stateflow writer, whose turn is waited for in the writers' queue)
stops at a Ctrl-C within moments, nothing written and nothing left held; not interrupted, it
waits the store's whole wait and fails ``store-busy`` as before, or writes once the lock is
let go."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import stateflow
from stateflow.errors import StoreBusy
from stateflow.store import DocKey, Write, open_store
from stateflow.store.sqlite import SqliteStore
from stateflow.store.writer_queue import WriterQueue

KEY = DocKey("lock", "k")
SRC = str(Path(stateflow.__file__).resolve().parents[1])  # (the children run this very tree)


def cli(db: Path, *args: str, wait: float = 60) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "STATEFLOW_STORE"}
    env |= {"PYTHONPATH": SRC, "STATEFLOW_STORE_WAIT_SECONDS": f"{wait:g}"}
    return subprocess.Popen(
        [sys.executable, "-m", "stateflow", "--store", str(db), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def run(db: Path, *args: str) -> str:
    out, err = cli(db, *args).communicate(timeout=120)
    assert not err.startswith("error"), err
    return out


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """A store with one document, its write lock then held by a plain ``sqlite3`` connection."""
    db = tmp_path / "busy.db"
    run(db, "doc", "put", "n", "k", '{"a": 0}')
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield db, other
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()


@pytest.mark.parametrize(
    "command",
    [
        ("doc", "put", "lock", "k", '{"a": 1}'),
        ("tool", "patch_state", '{"global": {"tactics": {"n": 1}}}'),
    ],
    ids=["doc-put", "patch-state"],
)
def test_ctrl_c_stops_a_write_waiting_for_another_programs_write_lock(
    held: tuple[Path, sqlite3.Connection], command: tuple[str, ...]
) -> None:
    db, other = held
    before = run(db, "dump")
    drawn = WriterQueue(db).drawn()
    writing = cli(db, *command, wait=60)
    try:
        # the write has its turn in the writers' queue (its ticket drawn): it waits for the lock
        deadline = time.monotonic() + 60
        while WriterQueue(db).drawn() == drawn:
            assert writing.poll() is None, writing.communicate()
            assert time.monotonic() < deadline, "the write never took its turn"
            time.sleep(0.01)
        time.sleep(1.0)
        assert writing.poll() is None  # still waiting
        pressed = time.monotonic()
        writing.send_signal(signal.SIGINT)
        try:
            out, err = writing.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("the write went on waiting for the lock after Ctrl-C")
        stopped = time.monotonic() - pressed
    finally:
        if writing.poll() is None:
            writing.kill()
            writing.communicate()
    assert (writing.returncode, out) == (130, ""), err
    assert re.fullmatch(r"interrupted(: .+)?\n", err), err
    assert stopped < 3, stopped
    other.execute("ROLLBACK")
    assert run(db, "dump") == before  # nothing written
    assert run(db, "doc", "put", "lock", "k", '{"a": 2}') == '{"revision":1,"seq":2}\n'


def put(store: SqliteStore, body: dict[str, int]) -> None:
    store.commit([Write.between(KEY, store.get(KEY).body, body, expect=None)])


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_in_the_wait_lets_the_turn_and_the_transaction_go(
    held: tuple[Path, sqlite3.Connection],
) -> None:
    db, other = held
    store = open_store(db, wait_seconds=20)
    assert isinstance(store, SqliteStore)
    main = threading.get_ident()

    def ctrl_c_once_waiting() -> None:
        while not store._group.queue.held:  # its turn taken: at the lock
            time.sleep(0.001)
        time.sleep(0.5)
        signal.pthread_kill(main, signal.SIGINT)

    pressing = threading.Thread(target=ctrl_c_once_waiting, daemon=True)
    began = time.monotonic()
    pressing.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            put(store, {"a": 1})
        assert time.monotonic() - began < 3
        assert not store._group.queue.held and not store._group.lock.locked()
        assert not store._writer().in_transaction
        other.execute("ROLLBACK")
        assert store.get(KEY).revision == 0  # nothing written
        put(store, {"a": 2})  # nothing left held
        assert store.get(KEY).body == {"a": 2}
    finally:
        pressing.join(60)
        store.close()


def test_not_interrupted_it_waits_the_whole_wait_and_fails_store_busy(
    held: tuple[Path, sqlite3.Connection],
) -> None:
    db, _ = held
    store = open_store(db, wait_seconds=1.5)
    assert isinstance(store, SqliteStore)
    try:
        began, cpu = time.monotonic(), time.process_time()
        with pytest.raises(StoreBusy) as refused:
            put(store, {"a": 1})
        waited, spent = time.monotonic() - began, time.process_time() - cpu
        assert str(refused.value) == "the store stayed busy past the timeout: database is locked"
        assert 1.4 < waited < 5, waited
        assert spent < 0.5, spent  # slept, not polled in a busy loop
        assert not store._writer().in_transaction
    finally:
        store.close()


def test_a_lock_let_go_during_the_wait_lets_the_write_through(held: tuple[Path, sqlite3.Connection]) -> None:
    db, other = held
    store = open_store(db, wait_seconds=60)
    assert isinstance(store, SqliteStore)
    letting_go = threading.Timer(1.0, other.execute, ("ROLLBACK",))
    try:
        began = time.monotonic()
        letting_go.start()
        put(store, {"a": 1})
        assert 0.9 < time.monotonic() - began < 10
        assert store.get(KEY).body == {"a": 1}
    finally:
        letting_go.join(60)
        store.close()
