"""PostgreSQL: an optimistic write of documents never seen creates their rows in its commit.

Their ids are taken from the sequence ahead, a block at a time; the commit inserts the rows and
writes them in one transaction (one round trip). A document that had a row after all (another
store made it) makes the commit's check fail, and the write is done on the row that exists.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from stateflow.aio import call, open_store_async
from stateflow.errors import StoreError
from stateflow.store import DocKey, Document, Write, open_store
from stateflow.store.id_blocks import RESERVED_IDS
from stateflow.store.postgres import PostgresStore


def _set(
    *values: tuple[DocKey, dict[str, Any]],
) -> Callable[[dict[DocKey, Document]], tuple[list[Write], None]]:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].value, body, docs[key].revision) for key, body in values], None

    return compute


@contextmanager
def _counted(store: PostgresStore) -> Iterator[list[int]]:
    """Count the connections the store takes from its pool (each use here is one round trip)."""
    taken: list[int] = []
    pool = store._pool
    real = pool.connection

    def counting(*args: Any, **kwargs: Any) -> Any:
        taken.append(1)
        return real(*args, **kwargs)

    pool.connection = counting
    try:
        yield taken
    finally:
        pool.connection = real


def test_a_new_document_is_created_and_written_in_one_round_trip(pg_schema_url: str) -> None:
    store = open_store(pg_schema_url, auto_migrate=True)
    other = open_store(pg_schema_url, auto_migrate=True)
    try:
        assert isinstance(store, PostgresStore)
        store.update([DocKey("s", "warm")], _set((DocKey("s", "warm"), {"n": 0})), optimistic=True)
        with _counted(store) as taken:
            for n in range(5):
                key = DocKey("s", f"new-{n}")
                commit, _ = store.update([key], _set((key, {"n": n})), optimistic=True)
                assert commit.revisions[key] == 1
        assert len(taken) == 5  # one connection use each: created and committed together
        for n in range(5):
            key = DocKey("s", f"new-{n}")
            assert other.get(key).body == {"n": n}
            assert [c.revision for c in other.history([key])] == [1]
        # a document another store created: the ids handed out here are not its row's, the
        # commit's check fails and the write lands on the row that exists
        made = DocKey("s", "made-elsewhere")
        other.update([made], _set((made, {"by": "other"})), optimistic=True)
        store.update([made], _set((made, {"by": "store"})), optimistic=True)
        assert other.get(made).body == {"by": "store"} and other.get(made).revision == 2
        assert [c.revision for c in other.history([made])] == [2, 1]
        # a new document beside a known one: the new row is created first, then both commit
        known, new = DocKey("s", "new-0"), DocKey("s", "beside")
        store.update([known, new], _set((known, {"n": 10}), (new, {"n": 11})), optimistic=True)
        assert other.get(known).body == {"n": 10} and other.get(known).revision == 2
        assert other.get(new).body == {"n": 11} and other.get(new).revision == 1
        assert store.count("s") == other.count("s") == 8
    finally:
        store.close()
        other.close()


@pytest.mark.parametrize("on_loop", [False, True])
def test_a_failed_create_and_commit_says_why_and_leaves_the_store_usable(
    pg_schema_url: str, on_loop: bool
) -> None:
    """When the commit that creates a row fails (here: the documents' sequence was set back, so
    the id taken is an existing document's), the caller gets the database's refusal — on the
    async pool's connections too — nothing is written, and the store goes on writing."""
    taken = open_store(pg_schema_url, auto_migrate=True)
    first = DocKey("s", "first")
    taken.update([first], _set((first, {"n": 1})), optimistic=True)
    taken.close()
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        conn.execute("SELECT setval(pg_get_serial_sequence('documents', 'doc_id'), 1, false)")
    clash, later = DocKey("s", "clash"), DocKey("s", "later")

    def attempt(store: Any) -> None:
        with pytest.raises(StoreError, match="duplicate key"):
            store.update([clash], _set((clash, {"n": 2})), optimistic=True)
        assert store.get(clash).body is None
        with psycopg.connect(pg_schema_url, autocommit=True) as conn:  # past the existing ids
            conn.execute("SELECT setval(pg_get_serial_sequence('documents', 'doc_id'), 1000)")
        store._spare_ids.clear()
        store.update([later], _set((later, {"n": 3})), optimistic=True)
        assert store.get(later).body == {"n": 3} and store.get(first).body == {"n": 1}

    if not on_loop:
        store = open_store(pg_schema_url, auto_migrate=True)
        try:
            attempt(store)
        finally:
            store.close()
        return

    async def main() -> None:
        store = await open_store_async(pg_schema_url, auto_migrate=True)
        try:
            await call(store, attempt, store)
        finally:
            await call(store, store.close)

    asyncio.run(main())


def test_many_new_documents_at_once_on_the_async_pool(pg_schema_url: str) -> None:
    """Tasks of one event loop creating documents at the same moment all need ids, more than
    one block of them: none waits for another's round trip with the loop's thread stopped
    (a task holding the ids' lock across its query, another waiting for it, stopped the loop)."""
    keys = [DocKey("s", f"task-{n}") for n in range(3 * RESERVED_IDS)]
    done: list[int] = []

    async def main() -> None:
        store = await open_store_async(pg_schema_url, auto_migrate=True)
        try:
            writes = [
                call(store, store.update, [key], _set((key, {"n": n})), optimistic=True)
                for n, key in enumerate(keys)
            ]
            done.extend(
                commit.revisions[key]
                for (commit, _), key in zip(await asyncio.gather(*writes), keys, strict=True)
            )
        finally:
            await call(store, store.close)

    runner = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    runner.start()
    runner.join(120)
    assert not runner.is_alive(), "the event loop stopped"
    assert done == [1] * len(keys)
    check = open_store(pg_schema_url, auto_migrate=True)
    try:
        assert [check.get(key).body for key in keys] == [{"n": n} for n in range(len(keys))]
    finally:
        check.close()
