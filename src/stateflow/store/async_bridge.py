"""Synchronous store code driving psycopg's async connections, on the event loop.

The store's algorithm (read, compute, commit, with its caches) is one body of synchronous code.
Run inside :func:`spawn`, each database call it makes through the facades below suspends the
code's greenlet and awaits the async driver on the event loop: the loop keeps serving other
tasks during every round trip, and no worker thread is involved. This is how SQLAlchemy runs
its ORM over asyncpg, with the `greenlet <https://greenlet.readthedocs.io>`_ library.

Called outside :func:`spawn` — from another thread, say a LangGraph node run in a worker — a
database call is handed to the loop (``run_coroutine_threadsafe``) and waited for; called on
the loop's own thread outside :func:`spawn`, it is refused (that wait would block the loop).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import greenlet
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline, AsyncRawCursor
from psycopg_pool import AsyncConnectionPool, PoolClosed

from stateflow.errors import StoreUnavailable
from stateflow.store.pg_pool import CheckedAsyncPool, refuse_if_forked, this_process

T = TypeVar("T")


class _Bridged(greenlet.greenlet):
    """A greenlet running synchronous store code for a task of ``loop``."""

    def __init__(self, fn: Callable[..., Any], parent: greenlet.greenlet, loop: asyncio.AbstractEventLoop):
        super().__init__(fn, parent)
        self.loop = loop


async def spawn(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on this thread; its database calls are awaited on this loop."""
    runner = _Bridged(fn, greenlet.getcurrent(), asyncio.get_running_loop())
    runner.gr_context = contextvars.copy_context()  # the caller's context (LangGraph's config)
    pending = runner.switch(*args, **kwargs)
    while not runner.dead:
        try:
            value = await pending
        except BaseException:
            pending = runner.throw(*sys.exc_info())
        else:
            pending = runner.switch(value)
    result: T = pending
    return result


def wait_for(awaitable: Awaitable[T], loop: asyncio.AbstractEventLoop) -> T:
    """The result of ``awaitable`` for synchronous code (see the module docs)."""
    current = greenlet.getcurrent()
    if isinstance(current, _Bridged) and current.parent is not None:
        result: T = current.parent.switch(awaitable)
        return result
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not loop and loop.is_running():  # another thread: the loop runs the call
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop).result()
    if asyncio.iscoroutine(awaitable):
        awaitable.close()
    raise RuntimeError(
        "this store is async: call it through stateflow.aio (or the adapters' async methods), "
        "or from another thread while its event loop runs"
    )


def would_block() -> bool:
    """Whether an async store's database call made here would wait on the thread of a running
    event loop outside :func:`spawn` — refused by :func:`wait_for` (it would block the loop)."""
    if isinstance(greenlet.getcurrent(), _Bridged):
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


class Cursor:
    def __init__(self, cursor: AsyncCursor[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._cursor = cursor
        self._loop = loop

    @property
    def pgresult(self) -> Any:
        return self._cursor.pgresult

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def fetchall(self) -> list[Any]:
        return wait_for(self._cursor.fetchall(), self._loop)

    def fetchone(self) -> Any:
        return wait_for(self._cursor.fetchone(), self._loop)


class Pipeline:
    def __init__(self, pipeline: AsyncPipeline, loop: asyncio.AbstractEventLoop) -> None:
        self._pipeline = pipeline
        self._loop = loop

    def sync(self) -> None:
        wait_for(self._pipeline.sync(), self._loop)


class Connection:
    """The part of ``psycopg.Connection`` the PostgreSQL store uses, over an async connection."""

    def __init__(self, conn: AsyncConnection[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._conn = conn
        self._loop = loop

    def execute(self, sql: str, params: Any = None, *, prepare: bool | None = None) -> Cursor:
        return Cursor(wait_for(self._conn.execute(sql, params, prepare=prepare), self._loop), self._loop)

    def execute_raw(self, sql: str, params: Any) -> Cursor:
        """``execute`` of a query with PostgreSQL's own ``$1, $2, …`` placeholders (a raw
        cursor: psycopg does not parse the query)."""
        cursor = AsyncRawCursor(self._conn)
        return Cursor(wait_for(cursor.execute(sql, params), self._loop), self._loop)

    @contextmanager
    def pipeline(self) -> Iterator[Pipeline]:
        with _entered(self._conn.pipeline(), self._loop) as pipeline:
            yield Pipeline(pipeline, self._loop)

    def close(self) -> None:
        wait_for(self._conn.close(), self._loop)


CLOSE_WAIT_SECONDS: Final = 30.0
"""How long :meth:`Pool.close` waits at most for the calls in flight to end (then it closes)."""


class Pool:
    """The part of ``psycopg_pool.ConnectionPool`` the PostgreSQL store uses, over an
    ``AsyncConnectionPool`` (created, opened and closed on ``loop``).

    Closing waits for the calls in flight — those that had taken a connection by then — to
    end (at most ``CLOSE_WAIT_SECONDS``; their later transactions are served meanwhile), as a
    SQLite store's close waits for its writers, and refuses other calls with
    ``StoreUnavailable``: psycopg's pool would fail the waiting ones, and those between two
    transactions, with its own ``PoolClosed``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conninfo: str, **options: Any) -> None:
        self._loop = loop
        self._pool: AsyncConnectionPool[Any] = CheckedAsyncPool(conninfo, open=False, **options)
        self.opened_in = this_process()
        self._using = 0  # connections held or waited for (threads too: counted under the lock)
        self._lock = threading.Lock()
        self._callers: weakref.WeakSet[greenlet.greenlet] = weakref.WeakSet()
        """the greenlets (a bridged call's, or a thread's) that took a connection"""
        self._draining: set[greenlet.greenlet] | None = None
        """while closing, the callers still served; then empty: every call is refused"""

    @property
    def timeout(self) -> float:
        return self._pool.timeout

    def open(self, wait: bool = False) -> None:
        wait_for(self._pool.open(wait=wait), self._loop)

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        refuse_if_forked(self.opened_in)  # (the loop serving the pool is the parent's: none runs here)
        me = greenlet.getcurrent()
        with self._lock:
            if self._draining is not None and me not in self._draining:
                raise StoreUnavailable("the store was closed: open it again to use it")
            self._using += 1
            self._callers.add(me)
        try:
            with _entered(self._pool.connection(), self._loop) as conn:
                yield Connection(conn, self._loop)
        except PoolClosed as exc:  # (closed by psycopg itself, past the wait)
            raise StoreUnavailable("the store was closed while this call waited for a connection") from exc
        finally:
            with self._lock:
                self._using -= 1

    def close(self) -> None:
        with self._lock:
            if self._draining is None:
                self._draining = set(self._callers) - {greenlet.getcurrent()}
        wait_for(self._drained_then_closed(), self._loop)

    async def _drained_then_closed(self) -> None:
        deadline = self._loop.time() + CLOSE_WAIT_SECONDS
        while self._in_flight() and self._loop.time() < deadline:
            await asyncio.sleep(0.005)  # (the calls in flight run on this loop meanwhile)
        with self._lock:
            self._draining = set()
        await self._pool.close()

    def _in_flight(self) -> bool:
        """A connection is in use, or a bridged call that had one has not returned yet."""
        return self._using > 0 or any(
            isinstance(caller, _Bridged) and not caller.dead for caller in self._draining or ()
        )


@contextmanager
def _entered(manager: Any, loop: asyncio.AbstractEventLoop) -> Iterator[Any]:
    """An async context manager, entered and left by synchronous code."""
    value = wait_for(manager.__aenter__(), loop)
    try:
        yield value
    except BaseException:
        if not wait_for(manager.__aexit__(*sys.exc_info()), loop):
            raise
    else:
        wait_for(manager.__aexit__(None, None, None), loop)
