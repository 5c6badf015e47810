"""SQLite writers of every process wait in one queue instead of polling SQLite's write lock."""

from __future__ import annotations

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
from stateflow.store.writer_queue import WriterQueue

KEY = DocKey("counters", "q")


def bump(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
    doc = docs[KEY]
    n = (doc.body or {"n": 0})["n"] + 1
    return [Write.between(KEY, doc.value, {"n": n}, doc.revision)], None


def turn_is_free(db: Path) -> bool:
    """Whether a writer arriving now would get its turn at once (nobody holds or waits)."""
    probe = WriterQueue(db)
    try:
        probe.acquire(0.0)
    except StoreBusy:
        return False
    finally:
        probe.close()
    return True


def test_a_writer_waits_while_another_holds_the_queue_then_commits(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "q.db"))
    store.update([KEY], bump)
    queue = tmp_path / "q.db-writer"
    assert queue.exists()
    assert oct(queue.stat().st_mode & 0o777) == "0o600"
    other = WriterQueue(tmp_path / "q.db")  # another writer's place in the queue (own open file)
    other.acquire(1.0)
    writer = threading.Thread(target=store.update, args=([KEY], bump))
    try:
        writer.start()
        writer.join(timeout=1.0)
        assert writer.is_alive()  # waiting for its turn, not writing past the holder
        assert store.get(KEY).body == {"n": 1}
    finally:
        other.close()
    writer.join(timeout=60)
    assert not writer.is_alive()
    assert store.get(KEY).body == {"n": 2}
    store.close()


def test_the_queue_is_free_between_commits(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "q.db"))
    for _ in range(3):
        store.update([KEY], bump)
    assert turn_is_free(tmp_path / "q.db")  # no commit kept its place
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
        # its limit, not the holder's 600 s (a bound for the machine: seconds at load 15)
        assert 0.4 <= waited < 60
        assert refused.value.code == "store-busy"
        assert "nothing was written" in refused.value.message
        assert "for over 0.5 s" in refused.value.message
        assert store.get(KEY).body == {"n": 1}
        with pytest.raises(StoreBusy):  # a second call waits its own limit, not forever
            store.update([KEY], bump)
    # the holder died: its turn came back, and the helper of the abandoned waits kept nothing
    store.update([KEY], bump)
    assert store.get(KEY).body == {"n": 2}
    assert turn_is_free(db)
    store.close()


def test_threads_of_one_process_each_wait_their_own_limit(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    # a limit long enough that four of them one after the other (16 s) stand apart from one
    # (4 s) however loaded the machine
    store = open_store(str(db), wait_seconds=4)
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
        assert time.monotonic() - started < 12  # not four limits one after the other
    assert [e.code for e in errors if isinstance(e, StoreBusy)] == ["store-busy"] * 4
    # each names the configured limit, not what was left of it after waiting behind the others
    assert all("for over 4 s" in e.message for e in errors if isinstance(e, StoreBusy))
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


def test_migrate_waits_for_the_write_lock_as_configured(tmp_path: Path) -> None:
    # ``migrate`` opens the store as every command does: it waits [store] wait_seconds for its
    # turn (it waited the Python default of 30 s whatever was configured), and says so
    db = tmp_path / "q.db"
    open_store(str(db)).close()
    env = {**os.environ, "STATEFLOW_STORE_WAIT_SECONDS": "0.5"}
    with hung_writer(db):
        migrate = subprocess.run(
            ["stateflow", "--store", str(db), "migrate"], capture_output=True, text=True, timeout=120, env=env
        )
    assert migrate.returncode == 1
    assert "error[store-busy]" in migrate.stderr and "for over 0.5 s" in migrate.stderr, migrate.stderr


ARRIVING_WRITER = """
import sys
from stateflow.store import DocKey, Write, open_store

key = DocKey("order", "q")
# (its turn comes once all five are in line, started one at a time: five Python start-ups on a
# loaded machine can outlast the default 30 s wait)
store = open_store(sys.argv[1], wait_seconds=300)

def arrive(docs):
    doc = docs[key]
    seen = (doc.body or {"names": []})["names"]
    return [Write.between(key, doc.value, {"names": [*seen, sys.argv[2]]}, doc.revision)], None

store.update([key], arrive)
store.close()
"""


def test_waiting_writer_processes_commit_in_the_order_they_came(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    open_store(str(db)).close()
    holder = WriterQueue(db)
    holder.acquire(1.0)
    names = [f"w{i}" for i in range(5)]
    procs: list[subprocess.Popen[str]] = []
    try:
        for name in names:
            drawn = holder.drawn()
            procs.append(subprocess.Popen([sys.executable, "-c", ARRIVING_WRITER, str(db), name], text=True))
            deadline = time.monotonic() + 60
            while holder.drawn() == drawn:  # this one is in the line before the next one starts
                assert time.monotonic() < deadline and procs[-1].poll() is None
                time.sleep(0.01)
    finally:
        holder.close()  # the turn passes down the line
        for proc in procs:
            assert proc.wait(timeout=60) == 0
    store = open_store(str(db))
    assert store.get(DocKey("order", "q")).body == {"names": names}
    store.close()


def _until_drawn_past(queue: WriterQueue, drawn: int, proc: subprocess.Popen[str] | None = None) -> None:
    """Return once a ticket past ``drawn`` is drawn (a writer started is in line)."""
    deadline = time.monotonic() + 60
    while queue.drawn() == drawn:
        assert time.monotonic() < deadline and (proc is None or proc.poll() is None)
        time.sleep(0.01)


def test_a_queue_alone_since_its_last_turn_takes_that_ticket_again_and_a_later_writer_waits(
    tmp_path: Path,
) -> None:
    # two queues on one file are two open files: their locks exclude each other as two
    # processes' do
    db = tmp_path / "q.db"
    open_store(str(db)).close()
    first, second = WriterQueue(db), WriterQueue(db)
    try:
        first.acquire(1.0)
        first.release()
        drawn = first.drawn()
        first.acquire(1.0)  # nobody drew since: its last ticket again, none drawn
        assert first.held and first.drawn() == drawn
        got: list[str] = []

        def take(queue: WriterQueue, name: str) -> threading.Thread:
            def wait() -> None:
                queue.acquire(60.0)
                got.append(name)

            thread = threading.Thread(target=wait)
            thread.start()
            return thread

        waiting = take(second, "second")
        _until_drawn_past(first, drawn)
        assert got == []  # in line behind the ticket taken again
        first.release()
        waiting.join(60)
        assert got == ["second"]
        drawn = first.drawn()
        waiting = take(first, "first")  # a ticket was drawn since its last: it draws, and waits
        _until_drawn_past(first, drawn)
        assert got == ["second"]
        second.release()
        waiting.join(60)
        assert got == ["second", "first"]
        first.release()
    finally:
        first.close()
        second.close()


def test_a_process_writing_alone_still_lets_a_writer_process_that_came_first_go_first(
    tmp_path: Path,
) -> None:
    db = tmp_path / "q.db"
    key = DocKey("order", "q")
    store = open_store(str(db), wait_seconds=300)
    try:

        def arrive(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            doc = docs[key]
            seen = (doc.body or {"names": []})["names"]
            return [Write.between(key, doc.value, {"names": [*seen, "mine"]}, doc.revision)], None

        store.update([KEY], bump)
        queue = store._group.queue  # type: ignore[attr-defined]
        drawn = queue.drawn()
        store.update([KEY], bump)
        assert queue.drawn() == drawn  # alone: its last ticket taken again
        queue.acquire(1.0)  # this process's turn (again), held while another process comes
        other = subprocess.Popen([sys.executable, "-c", ARRIVING_WRITER, str(db), "other"], text=True)
        try:
            _until_drawn_past(queue, drawn, other)
        finally:
            queue.release()
        store.update([key], arrive)  # after the one that came first: drawn behind it
        assert other.wait(timeout=120) == 0
        assert store.get(key).body == {"names": ["other", "mine"]}
        assert store.get(KEY).body == {"n": 2}
    finally:
        store.close()


MANY_WRITES = """
import sys
from stateflow.store import DocKey, Write, open_store

key = DocKey("counters", "q")
store = open_store(sys.argv[1])

def bump(docs):
    doc = docs[key]
    n = (doc.body or {"n": 0})["n"] + 1
    return [Write.between(key, doc.value, {"n": n}, doc.revision)], None

for _ in range(int(sys.argv[2])):
    store.update([key], bump)
store.close()
"""


def test_many_writer_processes_on_one_document_all_finish_and_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    open_store(str(db)).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", MANY_WRITES, str(db), "15"], text=True) for _ in range(4)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    store = open_store(str(db))
    assert store.get(KEY).body == {"n": 60}
    store.close()
    assert turn_is_free(db)
    assert WriterQueue(db).drawn() >= 4  # they queued (each process drew at least one ticket)


def test_short_lived_cli_writers_at_once_all_succeed(tmp_path: Path) -> None:
    """Each CLI call opens the file, writes and exits; many at once must neither crash (a -shm
    file truncated under a mapping) nor fail SQLite's locking (locks dropped by a close)."""
    db = tmp_path / "q.db"
    open_store(str(db)).close()
    script = "\n".join(
        f"stateflow --store {db} doc put notes w$1 '{{\"j\": {j}}}' >/dev/null || exit 1" for j in range(4)
    )
    procs = [
        subprocess.Popen(["bash", "-c", script, "writer", str(i)], stderr=subprocess.PIPE, text=True)
        for i in range(6)
    ]
    failures = [
        err
        for proc in procs
        if proc.wait(timeout=300) != 0
        for err in [proc.stderr.read() if proc.stderr else ""]
    ]
    assert failures == []
    store = open_store(str(db))
    assert [store.get(DocKey("notes", f"w{i}")).body for i in range(6)] == [{"j": 3}] * 6
    store.close()
