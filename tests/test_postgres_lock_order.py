"""PostgreSQL: writers, group commits and folds take their row locks in one order, so none of
them waits for another that waits for it.

The interleaving below once deadlocked (``deadlock detected``, and the fold failed): a group
commit of record writes knew of no row for the state's aliases (none when it last read them),
so it locked the declaration and its records without them; a fold in another process, having
created the aliases meanwhile, locked them and then waited for the declaration the group held;
and the group's first commit then asked for the aliases. Each step is held in place here by
locks taken from other sessions, so it happens in this order every run.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from stateflow.api import states_service
from stateflow.states import StatesService
from stateflow.states.service import StateNotFound, subject_of
from stateflow.store import DocKey, open_store
from stateflow.store.postgres import _SEQ_LOCK, _SEQ_LOCK_KEY, PostgresStore

from .test_states_concurrency import DECL, subject

SEQ_KEY = _SEQ_LOCK_KEY.replace("?", "%s")
APP = f"lock-order-{uuid.uuid4().hex[:8]}"


def _wait_for(what: str, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.002)


def _blocked(conn: psycopg.Connection[Any], by: str, where: str, params: tuple[Any, ...]) -> bool:
    """Whether a session that ``where`` selects from pg_stat_activity (``w``) waits for a lock
    held by one that ``by`` selects (``h``); ``params`` are ``by``'s, then ``where``'s."""
    row = conn.execute(
        f"SELECT EXISTS (SELECT 1 FROM pg_stat_activity w, pg_stat_activity h WHERE {by} "
        f"AND {where} AND h.pid = ANY(pg_blocking_pids(w.pid)))",
        params,
    ).fetchone()
    return bool(row and row[0])


@pytest.fixture
def url(pg_schema_url: str) -> str:
    return pg_schema_url


@pytest.fixture
def store(url: str) -> Iterator[PostgresStore]:
    store = open_store(f"{url}&application_name={APP}", auto_migrate=True)
    assert isinstance(store, PostgresStore)
    yield store
    store.close()


def _apply(service: StatesService, state: str, k: int, item: str) -> None:
    ops = [{"op": "set_by_key", "path": ["seen"], "key_field": "id", "value": {"id": item}}]
    assert service.apply(state, subject(k), ops, op_id=f"op-{item}").applied


def _started(
    outcomes: dict[str, BaseException | None], name: str, call: Callable[[], object]
) -> threading.Thread:
    """``call`` on a thread of its own, started; what it raised (or None) lands in
    ``outcomes[name]``."""

    def target() -> None:
        try:
            call()
            outcomes[name] = None
        except BaseException as exc:
            outcomes[name] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_group_commit_and_a_fold_do_not_deadlock_over_aliases_created_meanwhile(
    store: PostgresStore, url: str
) -> None:
    service = StatesService(store)
    _declare_as_before(url, "s", "t")
    for k in range(4):  # each record written twice here: the next writes are optimistic
        for n in range(2):
            _apply(service, "s", k, f"setup-{k}-{n}")
    for n in range(2):
        _apply(service, "t", 0, f"setup-t-{n}")
    # another process folds k3 into k2: the aliases of "s" now have a row this store has not seen
    other = open_store(url)
    try:
        StatesService(other).fold("s", subject(3), subject(2), "switch")
    finally:
        other.close()

    assert store._groups is not None
    outcomes: dict[str, BaseException | None] = {}
    run = functools.partial(_started, outcomes)

    threads = []
    with (
        psycopg.connect(url, autocommit=True) as watch,
        psycopg.connect(url) as record_holder,
        psycopg.connect(url) as fold,
    ):
        # 1. a commit of "t" waits for the seq lock, so the next two commits queue as one group
        watch_pid, holder_pid = watch.info.backend_pid, record_holder.info.backend_pid
        watch.execute(f"SELECT pg_advisory_lock({SEQ_KEY})", (_SEQ_LOCK,))
        threads.append(run("t", lambda: _apply(service, "t", 0, "t-1")))
        _wait_for(
            "the first commit waits",
            lambda: _blocked(watch, "h.pid = %s", "w.application_name = %s", (watch_pid, APP)),
        )
        # 2. record k1 is held elsewhere: the group will wait for it after its earlier locks
        record_holder.execute(
            "SELECT 1 FROM documents WHERE state = 's' AND subject = %s FOR UPDATE",
            (_encoded(1),),
        )
        # 3. the fold's first statement: its aliases, locked
        fold_pid = fold.info.backend_pid
        fold.execute(*_lock_statement(DocKey("_aliases", "s")))
        threads.append(run("k0", lambda: _apply(service, "s", 0, "g-0")))
        threads.append(run("k1", lambda: _apply(service, "s", 1, "g-1")))
        _wait_for("two commits queue", lambda: len(store._groups._pending) == 2)  # type: ignore[union-attr]
        watch.execute(f"SELECT pg_advisory_unlock({SEQ_KEY})", (_SEQ_LOCK,))
        _wait_for(
            "the group waits for k1",
            lambda: _blocked(watch, "h.pid = %s", "w.application_name = %s", (holder_pid, APP)),
        )
        # 4. the fold's second statement: the declaration (the group holds it, so it waits)
        declaration = run("fold", lambda: fold.execute(*_lock_statement(DocKey("_states", "s"))))
        _wait_for(
            "the fold waits for the group",
            lambda: _blocked(watch, "h.application_name = %s", "w.pid = %s", (APP, fold_pid)),
        )
        # 5. k1 goes: the group goes on; it must not now wait for the fold's aliases
        record_holder.commit()
        declaration.join(15)
        assert outcomes.get("fold", "running") is None, f"the fold failed: {outcomes.get('fold')}"
        fold.commit()
        for thread in threads:
            thread.join(30)
    assert outcomes == {"t": None, "k0": None, "k1": None, "fold": None}
    for k in (0, 1):
        record = service.read("s", subject(k))
        assert record is not None
        assert {"id": f"g-{k}"} in record["data"]["seen"]


def _declare_as_before(url: str, *states: str) -> None:
    """Declare ``states`` as a store of an earlier version did: without a row for their aliases
    until their first fold (declared from another store, which the tests' store has not seen)."""
    other = open_store(url)
    try:
        for state in states:
            StatesService(other).declare(state, DECL)
    finally:
        other.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "DELETE FROM documents WHERE state = '_aliases' AND subject = ANY(%s) AND present = 0",
            (list(states),),
        )
        left = conn.execute("SELECT count(*) FROM documents WHERE state = '_aliases'").fetchone()
        assert left == (0,)


def _encoded(k: int) -> str:
    return subject_of(subject(k)).encode()


def _lock_statement(key: DocKey) -> tuple[str, tuple[str, ...]]:
    """The statement the store locks (creating if needed) a document's row with."""
    sql, params = PostgresStore._lock_query(key)
    return sql.replace("?", "%s"), params


@pytest.mark.parametrize("declared_by", ["this version", "an earlier version"])
def test_a_write_that_waits_for_a_fold_lands_on_the_survivor(
    store: PostgresStore, url: str, declared_by: str
) -> None:
    """A write of a subject that a fold in another process folds meanwhile: the write's commit
    waits for the locks the fold holds, then must go through the new alias to the survivor — not
    onto the folded subject's own record, which every read then resolves past. (Before: the
    state's aliases had no row until its first fold, so the write's commit, having found none,
    could not see the fold's once it had waited for the declaration, and wrote the folded
    record: acknowledged, and never read again.)"""
    service = StatesService(store)
    if declared_by == "an earlier version":
        _declare_as_before(url, "s")
    else:
        service.declare("s", DECL)
    service.replace("s", subject(7), {"n": 0})
    assert service.read("s", subject(6)) is None  # (k6 has no record: the fold moves none of it)
    folder = open_store(f"{url}&application_name={APP}-fold", auto_migrate=False)
    outcomes: dict[str, BaseException | None] = {}
    run = functools.partial(_started, outcomes)

    try:
        with psycopg.connect(url, autocommit=True) as watch:
            watch_pid = watch.info.backend_pid
            # the fold holds its locks (declaration, aliases) while it waits for the seq lock
            watch.execute(f"SELECT pg_advisory_lock({SEQ_KEY})", (_SEQ_LOCK,))
            fold = run("fold", lambda: StatesService(folder).fold("s", subject(6), subject(7), "merge"))
            _wait_for(
                "the fold waits for the seq lock",
                lambda: _blocked(watch, "h.pid = %s", "w.application_name = %s", (watch_pid, f"{APP}-fold")),
            )
            write = run("write", lambda: _apply(service, "s", 6, "late"))
            _wait_for(
                "the write waits for the fold",
                lambda: _blocked(
                    watch, "h.application_name = %s", "w.application_name = %s", (f"{APP}-fold", APP)
                ),
            )
            watch.execute(f"SELECT pg_advisory_unlock({SEQ_KEY})", (_SEQ_LOCK,))
            fold.join(30)
            write.join(30)
    finally:
        folder.close()
    assert outcomes == {"fold": None, "write": None}
    for k in (6, 7):  # the folded subject reads as the survivor, which holds the write
        record = service.read("s", subject(k))
        assert record is not None
        assert record["data"]["seen"] == [{"id": "late"}], f"k{k}: {record}"


def test_a_write_that_found_no_aliases_row_before_a_fold_made_it_lands_on_the_survivor(
    store: PostgresStore, url: str
) -> None:
    """A state declared by an earlier version (no row for its aliases), then the store opened
    by this one: a write whose statement began before a fold made that row, and reached the
    declaration's lock only after the fold committed, must still go through the new alias. The
    write is a batch whose first shared row (another state's aliases) a session holds, so it
    stalls past its look at the aliases of "s" while the fold of "s" runs whole. (Before: the
    row was made by the fold itself, after the write had found none; the write then saw the
    declaration unmoved and wrote the folded record, hidden by its alias.)"""
    _declare_as_before(url, "s")
    service = states_service(store)  # opened as every door opens it
    service.declare("a", DECL)  # (declared by this version: its aliases have a row)
    service.replace("s", subject(7), {"n": 0})
    folder = open_store(f"{url}&application_name={APP}-fold", auto_migrate=False)
    outcomes: dict[str, BaseException | None] = {}
    run = functools.partial(_started, outcomes)

    ops = [{"op": "set_by_key", "path": ["seen"], "key_field": "id", "value": {"id": "late"}}]
    batch = [
        {"state": "a", "subject": subject(0), "ops": ops, "op_id": "op-a"},
        {"state": "s", "subject": subject(6), "ops": ops, "op_id": "op-s"},
    ]
    try:
        with psycopg.connect(url, autocommit=True) as watch, psycopg.connect(url) as holder:
            holder_pid = holder.info.backend_pid
            holder.execute("SELECT 1 FROM documents WHERE state = '_aliases' AND subject = 'a' FOR UPDATE")
            write = run("write", lambda: service.apply_batch(batch))
            _wait_for(
                "the write waits for the aliases of 'a'",
                lambda: _blocked(watch, "h.pid = %s", "w.application_name = %s", (holder_pid, APP)),
            )
            fold = run("fold", lambda: StatesService(folder).fold("s", subject(6), subject(7), "switch"))
            fold.join(30)
            holder.commit()
            write.join(30)
    finally:
        folder.close()
    assert outcomes == {"fold": None, "write": None}
    for k in (6, 7):  # the folded subject reads as the survivor, which holds the write
        record = service.read("s", subject(k))
        assert record is not None
        assert record["data"].get("seen") == [{"id": "late"}], f"k{k}: {record}"


def test_a_write_racing_a_state_delete_is_deleted_with_it_or_refused(store: PostgresStore, url: str) -> None:
    """A state deleted while another process writes to it: the write either committed before
    the delete, and its record goes with the others, or finds the state gone. (Before: the
    records were purged in one transaction and the declaration deleted in the next; a write
    that committed in between stayed, a record of an undeclared state, and came back with the
    state's next declaration.) The delete is held in place by a session holding the seq lock,
    which the delete and every commit take last."""
    service = StatesService(store)
    service.declare("s", DECL)
    _apply(service, "s", 0, "before")
    writer = open_store(f"{url}&application_name={APP}-w")
    writing = StatesService(writer)
    _apply(writing, "s", 1, "warm")  # (the writer has seen the state)
    outcomes: dict[str, BaseException | None] = {}
    run = functools.partial(_started, outcomes)

    try:
        with psycopg.connect(url, autocommit=True) as watch, psycopg.connect(url, autocommit=True) as holder:
            holder_pid = holder.info.backend_pid
            holder.execute(f"SELECT pg_advisory_lock({SEQ_KEY})", (_SEQ_LOCK,))
            delete = run("delete", lambda: service.delete_declaration("s"))
            _wait_for(
                "the delete waits for the seq lock",
                lambda: _blocked(watch, "h.pid = %s", "w.application_name = %s", (holder_pid, APP)),
            )
            # a write of a new record: it waits for the delete, or (before) for the seq lock,
            # behind the delete's purge
            write = run("write", lambda: _apply(writing, "s", 2, "during"))
            _wait_for(
                "the write waits",
                lambda: _blocked(
                    watch,
                    "(h.pid = %s OR h.application_name = %s)",
                    "w.application_name = %s",
                    (holder_pid, APP, f"{APP}-w"),
                ),
            )
            holder.execute(f"SELECT pg_advisory_unlock({SEQ_KEY})", (_SEQ_LOCK,))
            delete.join(30)
            write.join(30)
    finally:
        writer.close()
    assert outcomes["delete"] is None
    assert isinstance(outcomes["write"], StateNotFound), outcomes
    service.declare("s", DECL)  # a new state of the same name starts empty
    assert [service.read("s", subject(k)) for k in range(3)] == [None, None, None]
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM documents WHERE state = 's'").fetchone() == (0,)
