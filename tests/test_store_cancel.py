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
from stateflow.store.postgres import _SEQ_LOCK, _SEQ_LOCK_KEY, PostgresStore

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


def _ended(url: str, pid: int) -> bool:
    """Whether the server process ``pid`` ended within a few seconds: a connection the client
    closed ends once its process reads the close (not at once on a loaded machine), while one
    put back in the pool would stay."""
    deadline = time.monotonic() + 10
    while _alive(url, pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


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
            assert _ended(pg_schema_url, pid)  # closed, not back in the pool
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


def test_a_call_is_not_cancelled_once_any_of_its_transactions_committed(pg_schema_url: str) -> None:
    # a call made of several transactions (a retention sweep: its op ids, then each state's
    # history) whose first one committed deletes, not a document: what it deleted stands, so it
    # runs to its end — cancelled, it would fail saying nothing of it was written
    store = open_store(pg_schema_url, auto_migrate=True, statement_timeout=0)
    try:
        store.commit([Write.between(KEY, None, {"n": 1}, 0)], ORIGIN, op_id="old")
        cancel = Cancel()
        with cancellable(cancel):
            assert store.prune_ops("9999-01-01T00:00:00Z") == 1
            cancel.cancel()  # too late
            assert not cancel.cancelled
            assert store.prune_history("counters", "9999-01-01T00:00:00Z") == 1  # the next one runs
        assert store.applied_op("old", "") is False  # the deletion stood
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
                assert await asyncio.to_thread(_ended, pg_schema_url, pid)
            doc = await spawn(store.get, KEY)
            assert doc is not None and doc.body == {"n": 1}
            await spawn(store.commit, [Write.between(KEY, {"n": 1}, {"n": 3}, 1)], ORIGIN)
        finally:
            await spawn(store.close)

    asyncio.run(main())


def test_a_group_commit_is_not_cancelled_for_its_sender(pg_schema_url: str) -> None:
    # Commits of several callers ready at once go out in one group, sent by the first of them:
    # its going away must not fail the others' (nor its own: the group commits whole).
    store = open_store(pg_schema_url, auto_migrate=True, statement_timeout=0)
    assert isinstance(store, PostgresStore) and store._groups is not None
    keys = [DocKey("g", f"d{i}") for i in range(4)]
    try:
        for key in keys:  # each known here: the writes below are optimistic, sent alone or grouped
            store.commit([Write.between(key, None, {"n": 0})], ORIGIN)
        cancels = [Cancel() for _ in keys]
        failed: list[BaseException | None] = [None] * len(keys)

        def write(i: int) -> None:
            key = keys[i]
            with cancellable(cancels[i]):
                try:
                    store.update(
                        [key],
                        lambda docs: (
                            [Write.between(key, docs[key].value, {"n": 1}, docs[key].revision)],
                            None,
                        ),
                        ORIGIN,
                        optimistic=True,
                    )
                except BaseException as exc:
                    failed[i] = exc

        seq_key = _SEQ_LOCK_KEY.replace("?", "%s")
        threads = [threading.Thread(target=write, args=(i,)) for i in range(len(keys))]
        with (
            psycopg.connect(pg_schema_url, autocommit=True) as holder,
            locked(pg_schema_url, "SELECT doc_id FROM documents WHERE subject = 'd2' FOR UPDATE") as blocked,
        ):
            # the first commit waits for the seq lock; the others queue behind it in this process
            holder.execute(f"SELECT pg_advisory_lock({seq_key})", (_SEQ_LOCK,))
            threads[0].start()
            _until(
                "the first commit never waited",
                lambda: (
                    holder.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = %s",
                        (_SEQ_LOCK,),
                    ).fetchone()
                    == (1,)
                ),
            )
            for thread in threads[1:]:
                thread.start()
            _until("the commits never queued", lambda: len(store._groups._pending) == 3)  # type: ignore[union-attr]
            # the first of them sends the group
            sender = keys.index(store._groups._pending[0].params[1][0])
            holder.execute(f"SELECT pg_advisory_unlock({seq_key})", (_SEQ_LOCK,))
            # the group waits for a row another session holds
            _until("the group never waited for the row", blocked)
            cancels[sender].cancel()
        for thread in threads:
            thread.join(WAIT)
        assert failed == [None] * len(keys), failed
        for key in keys:
            doc = store.get(key)
            assert doc is not None and doc.body == {"n": 1}
    finally:
        store.close()
