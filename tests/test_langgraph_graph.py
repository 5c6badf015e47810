"""A real LangGraph graph on both adapters, on both backends: memory kept across threads by the
store, a paused thread resumed by a freshly opened graph through the saver, and the saver ending
where LangGraph's own ``InMemorySaver`` ends (a failed superstep resumed, time travel), sync and
async."""

from __future__ import annotations

import asyncio
import copy
import operator
import threading
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Command, Send, interrupt

from stateflow.config import Config, RetentionConfig
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import open_store
from stateflow.store.clock import restoring_time


class State(TypedDict):
    notes: Annotated[list[str], operator.add]


def remember(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, list[str]]:
    user = config["configurable"]["user_id"]
    fact = interrupt("what should I remember?")
    store.put(("memories", user), fact, {"fact": fact})
    known = sorted(m.value["fact"] for m in store.search(("memories", user)))
    return {"notes": [f"{user}: {', '.join(known)}"]}


def open_graph(location: str) -> tuple[CompiledStateGraph[Any, Any, Any, Any], StatesService]:
    states = StatesService(open_store(location, auto_migrate=True))
    builder = StateGraph(State).add_node(remember).add_edge(START, "remember")
    return builder.compile(checkpointer=StateflowSaver(states), store=StateflowStore(states)), states


def test_memory_across_threads_and_resume_after_reopen(backend: str) -> None:
    one: RunnableConfig = {"configurable": {"thread_id": "chat-1", "user_id": "ada"}}
    two: RunnableConfig = {"configurable": {"thread_id": "chat-2", "user_id": "ada"}}
    other: RunnableConfig = {"configurable": {"thread_id": "chat-3", "user_id": "bob"}}
    graph, states = open_graph(backend)
    try:
        assert "__interrupt__" in graph.invoke({"notes": []}, one)
        assert graph.invoke(Command(resume="likes tea"), one)["notes"] == ["ada: likes tea"]
        graph.invoke({"notes": []}, two)
    finally:
        states.store.close()

    graph, states = open_graph(backend)
    try:
        assert graph.get_state(two).next == ("remember",)
        assert graph.invoke(Command(resume="plays chess"), two)["notes"] == ["ada: likes tea, plays chess"]
        graph.invoke({"notes": []}, other)
        run = uuid.uuid4()
        resumed: RunnableConfig = {**other, "run_id": run}
        assert graph.invoke(Command(resume="sails"), resumed)["notes"] == ["bob: sails"]  # not ada's
        # an item a node stores names the invocation's run, as the checkpoints it wrote do
        sails = {
            "target_kind": "agent",
            "target_name": "langgraph",
            "kind": "item",
            "key": "memories/bob/sails",
        }
        assert states.writes("langgraph_store", sails)["items"][0]["origin"]["run_id"] == str(run)
        listed = states.subjects("langgraph_checkpoints", kind="checkpoint")["subjects"]
        # (subject order is id order: the thread's newest checkpoint is its last subject)
        chat3 = [s["subject"] for s in listed if s["subject"]["key"].startswith("chat-3/")][-1]
        assert states.writes("langgraph_checkpoints", chat3)["items"][0]["origin"]["run_id"] == str(run)
        assert graph.get_state(one).values == {"notes": ["ada: likes tea"]}
        history = list(graph.get_state_history(two))
        assert len(history) >= 3 and history[0].values == {"notes": ["ada: likes tea, plays chess"]}
        # time travel: the checkpoint before the answer still reads as it was
        paused = next(h for h in history if h.next == ("remember",) and h.tasks and h.tasks[0].interrupts)
        assert paused.values == {"notes": []}
        # the thread's checkpoints are records of the checkpoints state, audited with their run
        memory = {
            "target_kind": "agent",
            "target_name": "langgraph",
            "kind": "item",
            "key": "memories/ada/plays%20chess",
        }
        origin = states.writes("langgraph_store", memory)["items"][0]["origin"]
        assert (origin["consumer"], origin["meta"]) == (
            "langgraph",
            {"thread_id": "chat-2", "node": "remember"},
        )
        subjects = states.subjects("langgraph_checkpoints", kind="checkpoint")["subjects"]
        assert sum(s["subject"]["key"].startswith("chat-2/") for s in subjects) == len(history)
    finally:
        states.store.close()


class Items(TypedDict):
    items: Annotated[list[str], operator.add]


def _superstep_with_a_failure(
    checkpointer: BaseCheckpointSaver[Any], failing: list[bool], *, aio: bool = False
) -> Any:
    """``start``, then ``flaky`` beside ``par`` in one superstep: while ``failing[0]``, ``flaky``
    raises once ``par`` is done (else LangGraph may cancel ``par`` first: nothing to resume)."""
    done = threading.Event()
    adone = asyncio.Event()

    def par(state: Items) -> dict[str, list[str]]:
        done.set()
        return {"items": ["par"]}

    def flaky(state: Items) -> dict[str, list[str]]:
        if failing[0]:
            done.wait(30)  # (bounded: were the two ever run one after the other)
            raise RuntimeError("boom")
        return {"items": ["flaky"]}

    async def apar(state: Items) -> dict[str, list[str]]:
        adone.set()
        return {"items": ["par"]}

    async def aflaky(state: Items) -> dict[str, list[str]]:
        if failing[0]:
            await adone.wait()
            raise RuntimeError("boom")
        return {"items": ["flaky"]}

    return (
        StateGraph(Items)
        .add_node("start", lambda s: {"items": ["start"]})
        .add_node("flaky", aflaky if aio else flaky)
        .add_node("par", apar if aio else par)
        .add_edge(START, "start")
        .add_edge("start", "flaky")
        .add_edge("start", "par")
        .add_edge("flaky", END)
        .add_edge("par", END)
        .compile(checkpointer=checkpointer)
    )


def _time_travel(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    def fan(state: Items) -> list[Send]:
        return [Send("worker", {"items": [f"w{i}"]}) for i in range(2)]

    def last(state: Items) -> dict[str, list[str]]:
        return {"items": [f"last:{interrupt('ok?')}"]}

    return (
        StateGraph(Items)
        .add_node("first", lambda s: {"items": ["first"]})
        .add_node("worker", lambda s: {"items": [f"done-{s['items'][-1]}"]})
        .add_node("last", last)
        .add_edge(START, "first")
        .add_conditional_edges("first", fan, ["worker"])
        .add_edge("worker", "last")
        .add_edge("last", END)
        .compile(checkpointer=checkpointer)
    )


def _failed_and_resumed(checkpointer: BaseCheckpointSaver[Any]) -> tuple[Any, ...]:
    """A superstep where one node fails beside one that succeeds, the state read (as an app
    showing the error does: LangGraph applies the pending writes to the tuple it is given),
    then resumed."""
    failing = [True]
    graph = _superstep_with_a_failure(checkpointer, failing)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    with pytest.raises(RuntimeError, match="boom"):
        graph.invoke({"items": []}, config)
    tasks = [(t.name, t.error is not None, t.result) for t in graph.get_state(config).tasks]
    failing[0] = False
    return tasks, graph.invoke(None, config)["items"], len(list(graph.get_state_history(config)))


async def _afailed_and_resumed(checkpointer: BaseCheckpointSaver[Any]) -> tuple[Any, ...]:
    failing = [True]
    graph = _superstep_with_a_failure(checkpointer, failing, aio=True)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    with pytest.raises(RuntimeError, match="boom"):
        await graph.ainvoke({"items": []}, config)
    tasks = [(t.name, t.error is not None, t.result) for t in (await graph.aget_state(config)).tasks]
    failing[0] = False
    values = [v async for v in graph.astream(None, config, stream_mode="values")]
    return tasks, values[-1]["items"], len([h async for h in graph.aget_state_history(config)])


def _travelled(checkpointer: BaseCheckpointSaver[Any]) -> tuple[Any, ...]:
    """Run to the end, go back to the checkpoint before ``last``, edit it and run on from there."""
    graph = _time_travel(checkpointer)
    config: RunnableConfig = {"configurable": {"thread_id": "tt"}}
    graph.invoke({"items": []}, config)
    graph.get_state(config)  # (the pending interrupt, as a UI shows it)
    graph.invoke(Command(resume="yes"), config)
    old = next(h for h in graph.get_state_history(config) if h.next == ("last",))
    edited = graph.update_state(old.config, {"items": ["edited"]})
    after = graph.get_state(edited).next
    final = graph.invoke(Command(resume="again"), edited)["items"]
    return after, final, len(list(graph.get_state_history(config)))


async def _atravelled(checkpointer: BaseCheckpointSaver[Any]) -> tuple[Any, ...]:
    graph = _time_travel(checkpointer)
    config: RunnableConfig = {"configurable": {"thread_id": "tt"}}
    await graph.ainvoke({"items": []}, config)
    await graph.aget_state(config)
    await graph.ainvoke(Command(resume="yes"), config)
    history = [h async for h in graph.aget_state_history(config)]
    old = next(h for h in history if h.next == ("last",))
    edited = await graph.aupdate_state(old.config, {"items": ["edited"]})
    after = (await graph.aget_state(edited)).next
    final = (await graph.ainvoke(Command(resume="again"), edited))["items"]
    return after, final, len([h async for h in graph.aget_state_history(config)])


def test_a_failed_superstep_resumes_and_time_travels_as_in_memory(backend: str) -> None:
    """What the saver hands LangGraph is LangGraph's to change (``get_state`` applies pending
    writes to it): the next read must not see that, or the resumed run takes the parallel
    node's write as applied already and loses it, and an edited old checkpoint replays
    nothing."""
    expected = _failed_and_resumed(InMemorySaver())
    assert expected[:2] == (
        [("flaky", True, None), ("par", False, {"items": ["par"]})],
        ["start", "flaky", "par"],
    )
    with StateflowSaver.open(backend) as saver:
        assert _failed_and_resumed(saver) == expected
        travelled = _travelled(saver)
    assert travelled == _travelled(InMemorySaver())
    assert travelled[0] == ("worker", "worker")  # the edited checkpoint runs its workers again


def test_a_failed_superstep_resumes_and_time_travels_as_in_memory_async(backend: str) -> None:
    async def both() -> tuple[Any, ...]:
        saver = await StateflowSaver.aopen(backend)
        try:
            return await _afailed_and_resumed(saver), await _atravelled(saver)
        finally:
            await saver.aclose()

    failed, travelled = asyncio.run(both())
    assert failed == asyncio.run(_afailed_and_resumed(InMemorySaver()))
    assert failed[1] == ["start", "flaky", "par"]
    assert travelled == asyncio.run(_atravelled(InMemorySaver()))


def test_what_a_read_hands_out_is_the_callers_own(backend: str) -> None:
    """Changing a tuple from ``get_tuple`` or ``list`` — its checkpoint, values, metadata and
    pending writes — changes nothing the next read gives."""
    with StateflowSaver.open(backend) as saver:
        head: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for step, channel in enumerate(["a", "b"]):  # ``a`` then held by the first checkpoint
            checkpoint: Any = {
                "v": 4,
                "id": f"0000000{step}",
                "ts": "2026-01-01T00:00:00+00:00",
                "channel_values": {"a": [1], "b": {"n": [step]}},
                "channel_versions": {"a": 1, "b": step + 1},
                "versions_seen": {"node": {"a": 1}},
                "updated_channels": [channel],
            }
            head = saver.put(head, checkpoint, {"step": step, "parents": {}}, {channel: 1})
        saver.put_writes(head, [("a", {"w": [1]})], "task")

        def read() -> Any:
            tup = saver.get_tuple(head)
            assert tup is not None
            return tup.checkpoint, tup.metadata, tup.pending_writes

        before = copy.deepcopy(read())  # (a copy: a shared read would change too)
        for tup in (saver.get_tuple({"configurable": {"thread_id": "t"}}), next(saver.list(head))):
            assert tup is not None and tup.pending_writes is not None
            tup.checkpoint["versions_seen"]["node"]["a"] = "changed"
            tup.checkpoint["channel_values"]["a"].append(2)  # held by the other checkpoint
            tup.checkpoint["channel_values"]["b"]["n"].append(2)
            tup.metadata["parents"]["x"] = "changed"
            tup.pending_writes[0][2]["w"].append(2)
            assert read() == before


def test_checkpoint_audit_rows_carry_the_invocations_run_id(backend: str) -> None:
    """A run id given the LangChain way (``config["run_id"]``) is the run named in the audit
    rows of the checkpoints and pending writes it makes; one in the metadata (or the
    configurable) is the checkpoint's own and wins, as ``delete_for_runs`` matches it."""
    run = uuid.uuid4()
    with StateflowSaver.open(backend) as saver:
        graph = (
            StateGraph(Items)
            .add_node("n", lambda s: {"items": ["x"]})
            .add_edge(START, "n")
            .compile(checkpointer=saver)
        )
        graph.invoke({"items": []}, {"configurable": {"thread_id": "by-config"}, "run_id": run})
        graph.invoke(
            {"items": []},
            {"configurable": {"thread_id": "by-metadata"}, "metadata": {"run_id": "named"}, "run_id": run},
        )
        states = saver.states

        def audited(thread: str, kind: str) -> set[str | None]:
            found = states.subjects("langgraph_checkpoints", kind=kind)["subjects"]
            subjects = [s["subject"] for s in found if s["subject"]["key"].startswith(f"{thread}/")]
            assert subjects
            return {
                w["origin"]["run_id"]
                for s in subjects
                for w in states.writes("langgraph_checkpoints", s)["items"]
            }

        assert audited("by-config", "checkpoint") == audited("by-config", "writes") == {str(run)}
        assert audited("by-metadata", "checkpoint") == audited("by-metadata", "writes") == {"named"}
        tup = saver.get_tuple({"configurable": {"thread_id": "by-config"}})
        assert tup is not None and "run_id" not in tup.metadata  # (LangGraph's metadata, as given)


class Topic(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def test_the_default_retention_sweeps_the_store_never_a_threads_checkpoints(backend: str) -> None:
    """``STATEFLOW_DEFAULT_RETENTION_DAYS`` sweeps the store's items by age (they are independent)
    but never the saver's records: a checkpoint keeps a channel it did not write in an earlier
    checkpoint's record, so a thread's old checkpoints erased by age would leave its newest
    unreadable. After the sweep the thread reads whole, its history too."""
    states = StatesService(
        open_store(backend, auto_migrate=True), Config(retention=RetentionConfig(default_days=30))
    )
    try:
        memories = StateflowStore(states)
        graph = (
            StateGraph(Topic)
            .add_node("note", lambda s: {"notes": [f"{s['topic']} {len(s['notes'])}"]})
            .add_edge(START, "note")
            .compile(checkpointer=StateflowSaver(states), store=memories)
        )
        thread: RunnableConfig = {"configurable": {"thread_id": "chat"}}
        with restoring_time("2020-01-01T00:00:00.000000Z"):  # a session long ago
            graph.invoke({"topic": "tea", "notes": []}, thread, durability="sync")
            memories.put(("memories", "ada"), "old", {"fact": "likes tea"})
        today: Any = {"notes": []}  # (``topic`` unwritten: kept in the old session's checkpoint)
        graph.invoke(today, thread, durability="sync")
        memories.put(("memories", "ada"), "new", {"fact": "plays chess"})
        before = list(graph.get_state_history(thread))
        assert before[0].values == {"topic": "tea", "notes": ["tea 0", "tea 1"]}
        subjects = states.subjects("langgraph_checkpoints", kind="checkpoint")["subjects"]
        assert len(subjects) == len(before) >= 4

        report = states.prune(now=datetime.now(UTC))

        assert report["pruned"] == {"langgraph_store": 1}  # the checkpoints' state is exempt
        assert [i.key for i in memories.search(("memories", "ada"))] == ["new"]
        assert graph.get_state(thread).values == {"topic": "tea", "notes": ["tea 0", "tea 1"]}
        assert [h.values for h in graph.get_state_history(thread)] == [h.values for h in before]
    finally:
        states.store.close()
