"""``StateflowSaver``'s thread maintenance — prune, delete_for_runs, delete_thread, copy_thread —
on threads of a thousand checkpoints and more, each in one transaction, and around LangGraph's
``DeltaChannel``; on both backends."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import GetOp, Item, PutOp

from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import open_store


def _thread(saver: StateflowSaver, thread: str, count: int, run_id: str = "run-1") -> Any:
    """``count`` checkpoints of one thread: channel ``a`` written by the first only (the others
    keep it in that one's record), ``n`` by each; returns the newest's config."""
    head: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for n in range(count):
        checkpoint = generate_checkpoint(
            channel_values={"a": "first", "n": n}, channel_versions={"a": 1, "n": n + 1}
        )
        new: dict[str, str | int | float] = {"a": 1, "n": n + 1} if n == 0 else {"n": n + 1}
        head = saver.put(head, checkpoint, generate_metadata(step=n, run_id=run_id), new)
    return head


def _seqs(
    states: StatesService, saver: StateflowSaver, keys: list[str], kind: str = "checkpoint"
) -> set[int]:
    """The seqs of the newest audit rows of these records."""
    return {
        states.writes(saver.records.state, saver.records.subject(kind, key), limit=1)["items"][0]["seq"]
        for key in keys
    }


def test_a_thread_of_1100_checkpoints_copies_prunes_and_deletes_from_a_fresh_saver(backend: str) -> None:
    """Every read and erase of a thread's records names them all: on SQLite a statement naming
    a thousand documents was refused ("Expression tree is too large"), nothing pruned."""
    store = open_store(backend, auto_migrate=True)
    try:
        _thread(StateflowSaver(StatesService(store)), "A", 1100)
    finally:
        store.close()
    store = open_store(backend, auto_migrate=True)  # a maintenance job: nothing cached
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        saver.copy_thread("A", "B")
        saver.prune(["A"])
        kept = list(saver.list({"configurable": {"thread_id": "A"}}))
        assert len(kept) == 1 and kept[0].checkpoint["channel_values"] == {"a": "first", "n": 1099}
        copied = list(saver.list({"configurable": {"thread_id": "B"}}))
        assert len(copied) == 1100 and copied[-1].checkpoint["channel_values"] == {"a": "first", "n": 0}
        keys = [saver._key("B", "", t.config["configurable"]["checkpoint_id"]) for t in copied]
        saver.delete_thread("B")
        assert list(saver.list({"configurable": {"thread_id": "B"}})) == []
        assert len(_seqs(states, saver, keys)) == 1  # one transaction erased them all
    finally:
        store.close()


def test_a_store_batch_of_1100_puts_and_gets(backend: str) -> None:
    """A batch's puts are one transaction whatever their number; its gets one read. (SQLite: a
    statement naming a thousand documents was refused; PostgreSQL: the commit function built
    each new document's change from all the batch's member rows, past the statement timeout.)"""
    store = StateflowStore.open(backend)
    try:
        store.batch([PutOp(("ns",), f"k{i}", {"i": i}) for i in range(1100)])
        assert len(store.search(("ns",), limit=5000)) == 1100
    finally:
        store.close()
    store = StateflowStore.open(backend)
    try:
        found = store.batch([GetOp(("ns",), f"k{i}") for i in range(1100)])
        assert [item.value["i"] for item in found if isinstance(item, Item)] == list(range(1100))
    finally:
        store.close()


def test_delete_thread_prune_and_copy_are_each_one_transaction(backend: str) -> None:
    """A maintenance call killed partway leaves the thread as it was or done with: a delete
    erases every record in one transaction (it erased one a transaction, newest first, and a
    delete cut short left the thread at an older checkpoint), a copy writes the whole target in
    one (a copy cut short left newest checkpoints keeping channels in ones not copied yet), a
    prune rewrites the kept checkpoint in one and erases the others in one more."""
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        head = _thread(saver, "t", 250)
        saver.put_writes(head, [("n", 7)], "task-1")
        keys = [
            saver._key("t", "", c.config["configurable"]["checkpoint_id"])
            for c in saver.list({"configurable": {"thread_id": "t"}})
        ]
        saver.copy_thread("t", "u")
        copied = [k.replace("t/", "u/", 1) for k in keys]
        assert len(_seqs(states, saver, copied)) == 1
        assert _seqs(states, saver, copied[:1], "writes") == _seqs(states, saver, copied)
        target = saver.get_tuple({"configurable": {"thread_id": "u"}})
        assert target is not None and target.checkpoint["channel_values"] == {"a": "first", "n": 249}
        assert target.pending_writes == [("task-1", "n", 7)]
        saver.prune(["u"])
        pruned = saver.get_tuple({"configurable": {"thread_id": "u"}})
        assert pruned is not None and pruned.checkpoint["channel_values"] == {"a": "first", "n": 249}
        assert len(_seqs(states, saver, copied[1:])) == 1
        saver.delete_thread("t")
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
        assert len(_seqs(states, saver, keys) | _seqs(states, saver, keys[:1], "writes")) == 1
    finally:
        store.close()


def _append(state: list[Any] | None, writes: list[list[Any]]) -> list[Any]:
    out = list(state or [])
    for w in writes:
        out.extend(w)
    return out


class _Logged(TypedDict):
    log: Annotated[list[Any], DeltaChannel(_append)]
    n: int


def test_a_deltachannel_thread_is_refused_by_prune_and_delete_for_runs(backend: str) -> None:
    """A ``DeltaChannel`` keeps only a sentinel in most checkpoints and LangGraph rebuilds it
    from the ancestors' writes: trimming those ancestors emptied it silently. The saver refuses,
    as LangGraph's PostgresSaver refuses keep_latest on such threads, and writes nothing; the
    thread can still be deleted whole."""
    saver = StateflowSaver.open(backend)
    try:
        graph = (
            StateGraph(_Logged)
            .add_node("step", lambda s: {"log": [s["n"]], "n": s["n"] + 1})
            .add_edge(START, "step")
            .add_conditional_edges("step", lambda s: END if s["n"] >= 5 else "step")
            .compile(checkpointer=saver)
        )
        config: Any = {"configurable": {"thread_id": "t"}}
        graph.invoke({"log": [], "n": 0}, {"configurable": {"thread_id": "t", "run_id": "run-1"}})
        graph.invoke({"log": [], "n": 3}, {"configurable": {"thread_id": "t", "run_id": "run-2"}})
        whole = graph.get_state(config).values
        assert whole == {"log": [0, 1, 2, 3, 4, 3, 4], "n": 5}
        count = len(list(saver.list(config)))
        with pytest.raises(NotImplementedError, match="DeltaChannel"):
            saver.prune(["t"])
        with pytest.raises(NotImplementedError, match="DeltaChannel"):
            saver.delete_for_runs(["run-1"])
        assert graph.get_state(config).values == whole and len(list(saver.list(config))) == count
        saver.prune(["t"], strategy="delete")
        assert list(saver.list(config)) == []
    finally:
        saver.close()


class _Two(TypedDict):
    n: int
    other: str


def _two_step(saver: StateflowSaver) -> Any:
    return (
        StateGraph(_Two)
        .add_node("a", lambda s: {"n": s["n"] + 1})
        .add_node("b", lambda s: {"n": s["n"] + 1})
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(checkpointer=saver)
    )


@pytest.mark.parametrize("trim", ["prune", "delete_for_runs"])
def test_a_thread_trimmed_by_another_process_goes_on_whole(backend: str, trim: str) -> None:
    """Two processes on one store (each its own store, as another process has): one runs the
    threads, the other trims them. The running one had learnt where the parent checkpoint keeps
    each value (channel ``other``, written once at the start, in the thread's first
    checkpoint): its next checkpoint kept ``other`` there, in a record the trim had erased, and
    the thread could no longer be read (CorruptStore). And where the other process writes the
    next checkpoint, keeping ``other`` in the kept one (rewritten with its values inline), the
    running one's memory of that record, without them, answered that it was lost."""
    with StateflowSaver.open(backend) as runner, StateflowSaver.open(backend) as keeper:
        graph = _two_step(runner)
        for thread_id in ("t", "u"):
            graph.invoke(
                {"n": 0, "other": "keep"}, {"configurable": {"thread_id": thread_id, "run_id": "r1"}}
            )
            if trim == "delete_for_runs":
                graph.invoke({"n": 5}, {"configurable": {"thread_id": thread_id, "run_id": "r2"}})
        if trim == "prune":
            keeper.prune(["t", "u"])
        else:
            keeper.delete_for_runs(["r1"])
        _two_step(keeper).invoke({"n": 10}, {"configurable": {"thread_id": "u", "run_id": "r3"}})
        assert graph.get_state({"configurable": {"thread_id": "u"}}).values == {"n": 12, "other": "keep"}
        graph.invoke({"n": 10}, {"configurable": {"thread_id": "t", "run_id": "r3"}})
        for thread_id in ("t", "u"):
            thread: Any = {"configurable": {"thread_id": thread_id}}
            assert graph.get_state(thread).values == {"n": 12, "other": "keep"}
            graph.invoke({"n": 20}, {"configurable": {"thread_id": thread_id, "run_id": "r4"}})
            assert graph.get_state(thread).values == {"n": 22, "other": "keep"}
            with StateflowSaver.open(backend) as fresh:
                assert _two_step(fresh).get_state(thread).values == {"n": 22, "other": "keep"}
                for tup in fresh.list(thread):  # every checkpoint reads whole
                    assert tup.checkpoint["channel_values"]["other"] == "keep"


def test_a_single_thread_or_run_id_given_as_a_string_is_refused_and_nothing_changes(backend: str) -> None:
    """``prune("ab")`` would prune threads ``a`` and ``b`` (a string is a sequence of its
    characters) and leave ``ab`` alone; it is refused as LangGraph's ``PostgresSaver`` refuses
    it, and so is ``delete_for_runs("run")``."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        for thread in ("a", "b", "ab"):
            _thread(saver, thread, 2, run_id="r")
        for strategy in ("delete", "keep_latest"):
            with pytest.raises(TypeError, match="thread_ids must be a sequence of thread IDs, not a str"):
                saver.prune("ab", strategy=strategy)
        with pytest.raises(TypeError, match="run_ids must be a sequence of run IDs, not a str"):
            saver.delete_for_runs("r")
        for thread in ("a", "b", "ab"):
            assert len(list(saver.list({"configurable": {"thread_id": thread}}))) == 2
        saver.prune(["ab"], strategy="delete")
        assert [len(list(saver.list({"configurable": {"thread_id": t}}))) for t in ("a", "b", "ab")] == [
            2,
            2,
            0,
        ]
    finally:
        store.close()


def test_deleting_a_thread_erases_the_writes_whose_checkpoint_was_never_put(backend: str) -> None:
    """A run saves a step's writes in the background: they can be stored and the checkpoint's
    put then fail or never come (a value the serializer refuses, a process stopped). Such a
    writes record has no checkpoint, and ``delete_thread`` / ``prune(strategy="delete")`` erase
    it with the rest of the thread (what a user deletes for privacy is gone); ``keep_latest``
    keeps it, as LangGraph's own prune does (its checkpoint may still be on its way)."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        records = saver.records

        def writes_left(thread: str) -> list[str]:
            return [records.key_of(k) for k in records.scan("writes", f"{thread}/")]

        for thread in ("t1", "t2", "t3"):
            head = _thread(saver, thread, 2)
            never_put: RunnableConfig = {
                "configurable": {**head["configurable"], "checkpoint_id": f"never-put-{thread}"}
            }
            saver.put_writes(never_put, [("n", "private text of the user")], "task-1")
            saver.put_writes(head, [("n", "on the head")], "task-2")
        assert all(len(writes_left(t)) == 2 for t in ("t1", "t2", "t3"))
        saver.copy_thread("t1", "t4")  # (the thread's records, every one: that one too)
        assert len(writes_left("t4")) == 2
        saver.delete_thread("t1")
        saver.prune(["t2"], strategy="delete")
        saver.prune(["t3"], strategy="keep_latest")
        assert writes_left("t1") == writes_left("t2") == []
        assert len(writes_left("t3")) == 2
        fresh = StateflowSaver(StatesService(store))
        assert list(fresh.list({"configurable": {"thread_id": "t1"}})) == []
        assert list(fresh.list({"configurable": {"thread_id": "t2"}})) == []
    finally:
        store.close()


def test_a_checkpoint_kept_whose_parent_goes_is_left_with_no_parent(backend: str) -> None:
    """``prune(keep_latest)`` and ``delete_for_runs`` keep checkpoints whose parent they erase:
    their ``parent_config`` would name a checkpoint that is gone (``get_tuple`` of it: None).
    They are left with no parent, as LangGraph's ``PostgresSaver.prune`` leaves them; a kept
    checkpoint whose parent stays keeps it."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        _thread(saver, "p", 3)
        saver.prune(["p"], strategy="keep_latest")
        (kept,) = list(saver.list({"configurable": {"thread_id": "p"}}))
        assert kept.parent_config is None
        assert kept.checkpoint["channel_values"] == {"a": "first", "n": 2}
        head = _thread(saver, "q", 2, run_id="old")
        for n in (2, 3):  # (two more by another run: the first's parent is the old run's head)
            checkpoint = generate_checkpoint(
                channel_values={"a": "first", "n": n}, channel_versions={"a": 1, "n": n + 1}
            )
            head = saver.put(head, checkpoint, generate_metadata(step=n, run_id="new"), {"n": n + 1})
        saver.delete_for_runs(["old"])
        for reader in (saver, StateflowSaver(StatesService(store))):
            newest, oldest = list(reader.list({"configurable": {"thread_id": "q"}}))
            assert oldest.parent_config is None
            assert newest.parent_config is not None
            assert (
                newest.parent_config["configurable"]["checkpoint_id"]
                == oldest.config["configurable"]["checkpoint_id"]
            )
            assert [t.checkpoint["channel_values"]["n"] for t in (newest, oldest)] == [3, 2]
            assert oldest.checkpoint["channel_values"]["a"] == "first"
    finally:
        store.close()


@pytest.mark.parametrize("trim", ["prune", "delete_for_runs"])
def test_a_checkpoint_put_while_another_process_trims_the_thread_reads_whole(
    backend: str, trim: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trim lists the thread, rewrites the kept checkpoints whose values live in ones going,
    then erases those. A checkpoint another process puts in between — a child of the newest,
    keeping an unchanged channel where its parent keeps it, in a checkpoint going — passed its
    put's check (its parent was not rewritten yet) and was left pointing at an erased record:
    every later read of the thread failed. The trim lists again and rewrites such checkpoints
    too, for ``prune(keep_latest)`` and ``delete_for_runs`` alike."""
    writer_store, trimmer_store = open_store(backend, auto_migrate=True), open_store(backend)
    try:
        writer = StateflowSaver(StatesService(writer_store))
        trimmer = StateflowSaver(StatesService(trimmer_store))
        thread = f"race-{trim}"
        head = _thread(writer, thread, 3, run_id="old")  # (``a`` kept in the first only)
        materialize = trimmer._materialize

        def put_meanwhile(keys: Any, dropped: Any) -> int:
            monkeypatch.setattr(trimmer, "_materialize", materialize)  # (once)
            checkpoint = generate_checkpoint(
                channel_values={"a": "first", "n": 3}, channel_versions={"a": 1, "n": 4}
            )
            writer.put(head, checkpoint, generate_metadata(step=3, run_id="new"), {"n": 4})
            return materialize(keys, dropped)

        monkeypatch.setattr(trimmer, "_materialize", put_meanwhile)
        if trim == "prune":
            trimmer.prune([thread], strategy="keep_latest")
        else:
            trimmer.delete_for_runs(["old"])
        reader_store = open_store(backend)
        try:
            reader = StateflowSaver(StatesService(reader_store))
            found = reader.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
            assert found is not None and found.checkpoint["channel_values"] == {"a": "first", "n": 3}
            listed = list(reader.list({"configurable": {"thread_id": thread}}))
            assert listed and all(t.checkpoint["channel_values"]["a"] == "first" for t in listed)
        finally:
            reader_store.close()
    finally:
        trimmer_store.close()
        writer_store.close()


def test_a_trim_refused_midway_erases_nothing_and_cuts_no_parent_link(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trim that keeps finding checkpoints to rewrite at every listing (a thread whose run
    goes on as fast as it lists) is refused, ``StoreBusy``, nothing erased — and no kept
    checkpoint loses its link to a parent that is still there (the links are cut only once
    the parents are gone)."""
    from stateflow.errors import StoreBusy

    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        _thread(saver, "busy", 4)
        before = [(t.config, t.parent_config) for t in saver.list({"configurable": {"thread_id": "busy"}})]
        materialize = saver._materialize

        def always_rewriting(keys: Any, dropped: Any, *, parents: bool = False) -> int:
            return max(materialize(keys, dropped, parents=parents), 1)

        monkeypatch.setattr(saver, "_materialize", always_rewriting)
        with pytest.raises(StoreBusy, match="nothing was erased"):
            saver.prune(["busy"], strategy="keep_latest")
        monkeypatch.undo()
        fresh = StateflowSaver(StatesService(store))
        after = [(t.config, t.parent_config) for t in fresh.list({"configurable": {"thread_id": "busy"}})]
        assert after == before and len(after) == 4
        fresh.prune(["busy"], strategy="keep_latest")  # (and once it can: the head alone, no parent)
        (kept,) = list(fresh.list({"configurable": {"thread_id": "busy"}}))
        assert kept.parent_config is None and kept.checkpoint["channel_values"] == {"a": "first", "n": 3}
    finally:
        store.close()
