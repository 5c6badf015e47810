"""The saver's checkpoint keys: the id ascending (its UTF-8 in hex), a thread listed newest first
by a backward scan of the store; a store written with the earlier, inverted ids renamed once at
the saver's open (in batches, its mark last), read in either form meanwhile. On both backends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, TypedDict

import orjson
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.graph import END, START, StateGraph

from stateflow.errors import InvalidInput
from stateflow.langgraph import StateflowSaver
from stateflow.langgraph.checkpoint_keys import mark
from stateflow.states import StatesService
from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.store.check import check_store
from stateflow.subjects import encode_subject

STATE = "langgraph_checkpoints"


def _inverted(checkpoint_id: str) -> str:
    """A checkpoint id as earlier versions spelt it in a key: each UTF-8 byte complemented, in
    hex, then ``g`` (newest first in subject order)."""
    return checkpoint_id.encode().translate(bytes(range(255, -1, -1))).hex() + "g"


def _to_inverted_keys(location: str) -> int:
    """Leave the store at ``location`` as earlier versions wrote it: every checkpoint and writes
    subject keyed by the inverted id, no mark. Returns how many subjects moved."""
    store = open_store(location, auto_migrate=True)
    try:
        moved = 0
        with store._write_tx() as tx:
            for (subject,) in tx.all("SELECT subject FROM documents WHERE state = ?", (STATE,)):
                target_kind, target_name, kind, key = orjson.loads(subject)
                if kind not in ("checkpoint", "writes"):
                    continue
                thread, _, spelt = key.rpartition("/")
                old = encode_subject(
                    target_kind, target_name, kind, f"{thread}/{_inverted(bytes.fromhex(spelt).decode())}"
                )
                tx.run(
                    "UPDATE documents SET subject = ? WHERE state = ? AND subject = ?", (old, STATE, subject)
                )
                moved += 1
            tx.run("DELETE FROM stateflow_meta WHERE key = ?", (mark(STATE)[0],))
        return moved
    finally:
        store.close()


def _stored_keys(store: SqlStore, kind: str = "checkpoint") -> list[str]:
    """The subject keys of the state's present records of ``kind``, in subject order."""
    with store._read_tx() as tx:
        rows = tx.all(
            "SELECT subject FROM documents WHERE state = ? AND present = 1 ORDER BY subject", (STATE,)
        )
    return [parts[3] for (subject,) in rows if (parts := orjson.loads(subject))[2] == kind]


def _read_only(location: str) -> str:
    if location.startswith("postgres"):
        return location + ("&" if "?" in location else "?") + "mode=ro"
    return f"sqlite:///{location}?mode=ro"


def _thread(saver: StateflowSaver, thread: str, count: int, ns: str = "") -> list[Any]:
    """``count`` checkpoints of one thread and namespace, each writing ``n`` (``a`` kept by the
    first), a pending write on every third; their configs, oldest first."""
    head: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    configs = []
    for n in range(count):
        checkpoint = generate_checkpoint(
            channel_values={"a": "first", "n": n}, channel_versions={"a": 1, "n": n + 1}
        )
        new: dict[str, Any] = {"a": 1, "n": n + 1} if n == 0 else {"n": n + 1}
        head = saver.put(head, checkpoint, generate_metadata(step=n), new)
        if n % 3 == 0:
            saver.put_writes(head, [("n", f"pending {n}")], f"task-{n}")
        configs.append(head)
    return configs


def _ids(tuples: Any) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in tuples]


def _listing(saver: StateflowSaver, thread: str) -> list[tuple[str, Any, Any]]:
    """What a thread lists as: each checkpoint's id, values and pending writes, newest first."""
    return [
        (t.config["configurable"]["checkpoint_id"], t.checkpoint["channel_values"], t.pending_writes)
        for t in saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    ]


def test_descending_scans_of_the_store(open_migrated: Any) -> None:
    """``scan``, ``read_under`` and ``read_first_under`` read a range backwards: reverse subject
    order, ``after`` then bounding from above (strictly), ``limit`` the first ones so read."""
    store = open_migrated()
    subjects = ["a/1", "a/2", "a/3", "a/4", "a/5", "b/1", "ab"]
    store.commit([Write.between(DocKey("s", x), None, {"v": x}, 0) for x in subjects])
    store.commit([Write.between(DocKey("s", "a/3"), {"v": "a/3"}, None, 1)])  # absent: never listed

    def scanned(**options: Any) -> list[str]:
        return [item.key.subject for item in store.scan("s", **options)]

    assert scanned(within="a/", descending=True) == ["a/5", "a/4", "a/2", "a/1"]
    assert scanned(within="a/", after="a/4", descending=True) == ["a/2", "a/1"]
    assert scanned(within="a/", after="a/5", limit=2, descending=True) == ["a/4", "a/2"]
    assert scanned(within="a/", after="a/1", descending=True) == []
    assert scanned(within="a/", after="zz", descending=True) == ["a/5", "a/4", "a/2", "a/1"]
    assert scanned(descending=True) == ["b/1", "ab", "a/5", "a/4", "a/2", "a/1"]
    assert scanned(after="ab", descending=True) == ["a/5", "a/4", "a/2", "a/1"]
    assert scanned(within="a/") == ["a/1", "a/2", "a/4", "a/5"]  # (ascending, as it was)
    assert [d.body for d in store.read_under("s", "a/", descending=True)] == [
        {"v": "a/5"},
        {"v": "a/4"},
        {"v": "a/2"},
        {"v": "a/1"},
    ]
    assert [d.key.subject for d in store.read_under("s", "a/", limit=3, descending=True)] == [
        "a/5",
        "a/4",
        "a/2",
    ]
    assert [d.key.subject for d in store.read_under("s", "a/", limit=2)] == ["a/1", "a/2"]
    firsts = store.read_first_under("s", ["a/", "b/", "c/", "a"], descending=True)
    assert [None if d is None else d.key.subject for d in firsts] == ["a/5", "b/1", None, "ab"]
    firsts = store.read_first_under("s", ["a/", "b/", "c/"])
    assert [None if d is None else d.key.subject for d in firsts] == ["a/1", "b/1", None]


def test_a_thread_is_stored_ascending_and_listed_newest_first(backend: str) -> None:
    """A new checkpoint's key lands last in its thread's (the id in hex: subject order is id
    order); ``list`` and ``get_tuple`` read the thread backwards: newest first, ``before``
    strictly older, ``limit`` and ``filter`` as LangGraph's savers answer them."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        configs = _thread(saver, "t", 7)
        inner = _thread(saver, "t", 2, ns="inner")
        _thread(saver, "u", 2)
        ids = [c["configurable"]["checkpoint_id"] for c in configs]
        assert ids == sorted(ids)  # (LangGraph's ids are time-ordered)
        stored = [k for k in _stored_keys(store) if k.startswith("t//")]
        assert stored == [saver._key("t", "", i) for i in ids]  # the newest last: appended
        assert all(k.rpartition("/")[2] == i.encode().hex() for k, i in zip(stored, ids, strict=True))

        thread: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        assert _ids(saver.list(thread)) == ids[::-1]
        assert _ids(saver.list(thread, before=configs[4])) == ids[3::-1]
        assert _ids(saver.list(thread, before=configs[4], limit=2)) == [ids[3], ids[2]]
        assert _ids(saver.list(thread, before=configs[0])) == []
        assert _ids(saver.list(thread, filter={"step": 5})) == [ids[5]]
        assert _ids(saver.list(thread, limit=1)) == [ids[6]]
        newest = saver.get_tuple(thread)
        assert newest is not None and newest.config == configs[6]
        assert newest.checkpoint["channel_values"] == {"a": "first", "n": 6}
        assert newest.pending_writes == [("task-6", "n", "pending 6")]
        older = saver.get_tuple(configs[3])
        assert older is not None and older.pending_writes == [("task-3", "n", "pending 3")]
        every = sorted([*ids, *(c["configurable"]["checkpoint_id"] for c in inner)], reverse=True)
        assert _ids(saver.list({"configurable": {"thread_id": "t"}})) == every
        assert len(list(saver.list(None))) == 11
    finally:
        store.close()


def test_a_checkpoint_id_too_long_for_a_key_is_refused_and_nothing_is_written(backend: str) -> None:
    """A checkpoint's key is its thread's parts and its id in hex, under the subject keys' bound
    (512 characters): an id past it is refused by ``put`` and ``put_writes`` — as a thread id
    past it is —, nothing written, where it used to be written under a key no other door of the
    store accepts."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        thread: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        head = saver.put(thread, generate_checkpoint(), generate_metadata(), {})
        before = _stored_keys(store), _stored_keys(store, "writes")
        long_id = "x" * 300  # (600 hex digits)
        with pytest.raises(
            InvalidInput, match="key is 603 characters long \\(at most 512\\): use shorter checkpoint ids"
        ):
            saver.put(head, {**generate_checkpoint(), "id": long_id}, generate_metadata(), {})
        long_config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": long_id}}
        with pytest.raises(InvalidInput, match="key is 603 characters long"):
            saver.put_writes(long_config, [("n", 1)], "task")
        assert (_stored_keys(store), _stored_keys(store, "writes")) == before
        assert saver.get_tuple(long_config) is None  # (a reader finds nothing under it)
        # the longest id that fits is written and read back
        fits = "y" * ((512 - len("t//")) // 2)
        written = saver.put(head, {**generate_checkpoint(), "id": fits}, generate_metadata(), {})
        saver.put_writes(written, [("n", 1)], "task")
        found = saver.get_tuple(written)
        assert found is not None and found.checkpoint["id"] == fits
        assert found.pending_writes == [("task", "n", 1)]
    finally:
        store.close()


class _Count(TypedDict):
    n: int


def test_a_graph_lists_its_history_newest_first_and_before(backend: str) -> None:
    """Through LangGraph's own API: a compiled graph's state history is newest first, and
    ``before`` a checkpoint gives those older than it."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        builder = StateGraph(_Count)
        builder.add_node("step", lambda s: {"n": s["n"] + 1})
        builder.add_edge(START, "step")
        builder.add_edge("step", END)
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "g"}}
        for _ in range(3):
            graph.invoke({"n": 0}, config)
        history = list(graph.get_state_history(config))
        ids = [h.config["configurable"]["checkpoint_id"] for h in history]
        assert ids == sorted(ids, reverse=True) and len(ids) >= 6
        assert graph.get_state(config).values == history[0].values
        before = list(graph.get_state_history(config, before=history[2].config))
        assert [h.config["configurable"]["checkpoint_id"] for h in before] == ids[3:]
        assert list(graph.get_state_history(config, limit=2)) == history[:2]
    finally:
        store.close()


def test_a_store_written_with_inverted_ids_is_read_then_renamed(backend: str) -> None:
    """A store as earlier versions left it (ids inverted, no mark) reads the same through a saver
    on it read-only (nothing renamed: either form read), then a saver that may write renames
    every subject once (the mark recorded), after which it lists, reads and keeps writing the
    same threads; a renamed checkpoint's audit trail and as-of reads are its own (its document
    did not move), and ``check`` finds nothing wrong."""
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        configs = _thread(saver, "t", 6)
        _thread(saver, "t", 2, ns="inner")
        _thread(saver, "u", 3)
        expected = _listing(saver, "t")
        every = _ids(saver.list(None))
        key = saver._key("t", "", configs[2]["configurable"]["checkpoint_id"])
        trail = states.writes(STATE, saver.records.subject("checkpoint", key))["items"]
        seq = trail[0]["seq"]
        then = states.read(STATE, saver.records.subject("checkpoint", key))
    finally:
        store.close()
    assert _to_inverted_keys(backend) == 11 + 4  # checkpoints, writes records

    store = open_store(_read_only(backend))
    try:
        saver = StateflowSaver(StatesService(store))
        assert not saver._ascending
        assert _listing(saver, "t") == expected
        assert _ids(saver.list(None)) == every
        newest = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert newest is not None and newest.config == configs[-1]
        assert saver.get_tuple(configs[3]) is not None
        assert all(k.endswith("g") for k in _stored_keys(store))  # nothing renamed
    finally:
        store.close()

    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        saver = StateflowSaver(states)
        assert saver._ascending and store.meta_value(mark(STATE)[0]) == mark(STATE)[1]
        assert not any(k.endswith("g") for k in [*_stored_keys(store), *_stored_keys(store, "writes")])
        assert _listing(saver, "t") == expected
        assert _ids(saver.list(None)) == every
        newest = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert newest is not None and newest.config == configs[-1]
        assert newest.pending_writes == expected[0][2]
        subject = saver.records.subject("checkpoint", key)
        assert states.writes(STATE, subject)["items"] == trail
        past = states.read(STATE, subject, seq=seq)
        assert past is not None and then is not None and past["data"] == then["data"]
        more = _thread_from(saver, configs[-1], 6)
        assert _ids(saver.list({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, limit=1)) == [
            more["configurable"]["checkpoint_id"]
        ]
        assert not check_store(store).problems
    finally:
        store.close()
    store = open_store(backend, auto_migrate=True)
    try:  # opened again: the mark says all is renamed, nothing is read for it
        assert StateflowSaver(StatesService(store))._ascending
    finally:
        store.close()


def _thread_from(saver: StateflowSaver, head: Any, n: int) -> Any:
    checkpoint = generate_checkpoint(channel_values={"n": n}, channel_versions={"a": 1, "n": n + 1})
    return saver.put(head, checkpoint, generate_metadata(step=n), {"n": n + 1})


_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from stateflow.langgraph import StateflowSaver, checkpoint_keys

    location, flag = sys.argv[1], Path(sys.argv[2])
    checkpoint_keys.RENAME_BATCH = 20
    real, seen = checkpoint_keys.renamed_subject, []

    def renamed(subject):
        seen.append(subject)
        if len(seen) == 30:  # the second batch, the first committed
            flag.write_text("renaming")
            time.sleep(600)
        return real(subject)

    checkpoint_keys.renamed_subject = renamed
    StateflowSaver.open(location)
    """
)


def test_a_rename_killed_half_way_reads_in_order_and_finishes_at_the_next_open(
    backend: str, tmp_path: Path
) -> None:
    """A process killed (SIGKILL) in the middle of the rename leaves the thread in both forms,
    the mark unrecorded: read read-only, it lists in order all the same; the next saver to open
    it finishes the rename, and the thread's maintenance (copy, prune, delete) works on it."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        configs = _thread(saver, "A", 60)
        expected = _listing(saver, "A")
    finally:
        store.close()
    _to_inverted_keys(backend)
    flag = tmp_path / "flag"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, backend, str(flag)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert child.poll() is None, "the renaming process ended before its third batch"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()

    store = open_store(_read_only(backend))
    try:
        keys = _stored_keys(store)
        assert 0 < sum(k.endswith("g") for k in keys) < len(keys)  # both forms in one thread
        assert store.meta_value(mark(STATE)[0]) is None
        saver = StateflowSaver(StatesService(store))
        assert _listing(saver, "A") == expected
        newest = saver.get_tuple({"configurable": {"thread_id": "A", "checkpoint_ns": ""}})
        assert newest is not None and newest.config == configs[-1]
        assert newest.pending_writes == expected[0][2]
    finally:
        store.close()

    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        assert saver._ascending
        assert not any(k.endswith("g") for k in [*_stored_keys(store), *_stored_keys(store, "writes")])
        assert _listing(saver, "A") == expected
        saver.copy_thread("A", "B")
        assert _listing(saver, "B") == expected
        saver.prune(["A"])
        assert _listing(saver, "A") == expected[:1]
        saver.delete_thread("B")
        assert _listing(saver, "B") == []
        assert not check_store(store).problems
    finally:
        store.close()


def _twin(location: str, thread: str, kind: str, checkpoint_id: str) -> None:
    """Write the record of ``kind`` of ``checkpoint_id`` (a thread of the default namespace),
    stored inverted, once more under its ascending key: as an earlier release still writing
    the store beside this one leaves it, a record in both forms (the rename cannot move it)."""
    store = open_store(location, auto_migrate=True)
    try:
        old = encode_subject("agent", "langgraph", kind, f"{thread}//{_inverted(checkpoint_id)}")
        new = encode_subject("agent", "langgraph", kind, f"{thread}//{checkpoint_id.encode().hex()}")
        body = store.read([DocKey(STATE, old)])[DocKey(STATE, old)].body
        assert body is not None
        store.commit([Write.between(DocKey(STATE, new), None, body, 0)])
    finally:
        store.close()


def _thread_records(store: SqlStore, thread: str) -> list[str]:
    """The keys of the thread's present records of either kind, in either form."""
    return [
        k
        for kind in ("checkpoint", "writes")
        for k in _stored_keys(store, kind)
        if k.startswith(f"{thread}/")
    ]


def test_a_blocked_rename_keeps_the_maintenance_of_a_writable_saver_whole(backend: str) -> None:
    """Where a record is in both forms (an earlier release writing beside this one), the rename
    leaves it, and the mark unrecorded: a saver that may write then names every record by its
    ascending key, whichever form it is stored in. A thread lists each checkpoint once; copy,
    prune and delete reach the records in either form (both of a record in both), so nothing
    of a pruned checkpoint or a deleted thread is left behind."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        configs = _thread(saver, "A", 6)
        _thread(saver, "u", 3)
        expected = _listing(saver, "A")
    finally:
        store.close()
    _to_inverted_keys(backend)
    ids = [c["configurable"]["checkpoint_id"] for c in configs]
    _twin(backend, "A", "checkpoint", ids[1])
    _twin(backend, "A", "writes", ids[0])
    _twin(backend, "A", "writes", ids[3])

    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        assert not saver._ascending and store.meta_value(mark(STATE)[0]) is None
        assert sum(k.endswith("g") for k in _thread_records(store, "A")) == 3  # the twins' others
        assert _listing(saver, "A") == expected
        saver.copy_thread("A", "B")
        assert _listing(saver, "B") == expected
        assert not any(k.endswith("g") for k in _thread_records(store, "B"))
        saver.prune(["A"])
        assert _listing(saver, "A") == expected[:1]
        newest = ids[-1].encode().hex()
        assert all(k.endswith(newest) for k in _thread_records(store, "A"))
        saver.delete_thread("B")
        assert _listing(saver, "B") == [] and _thread_records(store, "B") == []
        saver.delete_thread("A")
        assert _thread_records(store, "A") == []
        assert not check_store(store).problems
    finally:
        store.close()
    store = open_store(backend, auto_migrate=True)
    try:  # nothing of the twins left: the next open renames whatever is left, and marks it
        assert StateflowSaver(StatesService(store))._ascending
    finally:
        store.close()
