"""SQLite: an optimistic write of a document never seen creates its row in its commit.

The row gets an id from a block reserved ahead (the documents' AUTOINCREMENT counter moved past
it, so no writer in any process draws those ids) and is inserted whole — present, at its
revision — before its members, instead of being read, inserted absent and updated. A document
that had a row after all (another store made it) makes the commit's check fail, and the write
is done on the row that exists.
"""

from __future__ import annotations

import itertools
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stateflow.store import DocKey, Document, Write, open_store
from stateflow.store.id_blocks import MAX_RESERVED_IDS, RESERVED_IDS
from stateflow.store.sqlite import SqliteStore


def _set(
    *values: tuple[DocKey, dict[str, Any]],
) -> Callable[[dict[DocKey, Document]], tuple[list[Write], None]]:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].value, body, docs[key].revision) for key, body in values], None

    return compute


def _ids(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return {subject: doc_id for doc_id, subject in conn.execute("SELECT doc_id, subject FROM documents")}


def test_a_new_document_is_created_whole_by_its_commit(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store, other = open_store(f"sqlite:///{path}"), open_store(f"sqlite:///{path}")
    try:
        assert isinstance(store, SqliteStore)
        store.update([DocKey("s", "warm")], _set((DocKey("s", "warm"), {"n": 0})), optimistic=True)
        statements: list[str] = []
        store._writer().set_trace_callback(statements.append)
        for n in range(5):
            key = DocKey("s", f"new-{n}")
            commit, _ = store.update([key], _set((key, {"n": n})), optimistic=True)
            assert commit.revisions[key] == 1
        store._writer().set_trace_callback(None)
        # (a trigger's statements are traced with the text of the statement that fired it)
        on_documents = {s for s in statements if " documents " in s and "EXISTS" not in s}
        # a created row is checked by its own insert (the documents' UNIQUE key), not looked
        # up again by the transition's insert
        assert not [s for s in statements if "NOT EXISTS" in s]
        # one insert of the whole row per document: no read, no absent row, no update after
        assert len(on_documents) == 5
        assert all(
            s.startswith("INSERT INTO documents (doc_id, state, subject, revision, present")
            for s in on_documents
        )
        for n in range(5):
            key = DocKey("s", f"new-{n}")
            doc = other.get(key)
            assert (doc.body, doc.revision) == ({"n": n}, 1)
            assert [c.revision for c in other.history([key])] == [1]
        assert store.count("s") == other.count("s") == 6  # the per-state counts follow
        # a document another store created: the id handed out here is not its row's, the
        # commit's check fails and the write lands on the row that exists
        made = DocKey("s", "made-elsewhere")
        other.update([made], _set((made, {"by": "other"})), optimistic=True)
        store.update([made], _set((made, {"by": "store"})), optimistic=True)
        assert (other.get(made).body, other.get(made).revision) == ({"by": "store"}, 2)
        assert [c.revision for c in other.history([made])] == [2, 1]
        _no_transition_without_change(path)  # (the refused creation left no transition behind)
        # a new document beside a known one commits both
        known, new = DocKey("s", "new-0"), DocKey("s", "beside")
        store.update([known, new], _set((known, {"n": 10}), (new, {"n": 11})), optimistic=True)
        assert (other.get(known).body, other.get(known).revision) == ({"n": 10}, 2)
        assert (other.get(new).body, other.get(new).revision) == ({"n": 11}, 1)
        assert store.count("s") == other.count("s") == 8
    finally:
        store.close()
        other.close()


def _no_transition_without_change(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        assert conn.execute(
            "SELECT count(*) FROM transitions t WHERE NOT EXISTS (SELECT 1 FROM changes c WHERE c.seq = t.seq)"
        ).fetchone() == (0,)


def test_a_document_read_but_not_written_is_still_checked_to_have_no_row(tmp_path: Path) -> None:
    """A write that reads a document it leaves alone (a memory patch reads every scope, writes
    one), which this store has never seen: its commit writes no row of that document to be
    refused by the documents' key, so the transition's check is what finds that another store
    made it — the write is computed again on the document as it is, never on it as absent."""
    path = tmp_path / "s.db"
    store, other = open_store(f"sqlite:///{path}"), open_store(f"sqlite:///{path}")
    try:
        store.update([DocKey("s", "warm")], _set((DocKey("s", "warm"), {"n": 0})), optimistic=True)
        read, written = DocKey("s", "read"), DocKey("s", "written")
        other.update([read], _set((read, {"seen": "by other"})), optimistic=True)
        seen: list[Any] = []

        def copy(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            seen.append(docs[read].body)  # (None: absent)
            body = {"copy": docs[read].body}
            return [Write.between(written, docs[written].value, body, docs[written].revision)], None

        store.update([read, written], copy, optimistic=True)
        assert seen[-1] == {"seen": "by other"}
        assert other.get(written).body == {"copy": {"seen": "by other"}}
        _no_transition_without_change(path)
    finally:
        store.close()
        other.close()


def test_a_creation_refused_in_a_group_commit_rolls_back_only_its_own_work(tmp_path: Path) -> None:
    """A writer creating a row that another store made meanwhile, in a group with others: its
    insert is refused by the documents' key inside its own savepoint — its transition with it
    — while the group's other writes commit, and it writes on the row that exists."""
    path = tmp_path / "s.db"
    store, other = SqliteStore(path), open_store(f"sqlite:///{path}")
    try:
        held, made, new = DocKey("s", "held"), DocKey("s", "made"), DocKey("s", "new")
        store.update([held], _set((held, {"n": 0})), optimistic=True)  # (ids reserved from here on)
        other.update([made], _set((made, {"by": "other"})), optimistic=True)
        inside = threading.Event()
        errors: list[BaseException] = []

        def holding(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            inside.set()
            deadline = time.monotonic() + 60
            while store._group._queued < 2:  # the others queue behind this turn
                assert time.monotonic() < deadline, "writers never queued"
                time.sleep(0.001)
            return _set((held, {"n": 1}))(docs)

        def run(key: DocKey, compute: Callable[[dict[DocKey, Document]], Any], optimistic: bool) -> None:
            try:
                store.update([key], compute, optimistic=optimistic)
            except BaseException as exc:
                errors.append(exc)

        first = threading.Thread(target=run, args=(held, holding, False))
        first.start()
        assert inside.wait(60)
        rest = [
            threading.Thread(target=run, args=(key, _set((key, {"by": "store"})), True))
            for key in (made, new)
        ]
        for thread in rest:
            thread.start()
        for thread in (first, *rest):
            thread.join(60)
        assert errors == []
        assert store._group.largest >= 2  # (they did share a commit)
        assert (other.get(held).body, other.get(held).revision) == ({"n": 1}, 2)
        assert (other.get(made).body, other.get(made).revision) == ({"by": "store"}, 2)
        assert [c.revision for c in other.history([made])] == [2, 1]
        assert (other.get(new).body, other.get(new).revision) == ({"by": "store"}, 1)
        _no_transition_without_change(path)
        assert other.count("s") == 3
    finally:
        store.close()
        other.close()


def test_reserved_ids_are_never_drawn_by_another_writer(tmp_path: Path) -> None:
    """Two stores on one file (as two processes) creating documents in turn, optimistically
    and through the locked path (which draws AUTOINCREMENT ids): every document its own id."""
    path = tmp_path / "s.db"
    one, two = open_store(f"sqlite:///{path}"), open_store(f"sqlite:///{path}")
    try:
        one.commit([Write.between(DocKey("s", "first"), None, {"n": -1}, 0)])
        written = {}
        for n in range(3 * RESERVED_IDS):
            store = one if n % 2 == 0 else two
            key = DocKey("s", f"d{n}")
            if n % 3 == 0:  # the locked path: the row upserted with a drawn id
                store.commit([Write.between(key, None, {"n": n}, 0)])
            else:
                store.update([key], _set((key, {"n": n})), optimistic=True)
            written[key] = n
        ids = _ids(path)
        assert len(set(ids.values())) == len(ids) == 3 * RESERVED_IDS + 1
        for key, n in written.items():
            assert one.get(key).body == two.get(key).body == {"n": n}
        assert one.count("s") == 3 * RESERVED_IDS + 1
    finally:
        one.close()
        two.close()


def _commits(path: Path) -> int:
    """Commits to the file so far: the WAL-index header's change counter (``iChange``, bytes
    8–11 of the ``-shm`` file in the machine's order, bumped by every commit)."""
    return int.from_bytes(Path(f"{path}-shm").read_bytes()[8:12], sys.byteorder)


def test_new_documents_reserve_their_next_ids_inside_their_own_commits(tmp_path: Path) -> None:
    """After the first block, each block of ids is reserved by a creating commit in its own
    transaction, not by a commit of its own (a turn, a frame and an fsync every block)."""
    path = tmp_path / "s.db"
    store = SqliteStore(path, synchronous="off")
    try:
        store.commit([Write.between(DocKey("s", "first"), None, {"n": -1}, 0)])  # (the locked path)
        before = _commits(path)
        created = 5 * RESERVED_IDS
        for n in range(created):  # (optimistic: each row created by its commit under a reserved id)
            key = DocKey("s", f"d{n}")
            store.update([key], _set((key, {"n": n})), optimistic=True)
        assert _commits(path) - before == created + 1  # (the first block reserved apart)
        ids = _ids(path)
        assert len(set(ids.values())) == len(ids) == created + 1
        conn = sqlite3.connect(path)
        try:
            (top,) = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'documents'").fetchone()
        finally:
            conn.close()
        assert top >= max(ids.values())  # every id handed out was reserved
        for n in range(created):
            assert store.get(DocKey("s", f"d{n}")).body == {"n": n}
    finally:
        store.close()


def test_a_store_creating_many_documents_reserves_ids_in_growing_blocks(tmp_path: Path) -> None:
    """Each block after the first is reserved by a creating commit: twice as many ids each
    time, up to ``MAX_RESERVED_IDS``, so a store that keeps creating documents moves the
    AUTOINCREMENT counter's page rarely."""
    path = tmp_path / "s.db"
    store = SqliteStore(path, synchronous="off")
    reserved: list[int] = []  # the AUTOINCREMENT counter after each block
    conn = sqlite3.connect(path)
    try:
        store.commit([Write.between(DocKey("s", "first"), None, {"n": -1}, 0)])  # (the locked path)
        for n in range(3000):
            key = DocKey("s", f"d{n}")
            store.update([key], _set((key, {"n": n})), optimistic=True)
            (top,) = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'documents'").fetchone()
            if not reserved or top != reserved[-1]:
                reserved.append(top)
        blocks = [b - a for a, b in itertools.pairwise(reserved)]
        grown = [min(RESERVED_IDS << k, MAX_RESERVED_IDS) for k in range(1, len(blocks) + 1)]
        assert blocks == grown and blocks[-1] == MAX_RESERVED_IDS
        ids = _ids(path)
        assert len(set(ids.values())) == len(ids) == 3001 and max(ids.values()) <= reserved[-1]
        assert store.get(DocKey("s", "d2999")).body == {"n": 2999}
    finally:
        conn.close()
        store.close()
