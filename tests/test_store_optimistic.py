"""Writes computed against the revisions a store last saw (``update(optimistic=True)``).

Such a write is computed with no lock held and committed only if nothing moved (on PostgreSQL
in one statement); whenever anything did — another store object wrote, a shared document
changed, the state was purged and re-created, an op id was taken — the locked path runs and
decides. The outcomes asserted here are the contract on both backends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stateflow.errors import InvalidInput
from stateflow.store import DocKey, Document, Write, open_store, writes
from stateflow.store.postgres import PostgresStore
from stateflow.store.sqlite import SqliteStore

from .conftest import StoreFactory
from .threads import run_threads

DOC = DocKey("counters", "x")
SETTINGS = DocKey("settings", "global")


def _bump(step: int = 1) -> Callable[[dict[DocKey, Document]], tuple[list[Write], int]]:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], int]:
        doc = docs[DOC]
        n = (doc.body or {"n": 0})["n"] + step
        return [Write.between(DOC, doc.value, {"n": n, "log": [n]}, doc.revision)], n

    return compute


def _n(store: Any) -> int:
    return int(store.get(DOC).body["n"])


def _count_one_statement_commits(store: Any) -> list[int | None]:
    """Observe (and pass through) the store's one-statement commits: their answers."""
    answers: list[int | None] = []
    inner = store._commit_planned

    def observed(*args: Any) -> int | None:
        answers.append(inner(*args))
        return answers[-1]

    store._commit_planned = observed
    return answers


def test_a_write_on_a_document_another_store_moved_uses_the_current_one(open_migrated: StoreFactory) -> None:
    one, two = open_migrated(), open_migrated()
    answers = _count_one_statement_commits(one)
    assert one.update([DOC], _bump(), optimistic=True)[1] == 1
    # a new document: PostgreSQL creates its row first and commits in one statement too
    assert len(answers) == (1 if isinstance(one, PostgresStore) else 0)
    assert one.update([DOC], _bump(), optimistic=True)[1] == 2  # from what `one` last wrote
    assert answers and all(a is not None for a in answers)  # the second one was computed unlocked
    assert two.update([DOC], _bump(10), optimistic=True)[1] == 12
    # `one` last saw revision 2; the document is at 3 now
    commit, n = one.update([DOC], _bump(), optimistic=True)
    assert n == 13 and commit.revisions[DOC] == 4
    if isinstance(one, PostgresStore):
        # tried against revision 2 and refused, then read again unlocked and committed
        assert answers[-2] is None and answers[-1] is not None
    else:
        assert answers[-1] is None  # tried against revision 2, refused, done locked
    assert _n(open_migrated()) == 13
    assert [c.revision for c in open_migrated().history([DOC])] == [4, 3, 2, 1]


def test_new_documents_written_at_once_by_two_stores_each_keep_one_write(open_migrated: StoreFactory) -> None:
    """Two stores that have never seen a document create it concurrently: both writes land,
    one after the other (the loser of the row's check goes again locked), none is lost."""
    stores = [open_migrated() for _ in range(4)]
    keys = [DocKey("counters", f"new-{n}") for n in range(6)]

    def bump(key: DocKey) -> Callable[[dict[DocKey, Document]], tuple[list[Write], int]]:
        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], int]:
            doc = docs[key]
            n = (doc.body or {"n": 0})["n"] + 1
            return [Write.between(key, doc.value, {"n": n}, doc.revision)], n

        return compute

    def write_all(i: int) -> None:
        for key in keys:
            stores[i].update([key], bump(key), optimistic=True)

    assert run_threads(write_all, len(stores)) == []
    check = open_migrated()
    assert [check.get(k).body for k in keys] == [{"n": 4}] * len(keys)
    assert all([c.revision for c in check.history([k])] == [4, 3, 2, 1] for k in keys)


def test_a_refusal_computed_on_a_stale_document_is_not_the_answer(open_migrated: StoreFactory) -> None:
    one, two = open_migrated(), open_migrated()
    one.update([DOC], _bump(), optimistic=True)  # n = 1, seen by `one`
    two.update([DOC], _bump(), optimistic=True)  # n = 2

    def refuse_odd(docs: dict[DocKey, Document]) -> tuple[list[Write], int]:
        if (docs[DOC].body or {})["n"] % 2:
            raise InvalidInput("odd")
        return _bump()(docs)

    assert one.update([DOC], refuse_odd, optimistic=True)[1] == 3  # decided on n = 2
    with pytest.raises(InvalidInput, match="odd"):  # and a real refusal still refuses
        one.update([DOC], refuse_odd, optimistic=True)
    assert _n(two) == 3


def test_a_shared_document_that_moved_is_read_again(open_migrated: StoreFactory) -> None:
    one, two = open_migrated(), open_migrated()
    one.commit([Write.between(SETTINGS, None, {"step": 1})])

    def copy_step(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        step = (docs[SETTINGS].body or {})["step"]
        return [Write.between(DOC, docs[DOC].value, {"step": step}, docs[DOC].revision)], None

    one.update([DOC], copy_step, shared=[SETTINGS], optimistic=True)
    one.update([DOC], copy_step, shared=[SETTINGS], optimistic=True)  # no change: step is 1
    two.commit([Write.between(SETTINGS, {"step": 1}, {"step": 5})])
    one.update([DOC], copy_step, shared=[SETTINGS], optimistic=True)
    assert open_migrated().get(DOC).body == {"step": 5}


def test_a_write_sharing_documents_reads_one_another_store_moved_without_the_lock(
    open_migrated: StoreFactory,
) -> None:
    """As the declared states' record writes share their declaration and aliases (the latter
    often without a row): on PostgreSQL a write whose own document moved reads it again in a
    snapshot and commits in one statement, checking the shared ones too — no row lock waited
    for meanwhile."""
    catalog, absent = DocKey("_catalog", "settings"), DocKey("_aliases", "none")
    one, two = open_migrated(), open_migrated()
    one.commit([Write.between(catalog, None, {"step": 1})])

    def copy_step(step_by: int) -> Callable[[dict[DocKey, Document]], tuple[list[Write], int]]:
        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], int]:
            assert docs[absent].body is None
            n = (docs[DOC].body or {"n": 0})["n"] + step_by * (docs[catalog].body or {})["step"]
            return [Write.between(DOC, docs[DOC].value, {"n": n}, docs[DOC].revision)], n

        return compute

    answers = _count_one_statement_commits(one)
    assert one.update([DOC], copy_step(1), shared=[catalog, absent], optimistic=True)[1] == 1
    assert one.update([DOC], copy_step(1), shared=[catalog, absent], optimistic=True)[1] == 2
    assert two.update([DOC], copy_step(10), shared=[catalog, absent], optimistic=True)[1] == 12
    before = len(answers)
    assert one.update([DOC], copy_step(1), shared=[catalog, absent], optimistic=True)[1] == 13
    if isinstance(one, PostgresStore):
        # tried against revision 2 and refused, then read again unlocked and committed
        assert answers[before:] == [None, answers[-1]] and answers[-1] is not None
    assert _n(open_migrated()) == 13


def test_a_document_written_by_another_store_while_contended_stays_contended(
    open_migrated: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the row lock (SQLite: the writers' turn) a store sees whether anyone else wrote the
    document since it last did: if so its next write waits for the lock again (with several
    writers on one document an unlocked attempt would lose); if not, the next write tries
    without the lock again."""
    # (a store remembers a lost race for CONTENDED_SECONDS, 0.5 s: long enough here for a loaded
    # machine's pause between two writes, which is not this test's subject)
    monkeypatch.setattr(writes, "CONTENDED_SECONDS", 60.0)
    one, two = open_migrated(), open_migrated()
    one.update([DOC], _bump(), optimistic=True)
    answers = _count_one_statement_commits(one)
    later = time.monotonic() + 60
    one._contended[DOC] = later  # as after an unlocked attempt that lost
    two.update([DOC], _bump(), optimistic=True)
    one.update([DOC], _bump(), optimistic=True)  # locked: and `two` wrote since
    assert answers == [] and one._is_contended([DOC])
    one.update([DOC], _bump(), optimistic=True)  # locked again: nobody else wrote since
    assert answers == [] and not one._is_contended([DOC])
    one.update([DOC], _bump(), optimistic=True)  # without the lock, from what `one` wrote
    assert len(answers) == 1 and answers[0] is not None
    assert _n(two) == 5
    one.close()
    two.close()


def test_on_sqlite_an_unlocked_attempt_that_lost_sends_the_next_writes_to_the_writers_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite: an unlocked commit that finds the document moved wrote nothing and costs its
    caller a second turn in the writers' queue (the locked path). So its writes of that document
    go to the locked path at once while other writers keep writing it: one turn, one compute —
    until a locked write finds nobody else wrote since, and the next one tries unlocked again."""
    # (a store remembers a lost race for CONTENDED_SECONDS, 0.5 s: long enough here for a loaded
    # machine's pause between two writes, which is not this test's subject)
    monkeypatch.setattr(writes, "CONTENDED_SECONDS", 60.0)
    url = f"sqlite:///{tmp_path / 'contended.db'}"
    one, two = open_store(url), open_store(url)
    assert isinstance(one, SqliteStore)
    computed: list[int] = []

    def bump(docs: dict[DocKey, Document]) -> tuple[list[Write], int]:
        writes, n = _bump()(docs)
        computed.append(n)
        return writes, n

    one.update([DOC], _bump(), optimistic=True)
    one.update([DOC], _bump(), optimistic=True)  # (unlocked, from what `one` wrote)
    answers = _count_one_statement_commits(one)
    turns = one._group.queue
    two.update([DOC], _bump(10), optimistic=True)
    assert one.update([DOC], bump, optimistic=True)[1] == 13
    assert answers == [None] and computed == [3, 13]  # tried on revision 2, lost, done locked
    assert one._is_contended([DOC]) and not two._is_contended([DOC])
    two.update([DOC], _bump(10), optimistic=True)
    before = turns.drawn()
    assert one.update([DOC], bump, optimistic=True)[1] == 24
    assert answers == [None] and computed[2:] == [24]  # no unlocked attempt: one compute
    assert turns.drawn() - before == 1 and one._is_contended([DOC])  # ... and one turn
    assert one.update([DOC], bump, optimistic=True)[1] == 25  # locked: nobody else wrote since
    assert answers == [None] and not one._is_contended([DOC])
    assert one.update([DOC], bump, optimistic=True)[1] == 26  # unlocked again
    assert len(answers) == 2 and answers[1] is not None
    assert [c.revision for c in two.history([DOC])] == list(range(8, 0, -1))
    one.close()
    two.close()


def test_an_op_id_applies_once_through_either_path(open_migrated: StoreFactory) -> None:
    one, two = open_migrated(), open_migrated()
    one.update([DOC], _bump(), optimistic=True)
    first, _ = one.update([DOC], _bump(), op_id="op-1", optimistic=True)
    assert first.applied and first.changed
    again, result = one.update([DOC], _bump(), op_id="op-1", optimistic=True)
    assert not again.applied and result is None
    elsewhere, _ = two.update([DOC], _bump(), op_id="op-1", optimistic=True)
    assert not elsewhere.applied
    assert _n(two) == 2 and one.applied_op("op-1") == first.seq


def test_a_purged_and_recreated_document_is_not_mistaken_for_the_old_one(
    open_migrated: StoreFactory,
) -> None:
    one, two = open_migrated(), open_migrated()
    one.update([DOC], _bump(), optimistic=True)  # `one` knows DOC at revision 1
    two.purge(DOC.state)
    two.update([DOC], _bump(7), optimistic=True)  # a new document, again at revision 1
    commit, n = one.update([DOC], _bump(), optimistic=True)
    assert n == 8 and commit.revisions[DOC] == 2
    assert open_migrated().get(DOC).body == {"n": 8, "log": [8]}


def test_concurrent_optimistic_writers_lose_no_update(open_migrated: StoreFactory) -> None:
    stores = [open_migrated(), open_migrated()]
    stores[0].commit([Write.between(SETTINGS, None, {"step": 1})])
    per_worker = 25

    def work(worker: int) -> None:
        store = stores[worker % 2]
        for _ in range(per_worker):
            store.update([DOC], _bump(), shared=[SETTINGS], optimistic=True)

    assert run_threads(work, 4) == []
    fresh = open_migrated()
    assert _n(fresh) == 4 * per_worker
    assert fresh.get(DOC).revision == 4 * per_worker
    assert len(fresh.history([DOC], limit=500)) == 4 * per_worker


def test_history_and_snapshots_stay_exact_over_many_optimistic_writes(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    for _ in range(300):  # past a snapshot (every 256 revisions at most, sooner for big edits)
        store.update([DOC], _bump(), optimistic=True)
    fresh = open_migrated()
    for revision in (1, 37, 255, 256, 257, 300):
        assert fresh.read_at(DOC, revision=revision).body == {"n": revision, "log": [revision]}


def test_on_sqlite_transition_times_follow_seq_order_under_concurrent_writers(tmp_path: Path) -> None:
    # (SQLite takes a write's time under its writer lock; PostgreSQL, on every path, before the
    # lock that orders seq values, so there the times of concurrent writes may interleave.)
    store = open_store(str(tmp_path / "times.db"))
    keys = [DocKey("counters", f"d{i}") for i in range(4)]

    def work(worker: int) -> None:
        key = keys[worker]
        for n in range(25):

            def set_n(docs: dict[DocKey, Document], n: int = n) -> tuple[list[Write], None]:
                return [Write.between(key, docs[key].value, {"n": n})], None

            store.update([key], set_n, optimistic=True)

    try:
        assert run_threads(work, 4) == []
        times = [t.at for t in store.transitions(limit=500)]
        assert len(times) == 100 and times == sorted(times)
    finally:
        store.close()


def test_a_shared_document_created_after_it_was_read_absent_is_read_again(
    open_migrated: StoreFactory,
) -> None:
    """A write computed while a shared document had no row commits in one statement only if it
    still has none (on PostgreSQL checked inside the commit function): created by another store
    between the read and the commit, the one-statement commit writes nothing and the write is
    computed again on it."""
    absent = DocKey("_aliases", "later")
    one, two = open_migrated(), open_migrated()
    create_now = [False]

    def copy_alias(docs: dict[DocKey, Document]) -> tuple[list[Write], Any]:
        if create_now[0]:  # after this write read the shared document, before it commits
            create_now[0] = False
            two.commit([Write.between(absent, None, {"to": "b"})])
        alias = (docs[absent].body or {}).get("to")
        n = (docs[DOC].body or {"n": 0})["n"] + 1  # every write changes the document
        return [Write.between(DOC, docs[DOC].value, {"alias": alias, "n": n}, docs[DOC].revision)], alias

    answers = _count_one_statement_commits(one)
    assert one.update([DOC], copy_alias, shared=[absent], optimistic=True)[1] is None
    assert one.update([DOC], copy_alias, shared=[absent], optimistic=True)[1] is None
    create_now[0] = True
    before = len(answers)
    assert one.update([DOC], copy_alias, shared=[absent], optimistic=True)[1] == "b"
    if isinstance(one, PostgresStore):
        assert answers[before] is None  # refused: the row exists now, nothing was written
    assert open_migrated().get(DOC).body == {"alias": "b", "n": 3}


def test_a_write_naming_members_and_outlines_computes_unlocked_on_what_the_locked_read_gives(
    open_migrated: StoreFactory,
) -> None:
    # (patch_state names its members and outlines: it computes on the cached documents too)
    one, two = open_migrated(), open_migrated()
    one.commit([Write.between(DOC, None, {"n": 1, "big": {"a": 1, "b": [2]}, "other": "x"})])
    seen: list[Document] = []

    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        doc = docs[DOC]
        seen.append(doc)
        assert doc.body is not None
        n = doc.body["n"] + 1
        return [Write.between(DOC, doc.value, {**doc.body, "n": n}, doc.revision, changed=[("n",)])], None

    def named() -> None:
        one.update([DOC], compute, members=["n"], outlines=["big"], optimistic=True)

    answers = _count_one_statement_commits(one)
    named()
    assert len(answers) == 1 and answers[0] is not None and len(seen) == 1  # on the cache, unlocked
    assert seen[-1].body == {"n": 1} and seen[-1].outlines == {"big": {"a": "number", "b": "array"}}
    two.update([DOC], compute, members=["n"], outlines=["big"])  # moves it past what `one` saw
    named()
    # computed on revision 2, refused, then computed again on the current one
    assert answers[1] is None and [d.revision for d in seen] == [1, 2, 2, 3]
    if isinstance(one, PostgresStore):
        assert answers[2] is not None  # read again unlocked and committed
    else:
        assert len(answers) == 2  # done locked
    assert seen[-1].body == {"n": 3} and seen[-1].outlines == {"big": {"a": "number", "b": "array"}}
    fresh = open_migrated().get(DOC)
    assert fresh.body == {"n": 4, "big": {"a": 1, "b": [2]}, "other": "x"} and fresh.revision == 4


def test_a_locked_document_a_write_leaves_alone_is_remembered_so_every_write_commits_once(
    open_migrated: StoreFactory,
) -> None:
    # (patch_state locks every scope of its view and writes those its patch names: the others
    # are locked, left alone, and most never written at all)
    one, two = open_migrated(), open_migrated()
    one.commit([Write.between(DOC, None, {"n": 1})])
    two.update([DOC, SETTINGS], _bump())  # SETTINGS gets a row (absent) that `one` never saw
    two.update([DOC], _bump())
    answers = _count_one_statement_commits(one)
    created: list[object] = []
    if isinstance(one, PostgresStore):
        inner = one._create

        def create(creates: Any) -> None:
            created.append(creates)
            inner(creates)

        one._create = create  # type: ignore[method-assign]
    for _ in range(2):  # the first sees DOC moved and SETTINGS unseen: its row is read there
        one.update([DOC, SETTINGS], _bump(), members=["n"], outlines=["n"], optimistic=True)
    answers.clear()
    created.clear()
    for _ in range(5):
        one.update([DOC, SETTINGS], _bump(), members=["n"], outlines=["n"], optimistic=True)
    # each write: one commit, computed on what this store last saw (no row made again for the
    # document left alone, no commit whose check fails, no second attempt)
    assert len(answers) == 5 and all(a is not None for a in answers) and not created
    assert _n(open_migrated()) == 10 and open_migrated().get(SETTINGS).revision == 0


def test_a_checked_update_still_refuses_a_malformed_write_but_does_not_walk_its_values_again(
    open_migrated: StoreFactory,
) -> None:
    """``update(checked=True)``: the caller vouches for the values (the memory layer checked its
    patch on the way in); the writes' shape is validated all the same, on every path."""
    store = open_migrated()
    assert store.update([DOC], _bump(), optimistic=True, checked=True)[1] == 1
    assert store.update([DOC], _bump(), optimistic=True, checked=True)[1] == 2  # the optimistic path
    assert store.update([DOC], _bump(), checked=True)[1] == 3  # the locked path
    assert _n(store) == 3

    def array_top(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        from stateflow.doc.diff import Edit

        return [Write(DOC, [Edit((0, "n"), 1)], docs[DOC].revision)], None

    for optimistic in (True, False):
        with pytest.raises(InvalidInput, match="top level is an object"):
            store.update([DOC], array_top, optimistic=optimistic, checked=True)
    assert _n(store) == 3
    # unchecked, a value that is not JSON is refused before anything is written
    with pytest.raises(InvalidInput):
        store.update([DOC], lambda docs: ([Write.between(DOC, docs[DOC].value, {"n": float("nan")})], None))
    assert _n(store) == 3
