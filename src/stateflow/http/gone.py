"""A request's store call cancelled when its client goes away (PostgreSQL).

Nobody reads the answer of a request whose client went away, yet its statement would run on —
behind a lock, over a large scan — until it ends or the statement timeout stops it, holding a
connection of the pool. Where the store can interrupt a call (``Store.cancellable``: PostgreSQL;
see ``store.cancel``), a call that runs longer than :data:`WATCH_AFTER` (at most twice that) is
watched: once the server reports the client gone, its running statement is interrupted, its
transaction rolled back, and the connections it used are closed rather than lent again. A call
that committed before that stands and is answered as usual (into the void); only a call
cancelled before its commit fails, and the request is dropped as one whose client went away
(logged 499, see ``BodyLimit``). No such call blocks the event loop's thread, which watches
(``EdgeCalls.short`` keeps the synchronous store's calls off it); on SQLite every call runs to
its end.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final, TypeVar

from starlette.requests import ClientDisconnect

from stateflow.store.cancel import Cancel, done, running

R = TypeVar("R")

WATCH_AFTER: Final = 0.05
"""Seconds a call runs (at least; at most twice) before the client's going away is watched for:
a shorter call is not worth a watch (a task waiting on the connection)."""

Gone = Callable[[], Awaitable[bool]]
"""Waits until the client has gone away (True), or answers False at once where waiting would
read the request's body, which the route has not read."""

CLIENT: ContextVar[Gone | None] = ContextVar("stateflow_client", default=None)
"""The request's own :data:`Gone` (set by ``BodyLimit`` for each request, in its task)."""


class CallAbandoned(ClientDisconnect):
    """The client went away while its call ran, and the call was cancelled (``committed``:
    too late, it had committed a write, which stands)."""

    def __init__(self, committed: bool) -> None:
        super().__init__(committed)  # (its args are its constructor's: it pickles)
        self.committed = committed


class _Watch:
    """An edge's watched calls in flight, swept every :data:`WATCH_AFTER` seconds on its event
    loop while there are any: a call present at two sweeps in a row gets its watch then. (Not a
    timer per call: with a timer made and cancelled every call, asyncio's heap of cancelled
    timers cost ~9 µs a call here; this is a dict entry.)"""

    __slots__ = ("calls", "handle", "loop", "seen", "watches")

    def __init__(self) -> None:
        self.calls: dict[Cancel, Gone] = {}
        self.seen: set[Cancel] = set()
        """the calls in flight at the last sweep"""
        self.watches: dict[Cancel, asyncio.Task[None]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.handle: asyncio.TimerHandle | None = None

    def add(self, cancel: Cancel, gone: Gone, loop: asyncio.AbstractEventLoop) -> None:
        self.calls[cancel] = gone
        if self.handle is None or self.loop is not loop:  # (an app served on another loop since)
            self.loop, self.handle = loop, loop.call_later(WATCH_AFTER, self.sweep)

    def remove(self, cancel: Cancel) -> None:
        del self.calls[cancel]
        watch = self.watches.pop(cancel, None)
        if watch is not None:
            watch.cancel()

    def sweep(self) -> None:
        calls, seen, loop = self.calls, self.seen, self.loop
        assert loop is not None
        for cancel in seen.intersection(calls):  # in flight since the last sweep, at least
            if cancel not in self.watches:
                self.watches[cancel] = loop.create_task(_cancel_when_gone(calls[cancel], cancel))
        self.seen = set(calls)
        self.handle = loop.call_later(WATCH_AFTER, self.sweep) if calls else None


def watched(hop: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``hop`` (how an edge awaits a store call off the loop's thread), its calls cancelled
    when the request's client goes away (see the module)."""
    watch = _Watch()

    async def call(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        gone = CLIENT.get()
        if gone is None:  # (not a request's call)
            result: R = await hop(fn, *args, **kwargs)
            return result
        cancel = Cancel()
        watch.add(cancel, gone, asyncio.get_running_loop())
        calling = running(cancel)  # (the call runs in a copy of this context)
        try:
            result = await hop(fn, *args, **kwargs)
        except Exception as exc:
            if cancel.cancelled:  # nobody to answer: dropped, saying what became of the call
                raise CallAbandoned(cancel.settled) from exc
            raise
        finally:
            done(calling)
            watch.remove(cancel)
        return result

    return call


async def _cancel_when_gone(gone: Gone, cancel: Cancel) -> None:
    if await gone():
        # off the loop's thread: an interrupt is a connection to the server of its own
        threading.Thread(target=cancel.cancel, name="stateflow-cancel", daemon=True).start()
