"""The async API on PostgreSQL's async pool: calls run on the event loop's thread, round trips
awaited there; the async example of docs/async.md and the LangGraph adapters' async methods on it."""

from __future__ import annotations

import asyncio
import operator
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Command, interrupt

import stateflow.aio
import stateflow.errors
from stateflow.aio import AsyncStateflow, open_store_async
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import open_store
from stateflow.store.postgres_async import AsyncPostgresStore

DECL = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
ROOT = Path(__file__).resolve().parent.parent


def subject(key: str) -> dict[str, str]:
    return {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": key}


def test_calls_stay_on_the_loop_thread_and_run_concurrently(pg_schema_url: str) -> None:
    async def main() -> None:
        store = await open_store_async(pg_schema_url, auto_migrate=True)
        assert isinstance(store, AsyncPostgresStore)
        sf = await AsyncStateflow.on(store)
        threads: set[int] = set()
        original = sf.states.sync.apply

        def apply(*args: Any, **kwargs: Any) -> Any:
            threads.add(threading.get_ident())
            return original(*args, **kwargs)

        sf.states.sync.apply = apply  # type: ignore[method-assign]
        before = threading.active_count()
        async with sf:
            await sf.states.declare("counters", DECL)
            # more callers than the pool has connections (10): they wait for one on the loop
            results = await asyncio.gather(
                *(
                    sf.states.apply(
                        "counters", subject(f"c{i % 8}"), [{"op": "set", "path": ["n"], "value": i}]
                    )
                    for i in range(40)
                )
            )
            assert all(r.applied for r in results)
            assert threads == {threading.get_ident()}  # no worker thread ran a call
            assert threading.active_count() <= before + 1  # (the pool's own scheduler task only)
            records = [await sf.states.read("counters", subject(f"c{k}")) for k in range(8)]
            assert [r["revision"] for r in records if r] == [5] * 8
            trail = await sf.states.writes("counters", subject("c3"))
            assert len(trail["items"]) == 5
            memory = sf.memory(agent="a", cwd="/tmp", session="s")
            await memory.patch_state({"session": {"tactics": {"next": "test"}}})
            assert await memory.read_state({"path": "tactics.next"}) == {"value": "test"}
            forked = await memory.fork("s2")
            assert await forked.read_state({"path": "tactics.next"}) == {"value": "test"}
            assert len(await sf.store.scan("counters")) == 8

    asyncio.run(main())


def test_a_failed_write_rolls_back_and_the_pool_stays_usable(pg_schema_url: str) -> None:
    async def main() -> None:
        async with await AsyncStateflow.on(await open_store_async(pg_schema_url, auto_migrate=True)) as sf:
            await sf.states.declare("counters", DECL)
            with pytest.raises(Exception, match="n"):
                await sf.states.replace("counters", subject("x"), {"n": "not a number"})
            assert await sf.states.read("counters", subject("x")) is None
            await sf.states.replace("counters", subject("x"), {"n": 1})
            record = await sf.states.read("counters", subject("x"))
            assert record is not None and record["data"] == {"n": 1}

    asyncio.run(main())


def test_sync_calls_from_other_threads_and_refused_on_the_loop(pg_schema_url: str) -> None:
    async def main() -> None:
        store = await open_store_async(pg_schema_url, auto_migrate=True)
        states = StatesService(store)
        try:
            await stateflow.aio.call(store, states.declare, "counters", DECL)
            # a worker thread (a sync LangGraph node, say) calls the sync API: the loop serves it
            await asyncio.to_thread(states.replace, "counters", subject("t"), {"n": 2})
            record = await stateflow.aio.call(store, states.read, "counters", subject("t"))
            assert record is not None and record["data"] == {"n": 2}
            with pytest.raises(RuntimeError, match="this store is async"):
                states.read("counters", subject("t"))  # would block the loop it needs
        finally:
            await stateflow.aio.call(store, store.close)

    asyncio.run(main())


def test_a_unit_of_work_on_the_async_pool_is_awaited_on_the_loop(pg_schema_url: str) -> None:
    # the synchronous unit ``await sf.states.unit()`` answered refused its reads on the loop
    async def main() -> None:
        async with await AsyncStateflow.on(await open_store_async(pg_schema_url, auto_migrate=True)) as sf:
            await sf.states.declare("counters", DECL)
            async with await sf.states.unit() as unit:
                await unit.apply("counters", subject("u"), [{"op": "set", "path": ["n"], "value": 1}])
                await unit.apply("counters", subject("u"), [{"op": "set", "path": ["n"], "value": 2}])
                staged = await unit.read("counters", subject("u"))
                assert staged is not None and (staged["data"], staged["staged"]) == ({"n": 2}, 2)
            record = await sf.states.read("counters", subject("u"))
            assert record is not None and (record["data"], record["revision"]) == ({"n": 2}, 1)

    asyncio.run(main())


def test_a_program_that_raises_right_after_opening_the_store_exits_with_its_error(
    pg_schema_url: str,
) -> None:
    """``asyncio.run`` cancels the tasks a failed ``main()`` leaves; the pool's workers, still
    opening its connections, must end then (they went back to their queue: a silent hang). The
    error is the documented one for a sync service built on the loop's thread."""
    with open_store(pg_schema_url, auto_migrate=True):
        pass
    program = (
        "import asyncio, stateflow.aio\n"
        "from stateflow.api import states_service\n"
        "async def main():\n"
        f"    store = await stateflow.aio.open_store_async({pg_schema_url!r})\n"
        "    states_service(store)\n"
        "asyncio.run(main())\n"
    )
    # (the bound only tells a hang apart: the program ends in a second or two)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "RuntimeError: this store is async" in done.stderr, done.stderr


def test_the_async_examples_of_the_docs_run_on_postgresql(
    pg_schema_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (ROOT / "docs" / "async.md").read_text()
    examples = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    # each example opens a fresh file; the same code given a postgresql:// URL takes the async pool
    fresh = 'f"{tempfile.mkdtemp()}/async-example.db"'
    assert len(examples) == 2 and all(fresh in code for code in examples)
    assert "stateflow.aio.connect(" in examples[0]
    with open_store(pg_schema_url, auto_migrate=True):
        pass  # connect() does not migrate PostgreSQL: `stateflow migrate` did, once
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATEFLOW_STORE", raising=False)
    for code in examples:
        code = code.replace(fresh, repr(pg_schema_url))
        exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})
    # both examples wrote to this PostgreSQL schema, not to a default file
    with open_store(pg_schema_url) as store:
        states = StatesService(store)
        ticket, note = states.read("tickets", subject("t-7")), states.read("notes", subject("n-1"))
        assert ticket is not None and ticket["data"] == {"status": "open"}
        assert note is not None and note["data"] == {"text": "hi"}


class Notes(TypedDict):
    notes: Annotated[list[str], operator.add]


async def remember(state: Notes, config: RunnableConfig, *, store: BaseStore) -> dict[str, list[str]]:
    user = config["configurable"]["user_id"]
    fact = interrupt("what should I remember?")
    await store.aput(("memories", user), fact, {"fact": fact})
    known = sorted(m.value["fact"] for m in await store.asearch(("memories", user)))
    return {"notes": [f"{user}: {', '.join(known)}"]}


def test_an_async_graph_on_the_async_adapters(pg_schema_url: str) -> None:
    async def main() -> None:
        saver = await StateflowSaver.aopen(pg_schema_url)
        store = await StateflowStore.aopen(pg_schema_url)
        assert isinstance(saver.states.store, AsyncPostgresStore)
        try:
            graph = (
                StateGraph(Notes)
                .add_node(remember)
                .add_edge(START, "remember")
                .compile(checkpointer=saver, store=store)
            )
            one: RunnableConfig = {"configurable": {"thread_id": "chat-1", "user_id": "ada"}}
            two: RunnableConfig = {"configurable": {"thread_id": "chat-2", "user_id": "ada"}}
            assert "__interrupt__" in await graph.ainvoke({"notes": []}, one)
            assert (await graph.ainvoke(Command(resume="likes tea"), one))["notes"] == ["ada: likes tea"]
            await graph.ainvoke({"notes": []}, two)
            assert (await graph.aget_state(two)).next == ("remember",)
            done = await graph.ainvoke(Command(resume="plays chess"), two)
            assert done["notes"] == ["ada: likes tea, plays chess"]
            # the item's write carries the run's origin (the graph's config reached the store)
            trail = await stateflow.aio.call(
                store.states.store,
                store.states.writes,
                "langgraph_store",
                store.subject(("memories", "ada"), "plays chess"),
            )
            origin = trail["items"][0]["origin"]
            assert origin["consumer"] == "langgraph"
            assert origin["meta"] == {"thread_id": "chat-2", "node": "remember"}
        finally:
            await saver.aclose()
            await store.aclose()

    asyncio.run(main())


def test_adapters_opened_by_aopen_are_async_context_managers(pg_schema_url: str) -> None:
    """``async with await StateflowSaver.aopen(url)`` — LangGraph's own async savers' idiom —
    was a ``TypeError`` (no ``__aenter__``), and a plain ``with`` failed at its end (the sync
    close on the loop's thread) and left the pool open. ``async with`` now closes the store on
    the loop; ``with`` is refused at once, naming ``async with``, and the store is closed on the
    loop all the same."""

    async def main() -> None:
        async with await StateflowSaver.aopen(pg_schema_url) as saver:
            assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None
        async with await StateflowStore.aopen(pg_schema_url) as store:
            await store.aput(("a",), "k", {"v": 1})
        for adapter in (saver, store):
            with pytest.raises(stateflow.errors.StoreUnavailable, match="closed"):
                await stateflow.aio.call(adapter.states.store, adapter.states.store.read, [])
        refused = await StateflowStore.aopen(pg_schema_url)
        with (
            pytest.raises(TypeError, match=r"use `async with await StateflowStore.aopen\(...\)`"),
            refused,
        ):
            pytest.fail("the block ran")
        closing = refused._closing
        assert closing is not None
        await closing
        with pytest.raises(stateflow.errors.StoreUnavailable, match="closed"):
            await refused.aget(("a",), "k")

    asyncio.run(main())
