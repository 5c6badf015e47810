"""Bindings around a run, on both backends: subject and scope expressions, injections before
the run, updates after it, one unit of work with the run's origin."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest

from stateflow.bindings import (
    DEFAULT_TARGET,
    Binding,
    BindingInvalid,
    BindingRefused,
    bound,
    current_run,
    run,
)
from stateflow.errors import InvalidInput
from stateflow.states import StatesService
from stateflow.states.models import DoorContext
from stateflow.store import open_store

from .threads import run_threads

NOTEBOOK = {
    "description": "notes kept per subject",
    "schema": {"type": "object", "properties": {"notes": {"type": "array", "items": {"type": "string"}}}},
    "template_jq": {
        "recent": {"purpose": "input", "jq": {"content": "[.notes[]?] | .[-2:]"}},
        "add": {
            "purpose": "update",
            "params": ["note"],
            "jq": {"content": '[{"op": "set", "path": ["notes", "-"], "value": $input.note}]'},
        },
    },
}
BINDING = Binding(
    state="tickets",
    subject_expr=".ticket_id",
    scope_expr='.channel == "support"',
    inputs={"notes": {"template_jq": "recent"}},
    updates=[{"template_jq": "add", "adapter": "{note: .output.reply}"}],
)


@pytest.fixture
def states(backend: str) -> Iterator[StatesService]:
    store = open_store(backend, auto_migrate=True)
    service = StatesService(store)
    service.put_template("notebook", NOTEBOOK)
    service.declare(
        "tickets",
        {
            "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
            "subject_kinds": ["thread"],
            "default_subject_kind": "thread",
        },
    )
    service.attach("tickets", "notebook", {"path": ["book"]})
    yield service
    service.close()
    store.close()


def subject(key: str, name: str = "helpdesk") -> dict[str, str]:
    return {"target_kind": "agent", "target_name": name, "kind": "thread", "key": key}


def test_decorated_callable_gets_injections_and_its_updates_land(states: StatesService) -> None:
    seen: list[Any] = []

    @bound(states, BINDING, target=("agent", "helpdesk"))
    def answer(ticket_id: str, channel: str, notes: list[str] | None = None) -> dict[str, str]:
        seen.append(notes)
        return {"reply": f"answered {ticket_id} #{len(notes or [])}"}

    assert answer("t-1", "support") == {"reply": "answered t-1 #0"}
    assert answer(ticket_id="t-1", channel="support") == {"reply": "answered t-1 #1"}
    answer("t-1", "support")
    assert seen == [[], ["answered t-1 #0"], ["answered t-1 #0", "answered t-1 #1"]]
    record = states.read("tickets", subject("t-1"))
    assert record is not None and len(record["data"]["book"]["notes"]) == 3
    trail = states.writes("tickets", subject("t-1"))["items"]
    origins = [(w["origin"]["consumer"], w["origin"]["door"]) for w in trail]
    assert origins == [(answer.__qualname__, "api")] * 3
    assert len({w["origin"]["run_id"] for w in trail}) == 3  # one run id per call


def test_scope_false_skips_injections_and_updates(states: StatesService) -> None:
    seen: list[Any] = []

    @bound(states, BINDING, target=("agent", "helpdesk"))
    def answer(ticket_id: str, channel: str, notes: list[str] | None = None) -> dict[str, str]:
        seen.append(notes)
        return {"reply": "hi"}

    answer("t-2", "sales")
    assert seen == [None]
    assert states.read("tickets", subject("t-2")) is None


def test_refusals_run_nothing_and_write_nothing(states: StatesService) -> None:
    calls: list[str] = []

    def make(binding: Binding) -> Any:
        @bound(states, binding, target=("agent", "helpdesk"))
        def answer(ticket_id: Any, channel: str = "support", notes: Any = None) -> dict[str, str]:
            calls.append("ran")
            return {"reply": "x"}

        return answer

    with pytest.raises(BindingRefused, match='scope_expr must yield true or false, got "support"'):
        make(Binding("tickets", ".ticket_id", scope_expr=".channel"))("t-3")
    with pytest.raises(
        BindingRefused, match="subject_expr must yield a subject object or a key string, got null"
    ):
        make(Binding("tickets", ".missing"))("t-3")
    with pytest.raises(BindingRefused, match="empty key"):
        make(Binding("tickets", ".ticket_id"))("  ")
    with pytest.raises(BindingRefused, match="kind"):
        make(Binding("tickets", '{target_kind: "agent", target_name: "x", kind: "nope", key: "k"}'))("t-3")
    assert calls == []
    for bad in ("", "   "):
        with pytest.raises(BindingInvalid, match="subject_expr is required"):
            Binding("tickets", bad)
    with pytest.raises(BindingInvalid, match="subject_expr is required"):
        Binding.parse({"state": "tickets"})
    with pytest.raises(BindingInvalid, match="does not take"):
        bound(states, Binding("tickets", ".k", inputs={"memo": {"template_jq": "recent"}}))(lambda k: k)
    assert states.read("tickets", subject("t-3")) is None


def test_a_scope_or_subject_expr_that_yields_nothing_or_fails_is_refused_naming_the_binding(
    states: StatesService,
) -> None:
    calls: list[str] = []
    cases = [
        ("scope_expr", 'select(.channel == "x") | true', "the jq program produced no output"),
        ("scope_expr", ".ticket_id.x", "Cannot index string"),
        ("subject_expr", '.ticket_id | select(startswith("z"))', "the jq program produced no output"),
        ("subject_expr", ".ticket_id.x", "Cannot index string"),
    ]
    for name, program, why in cases:
        binding = Binding.parse({"state": "tickets", "subject_expr": ".ticket_id", name: program})

        @bound(states, binding, target=("agent", "helpdesk"))
        def answer(ticket_id: str, channel: str = "support") -> None:
            calls.append("ran")

        @bound(states, binding, target=("agent", "helpdesk"))
        async def answer_async(ticket_id: str, channel: str = "support") -> None:
            calls.append("ran")

        expected = (
            rf"^binding of state 'tickets': {name} '{re.escape(program)}' gave no value: .*{why}.*"
            r"\(the inputs it read: \.ticket_id; \.channel\)$"
        )
        with pytest.raises(BindingRefused, match=expected):
            answer("t-4")
        with pytest.raises(BindingRefused, match=expected):
            asyncio.run(answer_async("t-4"))
    assert calls == []
    assert states.read("tickets", subject("t-4")) is None


def test_an_expression_that_yields_several_values_is_refused_not_cut_to_the_first(
    states: StatesService,
) -> None:
    """A stream is neither a boolean nor a subject: ``.ticket_ids[]`` giving two keys bound the
    run to the first and ignored the second, ``.flags[]`` giving ``false, true`` skipped the
    state; each is refused before the callable runs, nothing written."""
    calls: list[str] = []
    for name, program, values in (
        ("subject_expr", ".ticket_ids[]", '["t-5","t-6"]'),
        ("scope_expr", ".flags[]", "[false,true]"),
        ("subject_expr", '.ticket_ids[], "t-7"', '["t-5","t-6","t-7"]'),
    ):
        binding = Binding.parse({"state": "tickets", "subject_expr": ".ticket_ids[0]", name: program})

        @bound(states, binding, target=("agent", "helpdesk"))
        def answer(ticket_ids: list[str], flags: list[bool]) -> None:
            calls.append("ran")

        count = values.count(",") + 1
        expected = (
            rf"^binding of state 'tickets': {name} '{re.escape(program)}' gave {count} values "
            rf"\({re.escape(values)}\), not one \(the inputs it read: \.ticket_ids; \.flags\)$"
        )
        with pytest.raises(BindingRefused, match=expected):
            answer(["t-5", "t-6"], [False, True])
    assert calls == []
    assert [states.read("tickets", subject(k)) for k in ("t-5", "t-6", "t-7")] == [None, None, None]


def test_an_update_adapter_that_yields_nothing_or_fails_is_refused_naming_the_binding(
    states: StatesService,
) -> None:
    """An update's ``adapter`` runs after the callable: one that yields nothing or fails was a
    bare ``jq-error`` naming neither the binding nor the update; it is refused as the binding's
    other expressions are, and the run writes nothing (its own writes neither)."""
    for adapter, why in (
        ("select(.output.x) | {note: .output.reply}", "produced no output"),
        (".output.reply.x", "Cannot index"),
    ):
        binding = Binding.parse({
            "state": "tickets", "subject_expr": ".ticket_id",
            "updates": [{"template_jq": "add", "adapter": adapter}],
        })  # fmt: skip

        @bound(states, binding, target=("agent", "helpdesk"))
        def answer(ticket_id: str) -> dict[str, str]:
            current_run().unit.apply("tickets", current_run().subjects["tickets"], [
                {"op": "set", "path": ["status"], "value": "answered"}
            ])  # fmt: skip
            return {"reply": "done"}

        expected = (
            rf"^binding of state 'tickets': the adapter of update 'add' '{re.escape(adapter)}' gave no value: "
            rf".*{why}.*\(the inputs it read: \.input \{{ticket_id\}}; \.output \{{reply\}}\)$"
        )
        with pytest.raises(BindingRefused, match=expected):
            answer("t-9")
    assert states.read("tickets", subject("t-9")) is None


def test_full_subject_and_own_writes_commit_in_one_unit(states: StatesService) -> None:
    binding = Binding.parse(
        {
            "state": "tickets",
            "subject_expr": '{target_kind: "agent", target_name: .team, kind: "thread", key: .id}',
            "updates": [{"template_jq": "add", "adapter": '{note: "closed by \\(.input.id)"}'}],
        }
    )

    @bound(states, binding)
    def close(team: str, id: str) -> None:
        unit = current_run().unit
        unit.apply(
            "tickets",
            current_run().subjects["tickets"],
            [{"op": "set", "path": ["status"], "value": "closed"}],
        )

    close("ops", "t-4")
    record = states.read("tickets", subject("t-4", "ops"))
    assert record is not None and record["data"] == {"status": "closed", "book": {"notes": ["closed by t-4"]}}
    trail = states.writes("tickets", subject("t-4", "ops"))["items"]
    assert len(trail) == 1 and trail[0]["origin"]["consumer"] == close.__qualname__  # one write, one unit


def test_an_update_program_builds_on_the_runs_own_writes_and_on_writes_committed_meanwhile(
    states: StatesService,
) -> None:
    """A run's update programs run at its commit, over the record as its own staged writes and
    every write committed since leave it: an update that counts never loses a count."""
    states.put_template(
        "counter",
        {
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "template_jq": {
                "bump": {
                    "purpose": "update",
                    "jq": {"content": '[{"op": "set", "path": ["n"], "value": ((.n // 0) + 1)}]'},
                }
            },
        },
    )
    states.attach("tickets", "counter", {"path": ["counter"]})
    counting = Binding.parse(
        {
            "state": "tickets",
            "subject_expr": ".ticket_id",
            "updates": [{"template_jq": "bump", "adapter": "null"}],
        }
    )

    @bound(states, counting, target=("agent", "helpdesk"))
    def reset(ticket_id: str) -> None:
        current_run().unit.apply(
            "tickets",
            current_run().subjects["tickets"],
            [{"op": "set", "path": ["counter", "n"], "value": 5}],
        )

    reset("t-8")
    record = states.read("tickets", subject("t-8"))
    assert record is not None and record["data"] == {"counter": {"n": 6}}  # 5, then the update's +1

    # no adapter: a program that declares no params takes no input, whatever the run returns
    # (only one that declares params needs an adapter to fill them)
    @bound(
        states,
        Binding("tickets", ".ticket_id", updates=[{"template_jq": "bump"}]),
        target=("agent", "helpdesk"),
    )
    def answered(ticket_id: str) -> dict[str, str]:
        return {"reply": "done"}

    assert answered("t-8") == {"reply": "done"}
    record = states.read("tickets", subject("t-8"))
    assert record is not None and record["data"] == {"counter": {"n": 7}}

    @bound(states, counting, target=("agent", "helpdesk"))
    def count(ticket_id: str) -> None:
        return None

    assert run_threads(lambda i: [count("t-9") for _ in range(10)], 4) == []
    record = states.read("tickets", subject("t-9"))
    assert record is not None and record["data"] == {"counter": {"n": 40}}  # none lost


def test_a_bound_call_inside_a_bound_run_commits_with_it_or_not_at_all(states: StatesService) -> None:
    """A bound tool called by a bound node is a sub-tool of the node's dispatch: its own binding
    is a no-op (seed 004: a binding fires only on the outermost dispatch; its update ran, and
    the tool's note was written beside the node's), and its own writes commit in the outer
    run's one transaction, under its origin — none of it when the outer run raises, and only
    its own dropped when it raises and the outer run goes on."""
    noting = Binding.parse(
        {
            "state": "tickets",
            "subject_expr": ".ticket_id",
            "updates": [{"template_jq": "add", "adapter": "{note: .output}"}],
        }
    )

    @bound(states, noting, target=("agent", "helpdesk"))
    def tool(ticket_id: str, fail: bool = False) -> str:
        current_run().unit.apply(
            "tickets", current_run().subjects["tickets"], [{"op": "set", "path": ["status"], "value": "tool"}]
        )
        if fail:
            raise ValueError("the tool failed")
        return "from the tool"

    @bound(states, noting, target=("agent", "helpdesk"))
    def node(ticket_id: str, fail: bool = False, tool_fails: bool = False) -> str:
        with contextlib.suppress(ValueError):
            tool(ticket_id, tool_fails)
        if fail:
            raise RuntimeError("the node failed")
        return "from the node"

    with pytest.raises(RuntimeError):
        node("t-10", fail=True)
    assert states.read("tickets", subject("t-10")) is None  # the tool's writes too

    node("t-11", tool_fails=True)
    record = states.read("tickets", subject("t-11"))
    assert record is not None and record["data"] == {"book": {"notes": ["from the node"]}}

    node("t-12")
    record = states.read("tickets", subject("t-12"))
    assert record is not None and record["data"] == {"status": "tool", "book": {"notes": ["from the node"]}}
    trail = states.writes("tickets", subject("t-12"))["items"]
    assert len(trail) == 1 and trail[0]["origin"]["consumer"] == node.__qualname__  # one commit: the node's


def test_a_failing_run_writes_nothing(states: StatesService) -> None:
    with (
        pytest.raises(RuntimeError),
        run(states, [BINDING], {"ticket_id": "t-5", "channel": "support"}, target=("agent", "helpdesk")) as r,
    ):
        r.unit.apply("tickets", r.subjects["tickets"], [{"op": "set", "path": ["status"], "value": "open"}])
        raise RuntimeError("the model call failed")
    assert states.read("tickets", subject("t-5")) is None


def test_async_callable_and_langgraph_node(states: StatesService) -> None:
    @bound(states, BINDING, target=("agent", "helpdesk"))
    async def answer(ticket_id: str, channel: str, notes: list[str] | None = None) -> dict[str, str]:
        await asyncio.sleep(0)
        return {"reply": f"async {len(notes or [])}"}

    assert asyncio.run(answer("t-6", "support")) == {"reply": "async 0"}

    from langgraph.graph import START, StateGraph

    class Chat(TypedDict, total=False):
        thread: str
        notes: list[str]
        reply: str

    node_binding = Binding(
        "tickets",
        ".state.thread",
        inputs={"state.notes": {"template_jq": "recent"}},  # into the node's state argument
        updates=[{"template_jq": "add", "adapter": "{note: .output.reply}"}],
    )

    @bound(states, node_binding, target=("agent", "helpdesk"))
    def respond(state: Chat) -> Chat:
        return {"reply": f"seen {len(state.get('notes', []))}"}

    graph = StateGraph(Chat).add_node("respond", respond).add_edge(START, "respond").compile()
    assert graph.invoke({"thread": "t-6"})["reply"] == "seen 1"
    record = states.read("tickets", subject("t-6"))
    assert record is not None and record["data"]["book"]["notes"] == ["async 0", "seen 1"]


def test_a_node_bound_on_its_config_and_a_pydantic_state_sees_their_json_parts(states: StatesService) -> None:
    """jq sees every input's JSON form: a LangGraph ``config`` (whose callbacks and internals
    have none) by its ``configurable.thread_id``, a pydantic state by its fields."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import START, StateGraph
    from pydantic import BaseModel

    class Chat(BaseModel):
        thread: str
        reply: str = ""

    by_config = Binding(
        "tickets",
        ".config.configurable.thread_id",
        updates=[{"template_jq": "add", "adapter": '{note: "cfg"}'}],
    )
    by_state = Binding(
        "tickets", ".state.thread", updates=[{"template_jq": "add", "adapter": '{note: "st"}'}]
    )

    @bound(states, by_config, by_state, target=("agent", "helpdesk"))
    def respond(state: Chat, config: RunnableConfig) -> dict[str, str]:
        return {"reply": config["configurable"]["thread_id"]}

    graph = StateGraph(Chat).add_node("respond", respond).add_edge(START, "respond").compile()
    assert graph.invoke(Chat(thread="t-8"), {"configurable": {"thread_id": "chat-1"}})["reply"] == "chat-1"
    by_thread = states.read("tickets", subject("chat-1"))
    assert by_thread is not None and by_thread["data"]["book"]["notes"] == ["cfg"]
    by_field = states.read("tickets", subject("t-8"))
    assert by_field is not None and by_field["data"]["book"]["notes"] == ["st"]

    class Opaque:
        pass

    @bound(states, Binding("tickets", ".thing.id"), target=("agent", "helpdesk"))
    def nothing(thing: Any, other: Any) -> None:
        raise AssertionError("not run")

    with pytest.raises(
        BindingRefused,
        match=r"got null from '\.thing\.id' \(the inputs it read: \.thing \{name\}; \.other \{\}\)",
    ):
        nothing({"name": "x", "hook": Opaque()}, {"hook": Opaque()})


def test_a_dotted_injection_sets_one_field_of_a_dataclass_or_pydantic_state(states: StatesService) -> None:
    import dataclasses

    from pydantic import BaseModel

    states.replace("tickets", subject("t-9"), {"book": {"notes": ["one", "two"]}})

    @dataclasses.dataclass(frozen=True)
    class Plain:
        thread: str
        notes: tuple[str, ...] = ()
        answer: str = "kept"

    class Model(BaseModel):
        thread: str
        notes: list[str] = []
        answer: str = "kept"

    binding = Binding("tickets", ".state.thread", inputs={"state.notes": {"template_jq": "recent"}})
    seen: list[Any] = []

    @bound(states, binding, target=("agent", "helpdesk"))
    def node(state: Any) -> None:
        seen.append(state)

    original = Plain("t-9")
    node(original)
    node(Model(thread="t-9"))
    assert seen == [Plain("t-9", ["one", "two"], "kept"), Model(thread="t-9", notes=["one", "two"])]  # type: ignore[arg-type]
    assert original.notes == ()  # a copy was set, not the caller's object

    @bound(
        states,
        Binding("tickets", ".state.thread", inputs={"state.nope": {"template_jq": "recent"}}),
        target=("agent", "helpdesk"),
    )
    def missing(state: Any) -> None:
        raise AssertionError("not run")

    with pytest.raises(BindingRefused, match="Plain has no field 'nope'"):
        missing(Plain("t-9"))

    @bound(
        states,
        Binding("tickets", ".id", inputs={"state.notes": {"template_jq": "recent"}}),
        target=("agent", "helpdesk"),
    )
    def scalar(id: str, state: Any) -> None:
        raise AssertionError("not run")

    with pytest.raises(BindingRefused, match="is a str, which takes no field"):
        scalar("t-9", "text")
    assert len(states.writes("tickets", subject("t-9"))["items"]) == 1  # nothing written by the refusals


NOT_AN_OBJECT: list[Any] = [["notes"], "notes", [], "", 0, False]
NOT_A_LIST: list[Any] = ["add", {}, "", 0, False]


@pytest.mark.parametrize(
    ("member", "value"), [*(("inputs", v) for v in NOT_AN_OBJECT), *(("updates", v) for v in NOT_A_LIST)]
)
def test_a_binding_whose_inputs_are_not_an_object_or_updates_not_a_list_is_invalid(
    member: str, value: Any
) -> None:
    # an empty or false value of another type is not "none" (it was taken as none)
    expected = "inputs is an object" if member == "inputs" else "updates is a list"
    with pytest.raises(BindingInvalid, match=expected):
        Binding.parse({"state": "tickets", "subject_expr": ".k", member: value})
    none = Binding.parse({"state": "tickets", "subject_expr": ".k", member: None})
    assert none == Binding.parse({"state": "tickets", "subject_expr": ".k"})
    assert none.inputs == {} and none.updates == ()


def test_a_runs_update_programs_are_named_in_its_origin_meta(states: StatesService) -> None:
    """As ``template_jq_update`` names its program in the write's origin, so does a bound run
    (its updates commit in the run's one transaction)."""
    states.template_jq_update("tickets", subject("t-10"), "add", {"note": "direct"})

    @bound(
        states,
        Binding("tickets", ".k", updates=[{"template_jq": "add", "adapter": "{note: .output}"}]),
        target=("agent", "helpdesk"),
    )
    def answer(k: str) -> str:
        return "bound"

    answer("t-10")
    trail = states.writes("tickets", subject("t-10"))["items"]
    assert [w["origin"]["meta"] for w in trail] == [{"template_jq": "add"}] * 2
    assert trail[0]["origin"]["consumer"] == answer.__qualname__ and trail[0]["origin"]["run_id"]


async def _declared_async(backend: str) -> tuple[Any, StatesService]:
    """A store opened with ``open_store_async`` (PostgreSQL's async pool) and its service, the
    tickets state declared with the notebook attached, as the ``states`` fixture has them."""
    from stateflow.aio import call, open_store_async

    store = await open_store_async(backend, auto_migrate=True)
    service = StatesService(store)
    await call(store, service.put_template, "notebook", NOTEBOOK)
    await call(store, service.declare, "tickets", {
        "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
        "subject_kinds": ["thread"], "default_subject_kind": "thread",
    })  # fmt: skip
    await call(store, service.attach, "tickets", "notebook", {"path": ["book"]})
    return store, service


def test_an_async_callables_own_writes_join_its_unit_on_an_async_store(backend: str) -> None:
    """On every store — PostgreSQL's async pool too (``open_store_async``), whose reads cannot
    wait on the loop's thread — an async callable stages its own writes with ``await
    unit.aapply(...)``; the sync ``apply`` there is refused saying so, and nothing is written."""
    from stateflow.aio import call

    async def main() -> None:
        store, service = await _declared_async(backend)
        try:
            binding = Binding("tickets", ".k", updates=[{"template_jq": "add", "adapter": "{note: .output}"}])

            @bound(service, binding, target=("agent", "helpdesk"))
            async def node(k: str, sync: bool = False) -> str:
                unit = current_run().unit
                ops = [{"op": "set", "path": ["status"], "value": "seen"}]
                if sync:
                    unit.apply("tickets", current_run().subjects["tickets"], ops)
                else:
                    staged = await unit.aapply("tickets", current_run().subjects["tickets"], ops)
                    assert staged.data == {"status": "seen"}
                    read = await unit.aread("tickets", current_run().subjects["tickets"])
                    assert read is not None and read["staged"] == 1
                return "done"

            assert await node("t-11") == "done"
            record = await call(store, service.read, "tickets", subject("t-11"))
            assert record is not None and record["data"] == {"status": "seen", "book": {"notes": ["done"]}}
            assert getattr(store, "runs_on_loop", False) is backend.startswith("postgres")
            if backend.startswith("postgres"):
                with pytest.raises(InvalidInput, match=r"await unit\.aapply"):
                    await node("t-12", sync=True)
                assert await call(store, service.read, "tickets", subject("t-12")) is None
        finally:
            await call(store, service.close)
            await call(store, store.close)

    asyncio.run(main())


def test_an_async_close_waits_for_bound_runs_committing_their_updates(backend: str) -> None:
    """Bound async runs whose updates are on their way when the store is closed: the close waits
    for them (they ran on worker threads the close did not know of, and on SQLite it closed the
    store under them), and each run's update is there for a store opened afterwards."""
    import stateflow.aio

    async def main() -> None:
        store = await stateflow.aio.open_store_async(backend, auto_migrate=True)
        service = StatesService(store)
        await stateflow.aio.call(store, service.put_template, "notebook", NOTEBOOK)
        await stateflow.aio.call(store, service.declare, "tickets", {
            "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
            "subject_kinds": ["thread"], "default_subject_kind": "thread",
        })  # fmt: skip
        await stateflow.aio.call(store, service.attach, "tickets", "notebook", {"path": ["book"]})
        binding = Binding("tickets", ".k", updates=[{"template_jq": "add", "adapter": "{note: .output}"}])
        gate, returned = asyncio.Event(), []

        @bound(service, binding, target=("agent", "helpdesk"))
        async def node(k: str) -> str:
            await gate.wait()
            returned.append(k)
            return f"note {k}"

        runs = [asyncio.create_task(node(f"c{i}")) for i in range(12)]
        while not gate.is_set():
            await asyncio.sleep(0)
            if all(getattr(t, "_fut_waiter", None) is not None for t in runs):
                gate.set()
        while len(returned) < len(runs):  # each run's update handed on (in the step it returned)
            await asyncio.sleep(0)

        def closing() -> None:
            service.close()
            store.close()

        await stateflow.aio.close(store, closing)
        assert await asyncio.gather(*runs, return_exceptions=True) == [f"note c{i}" for i in range(12)]

    asyncio.run(main())
    with open_store(backend, auto_migrate=True) as again:
        service = StatesService(again)
        for i in range(12):
            record = service.read("tickets", subject(f"c{i}"))
            assert record is not None and record["data"]["book"]["notes"] == [f"note c{i}"]
        service.close()


def test_an_object_whose_call_is_async_runs_bound_and_commits_after_its_body(states: StatesService) -> None:
    """A tool or node object with an ``async def __call__`` (or a partial of one) is bound as an
    async callable: nothing commits before its body has run, and its own writes land with the
    updates. A sync callable that hands back an awaitable is refused, nothing written."""

    class Tool:
        async def __call__(
            self, ticket_id: str, channel: str, notes: list[str] | None = None
        ) -> dict[str, str]:
            await asyncio.sleep(0)
            run_ = current_run()
            run_.unit.apply(
                "tickets", run_.subjects["tickets"], [{"op": "set", "path": ["status"], "value": "body"}]
            )
            return {"reply": "from the body"}

    tool = bound(states, BINDING, target=("agent", "helpdesk"))(Tool())
    partial = bound(states, BINDING, target=("agent", "helpdesk"))(
        functools.partial(Tool(), channel="support")
    )

    async def main() -> None:
        pending = tool("t-20", "support")
        assert states.read("tickets", subject("t-20")) is None  # (not run, not committed)
        assert await pending == {"reply": "from the body"}
        assert await partial("t-21") == {"reply": "from the body"}

    asyncio.run(main())
    for key in ("t-20", "t-21"):
        record = states.read("tickets", subject(key))
        assert record is not None
        assert record["data"]["status"] == "body" and record["data"]["book"]["notes"] == ["from the body"]

    async def later() -> dict[str, str]:
        return {"reply": "never"}

    hands_back = bound(states, BINDING, target=("agent", "helpdesk"))(
        lambda ticket_id, channel, notes=None: later()
    )
    with pytest.raises(BindingInvalid, match="returned an awaitable"):
        hands_back("t-22", "support")  # type: ignore[unused-coroutine]
    assert states.read("tickets", subject("t-22")) is None


def test_a_bare_key_takes_the_contexts_target_unless_one_is_given(states: StatesService) -> None:
    """A bare key's target is the run's ambient one: the context's, where it names one; an
    explicit ``target`` wins; with neither, ``DEFAULT_TARGET``. Half a target is refused."""
    context = DoorContext(door="conversation", actor="u1", target_kind="agent", target_name="desk-2")
    keyed = Binding("tickets", ".ticket_id", updates=[{"template_jq": "add", "adapter": "{note: .output}"}])

    @bound(states, keyed, context=context)
    def ambient(ticket_id: str) -> str:
        return "ambient"

    @bound(states, keyed, context=context, target=("agent", "helpdesk"))
    def explicit(ticket_id: str) -> str:
        return "explicit"

    @bound(states, keyed)
    def neither(ticket_id: str) -> str:
        return "neither"

    ambient("t-30")
    explicit("t-30")
    neither("t-30")
    for name, note in (("desk-2", "ambient"), ("helpdesk", "explicit"), (DEFAULT_TARGET[1], "neither")):
        record = states.read("tickets", subject("t-30", name))
        assert record is not None and record["data"]["book"]["notes"] == [note]
    trail = states.writes("tickets", subject("t-30", "desk-2"))["items"]
    assert trail[0]["origin"]["door"] == "conversation" and trail[0]["origin"]["actor"] == "u1"
    with run(states, [keyed], {"ticket_id": "t-31"}, context=context) as r:
        assert r.subjects["tickets"] == subject("t-31", "desk-2")
        r.output = "in a run"
    with pytest.raises(BindingInvalid, match="give both, or neither"):
        bound(states, keyed, context=DoorContext(target_kind="agent"))


def test_an_injected_argument_may_be_left_out_of_the_call(states: StatesService) -> None:
    """An argument a binding injects needs no default: the run fills it. Any other argument
    missing is the call's own TypeError, before the run begins (nothing read or written)."""

    @bound(states, BINDING, target=("agent", "helpdesk"))
    def positional(ticket_id: str, channel: str, notes: list[str]) -> dict[str, str]:
        return {"reply": f"{len(notes)} notes"}

    @bound(states, BINDING, target=("agent", "helpdesk"))
    def keyword_only(ticket_id: str, channel: str, *, notes: list[str]) -> dict[str, str]:
        return {"reply": f"{len(notes)} notes"}

    assert positional("t-40", "support") == {"reply": "0 notes"}  # type: ignore[call-arg]
    assert keyword_only("t-40", channel="support") == {"reply": "1 notes"}  # type: ignore[call-arg]
    assert positional("t-40", "support", ["given"]) == {"reply": "2 notes"}  # (replaced by the injection)
    with pytest.raises(TypeError, match="channel"):
        positional("t-41")  # type: ignore[call-arg]
    assert states.read("tickets", subject("t-41")) is None


def test_a_refused_subject_names_the_expression_and_the_inputs_it_read(states: StatesService) -> None:
    def make(binding: Binding) -> Any:
        return bound(states, binding, target=("agent", "helpdesk"))(lambda ticket_id, channel="support": "x")

    with pytest.raises(
        BindingRefused, match=r"empty key from '\.ticket_id' \(the inputs it read: \.ticket_id"
    ):
        make(Binding("tickets", ".ticket_id"))(" ")
    malformed = '{target_kind: "agent", kind: "thread", key: .ticket_id}'
    with pytest.raises(
        BindingRefused, match=r"from subject_expr .*target_kind.* \(the inputs it read: \.ticket_id"
    ):
        make(Binding("tickets", malformed))("t-50")
    assert states.read("tickets", subject("t-50")) is None


def test_a_generator_is_refused_as_a_bound_callable_and_nothing_is_written(states: StatesService) -> None:
    """A generator's body runs as it is iterated — after a run around the call would have
    committed, and outside it (its updates written for a body that had not run, its own writes
    refused as "not inside a bound run"). A generator function, async or not, is refused when
    bound; a callable that returns one, when called, with nothing written."""
    binding = Binding("tickets", ".k", updates=[{"template_jq": "add", "adapter": "{note: .output}"}])

    def numbers(k: str) -> Any:
        yield k

    async def replies(k: str) -> Any:
        yield k

    class Streamer:
        async def __call__(self, k: str) -> Any:
            yield k

    for made in (numbers, replies, Streamer(), functools.partial(replies)):
        with pytest.raises(BindingInvalid, match="is a generator: its body runs as it is iterated"):
            bound(states, binding, target=("agent", "helpdesk"))(made)

    @bound(states, binding, target=("agent", "helpdesk"))
    def hands_back(k: str) -> Any:
        return numbers(k) if k == "g1" else replies(k)

    for key in ("g1", "g2"):
        with pytest.raises(BindingInvalid, match=r"returned a generator.*nothing was written"):
            hands_back(key)
        assert states.read("tickets", subject(key)) is None


def test_arun_binds_a_block_of_async_code_on_either_store(backend: str) -> None:
    """``async with arun(…)`` is ``run`` for async code: on PostgreSQL's async pool too, where
    ``run`` cannot resolve the bindings on the loop's thread. Its own writes and the updates
    commit together after the block; a block that raises writes nothing."""
    from stateflow.aio import call
    from stateflow.bindings import arun

    async def main() -> None:
        store, service = await _declared_async(backend)
        try:
            binding = Binding("tickets", ".k", updates=[{"template_jq": "add", "adapter": "{note: .output}"}])
            async with arun(
                service, [binding], {"k": "a1"}, target=("agent", "helpdesk"), consumer="block"
            ) as r:
                await r.unit.aapply(
                    "tickets", r.subjects["tickets"], [{"op": "set", "path": ["status"], "value": "seen"}]
                )
                r.output = "noted"
            record = await call(store, service.read, "tickets", subject("a1"))
            assert record is not None and record["data"] == {"status": "seen", "book": {"notes": ["noted"]}}
            trail = await call(store, service.writes, "tickets", subject("a1"))
            assert trail["items"][0]["origin"]["consumer"] == "block"
            with pytest.raises(RuntimeError, match="in the block"):
                async with arun(service, [binding], {"k": "a2"}, target=("agent", "helpdesk")) as r:
                    await r.unit.aapply(
                        "tickets", r.subjects["tickets"], [{"op": "set", "path": ["status"], "value": "x"}]
                    )
                    r.output = "never"
                    raise RuntimeError("in the block")
            assert await call(store, service.read, "tickets", subject("a2")) is None
        finally:
            await call(store, service.close)
            await call(store, store.close)

    asyncio.run(main())


def test_a_caller_cancelled_while_its_run_commits_leaves_the_commit_and_its_deferred_calls_whole(
    tmp_path: Any,
) -> None:
    """A bound async run whose caller is cancelled while the unit commits (here: waiting for
    another writer's lock) stops its caller alone: the commit runs to its end on its worker
    thread, as every SQLite call does, and the calls ``unit.defer`` queued run after it (the
    cancelled caller discarded the unit under the commit: the write landed, its deferred calls
    did not)."""
    import sqlite3
    import threading
    import time

    import stateflow.aio

    path = str(tmp_path / "cancelled.db")
    store = open_store(path, auto_migrate=True)
    service = StatesService(store)
    service.declare("tickets", {
        "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
        "subject_kinds": ["thread"], "default_subject_kind": "thread",
    })  # fmt: skip
    notified: list[str] = []

    @bound(service, Binding("tickets", ".k"), target=("agent", "helpdesk"))
    async def close_ticket(k: str) -> str:
        unit = current_run().unit
        await unit.aapply(
            "tickets",
            current_run().subjects["tickets"],
            [{"op": "set", "path": ["status"], "value": "closed"}],
        )
        unit.defer(lambda: notified.append(k))
        body_done.set()  # (no await from here to the commit's: the caller resumes once it waits)
        return "ok"

    taken, release = threading.Event(), threading.Event()
    body_done = asyncio.Event()

    def another_writer() -> None:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        taken.set()
        release.wait(30)
        time.sleep(0.2)  # (the cancel lands while the commit waits)
        other.execute("COMMIT")
        other.close()

    async def main() -> None:
        holder = threading.Thread(target=another_writer)
        holder.start()
        await asyncio.to_thread(taken.wait, 30)
        task = asyncio.create_task(close_ticket("t-1"))
        await body_done.wait()  # (the body ran; the commit waits for the other writer)
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

        def closing() -> None:
            service.close()
            store.close()

        await stateflow.aio.close(store, closing)  # (waits for the commit in flight)
        holder.join()

    asyncio.run(main())
    again = open_store(path)
    try:
        record = StatesService(again).read("tickets", subject("t-1"))
        assert record is not None and record["data"] == {"status": "closed"}
        assert notified == ["t-1"]
    finally:
        again.close()


def test_an_object_python_calls_a_coroutine_function_is_bound_as_async(states: StatesService) -> None:
    """An object ``inspect.iscoroutinefunction`` says is one — an ``AsyncMock`` standing in for
    a tool in a caller's tests — is bound as async, as it was before the check looked at its
    class's ``__call__`` only (then it was refused as a sync callable returning an awaitable)."""
    from unittest.mock import AsyncMock

    tool = AsyncMock(return_value="done")
    bound_tool = bound(states, Binding("tickets", ".kwargs.k"), target=("agent", "helpdesk"))(tool)

    async def main() -> Any:
        return await bound_tool(k="m1")

    assert asyncio.run(main()) == "done"
    tool.assert_awaited_once()
