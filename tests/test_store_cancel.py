"""A call run under a cancel (``stateflow.store.cancel``) on PostgreSQL — the sync store from a
worker thread, the async store on its event loop: cancelled while its statement waits behind a
lock another session holds, the statement is interrupted in the server, the call fails
``call-cancelled`` with nothing written, and its connection is closed rather than lent again; a
call that committed is not cancelled; a commit sent in a group for several callers is never
cancelled for one of them."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from stateflow.aio import open_store_async
from stateflow.errors import CallCancelled
from stateflow.store import DocKey, Write, open_store
from stateflow.store.async_bridge import spawn
from stateflow.store.cancel import Cancel, cancellable

KEY = DocKey("counters", "c")
ORIGIN = {"door": "test"}
WAIT = 60.0
"""A deadline for a loaded machine (the store has no statement timeout: without the cancel the
call would wait for ever)."""


TABLE_LOCK = "LOCK TABLE documents IN ACCESS EXCLUSIVE MODE"
"""Held by another session: every read of the store waits (a call's first statement)."""
ROW_LOCK = "SELECT doc_id FROM documents FOR UPDATE"
"""Held by another session: a write reads on and waits in its commit (a call's last statement)."""


@contextmanager
def locked(url: str, lock: str = TABLE_LOCK) -> Iterator[Callable[[], list[int]]]:
    """Another session holds ``lock``; yields what lists the server processes waiting for it."""
    with psycopg.connect(url, autocommit=True) as watcher, psycopg.connect(url) as locker:
        locker.execute(lock)
        holder = locker.info.backend_pid

        def blocked() -> list[int]:
            rows = watcher.execute(
                "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (holder,)
            ).fetchall()
            return [pid for (pid,) in rows]

        try:
            yield blocked
        finally:
            locker.rollback()


def _until(what: str, check: Callable[[], object]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _alive(url: str, pid: int) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is not None


@pytest.mark.parametrize(
    ("lock", "optimistic"),
    [(TABLE_LOCK, False), (ROW_LOCK, False), (ROW_LOCK, True)],
    # (a write computed on what the store holds commits in one statement, on the connection the
    # store keeps for such commits across calls)
    ids=["reading", "locking", "committing-alone"],
)
def test_a_cancelled_call_is_interrupted_and_rolled_back_and_its_connection_closed(
    pg_schema_url: str, lock: str, optimistic: bool
) -> None:
    store = open_store(pg_schema_url, auto_migrate=True, statement_timeout=0)
    try:
        store.commit([Write.between(KEY, None, {"n": 1}, 0)], ORIGIN)
        head = store.get(KEY)
        assert head is not None
        cancel = Cancel()
        failed: list[BaseException] = []

        def write() -> None:
            with cancellable(cancel):
                try:
                    if optimistic:
                        store.update(
                            [KEY],
                            lambda docs: (
                                [Write.between(KEY, docs[KEY].value, {"n": 2}, docs[KEY].revision)],
                                None,
                            ),
                            ORIGIN,
                            optimistic=True,
                        )
                    else:
                        store.commit([Write.between(KEY, head.value, {"n": 2}, head.revision)], ORIGIN)
                except BaseException as exc:
                    failed.append(exc)

        with locked(pg_schema_url, lock) as blocked:
            caller = threading.Thread(target=write)
            caller.start()
            _until("the write never waited for the lock", blocked)
            (pid,) = blocked()
            cancel.cancel()
            caller.join(WAIT)
            assert not caller.is_alive() and not blocked()
            assert len(failed) == 1 and isinstance(failed[0], CallCancelled), failed
            assert failed[0].code == "call-cancelled" and "nothing of it was written" in failed[0].message
            assert not _alive(pg_schema_url, pid)  # closed, not back in the pool
            with cancellable(cancel), pytest.raises(CallCancelled):  # no connection for it any more
                store.commit([Write.between(DocKey("counters", "other"), None, {"n": 1}, 0)], ORIGIN)
        after = store.get(KEY)
        assert after is not None and after.body == {"n": 1}  # nothing half-written; the pool serves on
        store.commit([Write.between(KEY, head.value, {"n": 3}, head.revision)], ORIGIN)
    finally:
        store.close()
    with psycopg.connect(pg_schema_url) as conn:
        assert conn.execute("SELECT max(revision), count(*) FROM documents").fetchone() == (2, 1)


def test_a_call_that_committed_is_not_cancelled(pg_schema_url: str) -> None:
    store = open_store(pg_schema_url, auto_migrate=True, statement_timeout=0)
    try:
        cancel = Cancel()
        with cancellable(cancel):
            store.commit([Write.between(KEY, None, {"n": 1}, 0)], ORIGIN)
            cancel.cancel()  # too late: what it wrote stands, and it runs to its end
            assert not cancel.cancelled
            store.commit([Write.between(KEY, {"n": 1}, {"n": 2}, 1)], ORIGIN)
        doc = store.get(KEY)
        assert doc is not None and doc.body == {"n": 2}
    finally:
        store.close()


def test_on_the_async_store_a_cancelled_call_is_interrupted_and_its_connection_closed(
    pg_schema_url: str,
) -> None:
    async def main() -> None:
        store: Any = await open_store_async(pg_schema_url, auto_migrate=True, statement_timeout=0)
        try:
            await spawn(store.commit, [Write.between(KEY, None, {"n": 1}, 0)], ORIGIN)
            cancel = Cancel()
            with locked(pg_schema_url) as blocked:
                with cancellable(cancel):  # (the task runs in a copy of this context)
                    call = asyncio.ensure_future(
                        spawn(store.commit, [Write.between(KEY, {"n": 1}, {"n": 2}, 1)], ORIGIN)
                    )
                while not await asyncio.to_thread(blocked):
                    assert not call.done(), call
                (pid,) = await asyncio.to_thread(blocked)
                await asyncio.to_thread(cancel.cancel)
                with pytest.raises(CallCancelled):
                    await asyncio.wait_for(call, WAIT)
                assert not await asyncio.to_thread(_alive, pg_schema_url, pid)
            doc = await spawn(store.get, KEY)
            assert doc is not None and doc.body == {"n": 1}
            await spawn(store.commit, [Write.between(KEY, {"n": 1}, {"n": 3}, 1)], ORIGIN)
        finally:
            await spawn(store.close)

    asyncio.run(main())
