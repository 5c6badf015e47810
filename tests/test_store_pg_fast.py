"""PostgreSQL: the common optimistic commits sent as one prepared plain statement per shape
(``store.pg_fast``) write what the commit function writes, check what it checks, and fall back
as it does."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import stateflow.store.postgres as pg
from stateflow.errors import StoreTooNew
from stateflow.langgraph import StateflowStore
from stateflow.states import StatesService
from stateflow.store import DocKey, Document, Write, open_store
from stateflow.store.migrations import SCHEMA_VERSION
from stateflow.store.pg_fast import SCALAR_MAX, FastCommit, scalar_of
from stateflow.store.postgres import PostgresStore
from tests.pg_helpers import commits_sent
from tests.test_store_write_rows import _drive, _rows


@pytest.fixture(autouse=True)
def _one_kept_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept connection stays kept through a test: it goes back to the pool at the first
    commit KEPT_FOR (1 s) after it was taken, and a loaded machine's pause between two commits
    swapped it under tests that follow one connection (its prepared statements, its settings)."""
    monkeypatch.setattr(pg, "KEPT_FOR", 60.0)


def _open(url: str) -> PostgresStore:
    store = open_store(url, auto_migrate=True)
    assert isinstance(store, PostgresStore)
    return store


def same_rows_without_them(
    urls: tuple[str, str], drive: Callable[[PostgresStore], None], monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    """``drive`` on a new store with the fast statements, then on another without them (every
    commit through the function): asserts every row of every table the same, and the counters
    the same and equal to a recount. The commits the first store sent, as sent."""
    sent = commits_sent(monkeypatch)
    fast = _open(urls[0])
    try:
        drive(fast)
        rows = _rows(fast, False)
        with fast._read_tx() as tx:
            counters, recounted = fast.recount(tx)
    finally:
        fast.close()
    made = list(sent)
    monkeypatch.setattr(pg, "fast_values", lambda *args: None)
    sent.clear()
    slow = _open(urls[1])
    try:
        drive(slow)
        assert _rows(slow, False) == rows
        with slow._read_tx() as tx:
            assert slow.recount(tx) == (counters, recounted)
    finally:
        slow.close()
    assert sent and not any(isinstance(p, FastCommit) for p in sent)
    assert counters == recounted
    return made


def _of_an_earlier_version(url: str) -> tuple[PostgresStore, StateflowStore]:
    """A store and its LangGraph items whose state was declared by an earlier version, with no
    row for its aliases until a fold: its writes check that key absent in their statements
    (declared now, a state's aliases have a row, shared as the declaration is)."""
    first = _open(url)
    try:
        StateflowStore(StatesService(first))
    finally:
        first.close()
    with psycopg.connect(url, autocommit=True) as conn:
        gone = conn.execute("DELETE FROM documents WHERE state = '_aliases' AND present = 0")
        assert gone.rowcount == 1
    store = _open(url)
    return store, StateflowStore(StatesService(store))


def _setting(key: DocKey, body: dict[str, Any] | None) -> Any:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        doc = docs[key]
        return [Write.between(key, doc.body, body, doc.revision)], None

    return compute


def _both(keys: list[DocKey], bodies: list[dict[str, Any] | None]) -> Any:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [
            Write.between(k, docs[k].body, b, docs[k].revision) for k, b in zip(keys, bodies, strict=True)
        ], None

    return compute


def _more(store: PostgresStore) -> None:
    """Optimistic writes of the other shapes: two documents in one commit, a member added and
    rewritten, a document deleted and written again (its ``present`` moves)."""
    a, b = DocKey("notes", "a"), DocKey("notes", "b")
    store.commit([Write.between(a, None, {"x": 1}), Write.between(b, None, {"y": [1]})])
    steps: list[list[dict[str, Any] | None]] = [
        [{"x": 2}, {"y": [1, 2]}],
        [{"x": 2, "z": "new"}, {"y": [1, 2], "w": {"k": 1}}],
        [{"x": 3, "z": "new"}, {"y": [], "w": {"k": 2}}],
        [None, {"y": [], "w": {"k": 2}, "v": True}],
        [{"x": 4, "z": "back"}, {"y": [3], "w": {"k": 2}, "v": False}],
    ]
    for bodies in steps:
        store.update([a, b], _both([a, b], bodies), {"by": "test"}, optimistic=True)


def test_the_fast_statements_write_the_rows_the_commit_function_writes(
    two_pg_schema_urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same writes on two new stores, one with the fast statements and one without (every
    # commit through the function): every row of every table the same, counters included.
    def drive(store: PostgresStore) -> None:
        _drive(store)
        _more(store)

    sent = same_rows_without_them(two_pg_schema_urls, drive, monkeypatch)
    shapes = {p.shape for p in sent if isinstance(p, FastCommit)}
    # a store put, put_writes adding a bucket and rewriting one, updates of one and of two
    # documents, one of them written again after its delete
    assert len(shapes) >= 5, shapes
    assert any(any(moves) for *_, moves in shapes)
    assert any(len(moves) == 2 for *_, moves in shapes)


def test_a_failed_check_writes_nothing_and_the_write_lands_by_the_locked_path(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, items = _of_an_earlier_version(pg_schema_url)
    try:
        items.put(("users", "u1"), "prefs", {"n": 0})
        items.put(("users", "u1"), "prefs", {"n": 1})
        before = _rows(store, False)
        real = pg._commit_alone
        tried: list[FastCommit] = []

        def first_the_failing_variants(conn: Any, params: Any) -> Any:
            # the commit as it goes out, first with each check made to fail: nothing written
            assert isinstance(params, FastCommit)
            absent, share, lock = params.shape[:3]
            assert (absent, share, lock) == (1, 1, 1)  # the aliases absent, the declaration shared
            shared_rev = 3 + 2 * absent + 1  # (the parameters' places: ``fast_values``)
            lock_rev = shared_rev + 2
            for at, value in ((shared_rev, b"999"), (lock_rev, b"999"), (4, b"langgraph_store")):
                values = list(params.values)
                values[at] = value
                if at == 4:  # an absent key's subject that has a row: the declaration's
                    values[3] = b"_states"
                assert real(conn, FastCommit(params.shape, values, params.slow)) is None
                assert _rows(store, False) == before
            tried.append(params)
            return real(conn, params)  # as it is: it lands

        monkeypatch.setattr(pg, "_commit_alone", first_the_failing_variants)
        items.put(("users", "u1"), "prefs", {"n": 2})
        monkeypatch.setattr(pg, "_commit_alone", real)
        (commit,) = tried
        after = _rows(store, False)
        assert after != before
        assert store._send_alone(commit) is None  # again: its written row has moved on
        assert _rows(store, False) == after
        sent = commits_sent(monkeypatch)
        # a store that did not see the last writes commits against a stale revision: the fast
        # statement writes nothing, and the write lands through the locked path
        other = _open(pg_schema_url)
        try:
            behind = StateflowStore(StatesService(other))
            assert behind.get(("users", "u1"), "prefs") is not None
            items.put(("users", "u1"), "prefs", {"n": 3})
            sent.clear()
            behind.put(("users", "u1"), "prefs", {"n": 4})
            assert any(isinstance(p, FastCommit) for p in sent)
        finally:
            other.close()
        item = items.get(("users", "u1"), "prefs")
        assert item is not None and item.value == {"n": 4}
    finally:
        store.close()


def test_racing_writers_of_one_document_all_land_in_seq_order(pg_schema_url: str) -> None:
    # Four stores (a connection each) add to one counter, each from the revision it last saw:
    # the fast statement's revision check turns a lost race into the locked path's retry, so
    # every increment lands, each revision once, their seq in revision order.
    key = DocKey("race", "counter")
    stores = [_open(pg_schema_url) for _ in range(4)]
    try:
        stores[0].commit([Write.between(key, None, {"n": 0})])
        errors: list[BaseException] = []

        def add(store: PostgresStore) -> None:
            def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
                doc = docs[key]
                assert doc.body is not None
                return [Write.between(key, doc.body, {"n": doc.body["n"] + 1}, doc.revision)], None

            try:
                for _ in range(15):
                    store.update([key], compute, {"by": "race"}, optimistic=True)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=add, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        doc = stores[0].get(key)
        assert doc.body == {"n": 60} and doc.revision == 61
        with stores[0]._read_tx() as tx:
            rows = tx.all(
                "SELECT c.revision, c.seq FROM changes c JOIN documents d USING (doc_id) "
                "WHERE d.state = 'race' ORDER BY c.revision"
            )
            assert [r[0] for r in rows] == list(range(1, 62))
            assert [r[1] for r in rows] == sorted(r[1] for r in rows)
            stored, recounted = stores[0].recount(tx)
        assert stored == recounted
    finally:
        for s in stores:
            s.close()


def test_a_kept_connections_fast_statements_survive_their_deallocation(pg_schema_url: str) -> None:
    # psycopg runs DEALLOCATE ALL on a connection after a ROLLBACK: the fast statement prepared
    # there is prepared again, and the commit lands once.
    store = _open(pg_schema_url)
    key = DocKey("d", "one")
    try:
        store.commit([Write.between(key, None, {"n": 0})])
        store.update([key], _setting(key, {"n": 1}), optimistic=True)
        kept = store._kept
        assert kept is not None
        names = {r[0] for r in kept.execute("SELECT name FROM pg_prepared_statements").fetchall()}
        assert any(n.startswith("stateflow_fast_") for n in names), names
        kept.execute("DEALLOCATE ALL")
        store.update([key], _setting(key, {"n": 2}), optimistic=True)
        assert store._kept is kept  # (the same connection: the commit did not fail)
        doc = store.get(key)
        assert doc.body == {"n": 2} and doc.revision == 3
    finally:
        store.close()


def _fast_names(conn: psycopg.Connection[Any]) -> set[str]:
    query = "SELECT name FROM pg_prepared_statements WHERE name LIKE 'stateflow_fast_%'"
    return {r[0] for r in conn.execute(query).fetchall()}


def test_fast_statements_prepared_since_a_deallocation_are_not_prepared_again(pg_schema_url: str) -> None:
    # After a deallocation, the first statement found gone is prepared again; one prepared since
    # then (another shape) is still on the server, and its next commit uses it: it was forgotten
    # with every other name and prepared again, failing as "already exists" (nothing written).
    store = _open(pg_schema_url)
    keys = [DocKey("d", f"k{i}") for i in range(3)]
    try:
        store.commit([Write.between(k, None, {"n": 0}) for k in keys])
        store.update(keys[:1], _both(keys[:1], [{"n": 1}]), optimistic=True)
        kept = store._kept
        assert kept is not None
        (one,) = _fast_names(kept)
        kept.execute("DEALLOCATE ALL")
        store.update(keys, _both(keys, [{"n": 2}] * 3), optimistic=True)  # another shape: new
        (three,) = _fast_names(kept)
        store.update(keys[:1], _both(keys[:1], [{"n": 3}]), optimistic=True)  # gone: again
        store.update(keys, _both(keys, [{"n": 4}] * 3), optimistic=True)  # still there: used
        assert store._kept is kept  # (no commit failed)
        assert _fast_names(kept) == {one, three}
        written = [(d.body, d.revision) for d in map(store.get, keys)]
        assert written == [({"n": 4}, 5), ({"n": 4}, 3), ({"n": 4}, 3)]
    finally:
        store.close()


def test_a_fast_statement_already_on_the_server_under_its_name_is_used(pg_schema_url: str) -> None:
    # A statement of ours on the connection that its record does not know of (here prepared by
    # hand, with the text the store prepares under that name) is used, not a raw "already exists".
    key = DocKey("d", "one")
    first = _open(pg_schema_url)
    try:
        first.commit([Write.between(key, None, {"n": 0})])
        first.update([key], _setting(key, {"n": 1}), optimistic=True)
        assert first._kept is not None
        query = "SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'stateflow_fast_%'"
        ((name, text),) = first._kept.execute(query).fetchall()
    finally:
        first.close()
    store = _open(pg_schema_url)
    other = DocKey("d", "other")
    try:
        store.commit([Write.between(other, None, {"n": 0})])
        store.update([other, key], _both([other, key], [{"n": 1}, {"n": 2}]), optimistic=True)
        kept = store._kept
        assert kept is not None and name not in _fast_names(kept)
        kept.execute(f"PREPARE {name} AS {text}")
        store.update([key], _setting(key, {"n": 3}), optimistic=True)
        assert store._kept is kept  # (the commit did not fail)
        doc = store.get(key)
        assert doc.body == {"n": 3} and doc.revision == 4
    finally:
        store.close()


def test_the_fast_statements_plan_no_sequential_scan_on_a_small_analyzed_store(pg_schema_url: str) -> None:
    # On a small table with statistics a sequential scan looks cheapest, and a generic plan is
    # kept as the table grows: the kept connection plans without them, as the commit function
    # does, and goes back to the pool planning as the others do.
    store = _open(pg_schema_url)
    keys = [DocKey("d", f"k{i}") for i in range(3)]
    try:
        store.commit([Write.between(k, None, {"n": 0}) for k in keys])
        with store._pool.connection() as conn:
            conn.execute("ANALYZE documents")
            conn.execute("ANALYZE members")
        store.update(keys[:1], _setting(keys[0], {"n": 1}), optimistic=True)
        store.update(keys[:1], _setting(keys[0], {"n": 1, "m": 2}), optimistic=True)
        kept = store._kept
        assert kept is not None
        kept.execute("SET plan_cache_mode = force_generic_plan")
        prepared = kept.execute(
            "SELECT name, cardinality(parameter_types) FROM pg_prepared_statements WHERE name LIKE 'stateflow_fast_%'"
        ).fetchall()
        assert len(prepared) == 2
        for name, count in prepared:
            plan = "\n".join(
                r[0] for r in kept.execute(f"EXPLAIN EXECUTE {name}({', '.join(['NULL'] * count)})")
            )
            assert "Index Scan" in plan and "Seq Scan" not in plan, plan
        kept.execute("RESET plan_cache_mode")
        pg._give_back(store._pool, kept)
        store._kept = None
        assert kept.execute("SHOW enable_seqscan").fetchone() == ("on",)
    finally:
        store.close()


def _generic_plan(store: PostgresStore, name_like: str) -> list[str]:
    """The generic plan of the one fast statement prepared on the kept connection under a name
    like ``name_like``, line by line."""
    kept = store._kept
    assert kept is not None
    ((name, count),) = kept.execute(
        "SELECT name, cardinality(parameter_types) FROM pg_prepared_statements WHERE name LIKE %s",
        (name_like,),
    ).fetchall()
    kept.execute("SET plan_cache_mode = force_generic_plan")
    lines = [r[0] for r in kept.execute(f"EXPLAIN EXECUTE {name}({', '.join(['NULL'] * count)})")]
    kept.execute("RESET plan_cache_mode")
    return lines


def _checks_in_order(lines: list[str]) -> list[str]:
    """The one one-time filter's checks in the order evaluated, each named by what its InitPlan
    scans: a key's index, or the parameter of the id a locking sublink finds its row by."""
    plan = "\n".join(lines)
    filters = [line.split(": ", 1)[1] for line in lines if "One-Time Filter" in line]
    assert len(filters) == 1, plan
    scans: dict[str, str] = {}
    for at, line in enumerate(lines):
        returns = re.search(r"InitPlan \d+ \(returns (\$\d+)\)", line)
        if returns:
            if "LockRows" in lines[at + 1]:
                assert "Index Scan using documents_pkey" in lines[at + 2], plan
                found = re.search(r"Index Cond: \(doc_id = (\$\d+)\)", lines[at + 3])
                assert found is not None, plan
                scans[returns[1]] = f"locked by {found[1]}"
            else:
                scanned = re.search(r"Index Only Scan using (\w+)", lines[at + 1])
                assert scanned is not None, plan
                scans[returns[1]] = scanned[1]
    return [scans[param] for param in re.findall(r"\$\d+", filters[0])]


def test_the_schema_fence_is_folded_into_the_plans_and_a_newer_version_plans_them_again(
    pg_schema_url: str,
) -> None:
    # Every write's seq lock key checks the store's schema version (``pg_fast.fenced``) through
    # ``stateflow_schema_version()``, whose constant body the planner folds: a generic plan
    # reads no ``stateflow_meta`` row (an index scan in every write before schema 38). A newer
    # version written — as a newer release's migrate writes it — defines the function again, so
    # the kept connection's cached generic plans are planned again, and refused.
    store = _open(pg_schema_url)
    key = DocKey("d", "k")
    try:
        store.commit([Write.between(key, None, {"n": 0})])
        for n in range(1, 8):  # (generic plans from a statement's sixth execution on)
            made = DocKey("d", f"new{n}")
            store.update([made], _setting(made, {"n": n}), optimistic=True)
            store.update([key], _setting(key, {"n": n}), optimistic=True)
        kept = store._kept
        assert kept is not None
        prepared = kept.execute(
            "SELECT name, cardinality(parameter_types), generic_plans FROM pg_prepared_statements "
            "WHERE name LIKE 'stateflow_fast_%'"
        ).fetchall()
        assert len(prepared) == 2 and all(generic for _, _, generic in prepared), prepared
        for name, count, _ in prepared:
            plan = "\n".join(
                r[0] for r in kept.execute(f"EXPLAIN EXECUTE {name}({', '.join(['NULL'] * count)})")
            )
            assert "stateflow_meta" not in plan and "stateflow_schema_version" not in plan, plan
        written = len(store.transitions())
        with psycopg.connect(pg_schema_url, autocommit=True) as conn:
            conn.execute("UPDATE stateflow_meta SET value = '99999' WHERE key = 'schema_version'")
            try:
                with pytest.raises(StoreTooNew, match="schema version 99999"):  # (on ``kept``: its plan)
                    store.update([key], _setting(key, {"n": 8}), optimistic=True)
                made = DocKey("d", "new8")
                with pytest.raises(StoreTooNew, match="schema version 99999"):
                    store.update([made], _setting(made, {"n": 8}), optimistic=True)
            finally:
                conn.execute(
                    "UPDATE stateflow_meta SET value = %s WHERE key = 'schema_version'",
                    (str(SCHEMA_VERSION),),
                )
        assert len(store.transitions()) == written  # nothing was written
        store.update([key], _setting(key, {"n": 8}), optimistic=True)
        assert store.get(key).body == {"n": 8}
    finally:
        store.close()


def test_a_statement_for_documents_that_exist_checks_by_id_in_one_filter_in_the_lock_order(
    pg_schema_url: str,
) -> None:
    # The rows it locks are found by id (the primary key: an id never names another key), and
    # every check is one one-time filter of the seq lock — the absent key, the shared row, the
    # written row, in that order —, each row locked by a sublink of its own: no chain of CTEs
    # each gated on the one before it, no CTE per row to set up and scan.
    store, items = _of_an_earlier_version(pg_schema_url)
    try:
        items.put(("users", "u1"), "prefs", {"n": 0})
        items.put(("users", "u1"), "prefs", {"n": 1})
        lines = _generic_plan(store, "stateflow_fast_1_1_1_%")
        plan = "\n".join(lines)
        # (the parameters: time, origin, seq lock, the absent key's two, then the shared row's
        # id and revision, then the written row's)
        checks = _checks_in_order(lines)
        assert checks == ["documents_state_subject_key", "locked by $6", "locked by $8"], plan
        assert plan.count("Index Scan using documents_pkey") == 3, plan  # the shared, the written, its update
        assert "CTE Scan on s0" not in plan and "CTE Scan on l0" not in plan, plan
    finally:
        store.close()


def test_a_creating_statement_of_one_new_row_hangs_every_write_on_that_rows_insert(
    pg_schema_url: str,
) -> None:
    # A new item: its row inserted after the checks (the absent key, then the shared row's
    # lock, in one filter) and the seq lock; the transition's insert is the statement itself,
    # and it (with the counters' deltas, schema 46), the members and the change all read the new
    # row's insert (none inserted: none of them writes) — no transition CTE to set up and scan again, no CTE for the shared row.
    # A plain insert: a key taken meanwhile fails it on the key's constraint, where ON CONFLICT's
    # speculative insertion cost every such write ~20,000 server instructions.
    store, items = _of_an_earlier_version(pg_schema_url)
    try:
        items.put(("users", "u1"), "prefs", {"n": 0})  # (the state declared)
        items.put(("users", "u2"), "prefs", {"n": 0, "m": "x"})
        lines = _generic_plan(store, "stateflow_fast_%_%_0_1_%")
        plan = "\n".join(lines)
        assert lines[0].startswith("Insert on transitions"), plan
        assert "CTE t" not in plan and "CTE s0" not in plan, plan
        # the transition (its counted deltas with it, schema 46), the members, the change
        assert plan.count("CTE Scan on n") == 3, plan
        assert "count_deltas" not in plan, plan
        assert "Conflict" not in plan, plan
        assert _checks_in_order(lines) == ["documents_state_subject_key", "locked by $3"], plan
        assert items.get(("users", "u2"), "prefs").value == {"n": 0, "m": "x"}  # type: ignore[union-attr]
    finally:
        store.close()


def test_a_failed_check_stops_the_checks_before_a_later_rows_lock(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the written row held FOR UPDATE by another transaction, a commit whose shared row
    # moved on, or whose absent key has a row, returns at once and writes nothing: the filter
    # stops at the failed check and never waits for the later row's lock.
    store, items = _of_an_earlier_version(pg_schema_url)
    try:
        items.put(("users", "u1"), "prefs", {"n": 0})
        sent = commits_sent(monkeypatch)
        items.put(("users", "u1"), "prefs", {"n": 1})
        (commit,) = [p for p in sent if isinstance(p, FastCommit)]
        assert commit.shape[:3] == (1, 1, 1)
        shared_rev, written_id = 3 + 2 + 1, 3 + 2 + 2  # (the parameters' places: ``fast_values``)
        before = _rows(store, False)
        with store._pool.connection() as holder, holder.transaction():
            held = holder.execute(
                "SELECT doc_id FROM documents WHERE doc_id = %s FOR UPDATE",
                (int(commit.values[written_id] or b""),),
            ).fetchall()
            assert len(held) == 1
            for changes in ({shared_rev: b"999"}, {3: b"_states", 4: b"langgraph_store"}):
                values = list(commit.values)
                for at, value in changes.items():
                    values[at] = value
                answers: list[int | None] = []
                sending = threading.Thread(
                    target=lambda v=values, out=answers: out.append(
                        store._send_alone(FastCommit(commit.shape, v, commit.slow))
                    )
                )
                sending.start()
                sending.join(30)  # (one that waits for the held row waits until the end)
                assert not sending.is_alive(), "waited for the held row's lock"
                assert answers == [None]
        assert _rows(store, False) == before
    finally:
        store.close()


def test_puts_racing_on_one_item_while_its_state_is_declared_again_all_land(pg_schema_url: str) -> None:
    # Three stores put one item while a fourth declares its state again and again: a put whose
    # shared declaration moved on writes nothing by its fast statement and lands by the locked
    # path; every put and every declaration lands, none deadlocks, the counters stay exact.
    from stateflow.langgraph.store import DECLARATION

    stores = [_open(pg_schema_url) for _ in range(4)]
    try:
        items = [StateflowStore(StatesService(s)) for s in stores[:3]]
        items[0].put(("users", "u1"), "prefs", {"by": -1, "i": 0})
        for each in items[1:]:
            assert each.get(("users", "u1"), "prefs") is not None
        declaring = StatesService(stores[3])
        errors: list[BaseException] = []

        def put(n: int) -> None:
            try:
                for i in range(12):
                    items[n].put(("users", "u1"), "prefs", {"by": n, "i": i})
            except BaseException as exc:
                errors.append(exc)

        def declare() -> None:
            try:
                for i in range(6):
                    declaring.declare("langgraph_store", {**DECLARATION, "description": f"again {i}"})
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=put, args=(n,)) for n in range(3)]
        threads.append(threading.Thread(target=declare))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        with stores[0]._read_tx() as tx:
            (revision,) = tx.all(
                "SELECT max(c.revision) FROM changes c JOIN documents d USING (doc_id) "
                "WHERE d.state = 'langgraph_store'"
            )[0]
            seqs = [
                r[0]
                for r in tx.all(
                    "SELECT c.seq FROM changes c JOIN documents d USING (doc_id) "
                    "WHERE d.state = 'langgraph_store' ORDER BY c.revision"
                )
            ]
            stored, recounted = stores[0].recount(tx)
        assert revision == 1 + 36 and seqs == sorted(seqs) and len(seqs) == 37
        assert stored == recounted
        assert StatesService(stores[0]).get_declaration("langgraph_store")["description"] == "again 5"
    finally:
        for s in stores:
            s.close()


def test_a_fast_statements_member_scalar_is_what_the_servers_rule_makes_it(pg_schema_url: str) -> None:
    """The fast statements send each member row's ``scalar`` (``pg_fast.scalar_of``), where the
    write functions set it by the server's ``stateflow_scalar``: the two agree on every kind of
    body — objects, arrays, scalars, an escaped NUL (or a backslash before ``u0000``), a tree's
    empty body, sizes at the bound and past it — and the rows the fast statements write hold
    what the rule makes (``stateflow check`` finds nothing)."""
    cases = [
        (b, len(b))
        for b in (
            b"{}",
            b'{"a":1}',
            b"[]",
            b"[1,2]",
            b'"x"',
            b'""',
            b"0",
            b"-1.5e3",
            b"true",
            b"false",
            b"null",
            b'"a\\u0000b"',
            b'"\\\\u0000"',
            b'"\\u00001"',
            b'"\xc3\xa9"',
            b'"' + b"x" * (SCALAR_MAX - 2) + b'"',
            b'"' + b"x" * (SCALAR_MAX - 1) + b'"',
        )
    ] + [(b"", SCALAR_MAX + 5), (b"", 0)]
    store = _open(pg_schema_url)
    try:
        with store._read_tx() as tx:
            for body, size in cases:
                row = tx.one("SELECT stateflow_scalar(?, ?)", (body, size))
                assert row is not None
                got = None if row[0] is None else bytes(row[0])
                assert got == scalar_of(body, size), body[:20]
        key = DocKey("notes", "scalars")
        store.commit([Write.between(key, None, {"a": "x", "b": {"c": 1}, "n": 1})])
        for new in (  # (a scalar rewritten and one turned object: the fast statement; then the function)
            {"a": "y", "b": {"c": 1}, "n": 1.5},
            {"a": {"now": "an object"}, "n": True, "nul": "\u0000"},
        ):

            def compute(docs: dict[DocKey, Any], new: dict[str, Any] = new) -> tuple[list[Write], None]:
                return [Write.between(key, docs[key].body, new, docs[key].revision)], None

            store.update([key], compute, optimistic=True)
        assert store.get(key).revision == 3
        with store._read_tx() as tx:
            assert store._stale_scalars(tx, 10) == []
            kept = dict(tx.all("SELECT name, scalar FROM members WHERE scalar IS NOT NULL"))
        assert {k: bytes(v) for k, v in kept.items()} == {"n": b"true"}
    finally:
        store.close()
