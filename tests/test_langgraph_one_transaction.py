"""The LangGraph adapters' maintenance calls and batches are each one transaction, on both
backends: a thread copied or deleted, a store batch's puts and deletes — whatever their number
(the published states batch takes at most 100 records a call), so that one cut short by a close,
a crash or a failure of the store leaves none of it written."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.store.base import PutOp

from stateflow.errors import InvalidJSON
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import DocKey, SqlStore, open_store
from stateflow.store.core import ROWS_PER_QUERY
from stateflow.store.sqlite import SqliteStore


def last_seq(store: SqlStore, key: DocKey) -> int:
    [change] = store.history([key], limit=1)
    return change.seq


def thread(saver: StateflowSaver, thread_id: str, count: int) -> list[str]:
    """``count`` checkpoints, each with a pending write: their record keys."""
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    keys = []
    for n in range(count):
        checkpoint = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n + 1})
        config = saver.put(config, checkpoint, generate_metadata(step=n), {"n": n + 1})
        saver.put_writes(config, [("n", n)], f"task-{n}")
        keys.append(saver._key(thread_id, "", config["configurable"]["checkpoint_id"]))
    return keys


def records(saver: StateflowSaver, keys: list[str]) -> list[DocKey]:
    return [saver.records.doc_key(kind, key) for key in keys for kind in ("checkpoint", "writes")]


def test_a_thread_of_more_records_than_one_states_batch_is_copied_and_deleted_in_one_transaction(
    store: SqlStore,
) -> None:
    saver = StateflowSaver(StatesService(store))
    source = thread(saver, "t", 60)  # 120 records: more than a published batch takes
    saver.copy_thread("t", "u")
    copied = [key.replace("t/", "u/", 1) for key in source]
    assert len({last_seq(store, key) for key in records(saver, copied)}) == 1  # one transition
    listed = list(saver.list({"configurable": {"thread_id": "u"}}))
    assert len(listed) == 60 and all(len(t.pending_writes or []) == 1 for t in listed)
    assert [t.checkpoint for t in listed] == [
        t.checkpoint for t in saver.list({"configurable": {"thread_id": "t"}})
    ]
    saver.delete_thread("t")
    assert list(saver.list({"configurable": {"thread_id": "t"}})) == []
    gone = records(saver, source)
    assert all(store.get(key).body is None for key in gone)
    assert len({last_seq(store, key) for key in gone}) == 1  # the erases: one transition
    assert len(list(saver.list({"configurable": {"thread_id": "u"}}))) == 60


def test_a_store_batch_deletes_in_the_transaction_of_its_puts(store: SqlStore) -> None:
    items = StateflowStore(StatesService(store))
    for key in ("a", "b", "c"):
        items.put(("ns",), key, {"v": key})
    items.batch([PutOp(("ns",), "a", None), PutOp(("ns",), "d", {"v": "d"}), PutOp(("ns",), "c", None)])
    assert sorted(i.key for i in items.search(("ns",))) == ["b", "d"]
    keys = [items.records.doc_key("item", items.subject_key(("ns",), k)) for k in ("a", "c", "d")]
    assert len({last_seq(store, key) for key in keys}) == 1
    # a refused put refuses the batch's deletes with it
    before = [last_seq(store, key) for key in keys]
    refused = [PutOp(("ns",), "b", None), PutOp(("ns",), "e", {"v": float("nan")})]
    with pytest.raises(InvalidJSON):
        items.batch(refused)
    assert sorted(i.key for i in items.search(("ns",))) == ["b", "d"]
    assert [last_seq(store, key) for key in keys] == before


def test_an_item_erased_in_a_batch_takes_its_aliases_with_it_as_an_erase_does(store: SqlStore) -> None:
    states = StatesService(store)
    items = StateflowStore(states)
    items.put(("ns",), "old", {"v": 1})
    items.put(("ns",), "new", {"v": 2})
    state = items.records.state
    states.fold(state, items.subject(("ns",), "old"), items.subject(("ns",), "new"), "switch")
    aliases = DocKey("_aliases", state)
    assert store.get(aliases).body  # old now reads new
    items.batch([PutOp(("ns",), "old", None), PutOp(("ns",), "other", {"v": 3})])
    assert not store.get(aliases).body  # the record and its alias gone together
    assert items.get(("ns",), "new") is None and items.get(("ns",), "old") is None
    items.put(("ns",), "old", {"v": 4})  # a record of its own again
    found = items.get(("ns",), "old")
    assert found is not None and found.value == {"v": 4} and items.get(("ns",), "new") is None


def test_a_store_batch_of_more_puts_than_one_statement_checks_stays_within_sqlite_limits(
    tmp_path: Path,
) -> None:
    # Every statement of a write names at most ``ROWS_PER_QUERY`` documents, two parameters
    # each: an optimistic commit checks every document it names in one statement, so one of
    # more takes the locked path, which reads their rows in parts. The writer's connection is
    # held to just that many parameters (SQLite's own default is 32,766; this build's may be
    # higher): a batch of more puts than that check holds is written whole, in one transition.
    store = open_store(str(tmp_path / "store.db"))
    try:
        assert isinstance(store, SqliteStore)
        store._writer().setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 2 * ROWS_PER_QUERY + 16)
        items = StateflowStore(StatesService(store))
        count = ROWS_PER_QUERY + 100
        items.batch([PutOp(("ns",), f"k{n}", {"n": n}) for n in range(count)])
        keys = [items.records.doc_key("item", items.subject_key(("ns",), f"k{n}")) for n in (0, count - 1)]
        assert len({last_seq(store, key) for key in keys}) == 1
        assert len(items.search(("ns",), limit=count + 1)) == count
    finally:
        store.close()


def test_deleting_checkpoints_without_pending_writes_makes_no_rows_for_them(store: SqlStore) -> None:
    # A checkpoint without pending writes has no writes record: the erase names only the
    # records there, so no document row (absent, unused) is made for the writes it never had.
    saver = StateflowSaver(StatesService(store))
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for n in range(5):
        checkpoint = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n + 1})
        config = saver.put(config, checkpoint, generate_metadata(step=n), {"n": n + 1})

    def rows() -> int:
        with store._read_tx() as tx:
            [(count,)] = tx.all("SELECT count(*) FROM documents")
        return int(count)

    before = rows()
    saver.delete_thread("t")
    assert list(saver.list({"configurable": {"thread_id": "t"}})) == []
    assert rows() == before
