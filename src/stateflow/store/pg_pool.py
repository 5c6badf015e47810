"""PostgreSQL connection pools that never lend a connection the server has ended.

A restart, a failover, an idle-session timeout or ``pg_terminate_backend`` ends the server's side
of every pooled connection while it sits idle in the pool; psycopg's pool would lend each one
once more, and the call using it would fail (``store-unavailable``) before the pool noticed and
replaced it. The pool's own ``check`` callback costs a round trip on every checkout and, on a
failed check, waits a second or more before trying the next connection.

Here every connection leaves the pool through ``getconn`` (its ``connection()`` too) and is
looked at first without a round trip: an idle connection the server still serves has nothing to
read, while an ended one has the server's last message or the end of the stream waiting. Only a
socket with something to read gets a real check (an empty statement: a notice or a parameter
report would also be waiting), and a connection that fails it is closed and given back — the pool
opens another in its place — and the next one is taken. Nothing was sent on an ended connection,
so nothing a caller asked for is lost or done twice; a connection that ends while in use still
fails its call, as before.

A pool opened before ``os.fork()`` lends nothing in the child: its connections are the parent's
sockets, and a statement sent on one from both processes mixes their messages (each waits for
an answer the other read: both hang) — the child is refused and told to open the store again.

A connection lent to a call run under a cancel (``store.cancel``) is registered with it until it
comes back: a cancelled call's statement is interrupted, and the connection is closed as it comes
back (the pool opens another), never lent again with a cancel perhaps still on its way to it.
"""

from __future__ import annotations

import asyncio
import os
import select
from typing import Any, cast

import psycopg
from psycopg.pq import ConnStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed

from stateflow.errors import StoreUnavailable
from stateflow.store.cancel import current

OK = ConnStatus.OK
_POLLER = "_stateflow_poller"

_process = os.getpid()
"""this process's id, set again in a forked child (no system call a checkout)"""


def _forked() -> None:
    global _process
    _process = os.getpid()


os.register_at_fork(after_in_child=_forked)


def this_process() -> int:
    """This process's id (a pool or store records it when opened)."""
    return _process


def refuse_if_forked(opened_in: int, url: str = "this PostgreSQL store") -> None:
    """Refuse (``store-unavailable``) in a process forked from the one, ``opened_in``, that
    opened the pool: its connections are that process's, never to be used (nor closed) here."""
    if opened_in != _process:
        raise StoreUnavailable(
            f"{url} was opened in process {opened_in}, before os.fork(): its connections belong to "
            "that process and are not used here; open the store again in the child (after the fork)"
        )


def _waiting(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether the server sent something (or closed the stream) on this idle connection: one
    ``poll`` of its socket, no round trip. True for a connection already closed or broken."""
    pgconn = conn.pgconn
    if pgconn.status != OK:
        return True
    poller = conn.__dict__.get(_POLLER)  # made once a connection: its socket stays the same
    if poller is None:
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN)
        setattr(conn, _POLLER, poller)
    return bool(poller.poll(0))


def ended(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server has ended this idle (autocommit) connection; an ended one is closed."""
    if not _waiting(conn):
        return False
    try:
        conn.execute("")
    except psycopg.Error:
        conn.close()
        return True
    return False


async def ended_async(conn: psycopg.AsyncConnection[Any]) -> bool:
    """:func:`ended` for an async connection."""
    if not _waiting(conn):
        return False
    try:
        await conn.execute("")
    except psycopg.Error:
        await conn.close()
        return True
    return False


class CheckedPool(ConnectionPool[Any]):
    """A ``ConnectionPool`` whose ``getconn`` skips (and replaces) connections the server ended,
    and lends a call run under a cancel connections it can interrupt (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opened_in = _process

    def getconn(self, timeout: float | None = None) -> Any:
        if self.opened_in != _process:
            refuse_if_forked(self.opened_in)
        cancel = current()
        conn = self._take(timeout)
        if cancel is not None:
            try:
                cancel.enter(conn, conn.cancel_safe)
            except BaseException:
                super().putconn(conn)
                raise
        return conn

    def _take(self, timeout: float | None) -> Any:
        try:
            # at most as many ended connections as the pool holds: then a fresh one
            for _ in range(self.max_size):
                conn = super().getconn(timeout)
                if not ended(conn):
                    return conn
                super().putconn(conn)  # closed: the pool opens another in its place
            return super().getconn(timeout)
        except PoolClosed as exc:
            # the store's own ``close()``, not the server: said so on every path that takes a
            # connection, as a closed SQLite store and the async bridge's pool say it
            raise StoreUnavailable("the store was closed: open it again to use it") from exc

    def putconn(self, conn: Any) -> None:
        cancel = current()
        if cancel is not None and cancel.leave(conn):
            conn.close()  # (a cancel may still be on its way to it: the pool opens another)
        super().putconn(conn)


class _EndsWhenCancelled:
    """A maintenance worker's task queue that ends the worker once it was cancelled: psycopg's
    maintenance tasks catch ``CancelledError`` (to keep the pool's count of connections right),
    so a worker cancelled while one ran — opening a connection, say — took the next task
    instead of ending, and a program whose ``main()`` raised right after opening the store
    (``asyncio.run`` cancels what is left) hung for ever instead of printing its error."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    async def get(self) -> Any:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
        return await self._queue.get()


class CheckedAsyncPool(AsyncConnectionPool[Any]):
    """:class:`CheckedPool` over psycopg's async pool."""

    @classmethod
    async def worker(cls, q: Any) -> None:
        await super().worker(cast(Any, _EndsWhenCancelled(q)))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opened_in = _process

    async def getconn(self, timeout: float | None = None) -> Any:
        if self.opened_in != _process:
            refuse_if_forked(self.opened_in)
        cancel = current()
        conn = await self._take(timeout)
        if cancel is not None:
            try:
                # (the blocking cancel: the call is interrupted from another thread)
                cancel.enter(conn, conn.cancel)
            except BaseException:
                await super().putconn(conn)
                raise
        return conn

    async def _take(self, timeout: float | None) -> Any:
        for _ in range(self.max_size):
            conn = await super().getconn(timeout)
            if not await ended_async(conn):
                return conn
            await super().putconn(conn)
        return await super().getconn(timeout)

    async def putconn(self, conn: Any) -> None:
        cancel = current()
        if cancel is not None and cancel.leave(conn):
            await conn.close()
        await super().putconn(conn)
