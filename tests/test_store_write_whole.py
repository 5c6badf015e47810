"""``Store.write_whole``: one document written whole on what this store last saw, or nothing.

Two stores on one location stand for two processes: what one writes, the other's caches have
not seen, so its ``write_whole`` must write nothing (and say so) rather than lose the other's
write; ``update`` then decides.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
from collections.abc import Callable
from contextlib import closing
from typing import Any

import orjson
import pytest

from stateflow.langgraph.codec import plain_edits
from stateflow.store import DocKey, Document, Whole, Write
from stateflow.store.model import made_document
from tests.conftest import StoreFactory

KEY = DocKey("items", '["agent","a","item","k"]')
GUARD = DocKey("_guard", "g")


def _whole(body: dict[str, Any], encoded: dict[str, bytes] | None = None) -> Any:
    def build(shared: dict[DocKey, Any], current: dict[str, Any] | None) -> Whole:
        return Whole(body, [[]], encoded)

    return build


def _replace(store: Any, key: DocKey, body: dict[str, Any]) -> None:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].body, body, docs[key].revision)], None

    store.update([key], compute, {"by": "update"})


def test_a_new_document_is_written_with_its_change_and_transition(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    _replace(store, GUARD, {"v": 1})
    store.read([GUARD])  # seen here
    store.write_whole(DocKey("items", "warm"), _whole({"x": 0}), {"by": "warm"}, shared=[GUARD])
    assert store.write_whole(KEY, _whole({"a": 1, "b": [1, 2]}), {"by": "lean"}, shared=[GUARD])
    assert store.get(KEY).revision == 1
    fresh = open_migrated()  # another process's view: from the database, not the caches
    assert fresh.get(KEY).body == {"a": 1, "b": [1, 2]}
    assert fresh.read_at(KEY, revision=1).body == {"a": 1, "b": [1, 2]}
    (change,) = fresh.history([KEY])
    assert change.revision == 1 and change.origin == {"by": "lean"} and change.paths == [[]]
    assert [t.origin for t in fresh.transitions(after_seq=change.seq - 1, limit=5)] == [{"by": "lean"}]


def test_a_document_another_store_moved_is_left_to_update(open_migrated: StoreFactory) -> None:
    mine, other = open_migrated(), open_migrated()
    _replace(mine, KEY, {"n": 1})
    _replace(mine, GUARD, {"v": 1})
    assert mine.write_whole(KEY, _whole({"n": 2}), {"by": "lean"}, shared=[GUARD])
    _replace(other, KEY, {"n": 3, "theirs": True})  # unseen by ``mine``
    before = other.get(KEY)
    assert not mine.write_whole(KEY, _whole({"n": 4}), {"by": "lean"}, shared=[GUARD])
    assert other.get(KEY) == before  # nothing written
    _replace(mine, KEY, {"n": 4})  # the general write decides, on what is there now
    assert [c.origin["by"] for c in other.history([KEY])] == ["update", "update", "lean", "update"]
    assert other.get(KEY).body == {"n": 4} and other.get(KEY).revision == 4


def test_a_shared_document_that_moved_writes_nothing(open_migrated: StoreFactory) -> None:
    mine, other = open_migrated(), open_migrated()
    _replace(mine, GUARD, {"v": 1})
    _replace(mine, KEY, {"n": 1})
    assert mine.write_whole(KEY, _whole({"n": 2}), {}, shared=[GUARD])
    _replace(other, GUARD, {"v": 2})  # e.g. a re-declare, in another process
    seen: list[Any] = []

    def build(shared: dict[DocKey, Any], current: dict[str, Any] | None) -> Whole:
        seen.append(shared[GUARD])
        return Whole({"n": 3}, [[]])

    assert not mine.write_whole(KEY, build, {}, shared=[GUARD])
    assert seen == [{"v": 1}]  # built on what it had seen; the commit found the guard moved
    assert other.get(KEY).revision == 2


def _rows(backend: str, subject: str) -> dict[str, list[tuple[Any, ...]]]:
    """The rows a document has, as stored (no ids, seqs or times): members, changes, change
    edits, snapshots and the document's own row."""
    queries = {
        "documents": "SELECT revision, present, snapshot_revision, bytes_since_snapshot, body_size, "
        "next_position FROM documents d WHERE {doc}",
        "members": "SELECT name, position, revision, size, outline, body, root FROM members "
        "WHERE doc_id = (SELECT doc_id FROM documents d WHERE {doc}) ORDER BY position",
        "changes": "SELECT revision, paths, edits FROM changes "
        "WHERE doc_id = (SELECT doc_id FROM documents d WHERE {doc}) ORDER BY revision",
        "change_edits": "SELECT revision, member, edits, roots FROM change_edits "
        "WHERE doc_id = (SELECT doc_id FROM documents d WHERE {doc}) ORDER BY revision, member",
        "snapshots": "SELECT revision, body FROM snapshots "
        "WHERE doc_id = (SELECT doc_id FROM documents d WHERE {doc}) ORDER BY revision",
        "snapshot_members": "SELECT name, revision, body, root FROM snapshot_members "
        "WHERE doc_id = (SELECT doc_id FROM documents d WHERE {doc}) ORDER BY name, revision",
    }
    out: dict[str, list[tuple[Any, ...]]] = {}
    if backend.startswith("postgres"):
        import psycopg

        with psycopg.connect(backend) as conn:
            for table, sql in queries.items():
                rows = conn.execute(
                    sql.format(doc="d.subject = %s").replace("?", "%s"), (subject,)
                ).fetchall()
                out[table] = [tuple(_plain(v) for v in row) for row in rows]
        return out
    with closing(sqlite3.connect(backend)) as conn:
        for table, sql in queries.items():
            rows = conn.execute(sql.format(doc="d.subject = ?"), (subject,)).fetchall()
            out[table] = [tuple(_plain(v) for v in row) for row in rows]
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, bytes | str | int | float) or value is None:
        return value
    return orjson.dumps(value)  # (PostgreSQL's jsonb columns come back decoded)


@pytest.mark.parametrize("size", [10, 5000])
def test_a_new_document_from_its_encodings_has_the_rows_of_the_general_write(
    open_migrated: StoreFactory, backend: str, size: int
) -> None:
    store = open_migrated()
    body = {"saved": {"config": {"id": "x"}, "text": "t" * size, "n": [1, 2.5, None]}, "k": "v"}
    encoded = {name: orjson.dumps(value) for name, value in body.items()}
    lean, general = DocKey("items", "lean"), DocKey("items", "general")
    _replace(store, GUARD, {"v": 1})
    store.read([GUARD])
    store.write_whole(DocKey("items", "warm"), _whole({"x": 0}), {}, shared=[GUARD])  # (ids reserved)
    assert store.write_whole(lean, _whole(orjson.loads(orjson.dumps(body)), encoded), {}, shared=[GUARD])
    _replace(store, general, body)
    assert _rows(backend, "lean") == _rows(backend, "general")
    rows = _rows(backend, "lean")
    assert [m[0] for m in rows["members"]] == ["saved", "k"]
    assert [m[5] for m in rows["members"]] == [encoded["saved"], encoded["k"]]
    whole_edit = b"[[[]," + orjson.dumps(body) + b"]]"
    if size < 1000:  # the edit inline in the change row
        assert rows["changes"] == [(1, b"[[]]", b'[["",' + whole_edit + b"]]")] and not rows["change_edits"]
    else:  # the edit in a row of its own, and a snapshot (the change outweighs nothing before)
        assert rows["changes"] == [(1, b"[[]]", None)]
        assert rows["change_edits"] == [(1, "", whole_edit, None)]
        assert len(rows["snapshots"]) == 1
    assert open_migrated().read_at(lean, revision=1).body == body


def test_a_document_written_whole_after_its_delete_is_a_new_body(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    _replace(store, GUARD, {"v": 1})
    store.read([GUARD])
    _replace(store, KEY, {"a": 1, "b": 2})

    def delete(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(KEY, docs[KEY].body, None, docs[KEY].revision)], None

    store.update([KEY], delete, {"by": "delete"})
    store.get(KEY)  # seen absent here
    assert store.write_whole(KEY, _whole({"c": 3}, {"c": b"3"}), {"by": "lean"}, shared=[GUARD])
    fresh = open_migrated()
    assert fresh.get(KEY).body == {"c": 3} and fresh.get(KEY).revision == 3
    assert [fresh.read_at(KEY, revision=r).body for r in (1, 2, 3)] == [{"a": 1, "b": 2}, None, {"c": 3}]
    assert store.write_whole(KEY, _whole({"c": 4}), {"by": "lean"}, shared=[GUARD])
    assert open_migrated().get(KEY).body == {"c": 4}


def test_a_new_document_read_back_here_carries_its_commit(open_migrated: StoreFactory) -> None:
    """The caches a first body's write fills (PostgreSQL keeps whole bodies) hold the commit's
    seq and time, as the database does."""
    store = open_migrated()
    _replace(store, GUARD, {"v": 1})
    store.read([GUARD])
    store.write_whole(DocKey("items", "warm"), _whole({"x": 0}), {"by": "warm"}, shared=[GUARD])
    assert store.write_whole(KEY, _whole({"a": 1}), {"by": "lean"}, shared=[GUARD])
    mine = store.read([KEY])[KEY]
    theirs = open_migrated().read([KEY])[KEY]
    assert mine.body == theirs.body == {"a": 1}
    assert theirs.seq is not None
    assert (mine.revision, mine.seq, mine.at) == (theirs.revision, theirs.seq, theirs.at)


def test_a_made_document_is_the_document_its_class_builds() -> None:
    """``made_document`` (the frozen ``__init__`` passed by, for the documents a write hands
    on or keeps) builds what ``Document(...)`` builds — every field, its time too — and the
    result stays frozen."""
    key = DocKey("items", "k")
    args: tuple[Any, ...]
    for args in (
        (key, 3, {"a": [1]}, 7, {"a": None}, "2026-12-04T21:40:00.000000Z"),
        (key, 0, None, None, {}),
    ):
        made, built = made_document(*args), Document(*args)
        assert made == built and type(made) is Document
        assert [getattr(made, f) for f in ("key", "revision", "body", "seq", "outlines", "at")] == [
            getattr(built, f) for f in ("key", "revision", "body", "seq", "outlines", "at")
        ]
        with pytest.raises(AttributeError):
            made.at = "later"  # type: ignore[misc]


def test_every_body_read_back_here_carries_the_commit_that_wrote_it(open_migrated: StoreFactory) -> None:
    """Whatever way a body is written — replaced whole on what this store saw, by the general
    ``update``, deleted, written again — the document read back here (PostgreSQL: from the
    bodies its writes keep) has the seq and time the database holds for that commit."""
    store = open_migrated()
    _replace(store, GUARD, {"v": 1})
    store.read([GUARD])
    assert store.write_whole(KEY, _whole({"a": 1}), {"by": "lean"}, shared=[GUARD])

    def delete(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(KEY, docs[KEY].body, None, docs[KEY].revision)], None

    writes: list[Callable[[], object]] = [
        lambda: store.write_whole(KEY, _whole({"a": 2, "b": [1]}), {"by": "lean"}, shared=[GUARD]),
        lambda: _replace(store, KEY, {"a": 3}),
        lambda: store.update([KEY], delete, {"by": "delete"}),
        lambda: _replace(store, KEY, {"c": 4}),
        lambda: store.write_whole(KEY, _whole({"c": 5}), {"by": "lean"}, shared=[GUARD]),
    ]
    for n, write in enumerate(writes, start=2):
        write()
        mine = store.read([KEY])[KEY]
        theirs = open_migrated().read([KEY])[KEY]
        assert mine.revision == theirs.revision == n
        assert (mine.body, mine.seq, mine.at) == (theirs.body, theirs.seq, theirs.at)
        assert theirs.seq is not None and theirs.at is not None


def _forms(backend: str) -> tuple[bool, ...]:
    """Whether the documents ``lean`` and ``general`` are in whole form, and their bodies as
    their rows keep them (a SQLite store)."""
    with closing(sqlite3.connect(backend)) as conn:
        rows = dict(conn.execute("SELECT subject, body FROM documents WHERE subject IN ('lean', 'general')"))
    return rows["lean"] is not None, rows["general"] is not None, rows["lean"], rows["general"]


def _replaced(rng: random.Random, body: dict[str, Any]) -> tuple[dict[str, Any], list[list[str]]]:
    """A body replaced whole, and the paths its writer names: ``[[]]``, or — when only one key
    inside one object member changed — that key's path (as the saver's ``put_writes`` names
    the entries it sets)."""
    new = dict(body)
    roll = rng.random()
    objects = [name for name, value in body.items() if type(value) is dict]
    if roll < 0.3 and objects:
        name = rng.choice(objects)
        inner = dict(body[name])
        key = f"k{rng.randrange(4)}"
        inner[key] = _value(rng)
        new[name] = inner
        return new, [[name, key]]
    for _ in range(rng.randrange(1, 4)):
        name = f"m{rng.randrange(7)}"
        roll = rng.random()
        if roll < 0.2:
            new.pop(name, None)
        elif roll < 0.3 and name in new:
            new[name] = orjson.loads(orjson.dumps(new[name]))  # equal, not the same object
        else:
            new[name] = _value(rng)
    if rng.random() < 0.1:
        new = dict(reversed(list(new.items())))  # the same members in another order
    return new, [[]]


def _value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.3:
        return rng.randrange(-5, 5)
    if roll < 0.45:
        return "x" * rng.choice([1, 40, 700, 5000])  # inline edits, ``change_edits`` rows, a snapshot
    if roll < 0.55:
        return None
    if roll < 0.8:
        return {f"k{i}": rng.choice([rng.randrange(9), [1, 2], {"z": i}]) for i in range(rng.randrange(4))}
    return [rng.randrange(9) for _ in range(rng.randrange(4))]


@pytest.mark.parametrize("whole", [False, True], ids=["member form", "whole form"])
@pytest.mark.parametrize("given_edits", [False, True], ids=["diffed", "edits given"])
def test_a_body_replaced_whole_has_the_rows_of_the_general_write(
    open_migrated: StoreFactory, backend: str, given_edits: bool, whole: bool
) -> None:
    """``write_whole``'s rows for a present body (planned straight from the diff, or from the
    edits its writer gives with the body, ``Whole.edits``, as the LangGraph store's codec
    makes them) are the rows ``update`` writes for ``Write.between`` of the same bodies and
    paths: every member, change, change edit, snapshot and document row, revision by revision;
    and every revision reads back as written, here and from another store. ``whole``: the
    state keeps whole bodies (where the backend has that form), its bodies crossing the bound
    both ways — rewrites that stay whole, leave it and come back."""
    store = open_migrated()
    lean, general = DocKey("items", "lean"), DocKey("items", "general")
    kept_whole = whole and store.keep_whole("items", 1500)
    forms: list[tuple[Any, ...]] = []  # (each revision's forms and bodies kept, lean and general)
    _replace(store, GUARD, {"v": 1})
    store.read([GUARD])
    rng = random.Random(20261203)
    body: dict[str, Any] = {f"m{i}": _value(rng) for i in range(4)}
    assert store.write_whole(lean, _whole(dict(body)), {"by": "test"}, shared=[GUARD])
    _replace(store, general, body)
    bodies = [body]
    other = open_migrated()
    for _ in range(120):
        new, paths = _replaced(rng, body)
        mine = orjson.loads(orjson.dumps(new))  # (no object shared between the two documents)

        def build(
            shared: dict[DocKey, Any],
            current: dict[str, Any] | None,
            mine: Any = mine,
            paths: Any = paths,
            before: Any = body,
        ) -> Whole:
            assert current == before  # (as cached by the write before)
            # …in the order of the members as stored (as another store reads them)
            assert current is not None and list(current) == list(other.get(lean).body or ())
            if given_edits and paths == [[]]:
                made = plain_edits(dict(mine), current)
                assert made is not None
                return Whole(made[0], paths, None, made[1])
            return Whole(mine, paths)

        written = store.write_whole(lean, build, {"by": "test"}, shared=[GUARD])
        assert written == (new != body), paths  # (nothing to write: update decides)

        def compute(
            docs: dict[DocKey, Document], new: Any = new, paths: Any = paths
        ) -> tuple[list[Write], None]:
            doc = docs[general]
            return [Write.between(general, doc.body, new, doc.revision, changed=paths, paths=paths)], None

        if written:
            if kept_whole:  # (the staged planner's rows: ``update`` would plan these as the lean write)
                doc = store.get(general)
                store.commit(
                    [Write.between(general, doc.body, new, doc.revision, changed=paths, paths=paths)]
                )
            else:
                store.update([general], compute, {"by": "test"})
            bodies.append(new)
            if kept_whole:
                forms.append(_forms(backend))
        body = new
    assert len(bodies) > 100
    if kept_whole:  # every form met, and a rewrite in whole form that stays in it
        assert {f[0] for f in forms} == {False, True}
        assert any(a[0] and b[0] for a, b in itertools.pairwise(forms))
        assert all(f[0] == f[1] and f[2] == f[3] for f in forms)
    assert _rows(backend, "lean") == _rows(backend, "general")
    snapshots = _rows(backend, "lean")["snapshots"]
    assert len(snapshots) > 1 and _rows(backend, "lean")["change_edits"]  # (both kinds of change met)
    for reader in (store, open_migrated()):
        for revision, want in enumerate(bodies, start=1):
            assert reader.read_at(lean, revision=revision).body == want, revision
        assert reader.get(lean).body == reader.get(general).body == body
    assert [c.edits for c in other.history([lean], limit=500)] == [
        c.edits for c in other.history([general], limit=500)
    ]


def test_a_shared_document_is_handed_as_it_is_now_after_it_moves(open_migrated: StoreFactory) -> None:
    """The shared documents ``write_whole`` last read are handed again while their rows stay the
    ones seen here; once one is written (here, or by another store: the commit finds it moved),
    the next write is built on it as it is now."""
    store, other = open_migrated(), open_migrated()
    _replace(store, GUARD, {"v": 1})
    store.read([GUARD])
    seen: list[Any] = []

    def build(shared: dict[DocKey, Any], current: dict[str, Any] | None) -> Whole:
        seen.append(shared[GUARD])
        return Whole({"n": len(seen)}, [[]])

    store.write_whole(DocKey("items", "warm"), _whole({"x": 0}), {}, shared=[GUARD])  # (ids reserved)
    assert store.write_whole(KEY, build, {}, shared=[GUARD])
    assert store.write_whole(KEY, build, {}, shared=[GUARD])
    _replace(store, GUARD, {"v": 2})  # written here
    assert store.write_whole(KEY, build, {}, shared=[GUARD])
    _replace(other, GUARD, {"v": 3})  # written elsewhere: unseen here, so the commit refuses
    assert not store.write_whole(KEY, build, {}, shared=[GUARD])
    _replace(store, GUARD, {"v": 4})  # (read under the lock, then written here)
    assert store.write_whole(KEY, build, {}, shared=[GUARD])
    assert seen == [{"v": 1}, {"v": 1}, {"v": 2}, {"v": 2}, {"v": 4}]
    assert open_migrated().get(KEY).body == {"n": 5}


def test_a_member_that_becomes_a_tree_is_left_to_update(open_migrated: StoreFactory) -> None:
    """A body replaced whole whose member grows past ``TREE_MIN`` (stored as a tree of nodes) is
    not planned by ``write_whole``: nothing is written, and ``update`` writes it as a tree."""
    store = open_migrated()
    _replace(store, GUARD, {"v": 1})
    store.read([GUARD])
    _replace(store, KEY, {"a": 1, "big": "small"})
    store.read([KEY])
    large = {"a": 1, "big": ["x" * 1000] * 1200}  # (~1.2 MB: a tree)
    assert store.write_whole(KEY, _whole({"a": 2, "big": "small"}), {}, shared=[GUARD])
    assert not store.write_whole(KEY, _whole(large), {}, shared=[GUARD])
    assert store.get(KEY).revision == 2
    _replace(store, KEY, large)
    fresh = open_migrated()
    assert fresh.get(KEY).body == large and fresh.get(KEY).revision == 3
    assert fresh.read_at(KEY, revision=2).body == {"a": 2, "big": "small"}


def test_a_write_leaves_one_entry_per_document_and_writes_on_where_it_was_dropped(
    open_migrated: StoreFactory,
) -> None:
    """A write leaves the document's heads and its body assembled in one entry at the new
    revision (the next write's starting point); where the entry's bounds dropped it, or never
    held the body (too large for them), the next write assembles the document again or leaves
    it to ``update`` — the same rows and bodies as another store reads."""
    from stateflow.store.cache import HeadCache

    store, other = open_migrated(), open_migrated()
    _replace(store, GUARD, {"v": 1})
    _replace(store, KEY, {"a": 1, "b": [1, 2]})
    assert store.write_whole(KEY, _whole({"a": 2, "b": [1, 2], "c": "x"}), {"by": "lean"}, shared=[GUARD])
    row = store._rows_known[KEY]
    entry = store._heads.entry(row.doc_id, row.revision)
    assert entry is not None and entry[2] is not None
    assert entry[2] == {"a": 2, "b": [1, 2], "c": "x"}
    assert list(entry[1]) == ["a", "b", "c"] and [h[2] for h in entry[1].values()] == [0, 1, 2]
    new = DocKey("items", "new")
    assert store.write_whole(new, _whole({"z": {"q": 1}, "y": 2}), {"by": "lean"}, shared=[GUARD])
    row = store._rows_known[new]  # a new document's body is its next write's starting point
    entry = store._heads.entry(row.doc_id, row.revision)
    assert entry is not None and entry[2] == {"z": {"q": 1}, "y": 2} and list(entry[1]) == ["z", "y"]
    store._heads = HeadCache(max_docs=3, max_bytes=400)  # bounds small enough to drop entries
    keys = [DocKey("items", f"k{i}") for i in range(4)]
    rng = random.Random(11)
    expected: dict[DocKey, dict[str, Any]] = {}
    for step in range(60):
        key = rng.choice(keys)
        body = {"n": step, "pad": "x" * rng.choice([0, 10, 80, 200])}
        if rng.random() < 0.3:
            body["extra"] = [step]
        if not store.write_whole(key, _whole(body), {"by": "lean"}, shared=[GUARD]):
            _replace(store, key, body)
        expected[key] = body
        held = store._heads._entries
        assert len(held) <= 3 and store._heads._bytes == sum(e[3] for e in held.values()) <= 400
        assert other.get(key).body == body == store.get(key).body
    assert {k: d.body for k, d in other.read(keys).items() if d.body is not None} == expected


def test_the_transitions_check_names_each_document_and_claim_and_is_formatted_once() -> None:
    """The optimistic commit's transition insert (SQLite): the condition's values in the
    order of its documents (id and revision where one has a row, state and subject where none)
    and claims; its text the same object for the same shape, so the connection's statement
    cache finds it without hashing a new text."""
    from stateflow.store.ledger import checked_transition, unmoved
    from stateflow.store.rows import NO_ROW, DocRow

    params: list[Any] = ["at", b"origin"]
    given = [(DocKey("_aliases", "s"), NO_ROW), (DocKey("s", "a"), DocRow(7, 3, True, 1, 0, 0, 0, 0))]
    shape = unmoved(given, params)
    assert shape == "nr" and params == ["at", b"origin", "_aliases", "s", 7, 3]
    text = checked_transition(False, shape, 1)
    assert text == (
        "INSERT INTO transitions (at, origin) SELECT ?, ? WHERE "
        "NOT EXISTS (SELECT 1 FROM documents WHERE state = ? AND subject = ?) AND "
        "EXISTS (SELECT 1 FROM documents WHERE doc_id = ? AND revision = ?) AND "
        "NOT EXISTS (SELECT 1 FROM applied_ops WHERE scope = ? AND op_id = ?)"
    )
    assert checked_transition(False, "".join(["n", "r"]), 1) is text
    assert checked_transition(True, "", 0) == (
        "INSERT INTO transitions (at, origin, changed) SELECT ?, ?, ? WHERE 1 = 1"
    )


def _adding(key: str, value: Any, seen: list[dict[str, Any] | None]) -> Any:
    """A build that keeps the current body and sets one member (what a writes record's next
    task does), noting the body it was handed."""

    def build(shared: dict[DocKey, Any], current: dict[str, Any] | None) -> Whole:
        seen.append(current)
        return Whole({**(current or {}), key: value}, [[key]], None)

    return build


@pytest.mark.parametrize("exists", [False, True], ids=["guessed new", "said to exist"])
@pytest.mark.parametrize("whole_form", [False, True], ids=["members", "whole form"])
def test_a_document_this_store_never_saw_is_read_and_written_on_what_it_holds(
    open_migrated: StoreFactory, whole_form: bool, exists: bool
) -> None:
    """A document another process wrote (or this one before it restarted) is written the lean
    way on what it holds: guessed new, its creation fails (nothing written), it is read in one
    statement and written again; said to exist, it is read first."""
    other = open_migrated()
    if whole_form:  # (PostgreSQL keeps member form whatever is asked: ``Backend.whole_form``)
        assert other.keep_whole("items") == other.whole_form
    _replace(other, GUARD, {"v": 1})
    _replace(other, KEY, {"a": 1, "b": [1, 2]})
    _replace(other, KEY, {"a": 2, "b": [1, 2]})
    mine = open_migrated()
    # (neither the shared document nor the record seen here: each read as it is)
    seen: list[dict[str, Any] | None] = []
    assert mine.write_whole(KEY, _adding("c", {"d": 3}, seen), {"by": "lean"}, shared=[GUARD], exists=exists)
    assert seen == ([] if exists else [None]) + [{"a": 2, "b": [1, 2]}]
    fresh = open_migrated()
    assert fresh.get(KEY).body == {"a": 2, "b": [1, 2], "c": {"d": 3}} and fresh.get(KEY).revision == 3
    assert fresh.read_at(KEY, revision=2).body == {"a": 2, "b": [1, 2]}
    assert [c.origin["by"] for c in fresh.history([KEY])] == ["lean", "update", "update"]  # (newest first)
    # what it read is its next write's starting point: no read again, and the bodies agree
    assert mine.write_whole(KEY, _adding("e", 5, seen), {"by": "lean"}, shared=[GUARD])
    assert seen[-1] == {"a": 2, "b": [1, 2], "c": {"d": 3}}
    assert fresh.get(KEY).body == {"a": 2, "b": [1, 2], "c": {"d": 3}, "e": 5}


def test_a_document_said_to_exist_that_does_not_is_created(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    _replace(store, GUARD, {"v": 1})
    seen: list[dict[str, Any] | None] = []
    assert store.write_whole(KEY, _adding("a", 1, seen), {"by": "lean"}, shared=[GUARD], exists=True)
    assert seen == [None]
    fresh = open_migrated()
    assert fresh.get(KEY).body == {"a": 1} and fresh.get(KEY).revision == 1
    assert [c.origin["by"] for c in fresh.history([KEY])] == ["lean"]


def test_a_document_never_seen_that_was_deleted_is_written_as_a_new_body(open_migrated: StoreFactory) -> None:
    other = open_migrated()
    _replace(other, GUARD, {"v": 1})
    _replace(other, KEY, {"a": 1})
    _replace(other, KEY, None)  # type: ignore[arg-type]  # (``Write.between`` to None: a delete)
    mine = open_migrated()
    mine.read([GUARD])
    seen: list[dict[str, Any] | None] = []
    assert mine.write_whole(KEY, _adding("b", 2, seen), {"by": "lean"}, shared=[GUARD])
    assert seen == [None, None]  # (guessed new, its creation failed on the row; read: absent)
    fresh = open_migrated()
    assert [fresh.read_at(KEY, revision=r).body for r in (1, 2, 3)] == [{"a": 1}, None, {"b": 2}]


def test_a_document_never_seen_with_a_tree_member_is_left_to_update(open_migrated: StoreFactory) -> None:
    """Its tree is not read by the one statement: nothing is written, ``update`` decides."""
    other = open_migrated()
    _replace(other, GUARD, {"v": 1})
    large = {"a": 1, "big": ["x" * 1000] * 1200}  # (~1.2 MB: a tree)
    _replace(other, KEY, large)
    mine = open_migrated()
    mine.read([GUARD])
    assert not mine.write_whole(KEY, _whole({"a": 2, "big": "small"}), {"by": "lean"}, shared=[GUARD])
    assert not mine.write_whole(KEY, _whole({"a": 2, "big": "small"}), {"by": "lean"}, shared=[GUARD])
    assert other.get(KEY).revision == 1
    _replace(mine, KEY, {"a": 2, "big": "small"})
    assert mine.write_whole(KEY, _whole({"a": 3, "big": "small"}), {"by": "lean"}, shared=[GUARD])
    assert open_migrated().get(KEY).body == {"a": 3, "big": "small"}
    assert open_migrated().read_at(KEY, revision=1).body == large


def test_a_document_the_caches_let_go_is_read_again_and_written_lean(open_migrated: StoreFactory) -> None:
    """Its row still known here, its heads and body dropped by the caches' bounds: read again
    (another store moved it meanwhile: the body read is the one now there)."""
    from stateflow.store.cache import HeadCache

    mine, other = open_migrated(), open_migrated()
    _replace(mine, GUARD, {"v": 1})
    _replace(mine, KEY, {"a": 1})
    mine._heads = HeadCache(max_docs=1)  # (one document's entry at a time)
    seen: list[dict[str, Any] | None] = []
    assert mine.write_whole(KEY, _adding("b", 2, seen), {"by": "lean"}, shared=[GUARD])
    assert mine.write_whole(DocKey("items", "other"), _whole({"z": 0}), {"by": "lean"}, shared=[GUARD])
    assert mine._heads.entry(mine._rows_known[KEY].doc_id, 2) is None  # (let go)
    assert mine.write_whole(KEY, _adding("c", 3, seen), {"by": "lean"}, shared=[GUARD])
    assert seen == [{"a": 1}, {"a": 1, "b": 2}]
    _replace(other, KEY, {"a": 1, "b": 2, "c": 3, "theirs": True})  # moved where ``mine`` has not seen
    mine.write_whole(DocKey("items", "other"), _whole({"z": 1}), {"by": "lean"}, shared=[GUARD])
    assert mine.write_whole(KEY, _adding("d", 4, seen), {"by": "lean"}, shared=[GUARD])
    assert seen[-1] == {"a": 1, "b": 2, "c": 3, "theirs": True}  # (the body now there: theirs kept)
    assert other.get(KEY).body == {"a": 1, "b": 2, "c": 3, "theirs": True, "d": 4}
    assert other.get(KEY).revision == 5


def _letting_go(open_migrated: StoreFactory, whole_form: bool) -> Any:
    """A store that holds ``items`` for its latest two writes only (``cache_recent``), with
    ``KEY`` written twice and then let go by two other writes: kept as a spare copy."""
    store = open_migrated()
    if whole_form:
        assert store.keep_whole("items") == store.whole_form
    store.cache_recent("items")
    store._recent_kept = 2
    _replace(store, GUARD, {"v": 1})
    seen: list[dict[str, Any] | None] = []
    assert store.write_whole(KEY, _adding("a", 1, seen), {"by": "lean"}, shared=[GUARD])
    assert store.write_whole(KEY, _adding("b", 2, seen), {"by": "lean"}, shared=[GUARD])
    for n in range(2):
        assert store.write_whole(
            DocKey("items", f"once {n}"), _whole({"n": n}), {"by": "lean"}, shared=[GUARD]
        )
    assert KEY not in store._rows_known and store._spare.holds(KEY)
    return store


@pytest.mark.parametrize("whole_form", [False, True], ids=["members", "whole form"])
def test_a_document_let_go_is_written_on_its_spare_copy(
    open_migrated: StoreFactory, whole_form: bool
) -> None:
    """A document written again, then let go by ``cache_recent``'s bound, is kept encoded; its
    next write takes the copy back and writes on it, and the copy is then held as before."""
    mine = _letting_go(open_migrated, whole_form)
    seen: list[dict[str, Any] | None] = []
    assert mine.write_whole(KEY, _adding("c", 3, seen), {"by": "spare"}, shared=[GUARD])
    assert seen == [{"a": 1, "b": 2}] and not mine._spare.holds(KEY)
    fresh = open_migrated()
    assert fresh.get(KEY).body == {"a": 1, "b": 2, "c": 3} and fresh.get(KEY).revision == 3
    assert [c.origin["by"] for c in fresh.history([KEY])] == ["spare", "lean", "lean"]
    # a document a write followed on as its ``also`` while held (a checkpoint whose child was
    # put) is let go without a copy; the child, which the next write will follow on, keeps one
    parent, child = DocKey("items", "parent"), DocKey("items", "child")
    assert mine.write_whole(parent, _whole({"p": 1}), {"by": "lean"}, shared=[GUARD])
    assert mine.write_whole(child, _whole({"c": 1}), {"by": "lean"}, shared=[GUARD], also=parent)
    for n in range(2, 5):
        assert mine.write_whole(
            DocKey("items", f"once {n}"), _whole({"n": n}), {"by": "lean"}, shared=[GUARD]
        )
    assert parent not in mine._rows_known and child not in mine._rows_known
    assert not mine._spare.holds(parent) and mine._spare.holds(child) and mine._spare.holds(KEY)
    assert mine.body_as_seen(child) == (1, {"c": 1})  # (taken back: no read)


def test_a_spare_copy_taken_back_by_a_read_is_let_go_again_without_a_copy(
    open_migrated: StoreFactory,
) -> None:
    """Read alone (a checkpoint's parent, ``body_as_seen``), a copy taken back is held as the
    latest writes are, then let go in turn with no copy kept: a read is not a sign of a write."""
    mine = _letting_go(open_migrated, True)
    assert mine.body_as_seen(KEY) == (2, {"a": 1, "b": 2}) and not mine._spare.holds(KEY)
    doc_id = mine._rows_known[KEY].doc_id
    for n in range(2, 5):
        assert mine.write_whole(
            DocKey("items", f"once {n}"), _whole({"n": n}), {"by": "lean"}, shared=[GUARD]
        )
    assert KEY not in mine._rows_known and mine._heads.entry(doc_id, 2) is None
    assert not mine._spare.holds(KEY)


@pytest.mark.parametrize("whole_form", [False, True], ids=["members", "whole form"])
def test_a_stale_spare_copy_writes_nothing_and_the_document_is_read_again(
    open_migrated: StoreFactory, whole_form: bool
) -> None:
    """Another process moved the document after it was let go: the write on the copy is
    refused by its commit's check (nothing written, theirs kept), and ``update`` then writes
    on the document as it is now; the next lean write goes on from there."""
    mine, other = _letting_go(open_migrated, whole_form), open_migrated()
    _replace(other, KEY, {"a": 1, "b": 2, "theirs": True})
    seen: list[dict[str, Any] | None] = []
    assert not mine.write_whole(KEY, _adding("c", 3, seen), {"by": "spare"}, shared=[GUARD])
    assert seen == [{"a": 1, "b": 2}]  # (the copy's body: stale)
    assert other.get(KEY).body == {"a": 1, "b": 2, "theirs": True} and other.get(KEY).revision == 3

    def adding_c(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        before = docs[KEY].body
        assert before is not None
        return [Write.between(KEY, before, {**before, "c": 3}, docs[KEY].revision)], None

    mine.update([KEY], adding_c, {"by": "update"})
    assert mine.write_whole(KEY, _adding("d", 4, seen), {"by": "lean"}, shared=[GUARD])
    assert seen[-1] == {"a": 1, "b": 2, "theirs": True, "c": 3}
    assert open_migrated().get(KEY).body == {"a": 1, "b": 2, "theirs": True, "c": 3, "d": 4}


def test_a_document_moved_to_another_subject_loses_its_spare_copy(open_migrated: StoreFactory) -> None:
    """A copy names its document by key; a rename keeps the id and revision the commit checks,
    so the copy goes with the move: the old key is then written as a new document."""
    mine = _letting_go(open_migrated, True)
    moved = DocKey("items", '["agent","a","item","moved"]')
    assert mine.rename_subjects(
        "items", lambda s: moved.subject if s == KEY.subject else None, mark=("renamed:items", "1")
    )
    assert not mine._spare.holds(KEY)
    seen: list[dict[str, Any] | None] = []
    assert mine.write_whole(KEY, _adding("new", 1, seen), {"by": "lean"}, shared=[GUARD])
    fresh = open_migrated()
    assert fresh.get(KEY).body == {"new": 1} and fresh.get(KEY).revision == 1
    assert fresh.get(moved).body == {"a": 1, "b": 2} and fresh.get(moved).revision == 2


def test_a_body_as_seen_is_the_one_the_next_write_starts_from(open_migrated: StoreFactory) -> None:
    """``body_as_seen``: held here, the cached body itself; not seen, read as it is and held
    for the write after; absent, no body; a member held as a tree, None (``get`` reads it)."""
    mine, other = open_migrated(), open_migrated()
    _replace(other, GUARD, {"v": 1})
    _replace(other, KEY, {"a": 1})
    assert mine.body_as_seen(DocKey("items", "never")) == (0, None)
    revision, body = mine.body_as_seen(KEY) or (None, None)
    assert (revision, body) == (1, {"a": 1})
    seen: list[dict[str, Any] | None] = []
    assert mine.write_whole(KEY, _adding("b", 2, seen), {"by": "lean"}, shared=[GUARD])
    assert seen == [body] and seen[0] is body  # (the body read, held: no read again)
    again = mine.body_as_seen(KEY)
    assert again is not None and again[0] == 2 and again[1] == {"a": 1, "b": 2}
    third = mine.body_as_seen(KEY)
    assert third is not None and third[1] is again[1]  # (held: the same object)
    large = DocKey("items", "large")
    _replace(other, large, {"big": ["x" * 1000] * 1200})  # (~1.2 MB: a tree)
    assert mine.body_as_seen(large) is None
