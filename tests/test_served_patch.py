"""PostgreSQL: ``patch_state`` merged by the server (``stateflow_patch_commit``) stores and reads
back exactly what the locked path does.

Two stores in two schemas run the same generated patches, both with their documents marked
contended (where the server merge is taken); one may merge in the server, the other may not.
Every stored row (times aside), every receipt and every read must be the same. Patches outside
the common case are generated too: those must fall back and still agree.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from stateflow.memory import Identity, MemoryView
from stateflow.memory.served import served_case
from stateflow.store import DocKey, open_store
from stateflow.store.postgres import PostgresStore
from stateflow.store.writes import CONTENDED_SECONDS

from .conftest import PG_URL, _with_schema, fresh_pg_schemas

ROOT = Path(__file__).resolve().parent.parent
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
TABLES = {
    "documents": "state, subject",
    "members": "doc_id, name",
    "changes": "doc_id, revision",
    "change_edits": "doc_id, revision, member",
    "snapshots": "doc_id, revision",
    "snapshot_members": "doc_id, name, revision",
    "transitions": "seq",
    "state_counts": "state, counter, name",
    "applied_ops": "scope, op_id",
}

plain_keys = st.sampled_from(["a", "b", "w0", "w1", "goal", "é", "x y", "n\u2028"])
odd_keys = st.sampled_from(['a"q', "[0]", "t\tab", "back\\slash"])
plain_leaves = st.one_of(
    st.sampled_from(["step 1", "step 2", "", 'ü\n"', "\u0001"]),
    st.integers(-3, 3),
    st.booleans(),
    st.just(2**63 - 1),
)
odd_leaves: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.floats(-2, 2, allow_nan=False), st.lists(st.integers(0, 2), max_size=2), st.just({})
)
plain = st.recursive(
    plain_leaves, lambda inner: st.dictionaries(plain_keys, inner, min_size=1, max_size=3), max_leaves=6
)
"""Values of the common case (the server merges them)."""
odd = st.recursive(
    st.one_of(plain_leaves, odd_leaves),
    lambda inner: st.dictionaries(st.one_of(*[plain_keys] * 6, odd_keys), inner, min_size=1, max_size=3),
    max_leaves=6,
)
"""Anything a patch may hold (mostly not the common case: the locked path)."""
plane_patch = st.one_of(
    *[st.dictionaries(plain_keys, plain, min_size=1, max_size=3)] * 8,
    st.dictionaries(plain_keys, odd, min_size=1, max_size=3),
)
planes = st.sampled_from(["tactics", "strategy", "tactics", "strategy", "tactics", "intents", "lazy"])
scope_patch = st.dictionaries(planes, plane_patch, min_size=1, max_size=2)
patches = st.dictionaries(
    st.sampled_from(["session", "session", "session", "cwd", "global"]), scope_patch, min_size=1, max_size=2
)


@pytest.fixture
def schemas() -> Iterator[tuple[str, str]]:
    """Two fresh schemas (served, locked)."""
    with fresh_pg_schemas(2) as names:
        yield names[0], names[1]


def _rows(schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the store's tables (documents by key, times left out)."""
    assert PG_URL
    out: dict[str, list[tuple[Any, ...]]] = {}
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for table, order in TABLES.items():
            rows = conn.execute(f"SELECT * FROM {schema}.{table} ORDER BY {order}").fetchall()
            if table == "transitions":  # (its time left out; where its counters' deltas are kept,
                # a column or ``count_deltas``, is each path's: the counters are compared as read)
                rows = [(r[0], bytes(r[2])) for r in rows]
            out[table] = [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows]
    return out


def _contend(store: PostgresStore, view: MemoryView) -> None:
    """Mark the view's documents contended, as another writer's commit would (the server merge
    is taken only then)."""
    store._contended.update(dict.fromkeys(view.keys.values(), math.inf))


def _outcome(view: MemoryView, patch: dict[str, Any]) -> Any:
    try:
        r = view.patch_state(patch)
    except Exception as exc:  # the same refusal on both sides
        return ("refused", type(exc).__name__, str(exc))
    return (r.message, r.changed_scopes, r.state_updates, r.hints, r.seq)


def _reads(view: MemoryView) -> list[Any]:
    out: list[Any] = [view.context().text()]
    for path in ("effective", "session", "cwd", "global", "effective.tactics", "session.strategy"):
        out.append(view.read_state({"path": path}))
    for k in range(3):
        try:
            out.append(view.read_state({"path": f"session.patches[{k}]"}))
        except Exception as exc:
            out.append(type(exc).__name__)
    store = view.store
    for key in view.keys.values():
        doc = store.get(key)
        out.append((doc.revision, doc.body))
        for revision in range(doc.revision + 1):
            out.append(store.read_at(key, revision=revision).body)
    for change in store.history(list(view.keys.values()), limit=100):
        out.append(
            (change.seq, str(change.key), change.revision, [e.to_json() for e in change.edits], change.paths)
        )
    out.append([(t.seq, t.origin) for t in store.transitions(limit=1000)])
    # times aside: each store took its own
    return [TIME.sub("<time>", repr(item)) for item in out]


def test_generated_patches_store_and_read_back_the_same_through_the_server_merge(
    schemas: tuple[str, str],
) -> None:
    assert PG_URL
    served_store = open_store(_with_schema(PG_URL, schemas[0]), auto_migrate=True)
    locked_store = open_store(_with_schema(PG_URL, schemas[1]), auto_migrate=True)
    assert isinstance(served_store, PostgresStore) and isinstance(locked_store, PostgresStore)
    locked_store.served_patches = False
    taken = [0]
    try:
        session = [0]

        @settings(max_examples=80, phases=[Phase.explicit, Phase.generate])  # (shrinking: minutes)
        @given(st.lists(patches, min_size=2, max_size=8))
        def run(calls: list[dict[str, Any]]) -> None:
            session[0] += 1
            ident = Identity.of("agent-a", "/tmp", f"s{session[0]}")
            served = MemoryView(served_store, ident)
            locked = MemoryView(locked_store, ident)
            for patch in calls:
                _contend(served_store, served)
                _contend(locked_store, locked)
                before = dict(served_store._served_revisions)
                assert _outcome(served, patch) == _outcome(locked, patch), patch
                if served_store._served_revisions != before:
                    taken[0] += 1
                    assert served_case(served._patch_args(patch))
            assert _rows(schemas[0]) == _rows(schemas[1])
            assert _reads(served) == _reads(locked)

        run()
    finally:
        served_store.close()
        locked_store.close()
    print("merged by the server:", taken[0])
    # the server merge did the common case's writes (runs see 18-40 of them; which patches are
    # generated varies, so the bound leaves room while still failing if the merge is never taken)
    assert taken[0] >= 10, taken


def test_edits_kept_apart_and_snapshots_are_written_the_same(schemas: tuple[str, str]) -> None:
    """Edits over 512 bytes go to ``change_edits`` rows, and snapshots fall due (by bytes, then
    by chain), in the server merge as in the locked path."""
    assert PG_URL
    served_store = open_store(_with_schema(PG_URL, schemas[0]), auto_migrate=True)
    locked_store = open_store(_with_schema(PG_URL, schemas[1]), auto_migrate=True)
    assert isinstance(served_store, PostgresStore) and isinstance(locked_store, PostgresStore)
    locked_store.served_patches = False
    try:
        ident = Identity.of("agent-a", "/tmp", "s1")
        served, locked = MemoryView(served_store, ident), MemoryView(locked_store, ident)
        calls: list[dict[str, Any]] = [{"session": {"tactics": {"seed": "0"}}}]
        calls += [
            {"session": {"strategy": {"doc": {f"k{i % 7}": "x" * (50 + 40 * (i % 15))}}, "tactics": {"n": i}}}
            for i in range(300)
        ]
        for patch in calls:
            _contend(served_store, served)
            _contend(locked_store, locked)
            assert _outcome(served, patch) == _outcome(locked, patch)
        key = served.keys["session"]
        assert served_store._served_revisions == {key: 301}
        rows = _rows(schemas[0])
        assert rows == _rows(schemas[1])
        assert rows["change_edits"] and len(rows["snapshots"]) > 2
        assert _reads(served) == _reads(locked)
    finally:
        served_store.close()
        locked_store.close()


def test_values_replaced_in_the_text_or_merged_by_the_walk_store_the_same(schemas: tuple[str, str]) -> None:
    """The server merge replaces a changed scalar of the same kind in the stored text and appends
    new keys (schema 21) only where that cannot touch another value; a key or value found more
    than once, a kind that changes, a nested object merged or a backslash in the text take the
    walk. Every case stores what the locked path stores, and each patch is merged by the server."""
    assert PG_URL
    served_store = open_store(_with_schema(PG_URL, schemas[0]), auto_migrate=True)
    locked_store = open_store(_with_schema(PG_URL, schemas[1]), auto_migrate=True)
    assert isinstance(served_store, PostgresStore) and isinstance(locked_store, PostgresStore)
    locked_store.served_patches = False
    try:
        ident = Identity.of("agent-a", "/tmp", "s1")
        served, locked = MemoryView(served_store, ident), MemoryView(locked_store, ident)
        key = served.keys["session"]
        calls: list[dict[str, Any]] = [
            {
                "session": {"tactics": {"n": 1, "deep": {"n": 1}, "m": {"n": 12}, "s": "a", "b": True}},
                "cwd": {"tactics": {"here": False}},
            },
            {"session": {"tactics": {"n": 2}}},  # '"n":1' twice (top and nested): the walk
            {"session": {"tactics": {"n": 1}}},  # '"n":2' once; the nested '"n":12' untouched
            {"session": {"tactics": {"n": 12}}},  # a prefix of nothing else
            {"session": {"tactics": {"b": False, "s": "b", "n": -3}}},  # three in place
            {"session": {"tactics": {"s": "b", "n": 4}}},  # one as it was, one in place
            {"session": {"tactics": {"n": "4"}}},  # number to string: the walk
            {"session": {"tactics": {"n": True}}},  # string to boolean: the walk
            {"session": {"tactics": {"b": 1}}},  # boolean to number: the walk
            {"session": {"tactics": {"s": {"x": 1}}}},  # string to object: the walk
            {"session": {"tactics": {"s": "back"}}},  # object to string: the walk
            {"session": {"tactics": {"new": "k", "é": {"ü": 1}, "x y": 2}}},  # appended
            {"session": {"tactics": {"deep": {"n": 2}}}},  # a nested object merged: the walk
            {"session": {"tactics": {"s": 'q"\n'}}},  # a backslash in the new value: the walk
            {"session": {"tactics": {"s": "c"}}},  # a backslash in the text: the walk
            {"session": {"tactics": {"x y": 3}}},  # (the backslash gone again)
            {"session": {"tactics": {"last": 1}}},  # appended; then in place before '}'
            {"session": {"tactics": {"last": 2}}},
            {"session": {"tactics": {"pair": 2, "twin": 2}}},
            {"session": {"tactics": {"pair": 3}}},  # '"pair":2' once (twin's is another key)
            {"session": {"strategy": {"a": 1, "b": {"c": "d"}}}},  # a member set whole
            {"session": {"strategy": {"a": 2}, "tactics": {"twin": 4}}},  # two members
            {"session": {"strategy": {"goal": "h"}}, "cwd": {"tactics": {"here": True}}},
        ]
        for revision, patch in enumerate(calls, 1):
            _contend(served_store, served)
            _contend(locked_store, locked)
            assert _outcome(served, patch) == _outcome(locked, patch), patch
            if revision > 1:  # (the first write creates the document's row: not merged there)
                assert served_store._served_revisions[key] == revision, patch
        assert _rows(schemas[0]) == _rows(schemas[1])
        assert _reads(served) == _reads(locked)
        assert served.read_state({"path": "session.tactics"})["value"] == {
            "n": True,
            "deep": {"n": 2},
            "m": {"n": 12},
            "s": "c",
            "b": 1,
            "new": "k",
            "é": {"ü": 1},
            "x y": 3,
            "last": 2,
            "pair": 3,
            "twin": 4,
        }
        assert served.read_state({"path": "session.strategy"})["value"] == {
            "a": 2,
            "b": {"c": "d"},
            "goal": "h",
        }
        assert served.read_state({"path": "cwd.tactics"})["value"] == {"here": True}
    finally:
        served_store.close()
        locked_store.close()


def _merge_calls(schema: str, expected: int) -> int:
    """Calls of ``stateflow_merge_keys`` in ``schema`` counted by the server (its statistics reach
    other sessions a moment after the calling session went idle): waited for until ``expected``
    or more are there, then read again once every session must have reported."""
    assert PG_URL
    sql = "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE schemaname = %s AND funcname = %s"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while True:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(sql, (schema, "stateflow_merge_keys")).fetchone()
            assert row is not None
            if int(row[0]) >= expected or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        time.sleep(1.5)  # any later report (a session reports at most once a second)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(sql, (schema, "stateflow_merge_keys")).fetchone()
        assert row is not None
        return int(row[0])


def test_one_key_merged_at_once_or_by_the_loop_stores_the_same(schemas: tuple[str, str]) -> None:
    """Schema 22 merges one key of one stored object in ``stateflow_patch_commit`` itself where
    the merge function would take its fast path — a key appended (a scalar or an object), a scalar
    replaced by one of its kind whose ``"key":value`` occurs once — and leaves everything else to
    the general loop: a value found twice, a kind changed, a nested object merged, a value as it
    was, a backslash in the value or the text, edits kept apart, a new member, two keys, two
    members, two documents. Every case stores what the locked path stores, snapshots fall due
    on both ways, and the server's own call counts say which way each took."""
    assert PG_URL
    served_store = open_store(
        _with_schema(PG_URL, schemas[0]) + quote(" -ctrack_functions=pl"), auto_migrate=True
    )
    locked_store = open_store(_with_schema(PG_URL, schemas[1]), auto_migrate=True)
    assert isinstance(served_store, PostgresStore) and isinstance(locked_store, PostgresStore)
    locked_store.served_patches = False
    try:
        ident = Identity.of("agent-a", "/tmp", "s1")
        served, locked = MemoryView(served_store, ident), MemoryView(locked_store, ident)
        key = served.keys["session"]
        # (each patch, and the calls of the merge function the general loop makes for it)
        calls: list[tuple[dict[str, Any], int]] = [
            (
                {
                    "session": {"tactics": {"n": 1, "deep": {"n": 1}, "s": "a", "b": True}},
                    "cwd": {"tactics": {"here": False}},
                },
                0,
            ),
            ({"session": {"tactics": {"s": "b"}}}, 0),  # a string in place
            ({"session": {"tactics": {"b": False}}}, 0),  # a boolean in place
            ({"session": {"tactics": {"n": 2}}}, 1),  # '"n":1' twice (top and nested)
            ({"session": {"tactics": {"n": 3}}}, 0),  # a number in place
            ({"session": {"tactics": {"new": "k"}}}, 0),  # appended
            ({"session": {"tactics": {"obj": {"a": 1, "é": "ü"}}}}, 0),  # an object appended
            ({"session": {"tactics": {"s": "b"}}}, 1),  # as it was: nothing written
            ({"session": {"tactics": {"s": 5}}}, 1),  # string to number
            ({"session": {"tactics": {"obj": {"a": 2}}}}, 1),  # a nested object merged
            ({"session": {"tactics": {"s": 'q"'}}}, 1),  # a backslash in the value
            ({"session": {"tactics": {"s": "c"}}}, 1),  # a backslash in the text
            ({"session": {"tactics": {"s": "d"}}}, 0),  # (gone again)
            ({"cwd": {"tactics": {"here": True}}}, 0),  # the view's second document
            ({"session": {"tactics": {"big": "x" * 600}}}, 1),  # edits kept apart
            ({"session": {"tactics": {"big": "y" * 600}}}, 1),
            ({"session": {"tactics": {"a": 1, "b": True}}}, 1),  # two keys
            ({"session": {"strategy": {"goal": "x"}}}, 1),  # a new member
            ({"session": {"strategy": {"goal": "y"}, "tactics": {"n": 4}}}, 2),  # two members
            ({"session": {"tactics": {"n": 5}}, "cwd": {"tactics": {"here": False}}}, 2),  # two documents
            *(({"session": {"tactics": {"pad": f"{i % 10}" * 300}}}, 0) for i in range(40)),  # snapshots due
        ]
        expected = 0
        for patch, loop in calls:
            _contend(served_store, served)
            _contend(locked_store, locked)
            before = served_store.get(key).revision
            assert _outcome(served, patch) == _outcome(locked, patch), patch
            expected += loop
            if before and served_store.get(key).revision > before:
                assert served_store._served_revisions[key] == before + 1, patch  # merged by the server
        assert _rows(schemas[0]) == _rows(schemas[1])
        assert _reads(served) == _reads(locked)
        assert len(_rows(schemas[0])["snapshots"]) >= 3  # (two of them among the last 40 patches)
        assert _merge_calls(schemas[0], expected) == expected
    finally:
        served_store.close()
        locked_store.close()


def test_a_member_written_with_keys_the_merge_does_not_encode_falls_back(schemas: tuple[str, str]) -> None:
    assert PG_URL
    store = open_store(_with_schema(PG_URL, schemas[0]), auto_migrate=True)
    assert isinstance(store, PostgresStore)
    try:
        view = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        view.patch_state({"session": {"tactics": {'say "hi"': "x", "n": "1"}}})
        _contend(store, view)
        receipt = view.patch_state({"session": {"tactics": {"n": "2"}}})
        assert receipt.changed_scopes == ["session"]
        assert store._served_revisions == {}  # the locked path wrote it
        assert view.read_state({"path": "session.tactics"})["value"] == {'say "hi"': "x", "n": "2"}
        _contend(store, view)
        view.patch_state({"session": {"strategy": {"n": "3"}}})
        key = view.keys["session"]
        assert store._served_revisions == {key: store.get(key).revision}  # a member without them
    finally:
        store.close()


def _writer(location: str, index: int, calls: int) -> list[str]:
    return [sys.executable, "-m", "tests.workers", "patcher", location, str(index), str(calls)]


@pytest.mark.slow
def test_writer_processes_patching_one_scope_lose_nothing_and_keep_one_history(
    schemas: tuple[str, str],
) -> None:
    """Four processes patch one session scope at once (contended: the server merge) while a
    fifth is killed with SIGKILL mid-stream; every acknowledged patch is there, and the history
    replays to the body."""
    assert PG_URL
    url = _with_schema(PG_URL, schemas[0])
    store = open_store(url, auto_migrate=True)
    try:
        view = MemoryView(store, Identity.of("bench", "/bench", "shared"))
        view.patch_state({"session": {"tactics": {"seed": "0"}}})
        children = [
            subprocess.Popen(_writer(url, i, 60), cwd=ROOT, stdout=subprocess.PIPE, text=True)
            for i in range(4)
        ]
        doomed = subprocess.Popen(_writer(url, 9, 100_000), cwd=ROOT, stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=30)
        outs = []
        for child in children:
            out, _ = child.communicate(timeout=300)
            assert child.returncode == 0
            outs.append(out)
        assert any("served" in out for out in outs)  # the server merge took part
        assert doomed.stdout is not None
        acknowledged = [line for line in doomed.stdout.read().split() if line.startswith("step")]
        tactics = view.read_state({"path": "session.tactics"})["value"]
        for i in range(4):
            assert tactics[f"w{i}"] == "step 59"
        if acknowledged:
            assert int(tactics["w9"].split()[1]) >= int(acknowledged[-1].split(":")[1])
        key = view.keys["session"]
        doc = store.get(key)
        changes = store.history([key], limit=10_000)
        assert [c.revision for c in changes] == list(range(doc.revision, 0, -1))
        assert store.read_at(key, revision=doc.revision).body == doc.body
    finally:
        store.close()


def test_patch_on_server_is_not_taken_uncontended(schemas: tuple[str, str]) -> None:
    assert PG_URL
    store = open_store(_with_schema(PG_URL, schemas[0]), auto_migrate=True)
    assert isinstance(store, PostgresStore)
    try:
        view = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        for i in range(5):
            view.patch_state({"session": {"tactics": {"n": str(i)}}})
        assert store._served_revisions == {}
        key: DocKey = view.keys["session"]
        store._contended[key] = math.inf  # another writer's commit beat this store's
        before = time.monotonic()
        view.patch_state({"session": {"tactics": {"n": "x"}}})
        after = time.monotonic()
        # merged by the server, its revision not seen before: contended for CONTENDED_SECONDS
        # from the call (judged by clocks around it: the window itself may have passed by now
        # on a loaded machine)
        assert store._served_revisions == {key: store.get(key).revision}
        assert before + CONTENDED_SECONDS <= store._contended[key] <= after + CONTENDED_SECONDS
        # (a window this test's load cannot outlast)
        store._contended[key] = until = time.monotonic() + 60
        view.patch_state({"session": {"tactics": {"n": "y"}}})
        assert store._served_revisions == {key: store.get(key).revision}
        # nobody else wrote since: still contended until then, not longer
        assert store._contended[key] == until
        store._contended[key] = time.monotonic() - 1  # (then lapsed)
        assert not store._is_contended([key])
        served = dict(store._served_revisions)
        view.patch_state({"session": {"tactics": {"n": "z"}}})  # the ordinary way
        assert store._served_revisions == served
        assert view.read_state({"path": "session.tactics.n"})["value"] == "z"
    finally:
        store.close()


def test_a_served_merge_is_flushed_before_its_call_returns(schemas: tuple[str, str]) -> None:
    """Schema 23: the server merge commits without waiting for its WAL flush — its row locks and
    the seq lock go to the next writer once its commit record is written — and the call returns
    only once the WAL is flushed past that record (a transaction of its own, committed after it
    on the same connection). The session's ``synchronous_commit`` is left as it was: every other
    commit on that connection waits for its flush as before."""
    assert PG_URL
    store = PostgresStore(_with_schema(PG_URL, schemas[0]), max_size=1, auto_migrate=True)
    try:
        view = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        view.patch_state({"session": {"tactics": {"n": "0"}}})
        key = view.keys["session"]
        with psycopg.connect(PG_URL, autocommit=True) as admin, admin.transaction(force_rollback=True):
            # pg_walinspect for this check alone: created in this transaction, rolled back after
            # it (a concurrent creation waits for ours), unless the database has it already
            admin.execute(f"CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA {schemas[1]}")
            (where,) = admin.execute(
                "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_walinspect'"
            ).fetchone() or ("",)
            for i in range(3):
                (start,) = admin.execute("SELECT pg_current_wal_flush_lsn()").fetchone() or ("",)
                _contend(store, view)
                view.patch_state({"session": {"tactics": {"n": f"x{i}"}}})
                # merged by the server
                assert store._served_revisions == {key: store.get(key).revision}
                (xid,) = admin.execute(
                    f"SELECT xmin::text FROM {schemas[0]}.transitions ORDER BY seq DESC LIMIT 1"
                ).fetchone() or ("",)
                # its commit record is in the WAL flushed by the time the call returned (the
                # function reads only flushed WAL)
                found = admin.execute(
                    f"SELECT end_lsn <= pg_current_wal_flush_lsn() FROM "
                    f"{where}.pg_get_wal_records_info_till_end_of_wal(%s) "
                    "WHERE xid::text = %s AND resource_manager = 'Transaction' AND record_type = 'COMMIT'",
                    (start, xid),
                ).fetchall()
                assert found == [(True,)]
            (default,) = admin.execute("SHOW synchronous_commit").fetchone() or ("",)
        with store._pool.connection() as conn:  # the one connection the merges ran on
            assert conn.execute("SHOW synchronous_commit").fetchone() == (default,)
        assert view.read_state({"path": "session.tactics.n"})["value"] == "x2"
    finally:
        store.close()
