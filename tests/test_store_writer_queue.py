"""SQLite writers of every process wait in one queue instead of polling SQLite's write lock."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stateflow.errors import StoreBusy
from stateflow.store import DocKey, Document, Write, open_store

KEY = DocKey("counters", "q")


def bump(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
    doc = docs[KEY]
    n = (doc.body or {"n": 0})["n"] + 1
    return [Write.between(KEY, doc.value, {"n": n}, doc.revision)], None


def test_a_writer_waits_while_another_holds_the_queue_then_commits(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "q.db"))
    store.update([KEY], bump)
    queue = tmp_path / "q.db-writer"
    assert queue.exists()
    assert oct(queue.stat().st_mode & 0o777) == "0o600"
    other = os.open(queue, os.O_RDWR)  # another writer's place in the queue (own open file)
    fcntl.flock(other, fcntl.LOCK_EX)
    writer = threading.Thread(target=store.update, args=([KEY], bump))
    try:
        writer.start()
        writer.join(timeout=1.0)
        assert writer.is_alive()  # waiting for its turn, not writing past the holder
        assert store.get(KEY).body == {"n": 1}
    finally:
        fcntl.flock(other, fcntl.LOCK_UN)
        os.close(other)
    writer.join(timeout=60)
    assert not writer.is_alive()
    assert store.get(KEY).body == {"n": 2}
    store.close()


def test_the_queue_is_free_between_commits(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "q.db"))
    for _ in range(3):
        store.update([KEY], bump)
    probe = os.open(tmp_path / "q.db-writer", os.O_RDWR)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if a commit kept its place
    finally:
        os.close(probe)
    store.close()


HUNG_WRITER = """
import sys, time
from stateflow.store import DocKey, Write, open_store

key = DocKey("counters", "q")
store = open_store(sys.argv[1])

def hang(docs):
    print("holding", flush=True)  # inside the write transaction, with its turn in the queue
    time.sleep(600)
    return [Write.between(key, docs[key].value, {"n": -1}, docs[key].revision)], None

store.update([key], hang)
"""


@contextmanager
def hung_writer(db: Path) -> Iterator[subprocess.Popen[str]]:
    """A real second process that took its turn and hangs in its write transaction."""
    proc = subprocess.Popen([sys.executable, "-c", HUNG_WRITER, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_hung_writer_process_holds_others_only_up_to_their_wait_limit(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    store = open_store(str(db), wait_seconds=0.5)
    store.update([KEY], bump)
    with hung_writer(db):
        started = time.monotonic()
        with pytest.raises(StoreBusy) as refused:
            store.update([KEY], bump)
        waited = time.monotonic() - started
        assert 0.4 <= waited < 5.0
        assert refused.value.code == "store-busy"
        assert "nothing was written" in refused.value.message
        assert store.get(KEY).body == {"n": 1}
        with pytest.raises(StoreBusy):  # a second call waits its own limit, not forever
            store.update([KEY], bump)
    # the holder died: its turn came back, and the helper of the abandoned waits kept nothing
    store.update([KEY], bump)
    assert store.get(KEY).body == {"n": 2}
    probe = os.open(tmp_path / "q.db-writer", os.O_RDWR)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(probe)
    store.close()


def test_threads_of_one_process_each_wait_their_own_limit(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    store = open_store(str(db), wait_seconds=0.5)
    store.update([KEY], bump)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            store.update([KEY], bump)
        except BaseException as exc:  # collected and checked below
            errors.append(exc)

    with hung_writer(db):
        started = time.monotonic()
        writers = [threading.Thread(target=write) for _ in range(4)]
        for w in writers:
            w.start()
        for w in writers:
            w.join(timeout=30)
        assert time.monotonic() - started < 5.0  # not four limits one after the other
    assert [e.code for e in errors if isinstance(e, StoreBusy)] == ["store-busy"] * 4
    assert store.get(KEY).body == {"n": 1}
    store.close()


def test_the_cli_refuses_with_store_busy_while_a_writer_hangs(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    store = open_store(str(db))
    store.update([KEY], bump)
    store.close()
    env = {**os.environ, "STATEFLOW_STORE_WAIT_SECONDS": "0.5"}
    with hung_writer(db):
        put = subprocess.run(
            ["stateflow", "--store", str(db), "doc", "put", "notes", "a", '{"x": 1}'],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    assert put.returncode != 0
    assert "error[store-busy]" in put.stderr
    get = subprocess.run(
        ["stateflow", "--store", str(db), "doc", "get", "notes", "a"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert get.returncode == 0, get.stderr
    assert get.stdout.strip() == "null"  # nothing was written
