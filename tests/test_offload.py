"""The edges' worker threads (stateflow.offload): anyio's contract — the call off the loop's
thread, in a copy of the caller's context, its result or error back, a cancelled caller held
until the call is done, at most so many calls at once — on real threads and a real loop."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from stateflow.offload import Offload, run_sync

from .collector_helpers import left_to_collector

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_result_error_thread_and_context() -> None:
    def work(a: int, *, b: int) -> tuple[int, int, str]:
        seen = WHO.get()
        WHO.set("changed in the call")  # a copy: the caller's context keeps its value
        return a + b, threading.get_ident(), seen

    def fail() -> None:
        raise KeyError("missing")

    async def main() -> None:
        WHO.set("caller")
        total, ident, seen = await run_sync(work, 1, b=2)
        assert (total, seen) == (3, "caller")
        assert ident != threading.get_ident()
        assert WHO.get() == "caller"
        with pytest.raises(KeyError, match="missing"):
            await run_sync(fail)

    asyncio.run(main())


def test_calls_run_at_once_on_their_own_threads() -> None:
    """Eight calls that each wait for all eight: they finish only if they run side by side (as
    concurrent writers must, to share a group commit)."""
    barrier = threading.Barrier(8, timeout=60)  # (eight threads started: seconds on a loaded machine)

    def meet() -> int:
        barrier.wait()
        return threading.get_ident()

    async def main() -> list[int]:
        return list(await asyncio.gather(*(run_sync(meet) for _ in range(8))))

    assert len(set(asyncio.run(main()))) == 8


def test_at_most_max_threads_calls_run_at_once() -> None:
    pool = Offload(max_threads=2)
    lock = threading.Lock()
    running = [0, 0]  # now, most
    release = threading.Event()

    def work(i: int) -> int:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        release.wait(20)
        with lock:
            running[0] -= 1
        return i

    async def main() -> list[int]:
        calls = [asyncio.ensure_future(pool.run(work, i)) for i in range(5)]
        deadline = time.monotonic() + 60  # two running, however long their threads take to start
        while running[0] < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # (time for a third to start, were it let)
        release.set()
        return list(await asyncio.gather(*calls))

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]
    assert running[1] == 2


def test_a_cancelled_caller_waits_for_its_call() -> None:
    """A call cannot be stopped halfway: its cancelled caller goes on only once it is done (a
    server shutting down must not close the store under a write)."""
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def work() -> None:
        started.set()
        release.wait(20)
        finished.append(True)

    async def main() -> None:
        task = asyncio.ensure_future(run_sync(work))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.2)
        assert not task.done(), "the caller went on while its call ran"
        task.cancel()  # a second cancellation does not let it go either
        await asyncio.sleep(0.1)
        assert not task.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == [True]

    asyncio.run(main())


def test_a_caller_cancelled_as_its_call_finishes_goes_on() -> None:
    """The call's answer is on its way to the loop when the caller is cancelled: the caller
    ends (cancelled) at once instead of waiting for an answer that already came."""
    done = threading.Event()

    def work() -> int:
        done.set()
        return 7

    async def main() -> None:
        task = asyncio.ensure_future(run_sync(work))
        await asyncio.sleep(0)  # the call is handed over
        done.wait(20)
        time.sleep(0.1)  # the loop is held: the answer waits in its queue, ahead of the cancellation
        task.cancel()
        await asyncio.wait({task}, timeout=5)
        assert task.cancelled()

    asyncio.run(main())


def test_the_answer_wakes_its_caller_in_the_pass_that_brought_it() -> None:
    """The caller goes on in the loop pass that ran the call's answer, ahead of what that pass
    scheduled after it (an ``asyncio.Future`` would wake it one pass later, behind those)."""
    order: list[str] = []
    handed = threading.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def work() -> int:
            handed.wait(20)
            return 5

        def hold() -> None:  # the answer arrives while the loop is busy in this callback
            handed.set()
            deadline = time.monotonic() + 60
            while not loop._ready and time.monotonic() < deadline:  # type: ignore[attr-defined]
                time.sleep(0.001)
            loop.call_soon(order.append, "after")

        async def caller() -> None:
            assert await run_sync(work) == 5
            order.append("caller")

        task = asyncio.ensure_future(caller())
        await asyncio.sleep(0)  # the call is handed over
        loop.call_soon(hold)
        await task
        await asyncio.sleep(0)

    asyncio.run(main())
    assert order == ["caller", "after"]


class Refused(Exception):
    pass


def test_an_error_handed_to_its_caller_is_freed_without_the_collector() -> None:
    """The error's traceback holds the frames that handed it over: none of them may hold it
    in turn, or the error and what its frames refer to wait for the cyclic collector."""

    def refuse(body: bytearray) -> None:
        raise Refused(len(body))

    async def main() -> None:
        for _ in range(3):
            with pytest.raises(Refused):
                await run_sync(refuse, bytearray(1000))

    with left_to_collector(Refused) as kept:
        asyncio.run(main())
    assert kept == []
