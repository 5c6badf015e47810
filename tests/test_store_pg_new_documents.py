"""PostgreSQL: an optimistic write of documents never seen creates their rows in its commit.

Their ids are taken from the sequence ahead, a block at a time; the commit inserts the rows and
writes them in one transaction (one round trip). A document that had a row after all (another
store made it) makes the commit's check fail, and the write is done on the row that exists.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from typing import Any

import orjson
import psycopg
import pytest

from stateflow.aio import call, open_store_async
from stateflow.errors import StoreError
from stateflow.store import DocKey, Document, Write, open_store
from stateflow.store.id_blocks import MAX_RESERVED_IDS, RESERVED_IDS
from stateflow.store.postgres import PostgresStore
from tests.pg_helpers import connections_taken


def _set(
    *values: tuple[DocKey, dict[str, Any]],
) -> Callable[[dict[DocKey, Document]], tuple[list[Write], None]]:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].value, body, docs[key].revision) for key, body in values], None

    return compute


def test_a_new_document_is_created_and_written_in_one_round_trip(pg_schema_url: str) -> None:
    # (a pool of two keeps no connection for commits sent alone: each commit takes one)
    store = PostgresStore(pg_schema_url, max_size=2, auto_migrate=True)
    other = open_store(pg_schema_url, auto_migrate=True)
    try:
        assert isinstance(store, PostgresStore)
        store.update([DocKey("s", "warm")], _set((DocKey("s", "warm"), {"n": 0})), optimistic=True)
        with connections_taken(store) as taken:
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


def _counters_hold(store: PostgresStore) -> None:
    """The maintained counters equal what the rows count now."""
    with store._read_tx() as tx:
        stored, counted = store.recount(tx)
    assert stored == counted


def test_new_documents_are_left_absent_and_uncounted_when_the_commit_is_refused(
    pg_schema_url: str,
) -> None:
    """When the commit's check fails after it created some rows — here the second of two new
    documents was created by another store meanwhile — the rows it created stay absent and the
    counters (updated in place since schema 13) stay true; the write then lands on the rows
    that exist."""
    store = open_store(pg_schema_url, auto_migrate=True)
    other = open_store(pg_schema_url, auto_migrate=True)
    try:
        assert isinstance(store, PostgresStore) and isinstance(other, PostgresStore)
        a, b = DocKey("s", '["agent","x","k1","a"]'), DocKey("s", '["agent","x","k1","b"]')
        other.update([b], _set((b, {"n": 0, "by": "other"})), optimistic=True)
        with connections_taken(store) as taken:
            commit, _ = store.update([a, b], _set((a, {"n": 1}), (b, {"n": 2})), optimistic=True)
        assert len(taken) > 1  # the one-statement commit was refused: the write went another way
        assert commit.revisions == {a: 1, b: 2}
        assert other.get(a).body == {"n": 1} and other.get(b).body == {"n": 2}
        assert other.count("s") == 2 and other.kind_counts("s") == {"k1": 2}
        assert other.member_counts("s") == {"n": 2}
        _counters_hold(other)
        # a refused commit of new documents alone: its created row stays absent, counted nowhere
        c, d = DocKey("s", '["agent","x","k2","c"]'), DocKey("s", '["agent","x","k2","d"]')
        other.update([d], _set((d, {"n": 0})), optimistic=True)
        with psycopg.connect(pg_schema_url, autocommit=True) as conn:
            ids = store._reserve(2)
            arrays = {
                "doc_rows": [],
                "new_keys": [("s", c.subject, ids[0]), ("s", d.subject, ids[1])],
                "lock_keys": [("s", c.subject, ids[0], 0), ("s", d.subject, ids[1], 0)],
            }
            row = conn.execute(
                "SELECT stateflow_commit(%s::json, 'now', '\\x7b7d'::bytea, 1, NULL, NULL, NULL)",
                (orjson.dumps(arrays).decode(),),
            ).fetchone()
            assert row == (None,)
            created = conn.execute(
                "SELECT present, revision FROM documents WHERE state = 's' AND subject = %s", (c.subject,)
            ).fetchall()
            assert created == [(0, 0)]
        assert other.kind_counts("s") == {"k1": 2, "k2": 1}
        _counters_hold(other)
        store.update([c], _set((c, {"n": 3})), optimistic=True)
        assert other.get(c).body == {"n": 3} and other.kind_counts("s") == {"k1": 2, "k2": 2}
        _counters_hold(other)
    finally:
        store.close()
        other.close()


def test_a_write_after_a_read_keeps_the_shared_rows_it_read(pg_schema_url: str) -> None:
    """A store that first writes a document after reading it (another store wrote it and its
    shared catalog; a second shared document has no row) keeps the shared rows it read, the
    missing one too: its next write of the document is one statement, with no read first."""
    other = open_store(pg_schema_url, auto_migrate=True)
    # (a pool of two keeps no connection for commits sent alone: each statement takes one)
    store = PostgresStore(pg_schema_url, max_size=2, auto_migrate=True)
    try:
        catalog, absent, doc = DocKey("_cat", "c"), DocKey("_cat", "none"), DocKey("s", "d")
        other.update([catalog, doc], _set((catalog, {"v": 1}), (doc, {"n": 0})), optimistic=True)
        store.get(doc)  # (a read leaves the shared rows unknown)

        def bump(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            assert docs[catalog].body == {"v": 1}
            body = docs[doc].body
            assert body is not None
            return [Write.between(doc, body, {"n": body["n"] + 1}, docs[doc].revision)], None

        def before(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            assert docs[absent].body is None
            return bump(docs)

        store.update([doc], before, shared=[catalog, absent], optimistic=True)
        with connections_taken(store) as taken:
            for _ in range(3):
                store.update([doc], before, shared=[catalog, absent], optimistic=True)
        assert len(taken) == 3  # one statement each
        assert other.get(doc).body == {"n": 4}
        # the missing document made meanwhile: the one-statement commit is refused, the write
        # reads it, and the next one computes on it again with no read
        other.update([absent], _set((absent, {"now": True})), optimistic=True)

        def check(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            assert docs[absent].body == {"now": True}
            return bump(docs)

        store.update([doc], check, shared=[catalog, absent], optimistic=True)
        with connections_taken(store) as taken:
            store.update([doc], check, shared=[catalog, absent], optimistic=True)
        assert len(taken) == 1
        assert other.get(doc).body == {"n": 6}
    finally:
        store.close()
        other.close()


def test_a_store_creating_many_documents_reserves_ids_in_growing_blocks(pg_schema_url: str) -> None:
    """Each block of ids is a round trip of its own: a store that keeps creating documents
    reserves twice as many each time, up to ``MAX_RESERVED_IDS``, and every document created
    gets an id of its own from them."""
    store = open_store(pg_schema_url, auto_migrate=True)
    reserved: list[int] = []  # the sequence's value after each block
    try:
        with psycopg.connect(pg_schema_url, autocommit=True) as conn:

            def top() -> int:
                row = conn.execute("SELECT last_value FROM documents_doc_id_seq").fetchone()
                assert row is not None
                return int(row[0])

            for n in range(3000):
                key = DocKey("s", f"d{n}")
                store.update([key], _set((key, {"n": n})), optimistic=True)
                if not reserved or top() != reserved[-1]:
                    reserved.append(top())
            ids = [int(r[0]) for r in conn.execute("SELECT doc_id FROM documents WHERE state = 's'")]
        blocks = [b - a for a, b in itertools.pairwise(reserved)]
        grown = [min(RESERVED_IDS << k, MAX_RESERVED_IDS) for k in range(1, len(blocks) + 1)]
        assert blocks == grown and blocks[-1] == MAX_RESERVED_IDS
        assert len(ids) == len(set(ids)) == 3000 and max(ids) <= reserved[-1]
        assert store.get(DocKey("s", "d2999")).body == {"n": 2999}
    finally:
        store.close()
