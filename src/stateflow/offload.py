"""Worker threads that run the edges' synchronous store calls for coroutines on event loops.

anyio's ``to_thread.run_sync`` (Starlette's thread pool) costs ~60–75 µs of CPU per call
here — a capacity limiter, a cancel scope, a ``queue.Queue`` whose condition variable is
Python code on both sides — and ~160 µs of wall time for the hop out and back. A call handed
to this pool costs one ``SimpleQueue.put`` (C), one ``call_soon_threadsafe`` and an answer
that wakes the caller in the loop pass that brought it (``_Answer``): ~20 µs of CPU, ~40 µs
of wall time. On a SQLite store every HTTP request makes that hop, so
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
from collections.abc import Callable, Generator
from typing import Any, Final, TypeVar

R = TypeVar("R")

MAX_THREADS: Final = 40


class _Answer:
    """What a caller awaits: asyncio's future protocol (the one a ``Task`` drives any awaitable
    future by), settled on the loop's thread only. An ``asyncio.Future`` wakes its task with
    ``call_soon``: the answer, having crossed from the worker in one loop pass, would wait
    for a second pass, behind everything else the loop had ready — with eight writers that is
    ~0.9 ms at the median here. Settled, this one wakes the task at once, in the pass that
    brought the answer (the task's step runs in the task's own context, as asyncio runs it)."""

    __slots__ = ("_asyncio_future_blocking", "_callbacks", "_error", "_loop", "_result", "_state")

    _PENDING, _DONE, _CANCELLED = 0, 1, 2

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._asyncio_future_blocking = False
        self._callbacks: list[tuple[Callable[[Any], object], contextvars.Context | None]] = []
        self._state = _Answer._PENDING
        self._result: Any = None
        self._error: BaseException | None = None

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def done(self) -> bool:
        return self._state != _Answer._PENDING

    def cancelled(self) -> bool:
        return self._state == _Answer._CANCELLED

    def add_done_callback(
        self, fn: Callable[[Any], object], *, context: contextvars.Context | None = None
    ) -> None:
        if self._state == _Answer._PENDING:
            self._callbacks.append((fn, context))
        else:
            self._loop.call_soon(fn, self, context=context)

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        kept = [(f, c) for f, c in self._callbacks if f != fn]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    def cancel(self, msg: Any = None) -> bool:
        """As a future's: the waiting task is woken (in the next pass) to be cancelled."""
        if self._state != _Answer._PENDING:
            return False
        self._state = _Answer._CANCELLED
        self._error = asyncio.CancelledError() if msg is None else asyncio.CancelledError(msg)
        callbacks, self._callbacks = self._callbacks, []
        for fn, context in callbacks:
            self._loop.call_soon(fn, self, context=context)
        return True

    def result(self) -> Any:
        if self._state == _Answer._PENDING:
            raise asyncio.InvalidStateError("the call has not answered yet")
        if self._error is not None:
            raise self._error
        return self._result

    def exception(self) -> BaseException | None:
        if self._state == _Answer._PENDING:
            raise asyncio.InvalidStateError("the call has not answered yet")
        if self._state == _Answer._CANCELLED and self._error is not None:
            raise self._error
        return self._error

    def settle(self, result: Any, error: BaseException | None) -> None:
        """The call's answer (on the loop's thread, in a pass of its own): its waiting task
        steps now. A no-op once cancelled (the caller was told already)."""
        if self._state != _Answer._PENDING:
            return
        self._state, self._result, self._error = _Answer._DONE, result, error
        del result, error  # (kept here, this frame would hold them after it returns: see release)
        callbacks, self._callbacks = self._callbacks, []
        for fn, context in callbacks:
            if context is None:
                fn(self)
            else:
                context.run(fn, self)

    def release(self) -> None:
        """Forget the call's error once the caller has it. The error's traceback holds the
        frames it was raised through, and they hold this answer: kept, the error, its frames
        and all they refer to (a refused request's body) would be a cycle that only the
        garbage collector frees."""
        self._error = None

    def __await__(self) -> Generator[Any, None, Any]:
        if self._state == _Answer._PENDING:
            self._asyncio_future_blocking = True
            yield self  # the task adds its wake-up (add_done_callback) and waits
        if self._state == _Answer._PENDING:
            raise RuntimeError("await wasn't used with future")
        return self.result()

    __iter__ = __await__


class _Call:
    """One call on its way through the pool (settled on its loop's thread only)."""

    __slots__ = ("answer", "context", "finished", "fn", "loop", "waiter")

    def __init__(self, fn: Callable[[], Any], loop: asyncio.AbstractEventLoop, answer: _Answer) -> None:
        self.fn = fn
        self.loop = loop
        self.answer = answer
        self.context = contextvars.copy_context()
        self.finished = False
        """the call returned or raised (and its caller was told, unless cancelled)"""
        self.waiter: asyncio.Future[None] | None = None
        """set when the caller was cancelled first: resolved once the call is done"""


def _settle(call: _Call, result: Any, error: BaseException | None) -> None:
    call.finished = True
    call.answer.settle(result, error)
    del result, error  # (see _Answer.release)
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
        answer = _Answer(loop)
        call = _Call(functools.partial(fn, *args, **kwargs) if args or kwargs else fn, loop, answer)
        with self._lock:
            self._pending += 1
            start = self._pending > self._idle and self._threads < self._max
            if start:
                self._threads += 1
        self._queue.put(call)
        if start:
            threading.Thread(target=self._work, name="stateflow-offload", daemon=True).start()
        try:
            result: R = await answer
            return result
        except asyncio.CancelledError:
            if not call.finished:  # still running: the cancellation goes on once it is done
                waiter = call.waiter = loop.create_future()
                while not waiter.done():
                    try:
                        await asyncio.shield(waiter)
                    except asyncio.CancelledError:
                        continue
            raise
        except BaseException:
            answer.release()  # the caller has it now
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

run_sync = _pool.run
"""``run_sync(fn, *args, **kwargs)``: ``fn(*args, **kwargs)`` on a worker thread of the
process's pool, awaited (the pool's own method: no coroutine's layer of its own around it)."""
