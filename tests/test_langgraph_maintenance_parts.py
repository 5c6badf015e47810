"""``StateflowSaver``'s thread maintenance in parts of one transaction: ``delete_thread`` and
``copy_thread`` read, write and send ``maintenance_part`` records at a time, so what they hold
at once is a part, not the thread (34,000 checkpoints erased whole held ~1.1 GB), and on
PostgreSQL each part's rows are one statement (a copy's one statement outlasted the statement
timeout); still one transaction and one transition. On both backends."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from stateflow.langgraph import StateflowSaver
from stateflow.states import StatesService
from stateflow.states.batch import apply_items_in_parts, erase_item
from stateflow.states.models import StateSubject
from stateflow.states.pipeline import RecordWrite
from stateflow.store import DocKey, SqlStore, open_store
from stateflow.store.check import check_store
from stateflow.store.rows import lock_order

PART = 10


def _thread(saver: StateflowSaver, thread: str, count: int) -> list[str]:
    """``count`` checkpoints, each with a pending write and a value of its own: their keys."""
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    keys = []
    for n in range(count):
        checkpoint = generate_checkpoint(
            channel_values={"n": n, "text": f"{n:04d}" * 250}, channel_versions={"n": n + 1, "text": n + 1}
        )
        config = saver.put(config, checkpoint, generate_metadata(step=n), {"n": n + 1, "text": n + 1})
        saver.put_writes(config, [("n", n)], f"task-{n}")
        keys.append(saver._key(thread, "", config["configurable"]["checkpoint_id"]))
    return keys


def _seqs(store: SqlStore, saver: StateflowSaver, keys: list[str]) -> set[int]:
    """The seqs of the newest changes of these checkpoints' records (both kinds)."""
    doc_keys = [saver.records.doc_key(kind, key) for key in keys for kind in ("checkpoint", "writes")]
    return {store.history([key], limit=1)[0].seq for key in doc_keys}


def _peak(call: Any) -> int:
    """The most bytes Python held at once during ``call`` beyond what it leaves held
    (allocations counted, not timed): what a part's work holds while it runs. What stays
    after the call — the store's caches of the records it read and wrote, bounded by their
    own limits (``Store.cache_recent``) — grows with the thread, and with when the collector
    happened to run, which made a peak taken whole vary from run to run."""
    gc.collect()
    tracemalloc.start()
    try:
        call()
        held, peak = tracemalloc.get_traced_memory()
        return peak - held
    finally:
        tracemalloc.stop()


def test_delete_and_copy_of_a_thread_hold_one_part_at_a_time_in_one_transition(backend: str) -> None:
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        small, large = _thread(saver, "s", 12), _thread(saver, "l", 60)
    finally:
        store.close()
    store = open_store(backend, auto_migrate=True)  # a maintenance job: nothing cached
    try:
        saver = StateflowSaver(StatesService(store))
        saver.maintenance_part = PART
        saver.copy_thread("s", "s2")  # (warm: the statements and the code paths met once)
        copied = list(saver.list({"configurable": {"thread_id": "s2"}}))
        assert [t.checkpoint for t in copied] == [
            t.checkpoint for t in saver.list({"configurable": {"thread_id": "s"}})
        ]
        assert all(t.pending_writes and len(t.pending_writes) == 1 for t in copied)
        assert len(_seqs(store, saver, [k.replace("s/", "s2/", 1) for k in small])) == 1
        saver.delete_thread("s2")

        # a thread five times as long costs about what a short one does: one part at a time
        # (before, every record of the thread was held at once: ~5x the short one's peak)
        copy_small = _peak(lambda: saver.copy_thread("s", "s3"))
        copy_large = _peak(lambda: saver.copy_thread("l", "l2"))
        delete_small = _peak(lambda: saver.delete_thread("s3"))
        delete_large = _peak(lambda: saver.delete_thread("l2"))
        assert copy_large < 3 * copy_small, (copy_small, copy_large)
        assert delete_large < 3 * delete_small, (delete_small, delete_large)

        # each all in one transition, however many parts
        saver.copy_thread("l", "l3")
        target = [k.replace("l/", "l3/", 1) for k in large]
        assert len(_seqs(store, saver, target)) == 1
        assert len(list(saver.list({"configurable": {"thread_id": "l3"}}))) == 60
        saver.delete_thread("l3")
        assert list(saver.list({"configurable": {"thread_id": "l3"}})) == []
        assert all(store.get(saver.records.doc_key("checkpoint", k)).body is None for k in target)
        assert len(_seqs(store, saver, target)) == 1
        assert len(list(saver.list({"configurable": {"thread_id": "l"}}))) == 60
        # the transitions list every change they made (SQLite keeps their keys on the row)
        assert check_store(store).ok
    finally:
        store.close()


def test_a_postgres_copy_sends_its_rows_a_part_per_statement(pg_schema_url: str) -> None:
    store = open_store(pg_schema_url, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        keys = _thread(saver, "t", 25)  # 50 records: 5 parts of 10
        saver.maintenance_part = PART
        saver.copy_thread("t", "u")
        [seq] = _seqs(store, saver, [k.replace("t/", "u/", 1) for k in keys])
    finally:
        store.close()
    with psycopg.connect(pg_schema_url) as conn:
        # each statement of a transaction has its own command id, which the rows it inserted
        # keep (``cmin``): the copy's member rows, inserted set-wise by the write function, came
        # from one of its calls per part
        [(statements, records)] = conn.execute(
            "SELECT count(DISTINCT m.cmin::text::int), count(DISTINCT m.doc_id) FROM members m "
            "WHERE m.doc_id IN (SELECT doc_id FROM changes WHERE seq = %s)",
            (seq,),
        ).fetchall()
    assert records == 50
    assert statements == 5


def test_a_state_with_aliases_is_copied_and_deleted_as_one_batch(store: SqlStore) -> None:
    # a folded subject resolves to its survivor, and an erase takes its aliases with it: where
    # the state has aliases the call runs as one batch, which does both (the parts name records
    # by their own keys)
    states = StatesService(store)
    saver = StateflowSaver(states)
    saver.maintenance_part = PART
    other = _thread(saver, "x", 2)
    records = saver.records
    states.fold(
        records.state, records.subject("writes", other[0]), records.subject("writes", other[1]), "switch"
    )
    source = _thread(saver, "t", 15)
    saver.copy_thread("t", "u")
    assert [t.checkpoint for t in saver.list({"configurable": {"thread_id": "u"}})] == [
        t.checkpoint for t in saver.list({"configurable": {"thread_id": "t"}})
    ]
    assert len(_seqs(store, saver, [k.replace("t/", "u/", 1) for k in source])) == 1
    saver.delete_thread("t")
    assert list(saver.list({"configurable": {"thread_id": "t"}})) == []
    assert len(_seqs(store, saver, source)) == 1
    saver.delete_thread("x")  # the folded record's alias goes with the survivor
    assert not store.get(DocKey("_aliases", records.state)).body


def test_a_call_failing_in_a_later_part_writes_nothing(store: SqlStore) -> None:
    # the parts before the failing one were sent already (their rows, on PostgreSQL their
    # statements): the one transaction takes them back, and no transition is left behind
    states = StatesService(store)
    saver = StateflowSaver(states)
    keys = _thread(saver, "t", 15)  # 30 records: 3 parts of 10
    records = saver.records
    doc_keys = [records.doc_key(kind, key) for key in keys for kind in ("checkpoint", "writes")]
    before = store.transitions(after_seq=0, limit=1000)

    last = max(doc_keys, key=lock_order)

    def failing(part: Sequence[DocKey], docs: object) -> list[RecordWrite]:
        if last in part:  # (two parts erased and sent before it)
            raise RuntimeError("stopped in the last part")
        return [erase_item(records.state, StateSubject.decode(k.subject)) for k in part]

    with pytest.raises(RuntimeError, match="last part"):
        apply_items_in_parts(states, records.state, doc_keys, failing, part=PART)
    assert store.transitions(after_seq=0, limit=1000) == before
    assert all(store.get(k).body is not None for k in doc_keys)
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 15
    assert check_store(store).ok
