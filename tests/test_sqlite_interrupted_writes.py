"""A SQLite write stopped by Ctrl-C (KeyboardInterrupt) is all or nothing: the store lets go of
its turn and of SQLite's write lock, reads what the file holds, writes again and closes."""

from __future__ import annotations

import _thread
import functools
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from stateflow.store import DocKey, Write, open_store
from stateflow.store.sqlite import SqliteStore
from stateflow.store.writer_queue import WriterQueue

KEYS = [DocKey("kbi", f"doc-{i}") for i in range(3)]

OTHER_PROCESS_WRITES = """
import sys
from stateflow.store import DocKey, Write, open_store
store = open_store(sys.argv[1], wait_seconds=10)
key = DocKey("kbi", "other")
store.commit([Write.between(key, store.get(key).body, {"from": "other"}, expect=None)])
print(store.get(DocKey("kbi", "doc-0")).revision)
store.close()
"""


pytestmark = pytest.mark.usefixtures("ctrl_c_raises")


def bump(store: SqliteStore) -> None:
    docs = store.read(KEYS)
    n = (docs[KEYS[0]].body or {}).get("n", 0) + 1
    store.commit([Write.between(k, docs[k].body, {"n": n}, expect=docs[k].revision) for k in KEYS])


def closes(store: SqliteStore) -> bool:
    closing = threading.Thread(target=store.close, daemon=True)
    closing.start()
    closing.join(60)
    return not closing.is_alive()


def assert_consistent(store: SqliteStore, db: Path) -> None:
    """Nothing left held, and the interrupted store reads what the file holds."""
    other = subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS_WRITES, str(db)], capture_output=True, text=True, timeout=120
    )
    assert other.returncode == 0, other.stderr  # (not store-busy: no turn nor lock left held)
    assert store.get(KEYS[0]).revision == int(other.stdout)
    bump(store)
    assert store.get(KEYS[0]).revision == int(other.stdout) + 1


def test_ctrl_c_while_waiting_for_the_turn_lets_the_queue_go_on(tmp_path: Path) -> None:
    db = tmp_path / "kbi.db"
    store = open_store(str(db), wait_seconds=30)
    assert isinstance(store, SqliteStore)
    bump(store)
    holder = WriterQueue(db)  # another writer holds the turn (its own open file, as a process's)
    holder.acquire(1.0)
    drawn = holder.drawn()
    main = threading.get_ident()

    def ctrl_c_once_waiting() -> None:
        while holder.drawn() == drawn:  # the store drew its ticket: it waits behind the holder
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGINT)

    pressing = threading.Thread(target=ctrl_c_once_waiting)
    pressing.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            bump(store)
    finally:
        pressing.join()
        holder.close()
    assert store.get(KEYS[0]).revision == 1  # nothing written
    assert_consistent(store, db)
    assert closes(store)


def test_ctrl_c_after_any_statement_of_a_commit_leaves_it_whole_or_not_at_all(tmp_path: Path) -> None:
    db = tmp_path / "kbi.db"
    store = open_store(str(db), wait_seconds=30)
    assert isinstance(store, SqliteStore)
    bump(store)
    statements: list[str] = []
    conn = store._writer()
    conn.set_trace_callback(statements.append)
    bump(store)
    conn.set_trace_callback(None)
    assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
    for n in range(len(statements)):
        before = store.get(KEYS[0]).revision
        # Ctrl-C as the n-th statement starts, raised as its call returns: the trace callback is
        # C code all through (no Python frame in which the interrupt would be raised and lost)
        press = map(_thread.interrupt_main, [signal.SIGINT])
        conn.set_trace_callback(functools.partial(next, itertools.chain(itertools.repeat(None, n), press)))
        try:
            with pytest.raises(KeyboardInterrupt):
                bump(store)
        finally:
            conn.set_trace_callback(None)
        after = store.get(KEYS[0]).revision
        assert after in (before, before + 1)  # (committed once the COMMIT ran, else not at all)
        fresh = open_store(str(db), wait_seconds=1)
        try:
            assert [d.revision for d in fresh.read(KEYS).values()] == [after] * len(KEYS)
        finally:
            fresh.close()
    assert_consistent(store, db)
    assert closes(store)


def ctrl_c_at(n: int, package: str) -> Any:
    """A profile function raising KeyboardInterrupt as the ``n``-th function of ``package`` is
    entered (not a ``__del__``: what one raises is only reported, as Python does)."""
    calls = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(package) and code.co_name != "__del__":
            calls += 1
            if calls == n:
                raise KeyboardInterrupt

    return profile


def test_ctrl_c_as_any_store_function_is_called_leaves_nothing_held(tmp_path: Path) -> None:
    """Where no ``finally`` can reach: a signal handled as a function is entered, before its
    first statement (a ``__exit__``, or what lets the turn go, stopped before it ran)."""
    db = tmp_path / "kbi.db"
    store = open_store(str(db), wait_seconds=30)
    assert isinstance(store, SqliteStore)
    bump(store)
    package = os.path.dirname(sys.modules["stateflow.store.sqlite"].__file__ or "")
    n = 0
    while True:
        n += 1
        before = store.get(KEYS[0]).revision
        sys.setprofile(ctrl_c_at(n, package))
        try:
            bump(store)
            stopped = False
        except KeyboardInterrupt:
            stopped = True
        finally:
            sys.setprofile(None)
        if not stopped:
            break  # every call of a whole commit had its turn
        other = open_store(str(db), wait_seconds=1)  # its own connection and place in the queue
        try:
            key = DocKey("kbi", "other")
            other.commit([Write.between(key, other.get(key).body, {"n": n}, expect=None)])
            after = other.get(KEYS[0]).revision
        finally:
            other.close()
        assert after in (before, before + 1)
        assert store.get(KEYS[0]).revision == after
    assert n > 50
    assert_consistent(store, db)
    assert closes(store)
