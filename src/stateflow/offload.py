"""Worker threads that run the edges' synchronous store calls for coroutines on event loops.

anyio's ``to_thread.run_sync`` (Starlette's thread pool) costs ~60–75 µs of CPU per call
here — a capacity limiter, a cancel scope, a ``queue.Queue`` whose condition variable is
Python code on both sides — and ~160 µs of wall time for the hop out and back. A call handed
to this pool costs one ``SimpleQueue.put`` (C), one ``call_soon_threadsafe`` and a future:
~20 µs of CPU, ~40 µs of wall time. On a SQLite store every HTTP request makes that hop, so
the difference is a twentieth of a small write's whole server CPU, and less time between a
request's arrival and its commit.

The contract is anyio's: the call runs on a worker thread in a copy of the caller's context
variables; its result or exception comes back to the awaiting coroutine; a cancelled caller
still waits for the call to finish (a store call cannot be stopped halfway, and whoever
cancelled — a server shutting down — must not close the store under it). At most
``MAX_THREADS`` calls run at once (anyio's default too); more wait in the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

R = TypeVar("R")

MAX_THREADS: Final = 40


class _Call:
    """One call on its way through the pool (settled on its loop's thread only)."""

    __slots__ = ("context", "finished", "fn", "future", "loop", "waiter")

    def __init__(
        self, fn: Callable[[], Any], loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]
    ) -> None:
        self.fn = fn
        self.loop = loop
        self.future = future
        self.context = contextvars.copy_context()
        self.finished = False
        """the call returned or raised (and its caller was told, unless cancelled)"""
        self.waiter: asyncio.Future[None] | None = None
        """set when the caller was cancelled first: resolved once the call is done"""


def _settle(call: _Call, result: Any, error: BaseException | None) -> None:
    call.finished = True
    future = call.future
    if not future.done():
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    if call.waiter is not None and not call.waiter.done():
        call.waiter.set_result(None)


class Offload:
    """A pool of daemon worker threads fed by one queue, started as calls need them."""

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self._queue: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._max = max(1, max_threads)
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._pending = 0
        """calls put but not yet taken by a thread"""

    async def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        call = _Call(functools.partial(fn, *args, **kwargs) if args or kwargs else fn, loop, future)
        with self._lock:
            self._pending += 1
            start = self._pending > self._idle and self._threads < self._max
            if start:
                self._threads += 1
        self._queue.put(call)
        if start:
            threading.Thread(target=self._work, name="stateflow-offload", daemon=True).start()
        try:
            return await future
        except asyncio.CancelledError:
            if not call.finished:  # still running: the cancellation goes on once it is done
                waiter = call.waiter = loop.create_future()
                while not waiter.done():
                    try:
                        await asyncio.shield(waiter)
                    except asyncio.CancelledError:
                        continue
            raise

    def _work(self) -> None:
        take, lock = self._queue.get, self._lock
        while True:
            with lock:
                self._idle += 1
            call = take()
            with lock:
                self._idle -= 1
                self._pending -= 1
            result: Any = None
            error: BaseException | None = None
            try:
                result = call.context.run(call.fn)
            except BaseException as exc:  # handed to the caller, as anyio does
                error = exc
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
                call.loop.call_soon_threadsafe(_settle, call, result, error)
            del call, result, error


_pool = Offload()


async def run_sync(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``fn(*args, **kwargs)`` on a worker thread of the process's pool, awaited."""
    return await _pool.run(fn, *args, **kwargs)
