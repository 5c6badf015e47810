"""A request's store call cancelled when its client goes away (PostgreSQL).

Nobody reads the answer of a request whose client went away, yet its statement would run on —
behind a lock, over a large scan — until it ends or the statement timeout stops it, holding a
connection of the pool. Where the store can interrupt a call (``Store.cancellable``: PostgreSQL;
see ``store.cancel``), a call that runs longer than :data:`WATCH_AFTER` is watched: once the
server reports the client gone, its running statement is interrupted, its transaction rolled
back, and the connections it used are closed rather than lent again. A call that committed
before that stands and is answered as usual (into the void); only a call cancelled before its
commit fails, and the request is dropped as one whose client went away (logged 499, see
``BodyLimit``). A call on the event loop's own thread (``EdgeCalls.short``) holds the loop: the
going away is seen only once it returns, and it runs to its end, as every call on SQLite does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final, TypeVar

from starlette.requests import ClientDisconnect

from stateflow.store.cancel import Cancel, cancellable

R = TypeVar("R")

WATCH_AFTER: Final = 0.05
"""Seconds a call runs before the client's going away is watched for: a shorter call is not
worth the watch (a timer is all it costs; a watch is a task waiting on the connection)."""

Gone = Callable[[], Awaitable[bool]]
"""Waits until the client has gone away (True), or answers False at once where waiting would
read the request's body, which the route has not read."""

CLIENT: ContextVar[Gone | None] = ContextVar("stateflow_client", default=None)
"""The request's own :data:`Gone` (set by ``BodyLimit`` for each request, in its task)."""


class CallAbandoned(ClientDisconnect):
    """The client went away while its call ran, and the call was cancelled (``committed``:
    too late, it had committed a write, which stands)."""

    def __init__(self, committed: bool) -> None:
        super().__init__()
        self.committed = committed


def watched(hop: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``hop`` (how an edge awaits a store call off the loop's thread), its calls cancelled
    when the request's client goes away (see the module)."""

    async def call(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        gone = CLIENT.get()
        if gone is None:  # (not a request's call)
            result: R = await hop(fn, *args, **kwargs)
            return result
        cancel = Cancel()
        loop = asyncio.get_running_loop()
        watch: asyncio.Task[None] | None = None

        def start() -> None:
            nonlocal watch
            watch = loop.create_task(_cancel_when_gone(gone, cancel))

        timer = loop.call_later(WATCH_AFTER, start)
        try:
            with cancellable(cancel):  # (the call runs in a copy of this context)
                result = await hop(fn, *args, **kwargs)
        except Exception as exc:
            if cancel.cancelled:  # nobody to answer: dropped, saying what became of the call
                raise CallAbandoned(cancel.settled) from exc
            raise
        finally:
            timer.cancel()
            if watch is not None:
                watch.cancel()
        return result

    return call


async def _cancel_when_gone(gone: Gone, cancel: Cancel) -> None:
    if await gone():
        # off the loop's thread: an interrupt is a connection to the server of its own
        threading.Thread(target=cancel.cancel, name="stateflow-cancel", daemon=True).start()
