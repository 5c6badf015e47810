"""SQLite writers of every process wait in one queue instead of polling SQLite's write lock."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

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
