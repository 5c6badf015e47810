"""PostgreSQL group commit: one-statement commits that are ready at once share a transaction.

The commits below are forced into one group: the seq lock is held from another session, so the
first commit waits in the database while the others queue behind it in this process; once the
lock goes, the queued ones go out together.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import psycopg
import pytest

from stateflow.errors import StoreError
from stateflow.store import DocKey, Document, Write, open_store
from stateflow.store.postgres import _SEQ_LOCK, _SEQ_LOCK_KEY, PostgresStore

KEYS = [DocKey("g", f"d{i}") for i in range(6)]
SEQ_KEY = _SEQ_LOCK_KEY.replace("?", "%s")  # the store's seq lock, keyed by its schema
APP = f"group-commit-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pg(pg_schema_url: str) -> Any:
    store = open_store(f"{pg_schema_url}&application_name={APP}", auto_migrate=True)
    assert isinstance(store, PostgresStore)
    for key in KEYS:  # each document exists and is known here: the next writes are optimistic
        store.commit([Write.between(key, None, {"n": 0})])
    yield store
    store.close()


def _set(n: int) -> Callable[[dict[DocKey, Document]], tuple[list[Write], None]]:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        ((key, doc),) = docs.items()
        return [Write.between(key, doc.value, {"n": n}, doc.revision)], None

    return compute


def _grouped(
    store: PostgresStore, url: str, calls: Sequence[Callable[[], object]]
) -> list[BaseException | None]:
    """Run the calls on threads while the seq lock is held elsewhere, so that the first waits
    in the database and the rest queue behind it; then let go and collect the outcomes."""
    assert store._groups is not None
    outcomes: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            calls[i]()
        except BaseException as exc:
            outcomes[i] = exc

    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute(f"SELECT pg_advisory_lock({SEQ_KEY})", (_SEQ_LOCK,))
        threads = [threading.Thread(target=run, args=(0,))]
        threads[0].start()
        _wait_for(lambda: _waiting_for_seq_lock(holder) == 1 or outcomes[0] is not None)
        assert outcomes[0] is None, outcomes[0]
        threads += [threading.Thread(target=run, args=(i,)) for i in range(1, len(calls))]
        for t in threads[1:]:
            t.start()
        _wait_for(lambda: len(store._groups._pending) == len(calls) - 1)  # type: ignore[union-attr]
        holder.execute(f"SELECT pg_advisory_unlock({SEQ_KEY})", (_SEQ_LOCK,))
    for t in threads:
        t.join(30)
    return outcomes


def _waiting_for_seq_lock(conn: psycopg.Connection[Any]) -> int:
    """This test's sessions waiting for the seq lock (other stores on the server may wait too)."""
    row = conn.execute(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = "
        "'advisory' AND NOT l.granted AND l.classid = %s AND a.application_name = %s",
        (_SEQ_LOCK, APP),
    ).fetchone()
    return int(row[0]) if row else 0


def _wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "the commits never queued"
        time.sleep(0.002)


def _transactions_of_last(url: str, count: int) -> int:
    """How many database transactions wrote the last ``count`` transitions."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT xmin::text) FROM "
            "(SELECT xmin FROM transitions ORDER BY seq DESC LIMIT %s) t",
            (count,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_commits_ready_at_once_share_one_transaction_and_all_land(
    pg: PostgresStore, pg_schema_url: str
) -> None:
    calls = [partial(pg.update, [KEYS[i]], _set(i + 1), optimistic=True) for i in range(len(KEYS))]
    assert _grouped(pg, pg_schema_url, calls) == [None] * len(KEYS)
    assert pg._groups is not None and pg._groups.largest == len(KEYS) - 1
    # the first alone, the five queued behind it in one transaction
    assert _transactions_of_last(pg_schema_url, len(KEYS)) == 2
    with open_store(pg_schema_url) as fresh:  # another store object: nothing served from a cache
        assert [fresh.get(key).body for key in KEYS] == [{"n": i + 1} for i in range(len(KEYS))]
        seqs = sorted(fresh.get(key).seq or 0 for key in KEYS)
        assert len(set(seqs)) == len(KEYS)  # each write is its own transition


def test_a_failing_commit_fails_alone_and_the_rest_of_its_group_lands(
    pg: PostgresStore, pg_schema_url: str
) -> None:
    poisoned = KEYS[2]
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.subject = 'd2' THEN RAISE EXCEPTION 'refused for the test'; END IF; "
            "RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE UPDATE ON documents FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    calls = [partial(pg.update, [KEYS[i]], _set(i + 10), optimistic=True) for i in range(len(KEYS))]
    outcomes = _grouped(pg, pg_schema_url, calls)
    assert pg._groups is not None and pg._groups.largest == len(KEYS) - 1
    failed = outcomes[KEYS.index(poisoned)]
    assert isinstance(failed, StoreError) and "refused for the test" in str(failed)
    assert [o for i, o in enumerate(outcomes) if KEYS[i] != poisoned] == [None] * (len(KEYS) - 1)
    with open_store(pg_schema_url) as fresh:
        for i, key in enumerate(KEYS):
            assert fresh.get(key).body == ({"n": 0} if key == poisoned else {"n": i + 10})
            assert fresh.get(key).revision == (1 if key == poisoned else 2)


def test_a_failing_commit_alone_hands_the_sending_on_to_those_queued_behind_it(
    pg: PostgresStore, pg_schema_url: str
) -> None:
    # the first commit goes alone (no group made) and fails once the seq lock lets it go; the
    # five that queued meanwhile still go out, together, and land
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.subject = 'd0' THEN RAISE EXCEPTION 'refused for the test'; END IF; "
            "RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE UPDATE ON documents FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    calls = [partial(pg.update, [KEYS[i]], _set(i + 20), optimistic=True) for i in range(len(KEYS))]
    outcomes = _grouped(pg, pg_schema_url, calls)
    assert isinstance(outcomes[0], StoreError) and "refused for the test" in str(outcomes[0])
    assert outcomes[1:] == [None] * (len(KEYS) - 1)
    assert pg._groups is not None and pg._groups.largest == len(KEYS) - 1 and not pg._groups.busy
    assert _transactions_of_last(pg_schema_url, len(KEYS) - 1) == 1
    with open_store(pg_schema_url) as fresh:
        assert [fresh.get(key).body for key in KEYS] == [{"n": 0}] + [
            {"n": i + 20} for i in range(1, len(KEYS))
        ]
    pg.update([KEYS[1]], _set(99), optimistic=True)  # and the next commit goes alone again
    assert pg.get(KEYS[1]).body == {"n": 99}


def test_a_commit_alone_does_not_wait_for_a_group(pg: PostgresStore) -> None:
    assert pg._groups is not None
    before = pg._groups.groups
    for n in range(1, 4):
        pg.update([KEYS[0]], _set(n), optimistic=True)
    assert pg._groups.groups == before + 3 and pg._groups.largest == 1
    assert pg.get(KEYS[0]).body == {"n": 3}


def test_a_commit_alone_survives_its_prepared_statement_being_deallocated(pg_schema_url: str) -> None:
    # One connection: the commit statement prepared on it is dropped when psycopg runs
    # DEALLOCATE ALL there (it does after a ROLLBACK, as a refused write ends with); the next
    # commit prepares it again and lands, once.
    store = PostgresStore(pg_schema_url, max_size=1, auto_migrate=True)
    try:
        key = KEYS[0]
        store.commit([Write.between(key, None, {"n": 0})])
        store.update([key], _set(1), optimistic=True)
        with store._pool.connection() as conn:
            conn.execute("DEALLOCATE ALL")
        store.update([key], _set(2), optimistic=True)
        with pytest.raises(ValueError):
            store.update([key], _refuse)  # the locked path: its transaction is rolled back
        store.update([key], _set(3), optimistic=True)
        doc = store.get(key)
        assert doc.body == {"n": 3} and doc.revision == 4
    finally:
        store.close()


def _refuse(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
    raise ValueError("refused")


def test_a_commit_alone_gives_its_connection_back_whatever_its_answer(pg_schema_url: str) -> None:
    # One connection: a commit alone that lands, one the server refuses (an error) and one that
    # writes nothing (a stale revision) each give the connection back to the pool, so every call
    # after them still gets it (one kept would fail the next call after the pool's wait: 30 s, so
    # that a loaded machine's slow reconnect is not mistaken for it).
    store = PostgresStore(pg_schema_url, max_size=1, timeout=30, auto_migrate=True)
    try:
        key = KEYS[0]
        store.commit([Write.between(key, None, {"n": 0})])
        store.update([key], _set(1), optimistic=True)
        with pytest.raises(StoreError):
            store._send_alone(["not json", "", b"{}", _SEQ_LOCK, None, None, None])
        params = ['{"doc_rows":[],"lock_keys":[["g","d0",1,0]]}', "", b"{}", _SEQ_LOCK, None, None, None]
        assert store._send_alone(params) is None  # (the document is past revision 0)
        store.update([key], _set(2), optimistic=True)
        doc = store.get(key)
        assert doc.body == {"n": 2} and doc.revision == 3
    finally:
        store.close()
