"""The async API on both backends: concurrent writers from one event loop, reads, memory views."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import stateflow.aio
from stateflow.aio import AsyncStateflow, AsyncStatesService, AsyncUnit
from stateflow.states import StatesService
from stateflow.store import open_store

DECL = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def test_concurrent_writes_reads_and_memory(backend: str) -> None:
    async def main() -> None:
        sf = await AsyncStateflow.on(open_store(backend, auto_migrate=True))
        async with sf:
            await sf.states.declare("counters", DECL)
            subject = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "c"}
            results = await asyncio.gather(
                *(
                    sf.states.apply(
                        "counters",
                        subject,
                        [{"op": "set", "path": ["n"], "value": i % 10}],
                        op_id=f"op-{i % 10}",
                    )
                    for i in range(30)
                )
            )
            assert sum(r.applied for r in results) == 10  # each op id applied once, replays refused
            trail = await sf.states.writes("counters", subject)
            assert len(trail["items"]) == 10
            memory = sf.memory(agent="a", cwd="/tmp", session="s")
            await memory.patch_state({"session": {"tactics": {"next": "test"}}})
            assert await memory.read_state({"path": "tactics.next"}) == {"value": "test"}
            assert len(await sf.store.scan("counters")) == 1

    asyncio.run(main())


def test_states_is_called_as_the_synchronous_api_calls_it(backend: str) -> None:
    # code ported from Stateflow (``sf.states().read(...)``) failed: the service was not callable
    async def main() -> None:
        async with await AsyncStateflow.on(open_store(backend, auto_migrate=True)) as sf:
            states = sf.states()
            assert states is sf.states
            await states.declare("counters", DECL)
            subject = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "c"}
            await sf.states().replace("counters", subject, {"n": 1})
            record = await sf.states.read("counters", subject)
            assert record is not None and record["data"] == {"n": 1}

    asyncio.run(main())


def test_a_unit_of_work_is_awaited_and_commits_on_leaving_its_async_block(backend: str) -> None:
    # ``await sf.states.unit()`` answered the synchronous unit: its reads ran on the loop's thread
    async def main() -> None:
        async with await AsyncStateflow.on(open_store(backend, auto_migrate=True)) as sf:
            await sf.states.declare("counters", DECL)
            a, b = ({"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": k} for k in "ab")
            loop_thread, threads = threading.get_ident(), set()
            original = sf.states.sync.read

            def read(*args: Any, **kwargs: Any) -> Any:
                threads.add(threading.get_ident())
                return original(*args, **kwargs)

            sf.states.sync.read = read  # type: ignore[method-assign]
            async with await sf.states.unit() as unit:
                assert isinstance(unit, AsyncUnit)
                staged = await unit.apply("counters", a, [{"op": "set", "path": ["n"], "value": 1}])
                assert staged.applied and staged.seq is None
                await unit.apply("counters", b, [{"op": "set", "path": ["n"], "value": 2}])
                with pytest.raises(RuntimeError), unit.savepoint():
                    await unit.apply("counters", b, [{"op": "set", "path": ["n"], "value": 3}])
                    raise RuntimeError("dropped")
                seen = await unit.read("counters", b)
                assert seen is not None and seen["data"] == {"n": 2}
                assert await sf.states.read("counters", a) is None  # nothing written yet
            assert loop_thread not in threads  # every read of the unit was awaited off the loop
            records = [await sf.states.read("counters", s) for s in (a, b)]
            assert [r["data"] if r else None for r in records] == [{"n": 1}, {"n": 2}]
            with pytest.raises(ValueError, match="no"):
                async with await sf.states.unit() as failing:
                    await failing.apply("counters", a, [{"op": "set", "path": ["n"], "value": 9}])
                    raise ValueError("no")
            record = await sf.states.read("counters", a)
            assert record is not None and record["data"] == {"n": 1}  # discarded whole

    asyncio.run(main())


def test_calls_leave_the_event_loop_thread(backend: str) -> None:
    store = open_store(backend, auto_migrate=True)
    try:
        service = StatesService(store)
        threads: list[int] = []
        original = service.read

        def read(name: str, subject: object) -> Any:
            threads.append(threading.get_ident())
            return original(name, subject)

        service.read = read  # type: ignore[method-assign,assignment]
        service.declare("counters", DECL)

        async def main() -> None:
            await AsyncStatesService(service).read(
                "counters", {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "x"}
            )
            assert threads and threads[0] != threading.get_ident()

        asyncio.run(main())
    finally:
        store.close()


async def under_way(tasks: list[asyncio.Task[Any]]) -> None:
    """Until every task has started and waits on a database call (or is done)."""
    while not all(t.done() or getattr(t, "_fut_waiter", None) is not None for t in tasks):
        await asyncio.sleep(0)


def test_closing_waits_for_the_calls_in_flight_then_refuses_by_name(backend: str) -> None:
    """Closing an async adapter or connection while calls are in flight lets them finish, on
    either backend (PostgreSQL's async pool waited for none: psycopg's PoolClosed escaped;
    SQLite's close ran while calls still waited for a worker thread, and could take the writer
    from a group of writes it then lost), and a call made after the close is refused as
    ``StoreUnavailable``."""
    from stateflow.errors import StoreUnavailable
    from stateflow.langgraph import StateflowStore

    async def main() -> None:
        store = await StateflowStore.aopen(backend)
        await store.aput(("warm",), "k", {"i": 0})
        puts = [asyncio.create_task(store.aput(("cl",), f"k{i}", {"i": i})) for i in range(30)]
        await under_way(puts)
        await store.aclose()
        assert await asyncio.gather(*puts, return_exceptions=True) == [None] * 30
        with pytest.raises(StoreUnavailable, match="closed"):
            await store.aput(("cl",), "late", {"i": -1})
        again = await StateflowStore.aopen(backend)
        assert len(await again.asearch(("cl",), limit=100)) == 30
        await again.aclose()

        async with await stateflow.aio.connect(backend) as sf:
            await sf.states.declare("cx", {
                "schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
                "subject_kinds": ["thread"], "default_subject_kind": "thread",
            })  # fmt: skip

            async def apply(i: int) -> Any:
                where = {"target_kind": "agent", "target_name": "b", "kind": "thread", "key": f"k{i}"}
                return await sf.states.apply("cx", where, [{"op": "set", "path": ["a"], "value": i}])

            applies = [asyncio.create_task(apply(i)) for i in range(20)]
            await under_way(applies)
        results = await asyncio.gather(*applies, return_exceptions=True)
        assert all(getattr(r, "applied", False) for r in results), results

    asyncio.run(main())


def test_a_cancelled_sqlite_call_runs_to_its_end_and_a_close_waits_for_it(tmp_path: Path) -> None:
    """On SQLite a call runs on a worker thread, which cannot be stopped midway: cancelling the
    caller cancels the caller alone, the call runs to its end (its write commits) and a close
    waits for it. (The close forgot a cancelled call and closed the store under it: its write
    was refused or failed on a closed connection, or the process crashed.)"""
    path = str(tmp_path / "cancelled.db")
    where = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "c"}

    async def main() -> None:
        sf = await stateflow.aio.connect(path)
        await sf.states.declare("counters", DECL)
        started, go = threading.Event(), threading.Event()

        def write() -> Any:
            started.set()
            go.wait(60)
            return sf.states.sync.apply("counters", where, [{"op": "set", "path": ["n"], "value": 7}])

        call = asyncio.create_task(stateflow.aio.call(sf.store.sync, write))
        try:
            await asyncio.to_thread(started.wait, 60)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            closing = asyncio.create_task(sf.close())
            # (a close that did not wait for the call would be done by then; one that does cannot be)
            done, _ = await asyncio.wait({closing}, timeout=0.5)
            assert not done
        finally:
            go.set()
        await closing

    asyncio.run(main())
    store = open_store(path)
    try:
        record = StatesService(store).read("counters", where)
        assert record is not None and record["data"] == {"n": 7}
    finally:
        store.close()


def test_every_call_made_once_the_close_began_is_refused_on_either_backend(backend: str) -> None:
    """Once an async close began, a call is refused (``StoreUnavailable``) whether it would run
    on a worker thread (SQLite) or on the loop (PostgreSQL's async pool): ``unit()`` there
    touches no database, and was handed out after the close, to fail only at its first write."""
    from stateflow.errors import StoreUnavailable

    open_store(backend, auto_migrate=True).close()

    async def main() -> None:
        sf = await stateflow.aio.connect(backend)
        await sf.states.declare("closing_units", DECL)
        await sf.close()
        with pytest.raises(StoreUnavailable, match="closed"):
            await sf.states.unit()
        with pytest.raises(StoreUnavailable, match="closed"):
            await sf.states.read(
                "closing_units", {"target_kind": "agent", "target_name": "b", "kind": "thread", "key": "k"}
            )
        await sf.close()  # (a second close is no error)

    asyncio.run(main())
