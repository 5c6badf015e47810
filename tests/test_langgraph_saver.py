"""``StateflowSaver`` against LangGraph's own checkpointer conformance suite, on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability

from stateflow.langgraph import StateflowSaver
from stateflow.states import StatesService
from stateflow.store import open_store
from tests.langgraph_helpers import fresh_locations


def test_conformance_every_capability(backend: str, tmp_path: Path) -> None:
    with fresh_locations(backend, tmp_path) as fresh:

        async def factory() -> AsyncGenerator[StateflowSaver, None]:
            saver = StateflowSaver.open(fresh())
            try:
                yield saver
            finally:
                saver.close()

        registered = checkpointer_test(name=f"StateflowSaver-{backend[:8]}")(factory)
        report = asyncio.run(validate(registered))
    results = report.results
    assert set(results) == {c.value for c in Capability}
    failed = {name: r.failures for name, r in results.items() if r.passed is not True}
    assert failed == {}  # every capability detected, every test passed
    assert all(r.detected and r.tests_passed > 0 for r in results.values())


def test_conformance_on_the_async_postgresql_pool(pg_schema_url: str, tmp_path: Path) -> None:
    """The async methods of a saver opened by ``aopen`` (psycopg's async pool, no worker thread)."""
    with fresh_locations(pg_schema_url, tmp_path) as fresh:

        async def factory() -> AsyncGenerator[StateflowSaver, None]:
            saver = await StateflowSaver.aopen(fresh())
            assert getattr(saver.states.store, "runs_on_loop", False)
            try:
                yield saver
            finally:
                await saver.aclose()

        registered = checkpointer_test(name="StateflowSaver-async-pg")(factory)
        report = asyncio.run(validate(registered))
    failed = {name: r.failures for name, r in report.results.items() if r.passed is not True}
    assert failed == {}
    assert all(r.detected and r.tests_passed > 0 for r in report.results.values())


def test_checkpoints_are_audited_records(backend: str, tmp_path: Path) -> None:
    """A checkpoint is a declared-state record: readable, with an audit row naming its run."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        checkpoint = generate_checkpoint(
            channel_values={"messages": ["hi"]}, channel_versions={"messages": 1}
        )
        config = saver.put(
            {"configurable": {"thread_id": "t 1", "checkpoint_ns": ""}},
            checkpoint,
            generate_metadata(run_id="run-7"),
            {"messages": 1},
        )
        key = saver._key("t 1", "", config["configurable"]["checkpoint_id"])
        subject = saver.records.subject("checkpoint", key)
        record = states.read("langgraph_checkpoints", subject)
        assert record is not None
        assert record["data"]["thread_id"] == "t 1"
        assert record["data"]["channel_values"] == {"messages": {"json": ["hi"]}}
        trail = states.writes("langgraph_checkpoints", subject)["items"]
        assert [(w["action"], w["origin"]["consumer"], w["origin"]["run_id"]) for w in trail] == [
            ("replace", "langgraph", "run-7")
        ]
        tup = saver.get_tuple({"configurable": {"thread_id": "t 1"}})
        assert tup is not None and tup.checkpoint["channel_values"] == {"messages": ["hi"]}
    finally:
        store.close()
