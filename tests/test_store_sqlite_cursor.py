"""The embedded store runs a transaction's statements on one cursor, and keeps the writer's from
one group commit to the next: a statement that fails, a nested write, a rolled-back writer and
a store closed and written again must leave that cursor as usable as a new one."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import cast

import pytest

from stateflow.errors import StateflowError, StoreUnavailable
from stateflow.store import DocKey, Write
from stateflow.store.sqlite import SqliteStore, _SqliteTx


def _store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "cursor.db", synchronous="off")


def _kept(store: SqliteStore) -> _SqliteTx | None:
    """The writer's transaction facade kept between group commits."""
    return store._group._tx


def test_the_writer_keeps_one_cursor_between_commits(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.commit([Write.between(DocKey("s", "a"), None, {"n": 1})])
    kept = _kept(store)
    assert kept is not None and kept.conn is store._writer_conn
    store.commit([Write.between(DocKey("s", "a"), {"n": 1}, {"n": 2}, expect=1)])
    store.commit([Write.between(DocKey("s", "b"), None, {"n": 3})])
    assert _kept(store) is kept
    assert store.get(DocKey("s", "a")).body == {"n": 2}
    assert store.get(DocKey("s", "b")).body == {"n": 3}
    store.close()


def test_a_failed_statement_leaves_the_cursor_usable(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.commit([Write.between(DocKey("s", "a"), None, {"n": 1})])
    with pytest.raises(StateflowError), store._write_tx() as tx:
        tx.run("INSERT INTO no_such_table VALUES (1)")
    with pytest.raises(StateflowError), store._write_tx() as tx:
        # a statement that wrote, then one that failed: the writer's part is rolled back
        tx.run("UPDATE documents SET revision = revision + 100")
        tx.run("INSERT INTO documents (doc_id, state, subject) VALUES (1, 'x', 'y')")
    store.commit([Write.between(DocKey("s", "a"), {"n": 1}, {"n": 2}, expect=1)])
    doc = store.get(DocKey("s", "a"))
    assert (doc.revision, doc.body) == (2, {"n": 2})
    with store._read_tx() as tx:
        assert tx.all("SELECT count(*) FROM documents WHERE revision > 100") == [(0,)]
    store.close()


def test_a_nested_write_shares_the_writer_cursor(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.commit([Write.between(DocKey("s", "a"), None, {"n": 1})])
    with store._write_tx() as outer:
        before = outer.all("SELECT revision FROM documents WHERE subject = 'a'")
        with store._write_tx() as inner:
            assert inner is outer
            inner.run("UPDATE documents SET bytes_since_snapshot = bytes_since_snapshot WHERE subject = 'a'")
        # the outer statement's rows were fetched before the inner one ran
        assert before == [(1,)]
        assert outer.all("SELECT revision FROM documents WHERE subject = 'a'") == [(1,)]
    store.close()


def test_only_the_thread_in_its_turn_joins_the_write_another_reads_apart_and_waits(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.commit([Write.between(DocKey("s", "a"), None, {"n": 1})])
    seen: list[object] = []
    read = threading.Event()

    def other() -> None:
        with store._read_tx() as tx:  # its own connection: the turn's uncommitted work unseen
            apart = cast(_SqliteTx, tx).conn is not store._writer_conn
            seen.append((apart, tx.all("SELECT max(revision) FROM documents")))
        read.set()
        store.commit([Write.between(DocKey("s", "b"), None, {"n": 2})])  # waits for the turn
        seen.append("wrote")

    with store._write_tx() as outer:
        outer.run("UPDATE documents SET revision = revision + 100")
        with store._read_tx() as inner:  # this thread, inside its turn: the writer's transaction
            assert inner.all("SELECT max(revision) FROM documents") == [(101,)]
        thread = threading.Thread(target=other)
        thread.start()
        assert read.wait(10)
        thread.join(0.3)  # (a write that joined this turn would be done by now)
        assert seen == [(True, [(1,)])]  # read apart; its write waits for the next turn
        outer.run("UPDATE documents SET revision = revision - 100")
    thread.join(10)
    assert seen[1:] == ["wrote"]
    assert store.get(DocKey("s", "b")).body == {"n": 2}
    store.close()


def test_writers_of_many_threads_then_a_closed_store_refuses_and_a_new_one_writes(tmp_path: Path) -> None:
    """The kept writer transaction goes with the close; a closed store opens nothing again (a
    write is refused "was closed"), and a store opened anew on the file keeps a new one."""
    store = _store(tmp_path)
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            for i in range(20):
                store.commit([Write.between(DocKey("s", f"t{t}-{i}"), None, {"t": t, "i": i})])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    old = _kept(store)
    store.close()
    assert _kept(store) is None
    with pytest.raises(StoreUnavailable, match="was closed"):
        store.commit([Write.between(DocKey("s", "after"), None, {"n": 1})])
    assert _kept(store) is None
    again = _store(tmp_path)
    again.commit([Write.between(DocKey("s", "after"), None, {"n": 1})])
    new = _kept(again)
    assert new is not None and new is not old
    assert new.conn is again._writer_conn
    for t in range(4):
        for i in range(20):
            assert again.get(DocKey("s", f"t{t}-{i}")).body == {"t": t, "i": i}
    assert again.get(DocKey("s", "after")).body == {"n": 1}
    again.close()
