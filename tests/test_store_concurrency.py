"""Several threads and several processes writing the same documents lose no update."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stateflow.errors import Conflict
from stateflow.store import DocKey, SqlStore, Write, open_store

from .conftest import StoreFactory
from .threads import run_threads
from .workers import A, B, bump

ROOT = Path(__file__).resolve().parent.parent


def _assert_consistent(store: SqlStore, expected: int) -> None:
    docs = store.read([A, B])
    for key in (A, B):
        body = docs[key].body
        assert body is not None
        assert body["n"] == expected, key
        assert docs[key].revision == expected
    # every transition touched both documents: no partial cohort anywhere in history
    seen = 0
    after = 0
    while batch := store.transitions(after_seq=after, limit=500):
        for t in batch:
            assert sorted(c.key for c in t.changes) == [A, B], t.seq
        seen += len(batch)
        after = batch[-1].seq
    assert seen == expected


def test_threads_with_locked_read_modify_write_lose_no_update(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    threads, per_thread = 6, 20

    def work(_worker: int) -> None:
        for _ in range(per_thread):
            store.update([A, B], bump)

    assert run_threads(work, threads) == []
    _assert_consistent(store, threads * per_thread)


def test_optimistic_updates_from_separate_stores_lose_no_update(open_migrated: StoreFactory) -> None:
    # separate store objects (separate caches, as separate processes): each optimistic attempt
    # computes on what it read, and a commit against a document that moved meanwhile must be
    # refused and computed again, under the row lock if need be
    threads, per_thread = 4, 15
    stores = [open_migrated() for _ in range(threads)]
    try:

        def work(worker: int) -> None:
            for _ in range(per_thread):
                stores[worker].update([A, B], bump, optimistic=True)

        assert run_threads(work, threads) == []
        _assert_consistent(stores[0], threads * per_thread)
    finally:
        for s in stores:
            s.close()


def test_threads_with_compare_and_set_retries_lose_no_update(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    threads, per_thread = 4, 15
    conflicts = 0
    lock = threading.Lock()

    def work(_worker: int) -> None:
        nonlocal conflicts
        for _ in range(per_thread):
            while True:
                docs = store.read([A, B])
                writes, _ = bump(docs)
                try:
                    store.commit(writes)
                    break
                except Conflict:
                    with lock:
                        conflicts += 1

    assert run_threads(work, threads) == []
    _assert_consistent(store, threads * per_thread)


@pytest.mark.slow
def test_processes_lose_no_update(backend: str, open_migrated: StoreFactory) -> None:
    store = open_migrated()
    procs, per_proc = 4, 25
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.workers", "increment", backend, str(per_proc)], cwd=ROOT
        )
        for _ in range(procs)
    ]
    for child in children:
        assert child.wait(timeout=120) == 0
    _assert_consistent(store, procs * per_proc)


@pytest.mark.slow
def test_killing_a_writer_mid_cohort_never_leaves_a_partial_cohort(
    backend: str, open_migrated: StoreFactory
) -> None:
    store = open_migrated()
    for round_ in range(4):
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.workers", "forever", backend],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.05 + 0.07 * round_)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        # A commit the child had already sent may still land on a server: taking the row locks
        # waits until the killed writer's transaction is over, one way or the other.
        store.update([A, B], lambda docs: ([], None))
        docs = store.read([A, B])
        n = (docs[A].body or {})["n"]
        assert n >= round_ + 1
        _assert_consistent(store, n)
    # the store is fully usable after the kills
    store.update([A, B], bump)
    _assert_consistent(store, (store.get(A).body or {})["n"])


def test_a_second_store_object_on_the_same_sqlite_file_sees_commits(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    one, two = open_store(path), open_store(path)
    try:
        one.commit([Write.between(DocKey("s", "x"), None, {"v": 1})])
        assert two.get(DocKey("s", "x")).body == {"v": 1}
    finally:
        one.close()
        two.close()
