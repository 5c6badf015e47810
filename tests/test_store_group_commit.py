"""SQLite group commit: concurrent writers share one commit, yet each stays its own unit.

The writers below are forced into one group: the first holds the writer until the others have
queued behind it, so they all run inside one transaction and one of them commits for all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from stateflow.errors import InvalidInput, StoreError, StoreUnavailable
from stateflow.store import DocKey, Document, Write, open_store
from stateflow.store.sqlite import SqliteStore

from .threads import run_threads

KEYS = [DocKey("g", f"d{i}") for i in range(4)]


def _queued(store: SqliteStore) -> int:
    return store._group._queued


def _wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "writers never queued"
        time.sleep(0.001)


def _run_group(
    store: SqliteStore, computes: Sequence[Callable[[dict[DocKey, Document]], Any]]
) -> list[BaseException | None]:
    """Run one ``update`` per compute; the first holds the writer until the rest are queued."""
    outcomes: list[BaseException | None] = [None] * len(computes)
    first_inside = threading.Event()

    def run(i: int) -> None:
        def compute(docs: dict[DocKey, Document]) -> Any:
            if i == 0:
                first_inside.set()
                _wait_for(lambda: _queued(store) == len(computes) - 1)
            return computes[i](docs)

        try:
            store.update([KEYS[i]], compute)
        except BaseException as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(0,))]
    threads[0].start()
    assert first_inside.wait(60)
    threads += [threading.Thread(target=run, args=(i,)) for i in range(1, len(computes))]
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(30)
    return outcomes


def _set(i: int) -> Callable[[dict[DocKey, Document]], Any]:
    def compute(docs: dict[DocKey, Document]) -> Any:
        key = KEYS[i]
        return [Write.between(key, docs[key].body, {"v": i}, docs[key].revision)], None

    return compute


def _fail(docs: dict[DocKey, Document]) -> Any:
    raise InvalidInput("this writer refuses")


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    s = open_store(str(tmp_path / "group.db"))
    assert isinstance(s, SqliteStore)
    return s


def test_a_group_of_writers_commits_once_and_every_write_is_durable(
    store: SqliteStore, tmp_path: Path
) -> None:
    outcomes = _run_group(store, [_set(i) for i in range(4)])
    assert outcomes == [None] * 4
    # a fresh store object on the same file sees every write: they were committed
    other = open_store(str(tmp_path / "group.db"))
    docs = other.read(KEYS)
    assert [docs[k].body for k in KEYS] == [{"v": i} for i in range(4)]
    # one transaction per write in the history (each kept its own transition)
    assert len(other.transitions(limit=10)) == 4
    other.close()


def test_a_failing_writer_in_a_group_rolls_back_only_its_own_work(store: SqliteStore) -> None:
    outcomes = _run_group(store, [_set(0), _fail, _set(2), _set(3)])
    assert outcomes[0] is None and outcomes[2] is None and outcomes[3] is None
    assert isinstance(outcomes[1], InvalidInput)
    docs = store.read(KEYS)
    assert docs[KEYS[1]].body is None and docs[KEYS[1]].revision == 0
    assert [docs[k].body for k in (KEYS[0], KEYS[2], KEYS[3])] == [{"v": 0}, {"v": 2}, {"v": 3}]


def test_writers_return_only_after_the_group_committed(store: SqliteStore, tmp_path: Path) -> None:
    """The first writer finishes its work before the others, but answers after their commit."""
    observed: dict[str, Any] = {}
    watcher = open_store(str(tmp_path / "group.db"))

    def first(docs: dict[DocKey, Document]) -> Any:
        return _set(0)(docs)

    def last(docs: dict[DocKey, Document]) -> Any:
        # the first writer's work is done but not committed: another connection cannot see it
        observed["before_commit"] = watcher.get(KEYS[0]).body
        return _set(1)(docs)

    assert _run_group(store, [first, last]) == [None, None]
    assert observed["before_commit"] is None
    assert watcher.get(KEYS[0]).body == {"v": 0}
    watcher.close()


def test_a_write_that_fails_to_commit_fails_every_writer_of_its_group(store: SqliteStore) -> None:
    """A commit that does not happen is reported to each writer that was waiting on it."""

    def breaks_the_transaction(docs: dict[DocKey, Document]) -> Any:
        # ROLLBACK ends the shared transaction: the earlier writer's work is gone with it
        store._writer().execute("ROLLBACK")
        return _set(1)(docs)

    outcomes = _run_group(store, [_set(0), breaks_the_transaction])
    assert all(o is not None for o in outcomes), outcomes
    assert store.read(KEYS[:2]) == {k: Document(k, 0, None) for k in KEYS[:2]}


def test_a_writer_alone_commits_in_the_same_group_and_a_shared_group_gets_a_new_one(
    store: SqliteStore,
) -> None:
    """A group only one writer ran in was seen by nobody else: it stays the next group (no lock
    made and released per write alone); a group two writers shared is replaced, and each
    writer still returns after its commit."""
    commit = store._group
    before = commit.commits
    store.update([KEYS[0]], _set(0))
    alone = commit._group
    for i in (1, 2):
        store.update([KEYS[i]], _set(i))
        assert commit._group is alone and alone.attempts == alone.members == 0
    assert commit.commits == before + 3 and commit.largest == 1
    outcomes = _run_group(store, [_set(0), _fail])  # two writers in one group, one of them failing
    assert outcomes[0] is None and isinstance(outcomes[1], InvalidInput)
    shared = commit._group
    assert shared is not alone and commit.largest == 1 and commit.commits == before + 4
    store.update([KEYS[3]], _set(3))
    assert commit._group is shared
    with open_store(str(store.path)) as other:  # every write committed
        assert [other.get(k).body for k in KEYS] == [{"v": i} for i in range(4)]


def test_a_commit_refused_at_commit_time_fails_the_writer_alone_and_the_next_write_commits(
    store: SqliteStore,
) -> None:
    """SQLite checks a deferred foreign key at ``COMMIT``: the lone writer whose ``COMMIT``
    fails hears that error itself, nothing of its work stays, and the writer's turn is free."""
    store.update([KEYS[0]], _set(0))
    with pytest.raises(StoreError, match="FOREIGN KEY"), store._write_tx() as tx:
        tx.run("PRAGMA defer_foreign_keys = ON")
        tx.run("INSERT INTO changes (doc_id, revision, seq, paths) VALUES (-1, 1, -1, x'00')")
    assert not store._writer().in_transaction
    assert store._writer().execute("SELECT count(*) FROM changes WHERE doc_id = -1").fetchone() == (0,)
    assert store._group.lock.acquire(False)  # the turn was handed back
    store._group.lock.release()
    store.update([KEYS[1]], _set(1))
    with open_store(str(store.path)) as other:
        assert [other.get(k).body for k in KEYS[:2]] == [{"v": 0}, {"v": 1}]


def test_many_threads_lose_no_update_through_group_commit(store: SqliteStore) -> None:
    counter = DocKey("g", "counter")

    def bump(docs: dict[DocKey, Document]) -> Any:
        n = (docs[counter].body or {"n": 0})["n"] + 1
        return [Write.between(counter, docs[counter].body, {"n": n}, docs[counter].revision)], None

    def work(_worker: int) -> None:
        for _ in range(25):
            store.update([counter], bump)

    assert run_threads(work, 8) == []
    doc = store.get(counter)
    assert doc.body == {"n": 200} and doc.revision == 200


def _wal_commits(path: Path) -> int:
    """Commits in the database's WAL, read from the file itself: frames of the WAL's current
    generation (their salts match the header's) that end a transaction (a non-zero database
    size in the frame header)."""
    data = (path.parent / f"{path.name}-wal").read_bytes()
    page_size = int.from_bytes(data[8:12], "big")
    salts = data[16:24]
    commits = 0
    for at in range(32, len(data) - 24, 24 + page_size):
        if data[at + 8 : at + 16] != salts:
            break  # a frame left from before the WAL restarted: the current frames end here
        commits += int.from_bytes(data[at + 4 : at + 8], "big") != 0
    return commits


def test_concurrent_callers_share_commits_and_every_call_lands(tmp_path: Path) -> None:
    """Eight callers applying at once: fewer commits reach the WAL than calls were made (each
    call still its own transition), and every call's write is there."""
    from stateflow.states import StatesService

    path = tmp_path / "shared.db"
    store = open_store(str(path))
    assert isinstance(store, SqliteStore)
    service = StatesService(store)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    service.declare("s", {"schema": schema, "subject_kinds": ["thread"], "default_subject_kind": "thread"})
    subject = {"target_kind": "agent", "target_name": "a", "kind": "thread"}
    for t in range(8):  # each record exists and is known here: the writes below are optimistic
        service.apply("s", {**subject, "key": f"t{t}"}, [{"op": "set", "path": ["n"], "value": 0}])
    before, calls = _wal_commits(path), 8 * 8

    def caller(t: int) -> None:
        for n in range(1, 9):
            service.apply("s", {**subject, "key": f"t{t}"}, [{"op": "set", "path": ["n"], "value": n}])

    assert run_threads(caller, 8) == []
    commits = _wal_commits(path) - before
    assert 0 < commits < calls
    assert store._group.largest > 1
    with open_store(str(path)) as other:  # another store object: nothing served from a cache
        records = StatesService(other)
        read = [records.read("s", {**subject, "key": f"t{t}"}) for t in range(8)]
        assert [r["data"] if r else None for r in read] == [{"n": 8}] * 8
        assert len(other.transitions(limit=200)) >= 8 + calls
    store.close()


def _race_a_close(path: Path, keys: list[DocKey], delay: float) -> tuple[list[int], list[BaseException]]:
    """One writer thread per key creating it, and ``store.close()`` ``delay`` s after they start:
    the indexes of the writes that returned, and what the others raised."""
    store = open_store(str(path))
    warm = DocKey("g", "warm")
    store.update([warm], lambda docs: ([Write.between(warm, None, {}, 0)], None))
    made: list[int] = []
    refused: list[BaseException] = []
    start = threading.Barrier(len(keys) + 1)

    def write(i: int) -> None:
        start.wait()
        try:
            store.update([keys[i]], lambda docs: ([Write.between(keys[i], None, {"v": i}, 0)], None))
            made.append(i)
        except StoreUnavailable as exc:
            refused.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(keys))]
    for t in threads:
        t.start()
    start.wait()
    time.sleep(delay)
    store.close()
    for t in threads:
        t.join(30)
    return made, refused


def test_a_close_while_writers_are_under_way_loses_no_write_it_acknowledged(tmp_path: Path) -> None:
    """Writers racing a ``close``: each write either returns and is there for a store opened
    afterwards, or is refused ``StoreUnavailable`` ("was closed") and is not. A close used to
    take the writer's turn while a group was open — its writers' work uncommitted, each waiting
    for the writer queued behind to commit it — and close its connection under it; the next
    writer reopened one, committed alone, and woke that group's writers as if their work had
    been committed too (a few of every twelve acknowledged writes missing in about one round in
    four). The close now commits such a group for its writers first, and opens nothing again."""
    keys = [DocKey("g", f"k{i}") for i in range(12)]
    for attempt in range(20):
        path = tmp_path / f"close{attempt}.db"
        made, refused = _race_a_close(path, keys, 0.001 * (attempt % 4))
        assert len(made) + len(refused) == len(keys)
        assert all("closed" in str(exc) for exc in refused), refused
        with open_store(str(path)) as again:
            kept = again.read(keys)
            assert sorted(i for i, key in enumerate(keys) if kept[key].revision) == sorted(made), attempt
