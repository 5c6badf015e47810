"""PostgreSQL: commits that create their documents' rows sent as one fast statement
(``store.pg_fast``: the seq lock, then the new rows inserted with their final values, the writes
gated on them) write what the commit function writes, write nothing where a new key was created
or is held meanwhile, and leave the kept connection usable."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import pq

import stateflow.store.pg_fast as pg_fast
import stateflow.store.postgres as pg
from stateflow.store import DocKey, Document, Write
from stateflow.store.pg_fast import FastCommit
from stateflow.store.postgres import PostgresStore
from tests.test_store_pg_fast import _open, same_rows_without_them
from tests.test_store_write_rows import _drive, _rows


@pytest.fixture(autouse=True)
def _one_kept_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept connection stays kept through a test: it goes back to the pool at the first
    commit KEPT_FOR (1 s) after it was taken, and a loaded machine's pause between two commits
    swapped it under tests that follow one connection (its prepared statements, its settings)."""
    monkeypatch.setattr(pg, "KEPT_FOR", 60.0)


def _creating(keys: list[DocKey], bodies: list[dict[str, Any]]) -> Any:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [
            Write.between(k, docs[k].body, b, docs[k].revision) for k, b in zip(keys, bodies, strict=True)
        ], None

    return compute


def _new_docs(store: PostgresStore) -> None:
    """Two new documents in one optimistic commit, then one more alone."""
    a, b, c = DocKey("notes", "a"), DocKey("notes", "b"), DocKey("notes", "c")
    store.update([a, b], _creating([a, b], [{"x": 1, "s": "t"}, {"y": [1]}]), {"by": "test"}, optimistic=True)
    store.update([c], _creating([c], [{"z": {"k": None}}]), {"by": "test"}, optimistic=True)


def _creating_sent(sent: list[Any]) -> list[FastCommit]:
    return [p for p in sent if isinstance(p, FastCommit) and p.shape[3]]


def _new_row(params: FastCommit) -> int:
    """Where the first new row's values (id, state, subject, …) start in ``params.values``."""
    checked = params.shape[3] if params.shape[3] > 1 else 0  # (several new keys: checked absent too)
    # (after the time, origin, seq lock and the transition's counted deltas)
    return 2 * (params.shape[0] + checked) + 2 * params.shape[1] + 4


def test_creating_commits_write_the_rows_the_commit_function_writes(
    two_pg_schema_urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same writes on two new stores, one sending its creating commits as the fast statement and one
    # through the function: every row of every table the same, counters equal to a recount.
    def drive(store: PostgresStore) -> None:
        _drive(store)
        _new_docs(store)

    sent = same_rows_without_them(two_pg_schema_urls, drive, monkeypatch)
    # (absent, shared, written, new, rewritten, added, moves)
    shapes = {p.shape for p in _creating_sent(sent)}
    assert any(s[3] == 1 and s[5] == 6 for s in shapes), shapes  # a new store item
    # a checkpoint: its declaration and its aliases shared (each has a row since its declaration)
    assert any(s[3] == 1 and s[5] == 1 and s[:2] == (0, 2) for s in shapes), shapes
    assert any(s[3] == 2 and len(s[6]) == 2 for s in shapes), shapes  # two new documents
    assert any(s[3] == 1 and s[:2] == (0, 0) for s in shapes), shapes  # a plain new document
    states = {(p.values[_new_row(p) + 1] or b"").decode() for p in _creating_sent(sent)}
    assert {"langgraph_checkpoints", "langgraph_store", "notes"} <= states, states


@pytest.mark.parametrize("created", [1, 2])
def test_a_key_created_meanwhile_writes_nothing_and_the_write_lands_by_the_locked_path(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch, created: int
) -> None:
    # One new key, created by another store just before the statement goes out: it inserts
    # nothing, None. Two, of which the other created the second: the check of the new keys
    # before the seq lock fails, None, no seq taken. Either way no transition, member, change or
    # row under a reserved id, and the write lands by the locked path.
    store, other = _open(pg_schema_url), _open(pg_schema_url)
    keys = [DocKey("notes", f"raced{n}") for n in range(created)]
    try:
        real = pg._commit_alone
        tried: list[object] = []

        def another_writer_first(conn: Any, params: Any) -> Any:
            if isinstance(params, FastCommit) and params.shape[3] and not tried:
                tried.append(-1)  # (the other store's commit goes through here too)
                other.commit([Write.between(keys[-1], None, {"by": "other"})])
                before = _rows(store, False)
                try:
                    tried[0] = real(conn, params)
                except psycopg.Error as exc:
                    tried[0] = exc.sqlstate
                    raise
                finally:
                    assert _rows(store, False) == before
                    ids = [int(params.values[_new_row(params) + 8 * n] or 0) for n in range(created)]
                    with store._read_tx() as tx:
                        assert tx.all("SELECT count(*) FROM documents WHERE doc_id = ANY(?)", (ids,)) == [
                            (0,)
                        ]
                return tried[0]
            return real(conn, params)

        monkeypatch.setattr(pg, "_commit_alone", another_writer_first)
        with store._read_tx() as tx:
            ((seq_before,),) = tx.all("SELECT COALESCE(MAX(seq), 0) FROM transitions")
        store.update(keys, _creating(keys, [{"by": "store"}] * created), {"by": "test"}, optimistic=True)
        # one key: its insert failed on the key's constraint (the caller's None); several: their
        # check before the seq lock failed, None
        assert tried == [None if created > 1 else pg_fast.KEY_TAKEN[0]]
        if created > 1:  # no seq taken for nothing
            with store._read_tx() as tx:
                seqs = [
                    r[0]
                    for r in tx.all("SELECT seq FROM transitions WHERE seq > ? ORDER BY seq", (seq_before,))
                ]
            assert seqs == list(range(seq_before + 1, seq_before + 3)), seqs  # the other's, then ours
        for n, key in enumerate(keys):
            doc = store.get(key)
            # the last on top of the other's, by the locked path
            assert doc.body == {"by": "store"} and doc.revision == (2 if n == created - 1 else 1)
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
        assert stored == recounted
    finally:
        store.close()
        other.close()


def _deadlock_check_after_a_minute(url: str) -> str:
    """``url`` with the server's deadlock check after 60 s (1 s by default): a lock cycle then
    costs a minute, which a loaded machine's slow write is not mistaken for (the bound was
    0.9 s, within a loaded machine's reach)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    options = " ".join([*(v for k, v in query if k == "options"), "-cdeadlock_timeout=60s"])
    rest = [(k, v) for k, v in query if k != "options"]
    return urlunsplit(parts._replace(query=urlencode([*rest, ("options", options)], quote_via=quote)))


def _race(stores: list[PostgresStore], key: DocKey) -> list[float]:
    """Each store creates ``key`` at once (a thread each): the seconds each took."""
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []
    took: list[float] = []

    def create(store: PostgresStore, n: int) -> None:
        try:
            barrier.wait()
            start = time.monotonic()
            store.update([key], _creating([key], [{"by": n}]), {"by": "race"}, optimistic=True)
            took.append(time.monotonic() - start)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(s, n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    return took


def test_two_stores_creating_one_key_at_once_both_land_without_a_deadlock_wait(pg_schema_url: str) -> None:
    # Each store's statement inserts the key's row after the seq lock; the second waits for the
    # seq lock, finds the key committed, writes nothing and lands by the locked path — no lock
    # cycle (a deadlock would be found only after deadlock_timeout, 1 s by default).
    stores = [_open(_deadlock_check_after_a_minute(pg_schema_url)) for _ in range(2)]
    try:
        for round_ in range(4):
            key = DocKey("notes", f"both{round_}")
            took = _race(stores, key)
            assert max(took) < 30, took  # (a lock cycle would cost the deadlock check's minute)
            doc = stores[0].get(key)
            assert doc.revision == 2 and doc.body in ({"by": 0}, {"by": 1})
            with stores[0]._read_tx() as tx:
                seqs = tx.all(
                    "SELECT c.revision, c.seq FROM changes c JOIN documents d USING (doc_id) "
                    "WHERE d.state = 'notes' AND d.subject = ? ORDER BY c.revision",
                    (key.subject,),
                )
            assert [r[0] for r in seqs] == [1, 2] and seqs[0][1] < seqs[1][1]
        with stores[0]._read_tx() as tx:
            stored, recounted = stores[0].recount(tx)
        assert stored == recounted
    finally:
        for s in stores:
            s.close()


def test_the_kept_connection_recovers_from_a_failed_creating_statement(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A creating statement that fails writes nothing and leaves the connection idle; one whose
    # statement was deallocated is prepared again and lands once; the next commits on the kept
    # connection land.
    store = _open(pg_schema_url)
    try:
        store.commit([Write.between(DocKey("notes", "first"), None, {"n": 0})])
        kept: list[Any] = []
        real = pg._commit_alone

        def failing_once(conn: Any, params: Any) -> Any:
            if isinstance(params, FastCommit) and params.shape[3] and not kept:
                kept.append(conn)
                bad = list(params.values)
                bad[_new_row(params)] = b"not a number"  # (the new row's id)
                before = _rows(store, False)
                with pytest.raises(psycopg.Error):
                    real(conn, FastCommit(params.shape, bad, params.slow))
                assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
                assert _rows(store, False) == before
            return real(conn, params)

        monkeypatch.setattr(pg, "_commit_alone", failing_once)
        key = DocKey("notes", "after")
        store.update([key], _creating([key], [{"n": 1}]), optimistic=True)
        assert kept
        conn: psycopg.Connection[Any] = kept[0]
        assert store._kept is conn
        assert store.get(key).revision == 1
        conn.execute("DEALLOCATE ALL")
        again = DocKey("notes", "again")
        store.update([again], _creating([again], [{"n": 2}]), optimistic=True)
        store.update([again], _creating([again], [{"n": 3}]), optimistic=True)
        assert store._kept is conn
        doc = store.get(again)
        assert doc.body == {"n": 3} and doc.revision == 2
        with store._read_tx() as tx:
            (count,) = tx.all("SELECT count(*) FROM changes")[0]
        assert count == 4
    finally:
        store.close()


def _seq_lock_waiters(conn: psycopg.Connection[Any]) -> int:
    """How many backends wait for this schema's seq lock."""
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND classid = %s::bigint::oid AND objid = (hashtext(current_schema())::bigint & 4294967295)::oid",
        (pg._SEQ_LOCK,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60  # (a safety net: a loaded machine takes its time)
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_new_key_held_by_the_commit_function_waiting_for_the_seq_lock_ends_at_once(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The creating statement holds the seq lock when it inserts its key; the commit function of
    # another store inserted the same key before queueing for the seq lock, and has not
    # committed: a lock cycle. The statement gives up after its short lock timeout (nothing
    # written), the function's commit lands, and the statement's write lands on top by the
    # locked path — both well under the deadlock check (a minute here).
    fast, slow = (_open(_deadlock_check_after_a_minute(pg_schema_url)) for _ in range(2))
    key = DocKey("notes", "held")
    gave_up: list[str | None] = []
    real = pg._commit_alone

    def watched(conn: Any, params: Any) -> Any:
        try:
            return real(conn, params)
        except psycopg.Error as exc:
            gave_up.append(exc.sqlstate)
            raise

    monkeypatch.setattr(pg, "_commit_alone", watched)
    took: dict[str, float] = {}
    errors: list[BaseException] = []

    def create(store: PostgresStore, by: str) -> None:
        try:
            start = time.monotonic()
            store.update([key], _creating([key], [{"by": by}]), {"by": by}, optimistic=True)
            took[by] = time.monotonic() - start
        except BaseException as exc:
            errors.append(exc)

    try:
        fast.commit([Write.between(DocKey("notes", "warm"), None, {"n": 0})])  # (statements prepared)
        with psycopg.connect(pg_schema_url, autocommit=True) as holder:
            with holder.transaction():
                holder.execute(
                    f"SELECT pg_advisory_xact_lock({pg._SEQ_LOCK_KEY.replace('?', '%s')})", (pg._SEQ_LOCK,)
                )
                first = threading.Thread(target=create, args=(fast, "fast"))
                first.start()  # its statement waits for the seq lock
                _until(lambda: _seq_lock_waiters(holder) == 1)
                # the other store's commit through the function: it inserts the row, then queues
                monkeypatch.setattr(pg, "fast_values", lambda *args: None)
                second = threading.Thread(target=create, args=(slow, "function"))
                second.start()
                _until(lambda: _seq_lock_waiters(holder) == 2)
            first.join()
            second.join()
        assert not errors
        assert gave_up == [pg_fast.LOCK_NOT_AVAILABLE]
        assert max(took.values()) < 30, took  # (not the deadlock check's minute)
        doc = fast.get(key)
        assert doc.body == {"by": "fast"} and doc.revision == 2
        with fast._read_tx() as tx:
            seqs = tx.all(
                "SELECT c.revision, c.seq FROM changes c JOIN documents d USING (doc_id) "
                "WHERE d.state = 'notes' AND d.subject = ? ORDER BY c.revision",
                (key.subject,),
            )
            stored, recounted = fast.recount(tx)
        assert [r[0] for r in seqs] == [1, 2] and seqs[0][1] < seqs[1][1]
        assert stored == recounted
    finally:
        fast.close()
        slow.close()


@pytest.mark.parametrize("created", [1, 2])
def test_a_key_committed_while_the_statement_waits_for_the_seq_lock_writes_nothing(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch, created: int
) -> None:
    # The statement's checks pass, then it waits for the seq lock; meanwhile another writer
    # creates the (last) key's row and commits. The insert finds it: one key, its insert fails on
    # the key's constraint; some of several, the error on purpose, the rows inserted rolled back;
    # nothing written either way (the caller's None). The write
    # lands by the locked path either way.
    store = _open(pg_schema_url)
    keys = [DocKey("notes", f"late{n}") for n in range(created)]
    answers: list[object] = []
    real = pg._commit_alone

    def watched(conn: Any, params: Any) -> Any:
        try:
            answers.append(real(conn, params))
        except psycopg.Error as exc:
            answers.append(exc.sqlstate)
            raise
        return answers[-1]

    errors: list[BaseException] = []

    def create() -> None:
        try:
            store.update(keys, _creating(keys, [{"by": "store"}] * created), {"by": "test"}, optimistic=True)
        except BaseException as exc:
            errors.append(exc)

    try:
        store.commit([Write.between(DocKey("notes", "warm"), None, {"n": 0})])
        monkeypatch.setattr(pg, "_commit_alone", watched)
        with psycopg.connect(pg_schema_url, autocommit=True) as holder:
            with holder.transaction():
                holder.execute(
                    f"SELECT pg_advisory_xact_lock({pg._SEQ_LOCK_KEY.replace('?', '%s')})", (pg._SEQ_LOCK,)
                )
                writing = threading.Thread(target=create)
                writing.start()
                _until(lambda: _seq_lock_waiters(holder) == 1)  # (its checks passed)
                holder.execute(
                    "INSERT INTO documents (state, subject) VALUES (%s, %s)",
                    (keys[-1].state, keys[-1].subject),
                )
            writing.join()
        assert not errors
        assert answers[0] == (pg_fast.KEY_TAKEN[0] if created == 1 else pg_fast.TAKEN_MEANWHILE), answers
        for key in keys:
            doc = store.get(key)
            assert doc.body == {"by": "store"} and doc.revision == 1
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
        assert stored == recounted
    finally:
        store.close()
