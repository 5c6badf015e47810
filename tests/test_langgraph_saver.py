"""``StateflowSaver`` against LangGraph's own checkpointer conformance suite, on both backends."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
from collections.abc import AsyncGenerator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import EXCLUDED_METADATA_KEYS, get_serializable_checkpoint_metadata
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver

from stateflow.config import Config, RetentionConfig
from stateflow.errors import CorruptStore, InvalidInput
from stateflow.langgraph import StateflowSaver
from stateflow.langgraph.saver import _EARLIER, DECLARATION, STATE
from stateflow.states import StatesService
from stateflow.store import DocKey, Write, open_store
from stateflow.store.clock import restoring_time
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
        names = record["data"]["saved"]["config"]
        assert names["thread_id"] == "t 1" and names["run_id"] == "run-7"
        assert set(record["data"]) == {"saved"}  # one member
        assert record["data"]["saved"]["channel_values"] == {"messages": {"json": ["hi"]}}
        trail = states.writes("langgraph_checkpoints", subject)["items"]
        assert [(w["action"], w["origin"]["consumer"], w["origin"]["run_id"]) for w in trail] == [
            ("replace", "langgraph", "run-7")
        ]
        tup = saver.get_tuple({"configurable": {"thread_id": "t 1"}})
        assert tup is not None and tup.checkpoint["channel_values"] == {"messages": ["hi"]}
    finally:
        store.close()


class _Text(str):
    """A subclass of ``str``."""


def _random_metadata(rng: random.Random) -> tuple[Any, dict[str, Any]]:
    """A config (``metadata`` and ``configurable`` each there or not) and a checkpoint's
    metadata, naming keys from one small pool: texts with and without NUL characters, numbers,
    booleans, nulls, containers, a subclass of ``str``, an integer enum; LangGraph's excluded
    and internal names, and ``writes``."""
    names = [
        "source",
        "step",
        "writes",
        "run_id",
        "user",
        "x",
        "__internal",
        *sorted(EXCLUDED_METADATA_KEYS)[:3],
    ]
    values: list[Any] = [
        "a",
        "a\x00b",
        "\x00",
        _Text("t\x00"),
        1,
        2.5,
        True,
        None,
        {"k": "v"},
        [1],
        _Level.LOW,
    ]

    def some() -> dict[str, Any] | None:
        roll = rng.random()
        if roll < 0.2:
            return None
        return {rng.choice(names): rng.choice(values) for _ in range(rng.randint(0, 5))}

    config: dict[str, Any] = {}
    for part in ("metadata", "configurable"):
        if (made := some()) is not None:
            config[part] = made
    return config, some() or {}


class _Level(enum.IntEnum):
    LOW = 1


def test_a_checkpoints_metadata_reads_back_as_langgraph_merges_it(backend: str) -> None:
    """Through a real saver: a checkpoint put with a config carrying metadata and extra
    configurable names reads back with the metadata LangGraph's own savers store."""
    rng = random.Random(5)
    with open_store(backend, auto_migrate=True) as store:
        saver = StateflowSaver(StatesService(store))
        for n in range(40):
            extra, metadata = _random_metadata(rng)
            extra.setdefault("configurable", {}).update(thread_id=f"t{n}", checkpoint_ns="")
            extra["configurable"].pop("checkpoint_id", None)
            checkpoint = generate_checkpoint(channel_values={"a": n}, channel_versions={"a": 1})
            put = saver.put(extra, checkpoint, metadata, {"a": 1})  # type: ignore[arg-type]
            expected = get_serializable_checkpoint_metadata(extra, metadata)  # type: ignore[arg-type]
            got = saver.get_tuple(put)
            assert got is not None
            assert got.metadata == expected and list(got.metadata) == list(expected), (extra, metadata)


def _chain(saver: StateflowSaver, thread: str) -> list[Any]:
    """Three checkpoints of one thread, each updating one channel (the others held by earlier
    checkpoints); returns their configs."""
    configs: list[Any] = []
    head: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    versions = {"a": 0, "b": 0}
    for step, channel in enumerate(["a", "b", "a"]):
        versions[channel] += 1
        checkpoint = generate_checkpoint(
            channel_values={"a": f"a{versions['a']}", "b": f"b{versions['b']}"},
            channel_versions=dict(versions),
        )
        head = saver.put(head, checkpoint, generate_metadata(step=step), {channel: versions[channel]})
        configs.append(head)
    return configs


def test_newest_checkpoint_with_its_writes_in_one_statement_on_postgresql(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``get_tuple`` of a thread's newest checkpoint asks the server once: the checkpoint and
    the thread's newest pending writes together, the unchanged channels from the checkpoints
    this saver wrote or read before (a fresh saver reads them once more)."""
    store = open_store(pg_schema_url, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        configs = _chain(saver, "t")
        saver.put_writes(configs[-1], [("a", "pending")], "task-1")
        sent: list[str] = []
        real = psycopg.Cursor.execute

        def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query))
            return real(cursor, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", counted)
        tup = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert len(sent) == 1
        assert tup is not None and tup.config == configs[-1]
        assert tup.checkpoint["channel_values"] == {"a": "a2", "b": "b1"}
        assert tup.pending_writes == [("task-1", "a", "pending")]
        fresh = StateflowSaver(StatesService(store))
        sent.clear()
        cold = fresh.get_tuple({"configurable": {"thread_id": "t"}})
        assert (
            cold is not None
            and cold.checkpoint == tup.checkpoint
            and cold.pending_writes == tup.pending_writes
        )
        assert len(sent) == 2  # the holders of the unchanged channels, read once
    finally:
        store.close()


def test_newest_checkpoint_gets_only_its_own_writes(backend: str) -> None:
    """The newest pending writes of a thread belong to the newest checkpoint only when their
    keys match: writes of an older checkpoint are not the newest's, and writes made for a
    checkpoint never stored do not hide the newest's own."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        configs = _chain(saver, "t")
        saver.put_writes(configs[0], [("a", "old")], "task-0")
        tup = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert tup is not None and tup.config == configs[-1] and tup.pending_writes == []
        saver.put_writes(configs[-1], [("b", "mine")], "task-1")
        future: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "~future"}}
        saver.put_writes(future, [("b", "unstored")], "task-2")
        tup = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert tup is not None and tup.config == configs[-1]
        assert tup.pending_writes == [("task-1", "b", "mine")]
        assert tup.checkpoint["channel_values"] == {"a": "a2", "b": "b1"}
    finally:
        store.close()


@pytest.mark.parametrize("shape", ["names at the top", "config beside the four", "config beside saved"])
def test_records_written_in_earlier_shapes_still_read(backend: str, shape: str) -> None:
    """Checkpoint and writes records written before ``config`` held their names (thread,
    namespace, ids, run at the top of the record), checkpoint records written before ``saved``
    held the checkpoint, metadata, values and sources (those four at the top, beside
    ``config``), and before ``config`` moved into ``saved`` (two members), read, list, copy and
    delete as before — in a store that still has the declaration the version writing them made
    (a saver's re-declare over it keeps what it had: records exist, so dropping it is refused)."""
    names_at_top = shape == "names at the top"
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        earlier = {"names at the top": 1, "config beside the four": 2, "config beside saved": 3}[shape]
        states.declare(STATE, {**DECLARATION, "schema": _EARLIER[earlier]})
        checkpoint = generate_checkpoint(channel_values={"a": "one"}, channel_versions={"a": 1})
        key = StateflowSaver._key("t", "", checkpoint["id"])
        bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        names = {
            "thread_id": "t",
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": None,
            "run_id": "run-1",
        }
        four = {
            "checkpoint": {"json": bare},
            "metadata": {"json": {"source": "input", "step": -1}},
            "channel_values": {"a": {"json": "one"}},
            "sources": {},
        }
        old: dict[str, Any] = (
            {"config": names, "saved": four}
            if shape == "config beside saved"
            else {**(names if names_at_top else {"config": names}), **four}
        )
        subject = {"target_kind": "agent", "target_name": "langgraph", "key": key}
        states.replace(STATE, {**subject, "kind": "checkpoint"}, old)
        writes: dict[str, Any] = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": checkpoint["id"]}
        writes = writes if names_at_top else {"config": writes}
        entry = {"task_id": "x", "idx": 0, "channel": "a", "value": {"json": 2}, "task_path": ""}
        states.replace(STATE, {**subject, "kind": "writes"}, {**writes, "w:x:0": entry})
        saver = StateflowSaver(states)  # (over the earlier declaration, with its records)
        assert StateflowSaver(states).records.schema == saver.records.schema  # (and once widened)
        tup = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == checkpoint["id"]
        assert tup.checkpoint["channel_values"] == {"a": "one"} and tup.pending_writes == [("x", "a", 2)]
        saver.copy_thread("t", "u")
        copied = saver.get_tuple({"configurable": {"thread_id": "u", "checkpoint_ns": ""}})
        assert copied is not None and copied.checkpoint == tup.checkpoint
        # a new checkpoint on the old one takes its unchanged channel from it (a fresh saver
        # reads the old record's versions), and keeps it once the old one is gone
        child = generate_checkpoint(
            channel_values={"a": "one", "b": "two"}, channel_versions={"a": 1, "b": 1}
        )
        fresh = StateflowSaver(states)
        made = fresh.put(tup.config, child, generate_metadata(step=0, run_id="run-2"), {"b": 1})
        stored = states.read(
            saver.records.state, saver.records.subject("checkpoint", saver._key("t", "", child["id"]))
        )
        assert stored is not None and stored["data"]["saved"]["sources"] == {"a": checkpoint["id"]}
        saver.delete_for_runs(["run-1"])
        kept = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert kept is not None and kept.config == made
        assert kept.checkpoint["channel_values"] == {"a": "one", "b": "two"}
        assert saver.get_tuple({"configurable": {**tup.config["configurable"]}}) is None
        saver.delete_thread("t")
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
    finally:
        store.close()


def test_pending_writes_sit_in_a_few_bucket_members(backend: str) -> None:
    """A writes record keeps its writes in members ``p0`` … ``pf`` by task: however many tasks
    write, the record's member names — which the store counts per state — stay among those
    sixteen; a record written with a member per write is put in buckets by its next write, and
    every write reads."""
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        config = _chain(saver, "t")[-1]
        for n in range(40):
            saver.put_writes(config, [("a", n), ("b", -n)], f"task-{n}")
        key = saver._key("t", "", config["configurable"]["checkpoint_id"])
        subject = saver.records.subject("writes", key)
        record = states.read(saver.records.state, subject)
        assert record is not None
        names = set(record["data"])
        assert names <= {f"p{d:x}" for d in range(16)} and len(names) > 1
        assert sum(len(record["data"][name]) for name in names) == 80
        tup = saver.get_tuple(config)
        assert tup is not None
        assert sorted(tup.pending_writes or []) == sorted(
            [(f"task-{n}", "a", n) for n in range(40)] + [(f"task-{n}", "b", -n) for n in range(40)]
        )
        # a record of an earlier shape: converted by its next write
        old_config = _chain(saver, "old")[-1]
        old_key = saver._key("old", "", old_config["configurable"]["checkpoint_id"])
        entry = {"task_id": "x", "idx": 0, "channel": "a", "value": {"json": 1}, "task_path": ""}
        names_of = {
            "thread_id": "old",
            "checkpoint_ns": "",
            "checkpoint_id": old_config["configurable"]["checkpoint_id"],
        }
        states.replace(
            saver.records.state,
            saver.records.subject("writes", old_key),
            {"config": names_of, "w:x:0": entry},
        )
        saver.put_writes(old_config, [("b", 2)], "y")
        old = saver.get_tuple(old_config)
        assert old is not None and sorted(old.pending_writes or []) == [("x", "a", 1), ("y", "b", 2)]
        rewritten = states.read(saver.records.state, saver.records.subject("writes", old_key))
        assert rewritten is not None and set(rewritten["data"]) <= {f"p{d:x}" for d in range(16)}
    finally:
        store.close()


# The declaration stores made before checkpoints became one member were declared with (their
# checkpoints and writes records have `config` as a member of its own).
_TWO_MEMBER_ERA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "config": {
            "type": "object",
            "properties": {
                "thread_id": {"type": "string"},
                "checkpoint_ns": {"type": "string"},
                "checkpoint_id": {"type": "string"},
                "parent_checkpoint_id": {"type": ["string", "null"]},
                "run_id": {"type": ["string", "null"]},
            },
            "required": ["thread_id", "checkpoint_ns", "checkpoint_id"],
        },
        "saved": {
            "type": "object",
            "properties": {
                "checkpoint": {"type": "object"},
                "metadata": {"type": "object"},
                "channel_values": {"type": "object"},
                "sources": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["checkpoint", "metadata", "channel_values", "sources"],
        },
        "checkpoint": {"type": "object"},
        "metadata": {"type": "object"},
        "channel_values": {"type": "object"},
        "sources": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "patternProperties": {
        "^w[0-9a-f]$": {
            "type": "object",
            "additionalProperties": {"type": "object", "required": ["task_id", "idx", "channel", "value"]},
        },
        "^w:": {"type": "object", "required": ["task_id", "idx", "channel", "value"]},
    },
}


def test_a_store_with_two_member_checkpoints_opens_and_keeps_working(backend: str) -> None:
    """A store declared and written before checkpoints became one member — its checkpoint and
    writes records on the store — opens with this saver (the declaration is re-declared over
    records only if additive: a changed schema would refuse to open), reads them, and writes
    new checkpoints and writes beside them, each readable."""
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        state = "langgraph_checkpoints"
        states.declare(
            state,
            {
                "description": "LangGraph checkpoints (kind checkpoint) and their pending writes (kind writes), "
                "one record per thread, namespace and checkpoint",
                "schema": _TWO_MEMBER_ERA_SCHEMA,
                "subject_kinds": ["checkpoint", "writes"],
                "default_subject_kind": "checkpoint",
            },
        )
        checkpoint = generate_checkpoint(channel_values={"a": "one"}, channel_versions={"a": 1})
        key = StateflowSaver._key("t", "", checkpoint["id"])
        names = {
            "thread_id": "t",
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": None,
            "run_id": "run-1",
        }
        saved = {
            "checkpoint": {"json": {k: v for k, v in checkpoint.items() if k != "channel_values"}},
            "metadata": {"json": {"source": "input", "step": -1}},
            "channel_values": {"a": {"json": "one"}},
            "sources": {},
        }
        subject = {"target_kind": "agent", "target_name": "langgraph", "kind": "checkpoint", "key": key}
        states.replace(state, subject, {"config": names, "saved": saved})
        entry = {"task_id": "x", "idx": 0, "channel": "a", "value": {"json": 2}, "task_path": ""}
        states.replace(
            state,
            {**subject, "kind": "writes"},
            {
                "config": {k: names[k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id")},
                "w5": {"x:0": entry},
            },
        )
        saver = StateflowSaver(states)  # opens over those records
        tup = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert tup is not None and tup.checkpoint["channel_values"] == {"a": "one"}
        assert tup.pending_writes == [("x", "a", 2)]
        child = generate_checkpoint(
            channel_values={"a": "one", "b": "two"}, channel_versions={"a": 1, "b": 1}
        )
        made = saver.put(tup.config, child, generate_metadata(step=0, run_id="run-2"), {"b": 1})
        saver.put_writes(made, [("b", 3)], "y")
        newest = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert newest is not None and newest.config == made and newest.parent_config == tup.config
        assert newest.checkpoint["channel_values"] == {"a": "one", "b": "two"}
        assert newest.pending_writes == [("y", "b", 3)]
        record = states.read(state, saver.records.subject("checkpoint", saver._key("t", "", child["id"])))
        assert record is not None and set(record["data"]) == {"saved"}  # the new one: one member
        assert [t.config for t in saver.list({"configurable": {"thread_id": "t"}})] == [made, tup.config]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("member", "stored", "why"),
    [
        ("checkpoint", {"type": "msgpack", "b64": "!!notbase64!!"}, "base64"),
        ("checkpoint", {"json": {"v": 4}}, "channel_versions"),
        ("metadata", {"type": "zzz", "b64": "AAAA"}, "NotImplementedError: Unknown serialization type"),
        ("write", {"type": "zzz", "b64": "AAAA"}, "pending writes.*NotImplementedError"),
    ],
)
def test_a_checkpoint_replaced_through_another_door_with_one_that_does_not_decode_is_named(
    backend: str, member: str, stored: dict[str, Any], why: str
) -> None:
    """The schema checks a checkpoint record's shape, not that LangGraph can read it back: one
    replaced through the states service (as HTTP and the CLI write) — its checkpoint, its
    metadata or a pending write's value — is refused by name on every read, never a raw
    decoding error from inside the saver, LangGraph or its serializer."""
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        config = saver.put(
            {"configurable": {"thread_id": "t-bad", "checkpoint_ns": ""}},
            generate_checkpoint(channel_values={"m": ["hi"]}, channel_versions={"m": 1}),
            generate_metadata(),
            {"m": 1},
        )
        saver.put_writes(config, [("m", ["there"])], "task")
        key = saver._key("t-bad", "", config["configurable"]["checkpoint_id"])
        if member == "write":
            subject = saver.records.subject("writes", key)
            record = states.read("langgraph_checkpoints", subject)
            assert record is not None
            (bucket,) = record["data"]
            channel, _, task_path = record["data"][bucket]["task:0"]
            states.replace(
                "langgraph_checkpoints", subject, {bucket: {"task:0": [channel, stored, task_path]}}
            )
        else:
            subject = saver.records.subject("checkpoint", key)
            record = states.read("langgraph_checkpoints", subject)
            assert record is not None
            saved = {**record["data"]["saved"], member: stored}
            states.replace("langgraph_checkpoints", subject, {**record["data"], "saved": saved})
        for read in (
            lambda: saver.get_tuple({"configurable": {"thread_id": "t-bad"}}),
            lambda: saver.get_tuple(config),
            lambda: list(saver.list({"configurable": {"thread_id": "t-bad"}})),
        ):
            with pytest.raises(CorruptStore, match=f"thread 't-bad'.*{why}") as refused:
                read()
            assert refused.value.code == "corrupt-store"
    finally:
        store.close()


@pytest.mark.parametrize("door", ["erase", "retention"])
def test_a_checkpoint_whose_values_lived_in_an_erased_one_is_refused_by_name(backend: str, door: str) -> None:
    """A checkpoint keeps a channel it did not write in the checkpoint holding it (``sources``):
    with that record erased other than by the saver — through a door, or by the retention
    sweep on a state an operator declared not exempt — the newest checkpoint is refused by
    name, never answered without the channel."""
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        # three checkpoints, writing a, b, a: the first two in an old session
        configs: list[Any] = []
        head: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        versions = {"a": 0, "b": 0}
        for step, channel in enumerate(["a", "b", "a"]):
            versions[channel] += 1
            checkpoint = generate_checkpoint(
                channel_values={"a": f"a{versions['a']}", "b": f"b{versions['b']}"},
                channel_versions=dict(versions),
            )
            with restoring_time("2020-01-01T00:00:00.000000Z") if step < 2 else contextlib.nullcontext():
                head = saver.put(head, checkpoint, generate_metadata(step=step), {channel: versions[channel]})
            configs.append(head)
        # the newest checkpoint (a) keeps ``b`` in the second one, which keeps ``a`` in the first
        second = configs[1]["configurable"]["checkpoint_id"]
        subject = saver.records.subject("checkpoint", saver._key("t", "", second))
        if door == "erase":
            states.erase("langgraph_checkpoints", subject)
        else:
            declared = states.get_declaration("langgraph_checkpoints")
            states.declare(
                "langgraph_checkpoints",
                {k: declared[k] for k in ("schema", "subject_kinds", "default_subject_kind")}
                | {"retention_exempt": False, "retention_days": 1},
            )
            assert states.prune()["pruned"]["langgraph_checkpoints"] == 2
        assert states.read("langgraph_checkpoints", subject) is None
        newest = configs[2]["configurable"]["checkpoint_id"]
        fresh = StateflowSaver(StatesService(store))  # (nothing held in memory)
        for read in (
            lambda: fresh.get_tuple({"configurable": {"thread_id": "t"}}),
            lambda: list(fresh.list({"configurable": {"thread_id": "t"}})),
        ):
            with pytest.raises(
                CorruptStore,
                match=f"checkpoint '{newest}' of thread 't'.*channel 'b' in checkpoint '{second}'",
            ):
                read()
    finally:
        store.close()


def test_the_checkpoint_state_is_retention_exempt_even_over_an_earlier_declaration(backend: str) -> None:
    """The saver declares its state ``retention_exempt`` (under any name): over one an earlier
    version declared, which an operator gave a ``retention_days``, the saver's declaration
    wins; a re-declare that does not name the field keeps it, and one combining it with a
    retention is refused — the sweep never erases a thread's checkpoints by age."""
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        earlier = {k: v for k, v in DECLARATION.items() if k != "retention_exempt"}
        states.declare("threads", {**earlier, "schema": _EARLIER[-1], "retention_days": 7})
        assert states.get_declaration("threads")["retention_exempt"] is False

        saver = StateflowSaver(states, state="threads")
        declared = states.get_declaration("threads")
        assert (declared["retention_exempt"], declared["retention_days"]) == (True, None)
        saver.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1}),
            generate_metadata(),
            {"a": 1},
        )
        as_declared = {k: declared[k] for k in ("schema", "subject_kinds", "default_subject_kind")}
        states.declare("threads", {**as_declared, "description": "renamed"})  # (field not named)
        assert states.get_declaration("threads")["retention_exempt"] is True
        for contradicting in ({"retention_days": 1}, {"retention_days": 1, "retention_exempt": True}):
            with pytest.raises(InvalidInput, match="retention_exempt and retention_days contradict"):
                states.declare("threads", {**as_declared, **contradicting})
        with pytest.raises(InvalidInput, match="retention_exempt must be true or false"):
            states.declare("threads", {**as_declared, "retention_exempt": "yes"})
        assert states.get_declaration("threads")["retention_exempt"] is True
        later = datetime.now(UTC) + timedelta(days=10_000)
        assert (
            "threads"
            not in StatesService(store, Config(retention=RetentionConfig(default_days=1))).prune(now=later)[
                "pruned"
            ]
        )
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None
    finally:
        store.close()


def test_the_sweep_spares_checkpoints_an_earlier_version_declared_before_any_saver_opens(
    backend: str,
) -> None:
    """A saver's state as an earlier version stored it — no ``retention_exempt`` field at all,
    maybe an operator's ``retention_days`` — is exempt from its first open on; a process that
    never opens a saver (the CLI's or the server's sweep) does not erase its checkpoints by age
    before that either. Declared ``"retention_exempt": false`` by an operator, it is swept."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store), state="threads")
        saver.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1}),
            generate_metadata(),
            {"a": 1},
        )
        row = DocKey("_states", "threads")
        current = store.get(row)
        body = current.body or {}
        earlier = {k: v for k, v in body.items() if k != "retention_exempt"} | {"retention_days": 7}
        store.commit([Write.between(row, body, earlier, current.revision)])  # (as stored then)

        later = datetime.now(UTC) + timedelta(days=10_000)
        elsewhere = StatesService(store, Config(retention=RetentionConfig(default_days=1)))
        assert elsewhere.prune(now=later)["pruned"].get("threads", 0) == 0
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None

        declared = elsewhere.get_declaration("threads")
        as_declared = {
            k: declared[k] for k in ("description", "schema", "subject_kinds", "default_subject_kind")
        }
        elsewhere.declare("threads", {**as_declared, "retention_exempt": False})  # the operator's say
        assert elsewhere.prune(now=later)["pruned"]["threads"] == 1
    finally:
        store.close()


@pytest.mark.parametrize("way", ["lean", "general"])
def test_a_regular_write_already_held_is_kept_a_special_one_replaced(backend: str, way: str) -> None:
    """As LangGraph's savers do (``InMemorySaver`` here): a task's write to a regular channel at
    an index already held is kept (the first one stands), a special channel's (an error, an
    interrupt) is replaced — on the lean way and through the states pipeline (a re-declared
    state) alike."""

    def written(saver: Any) -> Any:
        config = saver.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            generate_checkpoint(channel_values={}, channel_versions={}),
            generate_metadata(),
            {},
        )
        saver.put_writes(config, [("a", 1), ("b", 1)], "task1")
        saver.put_writes(config, [("a", 2), ("c", 2)], "task1")  # idx 0 held: kept; idx 1 held
        saver.put_writes(config, [("a", 3), ("b", 3), ("d", 3)], "task1")  # idx 2: new
        saver.put_writes(config, [("__error__", "e1")], "task2")
        saver.put_writes(config, [("__error__", "e2")], "task2")  # special: replaced
        return saver.get_tuple(config).pending_writes

    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        if way == "general":
            declared = states.get_declaration("langgraph_checkpoints")
            schema = {**declared["schema"], "title": "re-declared"}
            states.declare(
                "langgraph_checkpoints",
                {k: declared[k] for k in ("subject_kinds", "default_subject_kind")} | {"schema": schema},
            )
        expected = written(InMemorySaver())
        assert expected == [
            ("task1", "a", 1),
            ("task1", "b", 1),
            ("task1", "d", 3),
            ("task2", "__error__", "e2"),
        ]
        assert written(saver) == expected
        assert (saver.records._refused is not None) == (way == "general")
    finally:
        store.close()
