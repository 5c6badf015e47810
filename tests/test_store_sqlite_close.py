"""Closing the embedded store while other threads read: the close waits for each thread's call
using its reading connection (closing a connection under a running statement crashes Python's
sqlite3 module), so every call either finishes or is refused "was closed"; a read still under
way past the busy timeout keeps its connection, which closes as that read ends."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from stateflow.errors import StoreUnavailable
from stateflow.store import DocKey, Write
from stateflow.store.sqlite import SqliteStore

_RACE = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from stateflow.errors import StoreUnavailable
    from stateflow.store import DocKey, Write
    from stateflow.store.sqlite import SqliteStore

    top, rounds = Path(sys.argv[1]), int(sys.argv[2])
    keys = [DocKey("s", f"d{i}") for i in range(20)]
    wrong = []
    refused = finished = 0

    def reader(store, t, started):
        global refused, finished
        n = 0
        while True:
            key = keys[(t + n) % len(keys)]
            try:
                if n % 3 == 0:
                    store.read([key])  # the whole-document cache (a miss after each write)
                elif n % 3 == 1:
                    store.read([key], ["n"])  # members: a read transaction
                else:
                    store.commit([Write.between(key, store.get(key).body, {"n": n})])
            except StoreUnavailable as exc:
                if "was closed" not in str(exc):
                    wrong.append(repr(exc))
                refused += 1
                return
            except BaseException as exc:
                wrong.append(repr(exc))
                return
            finished += 1
            n += 1
            started.set()

    for r in range(rounds):
        store = SqliteStore(top / f"r{r}.db", synchronous="off")
        store.commit([Write.between(k, None, {"n": 0}) for k in keys])
        started = [threading.Event() for _ in range(4)]
        threads = [threading.Thread(target=reader, args=(store, t, started[t])) for t in range(4)]
        for thread in threads:
            thread.start()
        for event in started:  # every thread is calling the store when it closes
            event.wait(60)
        store.close()
        for thread in threads:
            thread.join(60)
    print(f"finished={finished} refused={refused} wrong={wrong[:3]}")
    sys.exit(1 if wrong or refused != 4 * rounds else 0)
    """
)


def test_a_close_under_reading_threads_lets_each_call_finish_or_refuses_it(tmp_path: Path) -> None:
    """In a child process (a crash fails the test, not the run): rounds of four threads reading
    and writing as the store closes; each call ends done or refused "was closed"."""
    src = Path(__file__).resolve().parent.parent / "src"
    done = subprocess.run(
        [sys.executable, "-c", _RACE, str(tmp_path), "40"],
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "refused=160 wrong=[]" in done.stdout


def test_a_read_under_way_past_the_busy_timeout_keeps_its_connection_until_it_ends(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "slow.db", synchronous="off", busy_timeout_ms=50)
    key = DocKey("s", "a")
    store.commit([Write.between(key, None, {"n": 1})])
    assert store.read([key])[key].body == {"n": 1}
    assert store._watch._fd is not None  # (the cache's watch on the -shm file)
    inside, closed = threading.Event(), threading.Event()
    seen: list[object] = []

    def slow_read() -> None:
        with store._read_tx() as tx:
            inside.set()
            closed.wait(60)
            seen.append(tx.all("SELECT count(*) FROM documents"))
            seen.append(store._watch._fd is not None)  # the -shm hold stays while it reads

    thread = threading.Thread(target=slow_read)
    thread.start()
    assert inside.wait(60)
    store.close()  # gives up waiting after the busy timeout, leaving the read its connection
    with pytest.raises(StoreUnavailable, match="was closed"):
        store.read([key])
    closed.set()
    thread.join(60)
    assert seen == [[(1,)], True]
    assert store._kept == [] and store._watch._fd is None  # closed as the read ended
