"""The adapters' lean writes (``Records.write``) make the same records as the general path.

A saver and a store on states declared with the adapters' own schemas write the lean way; a
second pair whose states an operator re-declared (another schema) writes through the states
pipeline. The same calls on both must read back the same through every door: the record, its
revision, its history and audit trail with the run's origin, as-of reads, subject listings.
Concurrent writers in other processes (lean and general, on the same records), killed mid-
stream, lose no acknowledged write, and ``stateflow check`` finds nothing wrong.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import orjson
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from stateflow.doc.diff import diff
from stateflow.errors import InvalidJSON
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.langgraph.saver import DECLARATION as SAVER_DECLARATION
from stateflow.langgraph.store import DECLARATION as STORE_DECLARATION
from stateflow.states import StatesService
from stateflow.states.models import DoorContext
from stateflow.store import DocKey, open_store
from stateflow.store.check import check_store


def _redeclared(states: StatesService, name: str, declaration: dict[str, Any]) -> None:
    """An operator's re-declare with another (compatible) schema: the adapter's lean writes
    no longer prove it, so its writes go through the states pipeline."""
    schema = {**declaration["schema"], "title": "re-declared"}
    states.declare(name, {**declaration, "schema": schema}, context=DoorContext(door="operator"))


_CHECKPOINTS = [
    generate_checkpoint(
        channel_values={"messages": [f"m{n}"], "count": n}, channel_versions={"messages": n + 1, "count": 1}
    )
    for n in range(3)
]


def _drive(saver: StateflowSaver, store: StateflowStore) -> None:
    config: Any = {"configurable": {"thread_id": "t 1", "checkpoint_ns": ""}}
    for n, checkpoint in enumerate(_CHECKPOINTS):
        config = saver.put(config, checkpoint, generate_metadata(run_id=f"run-{n}"), {"messages": n + 1})
        config = {**config, "configurable": {**config["configurable"], "run_id": f"run-{n}"}}
        saver.put_writes(config, [("messages", {"text": f"w{n}"}), ("count", n)], f"task-{n}")
        saver.put_writes(config, [("messages", "again")], f"task-{n}b", "path")
    store.put(("users", "u 1"), "prefs", {"theme": "dark", "n": 1})
    store.put(("users", "u 1"), "prefs", {"theme": "light", "n": 2})
    store.put(("users", "u 2"), "prefs", {"theme": "dark"}, ttl=5)


_STAMPED = ("consumer", "run_id", "door", "actor", "action", "meta")


def _doors(states: StatesService, name: str, subject: dict[str, Any]) -> dict[str, Any]:
    """What every door shows of a record, without what differs between two stores (seqs,
    times, the state's name)."""
    record = states.read(name, subject)
    assert record is not None
    first = states.read(name, subject, revision=1)
    assert first is not None
    audit = states.writes(name, subject, limit=50)
    key = DocKey(name, _encoded(subject))
    changes = states.store.history([key], limit=50)
    return {
        "data": record["data"],
        "revision": record["revision"],
        "first": first["data"],
        "audit": [(row["origin"], row["action"], row["paths"], row["revision"]) for row in audit["items"]],
        "edits": [[e.to_json() for e in c.edits] for c in changes],
        "paths": [c.paths for c in changes],
        "origins": [{k: v for k, v in c.origin.items() if k in _STAMPED} for c in changes],
    }


def _encoded(subject: dict[str, Any]) -> str:
    from stateflow.subjects import encode_subject

    return encode_subject(subject["target_kind"], subject["target_name"], subject["kind"], subject["key"])


def test_lean_records_read_back_as_the_general_path_writes_them(backend: str) -> None:
    with open_store(backend, auto_migrate=True) as opened:
        states = StatesService(opened)
        lean = (StateflowSaver(states, state="cp_lean"), StateflowStore(states, state="items_lean"))
        general = (StateflowSaver(states, state="cp_general"), StateflowStore(states, state="items_general"))
        _redeclared(states, "cp_general", SAVER_DECLARATION)
        _redeclared(states, "items_general", STORE_DECLARATION)
        for saver, store in (lean, general):
            _drive(saver, store)
        # the lean pair wrote the lean way, the other fell back (and stays there)
        assert lean[0].records._trusted and lean[0].records._refused is None
        assert lean[1].records._trusted and lean[1].records._refused is None
        assert general[0].records._refused is not None and not general[0].records._trusted
        assert general[1].records._refused is not None
        for (saver_a, store_a), (saver_b, store_b) in [(lean, general)]:
            a_subjects = states.subjects(saver_a.records.state)
            b_subjects = states.subjects(saver_b.records.state)
            keys_a: list[dict[str, Any]] = [dict(s["subject"]) for s in a_subjects["subjects"]]
            assert keys_a == [dict(s["subject"]) for s in b_subjects["subjects"]]
            assert len(keys_a) == 6  # three checkpoints, three writes records
            for subject in keys_a:
                seen_a = _doors(states, saver_a.records.state, subject)
                seen_b = _doors(states, saver_b.records.state, subject)
                assert seen_a == seen_b
                assert seen_a["origins"][0]["consumer"] == "langgraph"
            checkpoint_runs = [
                _doors(states, saver_a.records.state, s)["origins"][0].get("run_id")
                for s in keys_a
                if s["kind"] == "checkpoint"
            ]
            assert sorted(checkpoint_runs) == ["run-0", "run-1", "run-2"]
            for namespace in (("users", "u 1"), ("users", "u 2")):
                subject = store_a.subject(namespace, "prefs")
                seen_a = _doors(states, store_a.records.state, subject)
                seen_b = _doors(states, store_b.records.state, store_b.subject(namespace, "prefs"))
                created = [seen["data"].pop("created_at") for seen in (seen_a, seen_b)]
                expires = [seen["data"].pop("expires_at") for seen in (seen_a, seen_b)]
                for seen in (seen_a, seen_b):
                    seen["first"].pop("created_at"), seen["first"].pop("expires_at")
                    seen["edits"] = len(seen["edits"])
                assert seen_a == seen_b
                assert all(created) and (namespace[1] == "u 1" or all(expires))
            item = store_a.get(("users", "u 1"), "prefs")
            assert item is not None and item.value == {"theme": "light", "n": 2}
            # the saver reads its own lean records back
            tup = saver_a.get_tuple({"configurable": {"thread_id": "t 1", "checkpoint_ns": ""}})
            assert tup is not None and tup.checkpoint["channel_values"]["messages"] == ["m2"]
            assert sorted((w[0], w[1]) for w in tup.pending_writes or []) == [
                ("task-2", "count"),
                ("task-2", "messages"),
                ("task-2b", "messages"),
            ]
        report = check_store(opened)
        assert report.problems == []


def test_a_lean_write_refuses_what_the_general_path_refuses(backend: str) -> None:
    with open_store(backend, auto_migrate=True) as opened:
        store = StateflowStore(StatesService(opened))
        with pytest.raises(InvalidJSON):
            store.put(("users",), "bad", {"x": float("nan")})
        assert store.get(("users",), "bad") is None
        saver = StateflowSaver(StatesService(opened))
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"}}
        saver.put_writes(config, [("messages", {1, 2})], "task")  # not JSON: kept serialized
        tup = saver.get_tuple(config)
        assert tup is None  # writes without their checkpoint are not a checkpoint


_EXACT_VALUES: list[dict[str, Any]] = [
    {"n": 1, "tags": ["a", "b"], "deep": {"x": 1, "y": [1, 2]}},
    {"n": 1.0, "tags": ["a", "c"], "deep": {"x": 1, "y": [1, 2.0]}},
    {"n": True, "tags": ["a", "c", True], "deep": {"x": 1.0, "y": [True, 2.0]}},
    {"n": True, "tags": {"a": 1}, "deep": {"y": [True, 2.0], "z": None}},
    {"n": 0, "tags": {"a": 1.0, "b": False}, "deep": {"y": [], "z": {"q": 1}}},
    {"n": 0.0, "tags": {"a": 1.0, "b": 0}, "deep": {"y": [], "z": {"q": True}}, "new": "x"},
    {"n": 2**53 + 1, "tags": {"b": 0}, "deep": {"y": [0.0]}},  # not the codec's plain JSON
    {"n": False, "tags": {"b": 0.0}, "deep": {"y": [False]}, "new": None},
]


def test_an_items_changes_are_the_exact_diff_of_its_bodies(backend: str) -> None:
    """A store ``put`` records the exact diff of the body it replaces (``1``, ``1.0`` and
    ``True`` are three values: a changed number type is an edit, wherever it is), and every
    revision reads back in exact types, here and from another store."""
    with open_store(backend, auto_migrate=True) as opened:
        store = StateflowStore(StatesService(opened))
        for value in _EXACT_VALUES:
            store.put(("users", "u 1"), "exact", value)
        assert store.records._trusted and store.records._refused is None  # (the lean way)
        key = store.records.doc_key("item", store.subject_key(("users", "u 1"), "exact"))
        changes = opened.history([key], limit=50)[::-1]
        assert [c.revision for c in changes] == list(range(1, len(_EXACT_VALUES) + 1))
        with open_store(backend, auto_migrate=True) as other:
            for reader in (opened, other):
                bodies = [reader.read_at(key, revision=r).body for r in range(1, len(_EXACT_VALUES) + 1)]
                assert [orjson.dumps(b["value"]) for b in bodies if b] == [
                    orjson.dumps(v) for v in _EXACT_VALUES
                ]
                for change, before, after in zip(changes[1:], bodies[:-1], bodies[1:], strict=True):
                    assert before is not None and after is not None
                    assert orjson.dumps([e.to_json() for e in change.edits]) == orjson.dumps(
                        [e.to_json() for e in diff(before, after)]
                    )


def test_pending_writes_record_the_exact_diff_of_their_record(backend: str) -> None:
    """``put_writes`` hands the store the edits of the entries it adds (a bucket new to the
    record set whole, entries new to their bucket each set whole): every change of a writes
    record is the exact diff of the bodies it joins — a special channel's entry written again,
    a channel whose index repeats inside one call, tasks sharing a bucket — and reads back the
    same from another store. A task's regular entries written again are kept as they are, as
    LangGraph's savers keep them: no change."""
    from stateflow.langgraph.pending_writes import bucket as _bucket

    with open_store(backend, auto_migrate=True) as opened:
        saver = StateflowSaver(StatesService(opened))
        config: Any = {"configurable": {"thread_id": "t 1", "checkpoint_ns": ""}}
        config = saver.put(config, _CHECKPOINTS[0], generate_metadata(), {"messages": 1})
        tasks = [f"task-{n}" for n in range(40)]
        first = tasks[0]
        sharing = [t for t in tasks[1:] if _bucket(t) == _bucket(first)][:2]  # (its bucket's)
        assert sharing
        calls: list[tuple[list[tuple[str, Any]], str]] = [
            ([("messages", {"text": "a"}), ("count", 1)], first),
            *[([("messages", n)], task) for n, task in enumerate(sharing)],
            *[([("count", n), ("messages", [n, 1.0])], f"other-{n}") for n in range(6)],
            ([("messages", {"text": "b"}), ("count", 1.0)], first),  # the task's entries again
            ([("messages", {"text": "b"}), ("count", True)], first),
            ([("__error__", "x"), ("__error__", "y")], "failing"),  # (one index, twice)
            ([("__error__", "z")], "failing"),
            ([("messages", None)], sharing[0]),
        ]
        for writes, task in calls:
            saver.put_writes(config, writes, task)
        assert saver.records._trusted and saver.records._refused is None  # (the lean way)
        key = saver.records.doc_key("writes", saver._key("t 1", "", config["configurable"]["checkpoint_id"]))
        changes = opened.history([key], limit=50)[::-1]
        written = len(calls) - 3  # (the three regular entries written again change nothing)
        assert [c.revision for c in changes] == list(range(1, written + 1))
        tup = saver.get_tuple(config)
        assert tup is not None and tup.pending_writes is not None
        entries = {(w[0], w[1]): w[2] for w in tup.pending_writes}
        assert entries[(first, "messages")] == {"text": "a"} and type(entries[(first, "count")]) is int
        assert entries[(sharing[0], "messages")] == 0 and entries[("failing", "__error__")] == "z"
        with open_store(backend, auto_migrate=True) as other:
            for reader in (opened, other):
                bodies = [reader.read_at(key, revision=r).body for r in range(1, written + 1)]
                for change, before, after in zip(changes[1:], bodies[:-1], bodies[1:], strict=True):
                    assert before is not None and after is not None
                    assert orjson.dumps([e.to_json() for e in change.edits]) == orjson.dumps(
                        [e.to_json() for e in diff(before, after)]
                    )
            assert orjson.dumps(other.get(key).body) == orjson.dumps(opened.get(key).body)


CHILD = textwrap.dedent(
    """
    import sys, threading
    from stateflow.langgraph import StateflowSaver, StateflowStore
    from stateflow.states import StatesService
    from stateflow.store import open_store

    states = StatesService(open_store(sys.argv[1], auto_migrate=True))
    tag = sys.argv[2]
    saver, store = StateflowSaver(states), StateflowStore(states)
    lock = threading.Lock()
    shared = {"configurable": {"thread_id": "shared", "checkpoint_ns": "", "checkpoint_id": "c0"}}

    def ack(*what):
        with lock:
            print(*what, flush=True)

    def checkpoints(t):
        from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
        config = {"configurable": {"thread_id": f"{tag}-{t}", "checkpoint_ns": ""}}
        n = 0
        while True:
            n += 1
            cp = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n})
            config = saver.put(config, cp, {"step": n}, {"n": n})
            ack("cp", f"{tag}-{t}", config["configurable"]["checkpoint_id"])
            saver.put_writes(shared, [("n", n)], f"{tag}-{t}-{n}")  # one record, every writer
            ack("w", f"{tag}-{t}-{n}")
            store.put(("mem", tag), f"k{t}", {"n": n})
            ack("item", tag, t, n)

    def general():  # the states pipeline, on the same writes record, in the earlier shape
        # (each of its entries moved into the current shape by the saver's next write)
        subject = saver.records.subject("writes", saver._key("shared", "", "c0"))
        n = 0
        while True:
            n += 1
            states.apply(saver.records.state, subject,
                         [{"op": "set", "path": ["w0", f"g-{tag}:{n}"],
                           "value": {"task_id": f"g-{tag}", "idx": n, "channel": "n", "value": {"json": n},
                                     "task_path": ""}}],
                         origin={"consumer": "general"})
            ack("g", f"g-{tag}:{n}")

    for t in range(3):
        threading.Thread(target=checkpoints, args=(t,), daemon=True).start()
    threading.Thread(target=general, daemon=True).start()
    threading.Event().wait()
    """
)


def test_concurrent_lean_and_general_writers_keep_every_acknowledged_write_through_kill_9(
    backend: str,
) -> None:
    with open_store(backend, auto_migrate=True) as opened:  # declared once, before the race
        states = StatesService(opened)
        StateflowSaver(states), StateflowStore(states)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, backend, tag],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ,
        )
        for tag in ("a", "b")
    ]
    acked: list[list[str]] = []
    deadline = time.monotonic() + 300  # (a safety net: the loop ends at 400 acknowledged writes)
    streams = {c.stdout: c for c in children if c.stdout is not None}
    try:
        while len(acked) < 400 and time.monotonic() < deadline and streams:
            ready, _, _ = select.select(list(streams), [], [], 1)
            for stream in ready:
                line = stream.readline()
                if not line:
                    streams.pop(stream)
                    continue
                acked.append(line.split())
    finally:
        for child in children:
            child.send_signal(signal.SIGKILL)
    errors = [c.communicate()[1] for c in children]
    kinds = {a[0] for a in acked}
    assert kinds == {"cp", "w", "item", "g"}, errors
    with open_store(backend) as opened:
        states = StatesService(opened)
        saver, store = StateflowSaver(states), StateflowStore(states)
        for what in acked:
            if what[0] == "cp":
                config: Any = {
                    "configurable": {"thread_id": what[1], "checkpoint_ns": "", "checkpoint_id": what[2]}
                }
                assert saver.get_tuple(config) is not None, what
        shared = saver.records.subject("writes", saver._key("shared", "", "c0"))
        record = states.read(saver.records.state, shared)
        assert record is not None
        held = {name for bucket, entries in record["data"].items() if bucket != "config" for name in entries}
        wanted = {f"{w[1]}:0" for w in acked if w[0] == "w"} | {w[1] for w in acked if w[0] == "g"}
        assert wanted <= held
        # every write of the shared record is one revision with its change row, none lost
        key = DocKey(saver.records.state, _encoded(shared))
        assert len(opened.history([key], limit=100_000)) == record["revision"]
        for what in acked:
            if what[0] == "item":
                item = store.get(("mem", what[1]), f"k{what[2]}")
                assert item is not None and item.value["n"] >= int(what[3]), what
        assert check_store(opened).problems == []
