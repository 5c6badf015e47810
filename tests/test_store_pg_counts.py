"""PostgreSQL (schema 36): the counters as deltas each writer appends (``count_deltas``), folded
into ``state_counts`` now and then — every writer's counters equal a recount of the rows, before
and after a fold, with folds racing each other and writers; and the subject kind the client
sends is the server's ``stateflow_subject_kind``."""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stateflow.store.postgres as pg
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.store import DocKey, Document, Write, open_store
from stateflow.store.counting import subject_kind
from stateflow.store.pg_fast import FastCommit
from stateflow.store.postgres import PostgresStore
from stateflow.subjects import encode_subject
from tests.pg_helpers import commits_sent

Counts = dict[tuple[str, str, str], int]


@pytest.fixture
def store(pg_schema_url: str) -> Iterator[PostgresStore]:
    made = open_store(pg_schema_url, auto_migrate=True)
    assert isinstance(made, PostgresStore)
    try:
        yield made
    finally:
        made.close()


def exact(store: PostgresStore) -> Counts:
    """The stored counters (rows and deltas), after asserting they equal a recount."""
    with store._read_tx() as tx:
        stored, counted = store.recount(tx)
    assert stored == counted
    return stored


def delta_rows(store: PostgresStore) -> list[tuple[str, str, str, int]]:
    """The ``count_deltas`` rows (the write functions' and the delete triggers')."""
    with store._read_tx() as tx:
        return sorted((s, c, n, int(d)) for s, c, n, d in tx.all("SELECT * FROM count_deltas"))


def in_transitions(store: PostgresStore) -> list[tuple[str, str, str, int]]:
    """The deltas the unfolded transitions keep (the fast statements', schema 46), one per entry."""
    with store._read_tx() as tx:
        texts = tx.all(
            "SELECT counted FROM transitions WHERE counted IS NOT NULL AND seq > "
            "(SELECT CAST(value AS BIGINT) FROM stateflow_meta WHERE key = 'counts_folded')"
        )
    return sorted((s, c, n, int(d)) for (text,) in texts for s, c, n, d in json.loads(text))


def deltas(store: PostgresStore) -> list[tuple[str, str, str, int]]:
    """Every unfolded delta, wherever its writer keeps it."""
    return sorted(delta_rows(store) + in_transitions(store))


def fold(store: PostgresStore) -> None:
    with store._write_tx() as tx:
        store._fold_counts(tx)


def fast(commits: list[Any]) -> bool:
    """Whether the last commit sent was a fast statement (``pg_fast``)."""
    return isinstance(commits[-1], FastCommit)


def setting(key: DocKey, body: Any) -> Any:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].body, body, docs[key].revision)], None

    return compute


def test_each_fast_shape_appends_its_deltas_and_the_counters_stay_exact(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = commits_sent(monkeypatch)
    thread = DocKey("notes", encode_subject("agent", "a", "thread", "t1"))
    # creating, one document: +1 its kind, +1 each member
    store.update([thread], setting(thread, {"a": 1, "b": [2]}), optimistic=True)
    assert fast(commits) and commits[-1].shape[3] == 1
    # (kept in the transition row the statement writes, no row of ``count_deltas``: schema 46)
    assert delta_rows(store) == []
    assert in_transitions(store) == [
        ("notes", "kind", "thread", 1),
        ("notes", "member", "a", 1),
        ("notes", "member", "b", 1),
    ]
    exact(store)
    # documents that exist: a member rewritten (nothing to count), a member added (+1)
    store.update([thread], setting(thread, {"a": 2, "b": [2]}), optimistic=True)
    assert fast(commits) and len(deltas(store)) == 3
    store.update([thread], setting(thread, {"a": 2, "b": [2], "c": "new"}), optimistic=True)
    assert fast(commits) and ("notes", "member", "c", 1) in deltas(store)
    exact(store)
    # the document gone (the function: its kind and members -1), then written again by a fast
    # statement whose present moves 0 -> 1
    store.update([thread], setting(thread, None), optimistic=True)
    assert not fast(commits)
    assert exact(store) == {}
    store.update([thread], setting(thread, {"z": 1}), optimistic=True)
    assert fast(commits) and any(commits[-1].shape[6])
    assert exact(store) == {("notes", "kind", "thread"): 1, ("notes", "member", "z"): 1}
    # creating several documents, one of them not an encoded subject (kind '')
    made = [DocKey("notes", encode_subject("agent", "a", "user", "u")), DocKey("notes", "plain")]

    def both(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(k, None, {"k": i}) for i, k in enumerate(made)], None

    store.update(made, both, optimistic=True)
    assert fast(commits) and commits[-1].shape[3] == 2
    assert store.kind_counts("notes") == {"thread": 1, "user": 1, None: 1}
    assert store.member_counts("notes") == {"z": 1, "k": 2}
    exact(store)
    # a member deleted (the function)
    store.update([thread], setting(thread, {"y": 1}), optimistic=True)
    assert store.member_counts("notes") == {"y": 1, "k": 2}
    exact(store)


def test_a_new_store_item_and_langgraph_writes_count_exactly(store: PostgresStore) -> None:
    service = StatesService(store)
    items, saver = StateflowStore(service), StateflowSaver(service)
    items.put(("users", "u0"), "prefs", {"theme": "dark"})  # (the declarations written first)
    before = deltas(store)
    items.put(("users", "u1"), "prefs", {"theme": "dark"})  # a new item: its kind, its six members
    made = deltas(store)
    new = Counter(made) - Counter(before)
    assert sum(new.values()) == 7 and sum(n for d, n in new.items() if d[1] == "member") == 6
    items.put(("users", "u1"), "prefs", {"theme": "light"})  # rewritten in place: nothing
    assert deltas(store) == made
    config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    for n in range(3):
        checkpoint: Any = {
            "v": 4,
            "id": f"1f0c0000-0000-7000-8000-00000000000{n}",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"step": n},
            "channel_versions": {"step": n + 1},
            "versions_seen": {},
            "updated_channels": ["step"],
        }
        config = saver.put(config, checkpoint, {"source": "loop", "step": n, "parents": {}}, {"step": n + 1})
        saver.put_writes(config, [("step", n)], f"task-{n}")
        exact(store)
    items.delete(("users", "u1"), "prefs")
    assert exact(store)


def test_a_failed_check_and_a_key_taken_meanwhile_count_nothing(
    pg_schema_url: str, store: PostgresStore
) -> None:
    other = open_store(pg_schema_url)
    try:
        key = DocKey("notes", encode_subject("agent", "a", "thread", "raced"))
        seen: list[Any] = []

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            if not seen:  # another writer creates the key after this one looked
                other.commit([Write.between(key, None, {"by": "other"})])
            seen.append(docs[key].body)
            return [
                Write.between(key, docs[key].body, {"by": "us", "n": len(seen)}, docs[key].revision)
            ], None

        store.update([key], compute, optimistic=True)
        assert seen[0] is None and store.get(key).body == {"by": "us", "n": 2}
        assert exact(store) == {
            ("notes", "kind", "thread"): 1,
            ("notes", "member", "by"): 1,
            ("notes", "member", "n"): 1,
        }
        seen.clear()

        def moved(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            if not seen:  # the document written meanwhile: this commit's check fails
                other.update([key], setting(key, {"by": "other", "m": 1}), optimistic=True)
            seen.append(docs[key].body)
            return [
                Write.between(key, docs[key].body, {**(docs[key].body or {}), "q": 1}, docs[key].revision)
            ], None

        store.update([key], moved, optimistic=True)
        assert len(seen) == 2
        assert store.member_counts("notes") == {"by": 1, "m": 1, "q": 1}
        exact(store)
    finally:
        other.close()


def test_the_locked_path_claims_the_server_merge_and_purge_count_exactly(store: PostgresStore) -> None:
    key = DocKey("notes", encode_subject("agent", "a", "thread", "locked"))
    store.update([key], setting(key, {"a": 1, "b": 2}))  # the locked path: stateflow_write_rows
    store.update([key], setting(key, {"a": 1, "c": 2}))  # a member deleted, one added
    store.update([key], setting(key, None))  # gone
    store.update([key], setting(key, {"d": 1}))  # present again
    assert store.member_counts("notes") == {"d": 1}
    exact(store)

    def claimed(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].body, {"d": 1, "e": 2}, docs[key].revision)], None

    store.update([key], claimed, optimistic=True, claims=[("scope", "op-1")])  # the function
    assert store.member_counts("notes") == {"d": 1, "e": 1}
    exact(store)
    # the server merge (as under contention): members it adds
    view = MemoryView(store, Identity.of("bench", "/bench", "counts"))
    view.patch_state({"session": {"tactics": {"n": "1"}}})
    keys = [k for k in store._seen if k.state != "notes"]
    store._contended.update(dict.fromkeys(keys, math.inf))
    merged = exact(store)
    view.patch_state(
        {"session": {"tactics": {"n": "2"}, "strategy": {"s": "x"}}, "cwd": {"tactics": {"here": "1"}}}
    )
    after = exact(store)
    assert after != merged
    fold(store)
    assert deltas(store) == [] and exact(store) == after
    # purge: its deletes' deltas, then a fold: the state's rows at zero and gone
    assert store.purge("notes") == 1
    assert all(k[0] != "notes" for k in exact(store))
    with store._read_tx() as tx:
        assert tx.all("SELECT * FROM state_counts WHERE state = 'notes'") == []


def test_folds_racing_each_other_and_writers_keep_the_counters_exact(pg_schema_url: str) -> None:
    stores = [open_store(pg_schema_url, auto_migrate=True) for _ in range(3)]
    failures: list[BaseException] = []
    stop = threading.Event()

    def write(n: int) -> None:
        store = stores[n]
        try:
            for i in range(40):
                key = DocKey("notes", encode_subject("agent", "a", "thread", f"w{n}-{i % 7}"))
                store.update(
                    [key], setting(key, {f"m{i % 4}": i, "n": n} if i % 5 else None), optimistic=True
                )
        except BaseException as exc:  # (reported below)
            failures.append(exc)

    def folding() -> None:
        try:
            with psycopg.connect(pg_schema_url, autocommit=True) as conn:
                while not stop.is_set():
                    conn.execute(pg._FOLD_AFTER_COMMITS)
        except BaseException as exc:  # (reported below)
            failures.append(exc)

    try:
        writers = [threading.Thread(target=write, args=(n,)) for n in range(2)]
        folders = [threading.Thread(target=folding) for _ in range(2)]
        for t in (*writers, *folders):
            t.start()
        for t in writers:
            t.join()
        stop.set()
        for t in folders:
            t.join()
        assert not failures, failures
        store = stores[2]
        assert isinstance(store, PostgresStore)
        counts = exact(store)
        assert counts
        # two folds at once: one after a commit skips (its lock tried, not waited for), one that
        # waits folds after the other committed; none counts twice
        with psycopg.connect(pg_schema_url) as a, psycopg.connect(pg_schema_url) as b:
            a.execute(pg._FOLD_IN_TX)  # (a's transaction holds the fold's lock until its commit)
            b.execute(pg._FOLD_TRIED)
            a.commit()
            b.commit()
        assert deltas(store) == [] and exact(store) == counts
        writing = stores[0]
        key = DocKey("notes", encode_subject("agent", "a", "thread", "late"))
        writing.update([key], setting(key, {"late": 1}), optimistic=True)  # (kept in its transition)
        with psycopg.connect(pg_schema_url) as a, psycopg.connect(pg_schema_url) as b:
            a.execute(pg._FOLD_IN_TX)
            waiting = threading.Thread(target=b.execute, args=(pg._FOLD_IN_TX,))
            waiting.start()  # (its snapshot taken before a commits: it reads what a folded, locked)
            waiting.join(0.3)
            assert waiting.is_alive()  # (waits for a's lock)
            a.commit()
            waiting.join()
            b.commit()
        counts[("notes", "kind", "thread")] += 1
        counts[("notes", "member", "late")] = 1
        assert deltas(store) == [] and exact(store) == counts
    finally:
        for s in stores:
            s.close()


def test_one_commit_in_every_so_many_folds_whichever_path_wrote_it(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the commit whose seq is a multiple of FOLD_EVERY folds, locked or sent alone: a store
    # whose writes all take one path (the locked one, a group, the async store) still folds
    monkeypatch.setattr(pg, "FOLD_EVERY", 3)
    key = DocKey("notes", encode_subject("agent", "a", "thread", "t"))
    folded_by = set()
    for i in range(6):  # (six seqs in a row: two multiples of 3, one on each path)
        optimistic = i % 2 == 0
        commit, _ = store.update([key], setting(key, {f"m{i}": i}), optimistic=optimistic)
        assert commit.seq is not None
        left = deltas(store)
        if commit.seq % 3 == 0:
            assert left == []
            folded_by.add(optimistic)
        else:
            assert left  # (each commit adds a member: a delta, not folded yet)
        exact(store)
    assert folded_by == {True, False}
    assert exact(store) == {("notes", "kind", "thread"): 1, ("notes", "member", "m5"): 1}
    kept = store._kept  # (the fold planned with sequential scans on, the kept connection's own setting kept)
    assert kept is not None and kept.execute("SHOW enable_seqscan").fetchone() == ("off",)


_TRICKY = [
    '["a","b","c","d"]',
    '["a","b","","d"]',
    '["","","",""]',
    '["a","b","c"]',
    '["a","b","c","d","e"]',
    '["a,","b",",","d"]',
    '["a","b",",",""]',
    '[",","","",","]',
    '["a\\"","b","c","d"]',
    '["a","b","c\\\\","d"]',
    '["a\\\\","b","k","d\\"x"]',
    '["a","b\\n","kind","d"]',
    '["a","b","c","d"] ',
    ' ["a","b","c","d"]',
    '["a" ,"b","c","d"]',
    '["a","b","c","d"\\]',
    '["a","b","c","d"]\n',
    '["","","","","","",""]',
    '["a""b","c","d"]',
    '[""","","",""]',
    '["é","ü","ключ","日本"]',
    "plain",
    "",
    '"',
    '[","]',
    '["","]',
]


def test_the_subject_kind_the_client_sends_is_the_servers(pg_schema_url: str) -> None:
    subjects = [*_TRICKY, *(encode_subject("a\\", 'b"', k, 'x,\\"') for k in ("thread", "", "u s", ","))]
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        open_store(pg_schema_url, auto_migrate=True).close()
        for s in subjects:
            row = conn.execute("SELECT stateflow_subject_kind(%s)", (s,)).fetchone()
            assert row is not None and subject_kind(s) == row[0], s


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.text(alphabet='"\\,[]ab ', max_size=6), min_size=0, max_size=6).map(
        lambda parts: '["' + '","'.join(parts) + '"]'
    )
    | st.text(alphabet='"\\,[]ab ', max_size=24)
)
def test_the_subject_kind_matches_the_server_on_any_text(pg_schema_url: str, subject: str) -> None:
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        if conn.execute("SELECT to_regproc('stateflow_subject_kind')").fetchone() == (None,):
            open_store(pg_schema_url, auto_migrate=True).close()
        row = conn.execute("SELECT stateflow_subject_kind(%s)", (subject,)).fetchone()
    assert row is not None and subject_kind(subject) == row[0], subject
