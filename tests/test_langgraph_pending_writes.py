"""The saver's writes records: the current shape (``p0`` … ``pf``, each entry ``[channel, value,
task_path]`` under ``<task_id>:<idx>``), and records of the earlier shapes read as they are and
put in the current shape by their next write — the lean way and through the states pipeline (a
re-declared state) alike — with LangGraph's answers unchanged (``InMemorySaver`` given the same
calls answers the same)."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson
import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver

from stateflow.errors import StoreNotMigrated
from stateflow.langgraph import StateflowSaver
from stateflow.langgraph.pending_writes import NAMES, bucket
from stateflow.states import StatesService
from stateflow.store import DocKey, SqlStore, open_store
from stateflow.store.check import check_store
from stateflow.store.migrations import SCHEMA_VERSION
from stateflow.store.plan import WHOLE_ROW_MAX

STATE = "langgraph_checkpoints"


def _checkpoint(saver: Any, thread: str) -> Any:
    return saver.put(
        {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
        generate_checkpoint(channel_values={"n": 1}, channel_versions={"n": 1}),
        generate_metadata(),
        {"n": 1},
    )


def _pending(saver: Any, config: Any) -> Any:
    tup = saver.get_tuple(config)
    assert tup is not None
    return tup.pending_writes


def _entry(task_id: str, idx: int, channel: str, value: Any, task_path: str = "") -> dict[str, Any]:
    """A write entry as the earlier shape stored it."""
    return {
        "task_id": task_id,
        "idx": idx,
        "channel": channel,
        "value": {"json": value},
        "task_path": task_path,
    }


def _earlier_record(names: dict[str, Any]) -> dict[str, Any]:
    """A writes record of the earlier shapes: a member per write (before buckets), buckets
    ``w0`` … ``wf`` of entries, and a ``config`` member naming the checkpoint."""
    body: dict[str, Any] = {"config": names, "w:before:0": _entry("before", 0, "a", "first", "~p")}
    for task_id, writes in (("x", [("a", 1), ("b", 2)]), ("y", [("a", 3)]), ("z", [("__error__", "boom")])):
        for n, (channel, value) in enumerate(writes):
            idx = -1 if channel == "__error__" else n
            member = f"w{bucket(task_id)[1]}"
            body.setdefault(member, {})[f"{task_id}:{idx}"] = _entry(task_id, idx, channel, value, "p")
    return body


def _calls(saver: Any, config: Any) -> None:
    """The writes made on a record of the earlier shape (and, on ``InMemorySaver``, after the
    same writes that record holds)."""
    saver.put_writes(config, [("a", "again"), ("c", 4)], "x", "p")  # idx 0 and 1 held: kept
    saver.put_writes(config, [("__error__", "later")], "z", "p")  # special: replaced
    saver.put_writes(config, [("m", {"text": "new"})], "w", "~q")


@pytest.mark.parametrize("way", ["lean", "general"])
def test_a_writes_record_of_the_earlier_shapes_reads_and_is_rewritten_in_the_current_one(
    backend: str, way: str
) -> None:
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        if way == "general":  # (another schema: every write through the states pipeline)
            declared = states.get_declaration(STATE)
            schema = {**declared["schema"], "title": "re-declared"}
            states.declare(
                STATE,
                {k: declared[k] for k in ("subject_kinds", "default_subject_kind")} | {"schema": schema},
            )
        config = _checkpoint(saver, "t")
        checkpoint_id = config["configurable"]["checkpoint_id"]
        subject = saver.records.subject("writes", saver._key("t", "", checkpoint_id))
        names = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
        states.replace(STATE, subject, _earlier_record(names))

        memory = InMemorySaver()
        reference = _checkpoint(memory, "t")
        memory.put_writes(reference, [("a", "first")], "before", "~p")
        memory.put_writes(reference, [("a", 1), ("b", 2)], "x", "p")
        memory.put_writes(reference, [("a", 3)], "y", "p")
        memory.put_writes(reference, [("__error__", "boom")], "z", "p")
        read = saver.get_tuple(config)
        assert read is not None and read.pending_writes == _pending(memory, reference)

        _calls(saver, config)
        _calls(memory, reference)
        expected = _pending(memory, reference)
        assert expected is not None and len(expected) == 6
        for tup in (saver.get_tuple(config), next(iter(saver.list({"configurable": {"thread_id": "t"}})))):
            assert tup is not None and tup.pending_writes == expected
        assert (saver.records._refused is not None) == (way == "general")

        # the record is in the current shape only: the buckets, each entry [channel, value, path]
        record = states.read(STATE, subject)
        assert record is not None and set(record["data"]) <= NAMES
        held = {name: entry for entries in record["data"].values() for name, entry in entries.items()}
        assert held == {
            "before:0": ["a", {"json": "first"}, "~p"],
            "x:0": ["a", {"json": 1}, "p"],
            "x:1": ["b", {"json": 2}, "p"],
            "y:0": ["a", {"json": 3}, "p"],
            "z:-1": ["__error__", {"json": "later"}, "p"],
            "w:0": ["m", {"json": {"text": "new"}}, "~q"],
        }
        for member, entries in record["data"].items():
            assert all(bucket(name.rpartition(":")[0]) == member for name in entries)
        # copied, pruned and deleted as any record
        saver.copy_thread("t", "u")
        copied = saver.get_tuple({"configurable": {"thread_id": "u", "checkpoint_ns": ""}})
        assert copied is not None and copied.pending_writes == expected
        saver.prune(["u"], strategy="keep_latest")
        assert _pending(saver, {"configurable": {"thread_id": "u"}}) == expected
        saver.delete_thread("t")
        assert saver.get_tuple(config) is None and states.read(STATE, subject) is None
    finally:
        store.close()


def test_an_entry_not_of_the_shape_the_saver_wrote_stays_where_it_is(backend: str) -> None:
    """An entry of an earlier-shaped record whose name is not its task id and index (written
    through another door) is left in its member by the conversion, and still reads."""
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        config = _checkpoint(saver, "t")
        subject = saver.records.subject(
            "writes", saver._key("t", "", config["configurable"]["checkpoint_id"])
        )
        states.replace(
            STATE, subject, {"w0": {"odd": _entry("g", 3, "n", 1)}, "w:g:4": _entry("g", 4, "n", 2)}
        )
        saver.put_writes(config, [("n", 5)], "h")
        record = states.read(STATE, subject)
        assert record is not None
        assert record["data"]["w0"] == {"odd": _entry("g", 3, "n", 1)} and "w:g:4" not in record["data"]
        tup = saver.get_tuple(config)
        assert tup is not None and tup.pending_writes == [("g", "n", 1), ("g", "n", 2), ("h", "n", 5)]
    finally:
        store.close()


def test_a_writes_record_keeps_thirty_tasks_in_its_row(tmp_path: Any) -> None:
    """The shorter entry keeps a checkpoint's writes record whole (its body in its row, one row
    rewritten a write) up to ~40 tasks of two small writes; the earlier shape left that form at
    ~17 (its entries twice the bytes)."""
    store = open_store(str(tmp_path / "s.db"), auto_migrate=True)
    try:
        assert isinstance(store, SqlStore)
        saver = StateflowSaver(StatesService(store))
        config = _checkpoint(saver, "t")
        for n in range(30):
            saver.put_writes(config, [("messages", f"reply {n}"), ("step", n)], f"task-{n}")
        key = saver.records.doc_key("writes", saver._key("t", "", config["configurable"]["checkpoint_id"]))
        with store._read_tx() as tx:
            (row,) = tx.all(
                "SELECT d.body, (SELECT count(*) FROM members m WHERE m.doc_id = d.doc_id) "
                "FROM documents d WHERE d.state = ? AND d.subject = ?",
                (key.state, key.subject),
            )
        body, members = row
        assert body is not None and members == 0 and len(body) <= WHOLE_ROW_MAX
        assert orjson.loads(body) == store.get(key).body
        tup = saver.get_tuple(config)
        assert tup is not None and len(tup.pending_writes or []) == 60
    finally:
        store.close()


def test_a_schema_44_store_upgrades_to_45_and_its_writes_records_convert_at_their_next_write(
    backend: str,
) -> None:
    """Version 45 changes the writes records' shape, no table: a store at 44 holding writes
    records of the earlier shape (and no other difference: the version row set back) is
    refused until migrated, migrates by recording the version, reads those records as they
    are, and the saver's next write to each converts it; new records are of the current shape,
    every reader answers as ``InMemorySaver`` does, and ``stateflow check`` finds nothing."""
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        configs = [_checkpoint(saver, f"t{n}") for n in range(2)]
        for config in configs:
            thread, checkpoint_id = (
                config["configurable"]["thread_id"],
                config["configurable"]["checkpoint_id"],
            )
            names = {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
            subject = saver.records.subject("writes", saver._key(thread, "", checkpoint_id))
            states.replace(STATE, subject, _earlier_record(names))
    finally:
        store.close()
    if backend.startswith("postgresql://"):
        with psycopg.connect(backend, autocommit=True) as pg:
            pg.execute("UPDATE stateflow_meta SET value = '44' WHERE key = 'schema_version'")
    else:
        with sqlite3.connect(backend) as lite:
            lite.execute("UPDATE stateflow_meta SET value = '44' WHERE key = 'schema_version'")
        lite.close()
    store = open_store(backend, auto_migrate=False)
    try:
        with pytest.raises(StoreNotMigrated, match="schema version 44"):
            store.get(DocKey("notes", "a"))
        assert store.migrate() == (44, SCHEMA_VERSION) and SCHEMA_VERSION >= 45
        states = StatesService(store)
        saver = StateflowSaver(states)
        memory = InMemorySaver()
        reference = _checkpoint(memory, "t")
        for task_id, writes in (("before", [("a", "first")]), ("x", [("a", 1), ("b", 2)]), ("y", [("a", 3)])):
            memory.put_writes(reference, writes, task_id, "~p" if task_id == "before" else "p")
        memory.put_writes(reference, [("__error__", "boom")], "z", "p")
        as_read = _pending(memory, reference)
        for config in configs:
            tup = saver.get_tuple(config)
            assert tup is not None and tup.pending_writes == as_read
        _calls(memory, reference)
        _calls(saver, configs[0])  # (the other record stays of the earlier shape, and reads)
        written = saver.get_tuple(configs[0])
        assert written is not None and written.pending_writes == _pending(memory, reference)
        untouched = saver.get_tuple(configs[1])
        assert untouched is not None and untouched.pending_writes == as_read
        for config, shape in zip(configs, (NAMES, None), strict=True):
            thread, checkpoint_id = (
                config["configurable"]["thread_id"],
                config["configurable"]["checkpoint_id"],
            )
            record = states.read(
                STATE, saver.records.subject("writes", saver._key(thread, "", checkpoint_id))
            )
            assert record is not None
            assert (set(record["data"]) <= NAMES) == (shape is not None), record["data"]
        fresh = _checkpoint(saver, "new")
        saver.put_writes(fresh, [("a", 1)], "task", "p")
        record = states.read(
            STATE,
            saver.records.subject("writes", saver._key("new", "", fresh["configurable"]["checkpoint_id"])),
        )
        assert record is not None and record["data"] == {bucket("task"): {"task:0": ["a", {"json": 1}, "p"]}}
        saver.copy_thread("t1", "t2")
        copied = saver.get_tuple({"configurable": {"thread_id": "t2", "checkpoint_ns": ""}})
        assert copied is not None and copied.pending_writes == as_read
        assert check_store(store).problems == []
    finally:
        store.close()


def test_writes_onto_a_checkpoint_another_process_wrote_add_to_its_record(open_migrated: Any) -> None:
    """A saver that has not seen a checkpoint's writes record (another process wrote it, or
    this one before a restart, or its caches let it go) adds its task's writes to the record
    as it is; every task's writes read back, each change in the record's history."""
    first, second = (
        StateflowSaver(StatesService(open_migrated())),
        StateflowSaver(StatesService(open_migrated())),
    )
    checked: SqlStore = open_migrated()
    config = _checkpoint(first, "t")
    first.put_writes(config, [("n", 1), ("m", "a")], "task-1")
    second.put_writes(config, [("n", 2)], "task-2")
    first.put_writes(config, [("n", 3)], "task-3")  # (its record moved where it has not seen)
    second.put_writes(config, [("n", 9)], "task-1")  # (a task's writes kept once: no change)
    expected = [("task-1", "n", 1), ("task-1", "m", "a"), ("task-2", "n", 2), ("task-3", "n", 3)]
    reader = StateflowSaver(StatesService(open_migrated()))
    assert sorted(_pending(reader, config)) == sorted(expected)
    memory = InMemorySaver()  # (LangGraph's own answer to the same calls)
    config_m = _checkpoint(memory, "t")
    for writes, task in (([("n", 1), ("m", "a")], "task-1"), ([("n", 2)], "task-2"), ([("n", 3)], "task-3")):
        memory.put_writes(config_m, writes, task)
    memory.put_writes(config_m, [("n", 9)], "task-1")
    assert sorted(_pending(memory, config_m)) == sorted(expected)
    key = reader.records.doc_key("writes", reader._key("t", "", config["configurable"]["checkpoint_id"]))
    assert reader.records.store.get(key).revision == 3
    assert len(reader.records.store.history([key])) == 3
    assert check_store(checked).problems == []
