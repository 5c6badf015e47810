"""The async API on both backends: concurrent writers from one event loop, reads, memory views."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from stateflow.aio import AsyncStateflow, AsyncStatesService
from stateflow.states import StatesService
from stateflow.store import open_store

DECL = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def test_concurrent_writes_reads_and_memory(backend: str) -> None:
    async def main() -> None:
        sf = AsyncStateflow(open_store(backend, auto_migrate=True))
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
