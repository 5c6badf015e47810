"""A real LangGraph graph on both adapters, on both backends: memory kept across threads by the
store, a paused thread resumed by a freshly opened graph through the saver."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Command, interrupt

from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import open_store


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
        assert graph.invoke(Command(resume="sails"), other)["notes"] == ["bob: sails"]  # not ada's
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
