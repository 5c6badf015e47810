"""A store written by the schema-3 release opens, upgrades in place and reads back exactly.

``fixtures/schema3.sqlite`` was written by the schema-3 code (``fixtures/make_schema3_store.py``)
and ``fixtures/schema3.json`` holds what reading it gave then: every document at every
revision and every transition with its changes. On PostgreSQL the same rows are loaded into a
schema built by the version 1–3 migration scripts, as a schema-3 server holds them.
"""

from __future__ import annotations

import itertools
import math
import random
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from stateflow.doc.canonical import json_contains
from stateflow.doc.diff import Edit
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput, StoreNotMigrated, StoreTooNew
from stateflow.memory import Identity, MemoryView
from stateflow.store import DocKey, SqlStore, Whole, Write, open_store, postgres
from stateflow.store.check import check_store
from stateflow.store.counting import FOLD_EVERY
from stateflow.store.ledger import OpIdTaken
from stateflow.store.migrations import (
    CHANGE_ROW_MAX,
    CONTAINMENT_WHERE,
    INDEXABLE,
    POSTGRES,
    POSTGRES_SCALAR_VALUE_WHERE,
    POSTGRES_VALUE_WHERE,
    SCHEMA_VERSION,
    SQLITE,
    SQLITE_VALUE,
    SQLITE_VALUE_WHERE,
    WRITE_FUNCTIONS,
    statements,
)
from stateflow.store.plan import TREE_MIN, WritePlan
from stateflow.store.postgres import PostgresStore
from stateflow.store.sqlite import SqliteStore
from stateflow.subjects import encode_subject

from .pg_helpers import bytea_elements
from .test_store_key_order import writes_keep_member_order

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SQLITE_WHERE = SQLITE_VALUE_WHERE.format(m="")
TABLES = ("documents", "members", "transitions", "changes", "change_edits", "snapshots", "applied_ops")


def _expected() -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((FIXTURES / "schema3.json").read_bytes())
    return data


def _schema3_store(backend: str, tmp_path: Path) -> None:
    """Put the schema-3 fixture's rows at ``backend`` (a file path or a PostgreSQL URL)."""
    if not backend.startswith("postgresql://"):
        shutil.copy(FIXTURES / "schema3.sqlite", backend)
        return
    with (
        psycopg.connect(backend, autocommit=True) as pg,
        sqlite3.connect(FIXTURES / "schema3.sqlite") as lite,
    ):
        for version in (1, 2, 3):
            for statement in statements(POSTGRES[version]):
                pg.execute(statement)
        pg.execute("INSERT INTO stateflow_meta (key, value) VALUES ('schema_version', '3')")
        for table in TABLES:
            cursor = lite.execute(f"SELECT * FROM {table}")
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
            if rows:
                with pg.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                        rows,
                    )
        for table, column in (("documents", "doc_id"), ("transitions", "seq")):
            pg.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), (SELECT MAX({column}) FROM {table}))"
            )


def _reads_back(store: SqlStore, expected: dict[str, Any]) -> None:
    for name, doc in expected["documents"].items():
        key = DocKey(doc["state"], doc["subject"])
        assert store.get(key).revision == doc["revision"], name
        assert store.get(key).body == doc["revisions"][-1], name
        for revision, body in enumerate(doc["revisions"]):
            assert store.read_at(key, revision=revision).body == body, (name, revision)
    transitions = store.transitions(limit=10_000)
    assert [t.seq for t in transitions] == [t["seq"] for t in expected["transitions"]]
    for got, want in zip(transitions, expected["transitions"], strict=True):
        assert (got.at, got.origin) == (want["at"], want["origin"])
        assert [
            {
                "key": "/".join(c.key),  # (its storage key: state/subject)
                "revision": c.revision,
                "edits": [e.to_json() for e in c.edits],
                "paths": c.paths,
            }
            for c in got.changes
        ] == want["changes"]


def test_a_schema_3_store_upgrades_in_place_and_reads_back_exactly(backend: str, tmp_path: Path) -> None:
    _schema3_store(backend, tmp_path)
    expected = _expected()
    store = open_store(backend, auto_migrate=False)
    try:
        if SCHEMA_VERSION > 3:
            with pytest.raises(StoreNotMigrated, match="schema version 3"):
                store.get(DocKey("notes", "a"))
        assert store.migrate() == (3, SCHEMA_VERSION)
        _reads_back(store, expected)
        # the counters are filled from the rows there (version 6), then kept by every write
        with store._read_tx() as tx:
            stored, counted = store.recount(tx)
        assert stored == counted
        present = [d for d in expected["documents"].values() if d["revisions"][-1] is not None]
        assert sum(n for (_, c, _), n in stored.items() if c == "kind") == len(present)
        # writes continue where the old store stopped: revisions, seq and the op-id ledger
        notes = DocKey("notes", "a")
        before = store.get(notes)
        assert before.body is not None
        commit = store.commit([Write.between(notes, before.body, dict(before.body, title="after"))])
        assert commit.seq == expected["transitions"][-1]["seq"] + 1
        assert commit.revisions[notes] == before.revision + 1
        assert store.applied_op("essay", "notes") is not False
        assert store.read_at(notes, revision=before.revision).body == before.body
        # new snapshots are directories beside the schema-3 whole bodies, and both read back
        body = dict(before.body, title="after")
        for n in range(8):
            new = dict(body, filler=f"{n}" * 6000)
            store.commit([Write.between(notes, body, new)])
            body = new
        with store._read_tx() as tx:
            kinds = {bytes(raw)[:1] for (raw,) in tx.all("SELECT body FROM snapshots")}
            assert b"[" in kinds and b"{" in kinds
            assert tx.one("SELECT COUNT(*) FROM snapshot_members") != (0,)
        assert store.get(notes).body == body
        with store._read_tx() as tx:
            stored, counted = store.recount(tx)
        assert stored == counted and stored[("notes", "member", "filler")] == 1
        assert store.read_at(notes, revision=store.get(notes).revision - 1).body == {
            **body,
            "filler": "6" * 6000,
        }
    finally:
        store.close()
    reopened = open_store(backend, auto_migrate=False)  # a fresh process: nothing cached
    try:
        for name, doc in expected["documents"].items():
            key = DocKey(doc["state"], doc["subject"])
            for revision, body in enumerate(doc["revisions"]):
                assert reopened.read_at(key, revision=revision).body == body, (name, revision)
    finally:
        reopened.close()


def _store_at(version: int, backend: str, tmp_path: Path) -> None:
    """The schema-3 fixture taken to ``version`` by the version 4…``version`` scripts, each in
    its own transaction, as the release of that version's ``migrate`` left such a store."""
    _schema3_store(backend, tmp_path)
    if backend.startswith("postgresql://"):
        with psycopg.connect(backend, autocommit=True) as pg:
            for step in range(4, version + 1):
                with pg.transaction():
                    for statement in statements(POSTGRES[step]):
                        pg.execute(statement)
                    pg.execute(
                        "UPDATE stateflow_meta SET value = %s WHERE key = 'schema_version'", (str(step),)
                    )
        return
    with sqlite3.connect(backend) as lite:
        for step in range(4, version + 1):
            for statement in statements(SQLITE[step]):
                lite.execute(statement)
            lite.execute("UPDATE stateflow_meta SET value = ? WHERE key = 'schema_version'", (str(step),))
            lite.commit()
    lite.close()


@contextmanager
def _upgraded(version: int, backend: str, tmp_path: Path) -> Iterator[SqlStore]:
    """A store left at ``version`` (:func:`_store_at`), refused until migrated, then migrated
    and reading back the fixture exactly; closed on leaving."""
    _store_at(version, backend, tmp_path)
    store = open_store(backend, auto_migrate=False)
    try:
        with pytest.raises(StoreNotMigrated, match=f"schema version {version}"):
            store.get(DocKey("notes", "a"))
        assert store.migrate() == (version, SCHEMA_VERSION)
        _reads_back(store, _expected())
        yield store
    finally:
        store.close()


def test_a_schema_6_store_upgrades_to_7_and_searches_the_same(backend: str, tmp_path: Path) -> None:
    """Version 7 rebuilds SQLite's value index with numbers and strings only (version 6 gave
    objects and arrays entries too); searches answer the same before and after, through it."""
    with _upgraded(6, backend, tmp_path) as store:
        if isinstance(store, SqliteStore):
            with store._read_tx() as tx:
                kinds = tx.all(
                    "SELECT DISTINCT json_type(CAST(body AS TEXT)) FROM members INDEXED BY members_by_value "
                    f"WHERE {SQLITE_WHERE}"
                )
                containers = tx.one(
                    "SELECT COUNT(*) FROM members WHERE json_type(CAST(body AS TEXT)) IN ('object', 'array')"
                )
            # the fixture has object and array members; none of them is in the index now
            assert containers is not None and containers[0] > 0
            assert {k for (k,) in kinds} == {"integer", "text"}
        # a scalar filter starts from the index and finds what the fixture holds
        assert [x.key for x in store.search("notes", {"n": 99})] == [DocKey("notes", "a")]
        assert [x.key for x in store.search("notes", {"title": "title 11"})] == [DocKey("notes", "a")]
        assert store.search("notes", {"title": "title 10"}) == []
        with store._read_tx() as tx:
            assert store._selective(tx, {"n": 99}) is not None
        # written members enter the rebuilt index: an object does not, a string does
        notes = DocKey("notes", "a")
        before = store.get(notes).body
        assert before is not None
        store.commit([Write.between(notes, before, dict(before, extra={"k": 1}, title="title 12"))])
        assert [x.key for x in store.search("notes", {"title": "title 12"})] == [notes]
        assert store.search("notes", {"title": "title 11"}) == []


def _plan(store: SqlStore, sql: str, params: tuple[Any, ...]) -> str:
    """The query plan of ``sql`` (on PostgreSQL with sequential scans off: the fixture's tables
    are a few rows, which a scan reads fastest)."""
    sqlite = isinstance(store, SqliteStore)
    with store._read_tx() as tx:
        if not sqlite:
            tx.run("SET LOCAL enable_seqscan = off")
        return "\n".join(
            str(row[-1]) for row in tx.all(("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + sql, params)
        )


def test_a_schema_7_store_upgrades_to_8_and_lists_searches_and_prunes_the_same(
    backend: str, tmp_path: Path
) -> None:
    """Version 8: ``documents_by_state`` holds present documents only; PostgreSQL's value index
    is keyed by a hash of name and value; SQLite keeps transition times as microseconds. What
    reads see is unchanged, and listings and searches still go through the indexes."""
    with _upgraded(7, backend, tmp_path) as store:  # (every transition's time read back exactly as written)
        if isinstance(store, SqliteStore):
            with store._read_tx() as tx:
                assert tx.all("SELECT DISTINCT typeof(at) FROM transitions") == [("integer",)]
        # a deleted document is not listed, and listings walk an index (since version 12 on
        # SQLite and 14 on PostgreSQL the (state, subject) key, documents_by_state dropped)
        listed = [x.key.subject for x in store.scan("notes", limit=10)]
        assert listed == ["a"] and store.count("notes") == 1
        scan = _plan(
            store,
            "SELECT d.subject FROM documents d WHERE d.state = ? AND d.present = 1 AND d.subject > ? "
            "ORDER BY d.subject LIMIT ?",
            ("notes", "", 10),
        )
        if isinstance(store, SqliteStore):
            assert "sqlite_autoindex_documents_1" in scan
        else:
            assert "documents_state_subject_key" in scan
        # a scalar search starts from the value index and finds what the fixture holds
        match = store._value_match("n", 99)
        assert match is not None
        assert "members_by_value" in _plan(
            store, f"SELECT m.doc_id FROM members m WHERE {match[0]}", tuple(match[1])
        )
        assert [x.key for x in store.search("notes", {"n": 99})] == [DocKey("notes", "a")]
        assert [x.key for x in store.search("notes", {"n": 99.0})] == [DocKey("notes", "a")]
        assert [x.key for x in store.search("notes", {"title": "title 11"})] == [DocKey("notes", "a")]
        assert store.search("notes", {"title": "title 10"}) == []
        assert store.search("notes", {"n": "99"}) == []
        # new writes: times read back as the clock wrote them; values enter the index
        notes = DocKey("notes", "a")
        before = store.get(notes).body
        assert before is not None
        commit = store.commit([Write.between(notes, before, dict(before, title="title 12"))])
        assert commit.seq is not None
        assert store.transitions(after_seq=commit.seq - 1, limit=1)[0].at == commit.at
        assert store.get(notes).at == commit.at
        assert [x.key for x in store.search("notes", {"title": "title 12"})] == [notes]
        # pruning compares times as times, whatever the cutoff's ISO-8601 form
        oldest = _expected()["transitions"][0]["at"]
        assert store.prune_history("notes", oldest) == 0
        assert store.prune_history("notes", "2000-01-01T00:00:00Z") == 0
        with pytest.raises(InvalidInput, match="not an ISO-8601 time"):
            store.prune_history("notes", "yesterday")
        assert store.prune_history("notes", commit.at) > 0
        assert store.get(notes).body == dict(before, title="title 12")
        assert store.read_at(notes, revision=store.get(notes).revision).body == dict(before, title="title 12")


def test_a_schema_8_store_upgrades_to_9_and_its_indexes_answer_the_same(backend: str, tmp_path: Path) -> None:
    """Version 9 writes PostgreSQL's ``stateflow_jsonb`` in PL/pgSQL (an SQL function it could
    never be inlined), and its commit function creates new documents' rows; the indexes built on
    ``stateflow_jsonb`` by version 8 are kept and give the same answers, before and after new
    writes (version 31 keeps only scalar members in the containment index). SQLite only records
    the version."""
    _store_at(8, backend, tmp_path)
    pg = backend.startswith("postgresql://")
    language = (
        "SELECT l.lanname, p.provolatile, p.proisstrict FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
        "WHERE p.proname = 'stateflow_jsonb' AND p.pronamespace = current_schema()::regnamespace"
    )
    if pg:
        with psycopg.connect(backend) as conn:
            assert conn.execute(language).fetchall() == [("sql", "i", False)]
    store = open_store(backend, auto_migrate=False)
    try:
        with pytest.raises(StoreNotMigrated, match="schema version 8"):
            store.get(DocKey("notes", "a"))
        assert store.migrate() == (8, SCHEMA_VERSION)
        _reads_back(store, _expected())
        if pg:
            with store._read_tx() as tx:
                assert tx.all(language) == [("plpgsql", "i", True)]
        # every scalar member is found through the value index by its value, as before
        notes = DocKey("notes", "a")
        before = store.get(notes).body
        assert before is not None
        scalars = {k: v for k, v in before.items() if isinstance(v, (str, int)) and not isinstance(v, bool)}
        assert scalars
        for name, value in scalars.items():
            assert notes in [x.key for x in store.search("notes", {name: value})], name
            match = store._value_match(name, value)
            if match is not None:
                assert "members_by_value" in _plan(
                    store, f"SELECT m.doc_id FROM members m WHERE {match[0]}", tuple(match[1])
                )
        # new writes enter both indexes: a scalar by its value, an object by containment
        after = dict(before, extra={"k": 1, "tags": ["x"]}, title="title 13")
        store.commit([Write.between(notes, before, after)])
        assert [x.key for x in store.search("notes", {"title": "title 13"})] == [notes]
        assert [x.key for x in store.search("notes", {"extra": {"tags": ["x"]}})] == [notes]
        assert store.search("notes", {"extra": {"k": 2}}) == []
        assert store.search("notes", {"title": before.get("title", "none")}) == []
        # a new document's row is created by the commit itself (on PostgreSQL, in the version 9
        # commit function), and found like the others
        fresh = DocKey("notes", "new after 9")
        created = store.commit([Write.between(fresh, None, {"title": "title 14"})])
        assert created.revisions[fresh] == 1 and store.get(fresh).body == {"title": "title 14"}
        assert [x.key for x in store.search("notes", {"title": "title 14"})] == [fresh]
    finally:
        store.close()


def test_a_schema_9_store_upgrades_to_10_and_its_value_index_holds_the_same_members(
    backend: str, tmp_path: Path
) -> None:
    """Version 10 keys SQLite's value index by the body's first byte instead of ``json_type``: the
    same members are in it, under the same values, and searches still start from it."""
    _store_at(9, backend, tmp_path)
    store = open_store(backend, auto_migrate=False)
    try:
        sqlite = isinstance(store, SqliteStore)
        old_where = (
            "root IS NULL AND size <= 1024 AND json_type(CAST(body AS TEXT)) IN ('integer', 'real', 'text')"
        )
        before: list[tuple[Any, ...]] = []
        if sqlite:
            with store._read_tx() as tx:
                before = tx.all(
                    f"SELECT doc_id, name, json_extract(CAST(body AS TEXT), '$') FROM members WHERE {old_where} "
                    "ORDER BY 1, 2"
                )
            assert before
        assert store.migrate() == (9, SCHEMA_VERSION)
        _reads_back(store, _expected())
        notes = DocKey("notes", "a")
        body = store.get(notes).body
        assert body is not None
        # every kind of scalar, and a string holding an escaped NUL (never a key: SQLite text ends there)
        new = dict(body, neg=-3, real=2.5, yes=True, none=None, nul="a\x00b", quote='say "hi"', obj={"k": 1})
        store.commit([Write.between(notes, body, new)])
        if sqlite:
            with store._read_tx() as tx:
                entries = tx.all(
                    f"SELECT doc_id, name, {SQLITE_VALUE.format(m='')} FROM members INDEXED BY members_by_value "
                    f"WHERE {SQLITE_WHERE} ORDER BY 1, 2"
                )
                now = tx.all(
                    "SELECT doc_id, name, CASE WHEN instr(CAST(body AS TEXT), '\\u0000') = 0 THEN "
                    f"json_extract(CAST(body AS TEXT), '$') END FROM members WHERE {old_where} ORDER BY 1, 2"
                )
            # the same members as json_type picks, with the values it extracts
            assert entries == now
            # untouched members keep their entries; the new ones enter by kind
            assert [r for r in entries if r[1] not in new] == [r for r in before if r[1] not in new]
            names = {r[1] for r in entries}
            assert {"neg", "real", "quote", "nul"} <= names and not {"yes", "none", "obj"} & names
            assert [r[2] for r in entries if r[1] == "nul"] == [None]  # kept, under no value
        match = store._value_match("n", 99)
        assert match is not None
        assert "members_by_value" in _plan(
            store, f"SELECT m.doc_id FROM members m WHERE {match[0]}", tuple(match[1])
        )
        for name, value in (("neg", -3), ("real", 2.5), ("quote", 'say "hi"'), ("n", 99), ("n", 99.0)):
            assert [x.key for x in store.search("notes", {name: value})] == [notes], (name, value)
        assert [x.key for x in store.search("notes", {"nul": "a\x00b"})] == [notes]
        assert store.search("notes", {"neg": "-3"}) == []
    finally:
        store.close()


def _server_merged(store: SqlStore) -> dict[DocKey, int] | None:
    """The revisions PostgreSQL's server merge left (None on SQLite, whose merge of a contended
    patch in the writers' turn these upgrades of the server functions do not concern)."""
    assert isinstance(store, (SqliteStore, PostgresStore))
    return None if isinstance(store, SqliteStore) else store._served_revisions


def test_a_schema_10_store_upgrades_to_11_and_merges_memory_patches_in_the_server(
    backend: str, tmp_path: Path
) -> None:
    """Version 11 adds PostgreSQL's ``stateflow_patch_commit`` (SQLite only records the version):
    after the upgrade a contended memory patch is merged by the server, and the store's earlier
    documents read back as before."""
    with _upgraded(10, backend, tmp_path) as store:
        view = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        view.patch_state({"session": {"tactics": {"n": "1"}}})
        key = view.keys["session"]
        store._contended[key] = math.inf  # as another writer's commit would leave it
        receipt = view.patch_state({"session": {"tactics": {"n": "2", "m": {"deep": True}}}})
        assert receipt.changed_scopes == ["session"]
        assert isinstance(store, (SqliteStore, PostgresStore))
        served = store._served_revisions  # (SQLite too since the writers' turn merges it)
        assert served == {key: 2}
        if isinstance(store, SqliteStore):
            with store._read_tx() as tx:
                assert tx.one("SELECT value FROM stateflow_meta WHERE key = 'schema_version'") == (
                    str(SCHEMA_VERSION),
                )
        assert view.read_state({"path": "session.tactics"})["value"] == {"n": "2", "m": {"deep": True}}
        [change] = store.history([key], limit=1)
        assert [e.to_json() for e in change.edits] == [
            [["tactics", "n"], "2"],
            [["tactics", "m"], {"deep": True}],
        ]
        assert store.read_at(key, revision=1).body == {"tactics": {"n": "1"}}


def test_a_schema_11_store_upgrades_to_12_and_keeps_its_change_rows_within_a_page(
    backend: str, tmp_path: Path
) -> None:
    """Version 12 rebuilds SQLite's ``changes`` without rowids, each row kept under
    ``CHANGE_ROW_MAX`` (an index b-tree reads an overflowing row whole to compare keys): the
    paths of a longer row move to ``change_paths``, its inline edits to ``change_edits``; and it
    drops ``documents_by_state``. Reads see every revision, change and path as before."""
    _store_at(11, backend, tmp_path)
    sqlite = not backend.startswith("postgresql://")
    if sqlite:  # the same values in longer text (JSON allows the spaces): one row of each kind too long
        with sqlite3.connect(backend) as lite:
            row = lite.execute("SELECT paths FROM changes WHERE doc_id = 1 AND revision = 2").fetchone()
            lite.execute(
                "UPDATE changes SET paths = ? WHERE doc_id = 1 AND revision = 2", (b" " * 600 + row[0],)
            )
            row = lite.execute("SELECT edits FROM changes WHERE doc_id = 1 AND revision = 3").fetchone()
            assert row[0] is not None
            lite.execute(
                "UPDATE changes SET edits = ? WHERE doc_id = 1 AND revision = 3", (b" " * 1000 + row[0],)
            )
        lite.close()
    store = open_store(backend, auto_migrate=False)
    try:
        assert store.migrate() == (11, SCHEMA_VERSION)
        _reads_back(store, _expected())
        if sqlite:
            rows = _sqlite_rows(
                backend,
                "SELECT revision, paths IS NULL, edits IS NULL FROM changes WHERE doc_id = 1 AND revision IN (2, 3)",
            )
            assert rows == [(2, 1, 0), (3, 0, 1)]
            assert _sqlite_rows(backend, "SELECT doc_id, revision FROM change_paths") == [(1, 2)]
            assert _sqlite_rows(backend, "SELECT member FROM change_edits WHERE doc_id = 1 AND revision = 3")
            assert _sqlite_rows(
                backend, "SELECT MAX(coalesce(length(paths), 0) + coalesce(length(edits), 0)) FROM changes"
            ) <= [(CHANGE_ROW_MAX,)]
            assert (
                _sqlite_rows(
                    backend,
                    "SELECT name FROM sqlite_master WHERE name IN ('documents_by_state', 'changes_v11', 'change_edits_v11')",
                )
                == []
            )
            assert (
                "WITHOUT ROWID"
                in _sqlite_rows(backend, "SELECT sql FROM sqlite_master WHERE name = 'changes'")[0][0]
            )
            assert _sqlite_rows(backend, "PRAGMA foreign_key_check") == []
        # new changes: long paths and edits kept apart on SQLite, read back on both
        notes = DocKey("notes", "a")
        body = store.get(notes).body
        assert body is not None
        long = [[f"k{i:04d}"] for i in range(200)]
        new = dict(body, **{p[0]: "v" * 10 for p in long})
        commit = store.commit([Write.between(notes, body, new, paths=long)])
        assert commit.seq is not None and commit.at is not None
        [change] = store.history([notes], limit=1)
        assert change.paths == long and change.revision == store.get(notes).revision
        assert store.transitions(after_seq=commit.seq - 1)[0].changes[0].paths == long
        assert store.read_at(notes, revision=change.revision).body == new
        if sqlite:
            assert _sqlite_rows(backend, "SELECT COUNT(*) FROM change_paths") == [(2,)]
            assert _sqlite_rows(
                backend, "SELECT COUNT(*) FROM dbstat WHERE name = 'changes' AND pagetype = 'overflow'"
            ) == [(0,)]
        # listings and counts read through the (state, subject) key
        assert [x.key for x in store.scan("notes", limit=10)] == [notes]
        assert store.count("notes") == 1
        # pruning the history removes the paths kept apart with their changes
        assert store.prune_history("notes", commit.at) > 0
        if sqlite:
            assert (
                _sqlite_rows(backend, "SELECT doc_id FROM change_paths WHERE doc_id = 1 AND revision < 16")
                == []
            )
        assert store.get(notes).body == new
    finally:
        store.close()


def _created(store: SqlStore, n: int) -> list[DocKey]:
    """``n`` new documents of kind ``k`` in ``notes`` (``{"i": i}``), each written by an
    optimistic update at revision 1."""
    new = [DocKey("notes", f'["agent","x","k","n{i}"]') for i in range(n)]
    for i, key in enumerate(new):

        def create(docs: dict[DocKey, Any], key: DocKey = key, i: int = i) -> tuple[list[Write], None]:
            return [Write.between(key, None, {"i": i})], None

        commit, _ = store.update([key], create, optimistic=True)
        assert commit.revisions == {key: 1}
    return new


def _sqlite_rows(location: str, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(location) as lite:
        rows = lite.execute(sql).fetchall()
    lite.close()
    return rows


def test_a_schema_12_store_upgrades_to_13_and_commits_in_one_function(backend: str, tmp_path: Path) -> None:
    """Version 13 replaces PostgreSQL's ``stateflow_begin_commit`` by ``stateflow_commit`` (the
    whole commit in one function, a new document inserted present) and updates the counters in
    place (SQLite only records the version): after the upgrade the earlier documents read back
    as before, new and changed documents commit in one statement, and the counters stay true."""
    with _upgraded(12, backend, tmp_path) as store:
        notes = DocKey("notes", "a")
        before = store.get(notes).body
        assert before is not None
        counted = store.count("notes")
        new = _created(store, 3)
        store.update(
            [notes],
            lambda docs: ([Write.between(notes, docs[notes].body, dict(before, extra=1))], None),
            optimistic=True,
        )
        assert store.get(notes).body == dict(before, extra=1)
        assert [store.get(key).body for key in new] == [{"i": 0}, {"i": 1}, {"i": 2}]
        assert store.count("notes") == counted + 3
        assert store.kind_counts("notes").get("k") == 3
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted
            if backend.startswith("postgresql://"):
                names = {
                    r[0]
                    for r in tx.all(
                        "SELECT proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace"
                    )
                }
                assert "stateflow_commit" in names and "stateflow_begin_commit" not in names
                # the kind pattern capturing only the kind answers as version 6's did
                subjects = [
                    '["agent","x","k","a"]',
                    '["a\\"b","x\\\\","kind","d\\"e"]',
                    '["a","b","k\\"x","d"]',
                    '["a","b","c"]',
                    '["a","b","c","d","e"]',
                    '["a","b",""," "]',
                    ' ["a","b","c","d"]',
                    '["a","b\\","c","d"]',
                    "plain",
                ]
                old = (
                    'coalesce((regexp_match(s, \'^\\["([^"\\\\]|\\\\.)*","([^"\\\\]|\\\\.)*",'
                    '"([^"\\\\]*)","([^"\\\\]|\\\\.)*"\\]$\'))[3], \'\')'
                )
                pairs = tx.all(
                    f"SELECT stateflow_subject_kind(s), {old} FROM unnest(?::text[]) AS x(s)", (subjects,)
                )
                assert [new for new, _ in pairs] == [old for _, old in pairs]
                assert [new for new, _ in pairs][:2] == ["k", "kind"] and [new for new, _ in pairs].count(
                    ""
                ) == 7


def test_a_schema_13_store_upgrades_to_14_and_lists_through_the_key(backend: str, tmp_path: Path) -> None:
    """Version 14 drops PostgreSQL's ``documents_by_state`` (SQLite dropped it in version 12 and
    only records the version): after the upgrade the earlier documents read back as before,
    new documents count, a deleted one leaves the listing and its counters, and listings walk
    the unique key."""
    with _upgraded(13, backend, tmp_path) as store:
        counted = store.count("notes")
        new = _created(store, 4)
        gone = new[1]
        store.update([gone], lambda docs: ([Write.between(gone, docs[gone].body, None)], None))
        assert store.get(gone).body is None
        listed = [x.key for x in store.scan("notes", limit=100)]
        assert [k for k in new if k in listed] == [new[0], new[2], new[3]]
        assert store.count("notes") == counted + 3
        assert store.kind_counts("notes").get("k") == 3
        scan = _plan(
            store,
            "SELECT d.subject FROM documents d WHERE d.state = ? AND d.present = 1 AND d.subject > ? "
            "ORDER BY d.subject LIMIT ?",
            ("notes", "", 10),
        )
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted
            if isinstance(store, SqliteStore):
                assert "sqlite_autoindex_documents_1" in scan
                return
            assert "documents_state_subject_key" in scan
            indexes = {
                r[0]
                for r in tx.all(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                    "AND tablename = 'documents'"
                )
            }
            assert indexes == {"documents_pkey", "documents_state_subject_key"}


def _scope_rows(store: SqlStore, key: DocKey) -> list[tuple[Any, ...]]:
    """A document's member rows and its changes' paths and edits (ids and seqs aside)."""
    with store._read_tx() as tx:
        [(doc_id,)] = tx.all(
            "SELECT doc_id FROM documents WHERE state = ? AND subject = ?", (key.state, key.subject)
        )
        members = tx.all(
            "SELECT name, position, revision, size, outline, body FROM members WHERE doc_id = ? ORDER BY name",
            (doc_id,),
        )
        changes = tx.all(
            "SELECT revision, paths, edits FROM changes WHERE doc_id = ? ORDER BY revision", (doc_id,)
        )
        edits = tx.all(
            "SELECT revision, member, edits FROM change_edits WHERE doc_id = ? ORDER BY revision, member",
            (doc_id,),
        )
    return [
        tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
        for row in (*members, *changes, *edits)
    ]


def _snapshot_rows(store: SqlStore, key: DocKey) -> list[tuple[int, bytes]]:
    """A document's snapshots: revision and stored bytes, oldest first."""
    with store._read_tx() as tx:
        rows = tx.all(
            "SELECT s.revision, s.body FROM snapshots s JOIN documents d ON d.doc_id = s.doc_id "
            "WHERE d.state = ? AND d.subject = ? ORDER BY s.revision",
            (key.state, key.subject),
        )
    return [(int(r), bytes(b)) for r, b in rows]


def test_a_schema_14_store_upgrades_to_15_and_merges_patches_into_the_same_rows(
    backend: str, tmp_path: Path
) -> None:
    """Version 15 rewrites PostgreSQL's server merge (``stateflow_patch_commit`` writes its rows
    itself; SQLite only records the version): after the upgrade a patch merged by the server —
    an update in place, a new member, a nested object, edits kept apart from the change row —
    leaves the same rows as the same patches through the locked path, and a stored key that
    encoding escapes still falls back to it."""
    with _upgraded(14, backend, tmp_path) as store:
        served = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        locked = MemoryView(store, Identity.of("agent-b", "/tmp", "s1"))
        patches: list[dict[str, Any]] = [
            {"session": {"tactics": {"n": "1", "a": {"deep": True}}}},
            {"session": {"tactics": {"n": "2", "b": 3}, "strategy": {"goal": "x"}}},
            {"session": {"tactics": {"a": {"deep": False, "more": "y" * 600}}}},
            {"session": {"tactics": {"n": "3"}}},
        ]
        for patch in patches:
            if not isinstance(store, SqliteStore):
                store._contended[served.keys["session"]] = math.inf  # as another writer would leave it
            served.patch_state(patch)
            locked.patch_state(patch)
        merged = _server_merged(store)
        if isinstance(store, SqliteStore):
            assert merged is None
        else:
            assert merged == {served.keys["session"]: len(patches)}
            with store._read_tx() as tx:
                [(source,)] = tx.all(
                    "SELECT prosrc FROM pg_proc WHERE proname = 'stateflow_patch_commit' "
                    "AND pronamespace = current_schema()::regnamespace"
                )
            assert "PERFORM stateflow_write_rows" not in source
        rows = _scope_rows(store, served.keys["session"])
        assert rows == _scope_rows(store, locked.keys["session"])
        assert any(len(row) == 3 and row[1] == "tactics" for row in rows)  # edits kept apart
        assert served.read_state({"path": "session.tactics"})["value"] == {
            "n": "3",
            "a": {"deep": False, "more": "y" * 600},
            "b": 3,
        }
        # a stored key that encoding escapes: the server does not merge it, the locked path does
        served.patch_state({"session": {"tactics": {'say "hi"': "1"}}})
        if not isinstance(store, SqliteStore):
            store._contended[served.keys["session"]] = math.inf
        served.patch_state({"session": {"tactics": {"n": "4"}}})
        assert served.read_state({"path": "session.tactics.n"})["value"] == "4"
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted


def _audit(store: SqlStore, limit: int) -> list[tuple[int, list[tuple[str, int]]]]:
    """The audit pages of ``limit`` transitions each, walked to the end: each transition's seq
    and its changes' keys and revisions, in page order."""
    out: list[tuple[int, list[tuple[str, int]]]] = []
    after = 0
    while page := store.transitions(after_seq=after, limit=limit):
        out += [(t.seq, [("/".join(c.key), c.revision) for c in t.changes]) for t in page]
        after = page[-1].seq
    return out


def test_a_schema_15_store_upgrades_to_16_and_reads_audits_and_prunes_the_same(
    backend: str, tmp_path: Path
) -> None:
    """Version 16 drops SQLite's ``changes_by_seq``: a transition's row lists its changes' keys
    (``transitions.changed``, filled by the upgrade from the rows there) and ``changes`` loses
    its foreign key to ``transitions``. The audit pages, history and as-of reads give what they
    gave under 15 (the fixture's record, and the changes by seq read from the version-15 rows),
    and pruning and purging delete the same transitions — the ones left without changes."""
    _store_at(15, backend, tmp_path)
    sqlite = not backend.startswith("postgresql://")
    if sqlite:  # one change's paths kept apart, as version 15 keeps a long row's
        with sqlite3.connect(backend) as lite:
            lite.execute(
                "INSERT INTO change_paths (doc_id, revision, paths) "
                "SELECT doc_id, revision, paths FROM changes WHERE doc_id = 1 AND revision = 2"
            )
            lite.execute("UPDATE changes SET paths = NULL WHERE doc_id = 1 AND revision = 2")
        lite.close()
        before = _sqlite_rows(
            backend,
            "SELECT c.seq, d.state, d.subject, c.revision FROM changes c JOIN documents d "
            "ON d.doc_id = c.doc_id ORDER BY c.seq, d.state, d.subject",
        )
    store = open_store(backend, auto_migrate=False)
    try:
        assert store.migrate() == (15, SCHEMA_VERSION)
        _reads_back(store, _expected())
        whole = _audit(store, 10_000)
        assert [(s, k, r) for s, changes in whole for k, r in changes] == [
            (t["seq"], c["key"], c["revision"]) for t in _expected()["transitions"] for c in t["changes"]
        ]
        assert _audit(store, 1) == _audit(store, 7) == whole  # the same by page
        if sqlite:
            assert [(s, f"{st}/{sub}", r) for s, st, sub, r in before] == [
                (s, k, r) for s, changes in whole for k, r in changes
            ]
            assert (
                _sqlite_rows(
                    backend,
                    "SELECT name FROM sqlite_master WHERE name LIKE '%_v15' OR name = 'changes_by_seq'",
                )
                == []
            )
            assert "transitions" not in {
                r[2] for r in _sqlite_rows(backend, "PRAGMA foreign_key_list(changes)")
            }
            assert _sqlite_rows(backend, "PRAGMA foreign_key_check") == []
            assert _sqlite_rows(backend, "SELECT changed FROM transitions WHERE seq = 16") == [
                ("[[1,16],[2,1]]",)
            ]
            assert _sqlite_rows(backend, "SELECT doc_id, revision FROM change_paths") == [(1, 2)]
        assert check_store(store).ok
        # a new transition over two states: listed whole, then its purged half left out
        notes, ticket = DocKey("notes", "a"), DocKey("tickets", '["agent","fixture","thread","t1"]')
        old_notes, old_ticket = store.get(notes), store.get(ticket)
        commit = store.commit(
            [
                Write.between(notes, old_notes.body, dict(old_notes.body or {}, late=1), old_notes.revision),
                Write.between(ticket, old_ticket.body, {"closed": True}, old_ticket.revision),
            ]
        )
        assert commit.seq is not None and commit.at is not None
        [last] = store.transitions(after_seq=commit.seq - 1)
        assert [(c.key, c.revision) for c in last.changes] == [
            (notes, old_notes.revision + 1),
            (ticket, old_ticket.revision + 1),
        ]
        # pruning: the transitions whose every change goes are deleted, as under 15
        cut = next(t for t in store.transitions(limit=100) if t.seq == 10).at
        assert store.prune_history("notes", cut) == 9
        assert [s for s, _ in _audit(store, 5)] == [*range(10, 24), commit.seq]
        assert store.history([notes], limit=100)[-1].revision == 10
        assert store.read_at(notes, revision=9).body == _expected()["documents"]["notes/a"]["revisions"][9]
        # purging: the transitions of the state's documents alone go, the shared one stays
        assert store.purge("tickets") == 1
        assert [s for s, _ in _audit(store, 5)] == [*range(10, 22), commit.seq]
        [last] = store.transitions(after_seq=commit.seq - 1)
        assert [(c.key, c.revision) for c in last.changes] == [(notes, old_notes.revision + 1)]
        assert store.purge("notes") == 2
        assert [s for s, _ in _audit(store, 5)] == [*range(18, 22), commit.seq]  # the newest stays
        assert store.transitions(after_seq=commit.seq - 1)[0].changes == []
        assert check_store(store).ok
    finally:
        store.close()


_REFERENCES_VERSION = 17
"""The version whose PostgreSQL step drops ``members``' and ``changes``' foreign keys."""


def _dependents(store: SqlStore, doc_id: int) -> tuple[int, int, int]:
    """A document's member, change and change_edits rows, counted."""
    with store._read_tx() as tx:
        members, changes, edits = (
            int(tx.all(f"SELECT COUNT(*) FROM {table} WHERE doc_id = ?", (doc_id,))[0][0])
            for table in ("members", "changes", "change_edits")
        )
    return members, changes, edits


def test_a_schema_15_store_upgrades_and_a_deleted_document_still_takes_its_rows(
    backend: str, tmp_path: Path
) -> None:
    """The references step leaves PostgreSQL's ``members`` and ``changes`` without foreign keys
    (the commit function locks every document it writes, so its rows always point at one) and
    deletes a document's members and changes with it by a statement trigger, as their
    ``ON DELETE CASCADE`` did (SQLite only records the version). After the upgrade new documents
    count, large members keep edits apart, and deleting a document's row takes its members,
    changes and edits on both backends."""
    with _upgraded(_REFERENCES_VERSION - 1, backend, tmp_path) as store:
        counted = store.count("notes")
        kinds = store.kind_counts("notes").get("k", 0)
        new = _created(store, 3)
        big = new[0]
        for n in range(2):

            def grown(docs: Any, n: int = n) -> tuple[list[Write], None]:
                return [Write.between(big, docs[big].body, {"i": n, "t": "y" * 2000})], None

            store.update([big], grown)
        assert store.count("notes") == counted + 3
        assert store.kind_counts("notes").get("k") == kinds + 3
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted
            ids = {
                key: int(r[0])
                for key in new
                for r in tx.all(
                    "SELECT doc_id FROM documents WHERE state = ? AND subject = ?", (key.state, key.subject)
                )
            }
            if not isinstance(store, SqliteStore):
                keys = tx.all(
                    "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' "
                    "AND connamespace = current_schema()::regnamespace ORDER BY 1"
                )
                assert [k[0] for k in keys] == ["change_edits", "snapshot_members", "snapshots"]
        members, changes, edits = _dependents(store, ids[big])
        assert members > 0 and changes == 3 and edits > 0
        with store._write_tx() as tx:
            tx.run("DELETE FROM documents WHERE doc_id IN (?, ?)", (ids[big], ids[new[1]]))
        assert _dependents(store, ids[big]) == (0, 0, 0)
        assert _dependents(store, ids[new[1]]) == (0, 0, 0)
        assert _dependents(store, ids[new[2]]) == (1, 1, 0)
        assert store.get(new[2]).body == {"i": 2}
        assert store.purge("notes") > 0
        with store._read_tx() as tx:
            for table in ("members", "changes", "change_edits", "snapshots", "snapshot_members"):
                assert tx.one(f"SELECT COUNT(*) FROM {table} WHERE doc_id = ?", (ids[new[2]],)) == (0,)


_LEAN_MERGE_VERSION = 18


def test_a_schema_17_store_upgrades_to_18_and_merges_patches_into_the_same_rows(
    backend: str, tmp_path: Path
) -> None:
    """Version 18 rewrites PostgreSQL's server merge with fewer expressions per call (a locked
    document's row kept whole, each member's edits joined by ``stateflow_merge_object`` as it
    finds them; SQLite only records the version): after the upgrade, patches merged by the
    server — a new member set whole, an update in place, a nested object, two members in one
    call written in name order, a value as it was, edits kept apart from the change row, a
    snapshot falling due — leave the same rows as the same patches through the locked path, and
    a stored key that encoding escapes still falls back to it."""
    with _upgraded(_LEAN_MERGE_VERSION - 1, backend, tmp_path) as store:
        served = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        locked = MemoryView(store, Identity.of("agent-b", "/tmp", "s1"))
        patches: list[dict[str, Any]] = [
            {"session": {"tactics": {"n": "1", "a": {"deep": True}}}},
            {"session": {"tactics": {"n": "2", "b": 3}, "strategy": {"goal": "x"}}},
            {"session": {"tactics": {"n": "2"}, "strategy": {"goal": "y", "é": {"z": 1}}}},
            {"session": {"tactics": {"a": {"deep": False, "more": "y" * 600}}}},
            *(
                {"session": {"strategy": {"doc": "x" * (100 + 50 * i)}, "tactics": {"n": i}}}
                for i in range(12)
            ),
            {"session": {"tactics": {"n": "3"}}},
        ]
        key = served.keys["session"]
        for n, patch in enumerate(patches, 1):
            if not isinstance(store, SqliteStore):
                store._contended[key] = math.inf  # as another writer would leave it
            served.patch_state(patch)
            locked.patch_state(patch)
            # every patch written; on PostgreSQL each one after the first (which creates the
            # document's row) merged by the server
            assert store.get(key).revision == n
            merged = _server_merged(store)
            assert merged is None if isinstance(store, SqliteStore) else merged == ({key: n} if n > 1 else {})
        rows = _scope_rows(store, key)
        assert rows == _scope_rows(store, locked.keys["session"])
        assert any(len(row) == 3 and row[1] == "tactics" for row in rows)  # edits kept apart
        served_snapshots = _snapshot_rows(store, key)
        assert served_snapshots and served_snapshots == _snapshot_rows(store, locked.keys["session"])
        assert served.read_state({"path": "session.tactics"})["value"] == {
            "n": "3",
            "a": {"deep": False, "more": "y" * 600},
            "b": 3,
        }
        # a stored key that encoding escapes: the server does not merge it, the locked path does
        served.patch_state({"session": {"tactics": {'say "hi"': "1"}}})
        if not isinstance(store, SqliteStore):
            store._contended[key] = math.inf
        served.patch_state({"session": {"tactics": {"n": "4"}}})
        assert served.read_state({"path": "session.tactics.n"})["value"] == "4"
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted


_ONE_STATEMENT_MERGE_VERSION = 19


def test_a_schema_18_store_upgrades_to_19_and_merges_patches_into_the_same_rows(
    backend: str, tmp_path: Path
) -> None:
    """Version 19 gives PostgreSQL's server merge two statements fewer in the common case (one
    document with one member updated: its member, document and change rows in one statement;
    each document's returned members in the result by one query, which raises for a member held
    as a tree; SQLite only records the version). After the upgrade, patches merged by the server
    — one member in place again and again (edits kept apart, snapshots falling due), a new
    member, two members, two documents in one call — leave the same rows as the same patches
    through the locked path; a returned member held as a tree, or a stored key that encoding
    escapes, sends the patch to the locked path, and the counters still equal a recount."""
    with _upgraded(_ONE_STATEMENT_MERGE_VERSION - 1, backend, tmp_path) as store:
        served = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        locked = MemoryView(store, Identity.of("agent-b", "/tmp", "s1"))
        patches: list[dict[str, Any]] = [
            {"session": {"tactics": {"n": "0"}}},
            *({"session": {"tactics": {"n": str(i), "pad": "p" * (40 * i)}}} for i in range(1, 14)),
            {"session": {"tactics": {"a": {"deep": True}}}},
            {"session": {"tactics": {"a": {"deep": False, "more": "y" * 600}}}},
            {"session": {"strategy": {"goal": "x"}}},
            {"session": {"tactics": {"n": "2"}, "strategy": {"goal": "y", "é": {"z": 1}}}},
            {"cwd": {"tactics": {"here": False}}},
            {"session": {"tactics": {"n": "3"}}, "cwd": {"tactics": {"here": True}}},
            {"session": {"tactics": {"n": "4"}}},
        ]
        scopes = {served.keys["session"]: "session", served.keys["cwd"]: "cwd"}
        keys = list(scopes)
        merged = _server_merged(store)
        for patch in patches:
            if not isinstance(store, SqliteStore):
                store._contended.update(dict.fromkeys(keys, math.inf))  # as another writer would leave it
            before = {key: store.get(key).revision for key in keys}
            served.patch_state(patch)
            locked.patch_state(patch)
            if merged is not None and all(before[key] > 0 for key in keys if scopes[key] in patch):
                # merged by the server (a document's first write creates its row: not there)
                assert all(merged[key] == before[key] + 1 for key in keys if scopes[key] in patch)
        for scope in ("session", "cwd"):
            assert _scope_rows(store, served.keys[scope]) == _scope_rows(store, locked.keys[scope])
        rows = _scope_rows(store, keys[0])
        assert any(len(row) == 3 and row[1] == "tactics" for row in rows)  # edits kept apart
        served_snapshots = _snapshot_rows(store, keys[0])
        assert served_snapshots and served_snapshots == _snapshot_rows(store, locked.keys["session"])
        assert served.read_state({"path": "session.tactics.n"})["value"] == "4"
        assert served.read_state({"path": "cwd.tactics"})["value"] == {"here": True}
        # a returned member held as a tree (larger than ``TREE_MIN``): the server
        # merge refuses the call and the locked path writes the patch
        served.patch_state({"session": {"strategy": {"doc": "t" * (TREE_MIN + 1000)}}})
        if not isinstance(store, SqliteStore):
            with store._read_tx() as tx:
                assert tx.one(
                    "SELECT m.root IS NOT NULL FROM members m JOIN documents d ON d.doc_id = m.doc_id "
                    "WHERE d.state = ? AND d.subject = ? AND m.name = 'strategy'",
                    (keys[0].state, keys[0].subject),
                ) == (True,)
            store._contended.update(dict.fromkeys(keys, math.inf))
        revision = store.get(keys[0]).revision
        served.patch_state({"session": {"tactics": {"n": "5"}}})
        assert store.get(keys[0]).revision == revision + 1
        assert merged is None or merged.get(keys[0]) != revision + 1  # not merged by the server
        assert served.read_state({"path": "session.tactics.n"})["value"] == "5"
        assert served.read_state({"path": "session.strategy.doc"})["value"] == "t" * (TREE_MIN + 1000)
        # a stored key that encoding escapes: the locked path as well
        served.patch_state({"session": {"tactics": {'say "hi"': "1"}}})
        if not isinstance(store, SqliteStore):
            store._contended.update(dict.fromkeys(keys, math.inf))
        served.patch_state({"session": {"tactics": {"n": "6"}}})
        assert served.read_state({"path": "session.tactics.n"})["value"] == "6"
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted


_MEMBERS_BY_KEY_VERSION = 20


def _counted_writes(store: SqlStore, state: str) -> list[DocKey]:
    """Writes that move the member counters of ``state`` (each through the store's commit): three
    new documents of several members in one commit, members added and dropped, a document
    deleted and written again with other members."""
    keys = [DocKey(state, f'["agent","x","k","m{i}"]') for i in range(3)]

    def create(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
        return [Write.between(k, None, {"a": i, "b": [i], "c": {"d": i}}) for i, k in enumerate(keys)], None

    def reshape(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
        return [
            Write.between(keys[0], docs[keys[0]].body, {"b": [0], "c": {"d": 1}, "e": "new", "f": True})
        ], None

    def delete(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
        return [Write.between(keys[1], docs[keys[1]].body, None)], None

    def again(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
        return [Write.between(keys[1], None, {"x": 1, "y": 2})], None

    for change in (create, reshape, delete, again):
        store.update(keys, change, optimistic=True)
    return keys


def _member_counts(store: SqlStore, state: str) -> list[tuple[str, int]]:
    """``state``'s member counters as stored: their rows and deltas (``counting``)."""
    return sorted((str(name), int(n)) for name, n in store.member_counts(state).items())


def test_a_schema_19_store_upgrades_to_20_and_counts_members_the_same(backend: str, tmp_path: Path) -> None:
    """Version 20 had PostgreSQL's member counters find each row's document by its key, planned
    without sequential scans (a join planned while ``documents`` was small read it whole on every
    later commit; SQLite only records the version). Version 36 dropped the trigger on inserted
    members (each writer appends its deltas) and kept the one on deleted members, appending
    deltas. After the upgrade, writes of new documents of several members, members added and
    dropped, a document deleted and written again, a document's row deleted under its members
    (whose counters the trigger cannot find, and leaves) leave member counters equal to a
    recount; and a fresh session's delete of a member reads ``documents`` by its key, the table
    analyzed or not, and appends its delta."""
    with _upgraded(_MEMBERS_BY_KEY_VERSION - 1, backend, tmp_path) as store:
        postgres = not isinstance(store, SqliteStore)
        state = "new"
        keys = _counted_writes(store, state)
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert {k: n for k, n in stored.items() if k[0] == state} == {
                k: n for k, n in recounted.items() if k[0] == state
            }
        with store._write_tx() as tx:  # its members deleted after its row: not found, not counted
            tx.run("DELETE FROM documents WHERE state = ? AND subject = ?", (state, keys[2].subject))
        assert dict(_member_counts(store, state)) == {"a": 1, "b": 2, "c": 2, "e": 1, "f": 1, "x": 1, "y": 1}
        if not postgres:
            return
        url = backend
        with store._read_tx() as tx:
            [(doc_id,)] = tx.all(
                "SELECT doc_id FROM documents WHERE state = 'new' AND subject = ?", (keys[0].subject,)
            )
        for analyze in (False, True):
            with psycopg.connect(url) as conn:  # a session of its own: the trigger planned afresh
                if analyze:
                    conn.execute("ANALYZE documents")
                    conn.commit()

                def scans() -> tuple[int, int]:
                    row = conn.execute(
                        "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relid = 'documents'::regclass"
                    ).fetchone()
                    assert row is not None
                    return int(row[0]), int(row[1] or 0)

                def deltas() -> list[tuple[Any, ...]]:
                    return conn.execute(
                        "SELECT name, delta FROM count_deltas WHERE state = 'new' AND counter = 'member' "
                        "AND delta < 0 ORDER BY name"
                    ).fetchall()

                before = deltas()
                seq, idx = scans()
                conn.execute("DELETE FROM members WHERE doc_id = %s AND name = 'b'", (doc_id,))
                seq_after, idx_after = scans()
                assert seq_after == seq and idx_after > idx, analyze
                assert sorted([*before, ("b", -1)]) == deltas()
                conn.rollback()


_WALKED_PATCH_VERSION = 21


def test_a_schema_20_store_upgrades_to_21_and_merges_patches_into_the_same_rows(
    backend: str, tmp_path: Path
) -> None:
    """Version 21 has PostgreSQL's server merge take the patch as the client walked it (no query
    walks the patch's text under the row locks), replace a changed scalar of the same kind in
    the stored text or append a new key without walking the stored object where that cannot
    touch another value, and leave a patched document's ``present`` as it is (SQLite only
    records the version). After the upgrade, patches merged by the server — values in place, a
    key or value found twice, kinds changed, new keys, nested objects, a backslash in the text,
    a member set whole, two members, two documents, edits kept apart and snapshots falling due —
    leave the same rows as the same patches through the locked path; a stored key that encoding
    escapes still sends the patch to the locked path; the counters equal a recount."""
    with _upgraded(_WALKED_PATCH_VERSION - 1, backend, tmp_path) as store:
        postgres = not isinstance(store, SqliteStore)
        if postgres:
            with store._read_tx() as tx:
                # the version before's function (its patch as JSON text) is gone, the new one there
                assert tx.all(
                    "SELECT pg_get_function_identity_arguments(oid) FROM pg_proc "
                    "WHERE proname = 'stateflow_patch_commit' AND pronamespace = current_schema()::regnamespace"
                ) == [
                    (
                        "p_state text[], p_subject text[], p_doc integer[], p_member text[], p_last integer[], "
                        "p_key text[], p_value text[], p_members text[], p_outlines text[], p_at text, "
                        "p_origin bytea, p_seq_lock bigint",
                    )
                ]
        served = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        locked = MemoryView(store, Identity.of("agent-b", "/tmp", "s1"))
        patches: list[dict[str, Any]] = [
            {
                "session": {"tactics": {"n": 1, "deep": {"n": 1}, "s": "a"}},
                "cwd": {"tactics": {"here": False}},
            },
            {"session": {"tactics": {"n": 2}}},
            *({"session": {"tactics": {"s": f"v{i}", "pad": "p" * (40 * i)}}} for i in range(1, 14)),
            {"session": {"tactics": {"n": "2", "s": True}}},
            {"session": {"tactics": {"deep": {"n": 2, "m": "x"}, "new": {"k": 1}}}},
            {"session": {"tactics": {"s": 'q"\n'}}},
            {"session": {"tactics": {"s": "plain"}}},
            {"session": {"strategy": {"goal": "x", "é": {"z": 1}}}},
            {"session": {"tactics": {"n": 3}, "strategy": {"goal": "y"}}},
            {"session": {"tactics": {"n": 4}}, "cwd": {"tactics": {"here": True}}},
        ]
        scopes = {served.keys["session"]: "session", served.keys["cwd"]: "cwd"}
        keys = list(scopes)
        merged = _server_merged(store)
        for patch in patches:
            if postgres:
                store._contended.update(dict.fromkeys(keys, math.inf))  # as another writer would leave it
            before = {key: store.get(key).revision for key in keys}
            served.patch_state(patch)
            locked.patch_state(patch)
            if merged is not None and all(before[key] > 0 for key in keys if scopes[key] in patch):
                # merged by the server (a document's first write creates its row: not there)
                assert all(merged[key] == before[key] + 1 for key in keys if scopes[key] in patch)
        for scope in ("session", "cwd"):
            assert _scope_rows(store, served.keys[scope]) == _scope_rows(store, locked.keys[scope])
        rows = _scope_rows(store, keys[0])
        assert any(len(row) == 3 and row[1] == "tactics" for row in rows)  # edits kept apart
        served_snapshots = _snapshot_rows(store, keys[0])
        assert served_snapshots and served_snapshots == _snapshot_rows(store, locked.keys["session"])
        assert (
            served.read_state({"path": "session.tactics"})["value"]
            == locked.read_state({"path": "session.tactics"})["value"]
        )
        assert served.read_state({"path": "session.tactics.n"})["value"] == 4
        assert served.read_state({"path": "cwd.tactics"})["value"] == {"here": True}
        # a stored key that encoding escapes: the locked path
        served.patch_state({"session": {"tactics": {'say "hi"': "1"}}})
        if postgres:
            store._contended.update(dict.fromkeys(keys, math.inf))
        revision = store.get(keys[0]).revision
        served.patch_state({"session": {"tactics": {"n": 5}}})
        assert store.get(keys[0]).revision == revision + 1
        assert merged is None or merged.get(keys[0]) != revision + 1  # not merged by the server
        assert served.read_state({"path": "session.tactics.n"})["value"] == 5
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted


_ONE_KEY_AT_ONCE_VERSION = 22


def test_a_schema_21_store_upgrades_to_22_and_merges_one_key_into_the_same_rows(
    backend: str, tmp_path: Path
) -> None:
    """Version 22 has PostgreSQL's server merge write one key of one stored object at once —
    appended, or a scalar of the same kind replaced in the text — without the merge function's
    call and the general loop, which still takes everything else (SQLite only records the
    version). After the upgrade, patches merged by the server — keys in place and appended on
    two documents, a value found twice, a kind changed, a value as it was, edits kept apart,
    snapshots falling due, two keys, two members, a new member — leave the same rows as the same
    patches through the locked path; the counters equal a recount."""
    with _upgraded(_ONE_KEY_AT_ONCE_VERSION - 1, backend, tmp_path) as store:
        postgres = not isinstance(store, SqliteStore)
        if postgres:
            with store._read_tx() as tx:
                (source,) = tx.one(
                    "SELECT prosrc FROM pg_proc WHERE proname = 'stateflow_patch_commit' "
                    "AND pronamespace = current_schema()::regnamespace"
                ) or ("",)
                assert "u_body" in source  # the version's function replaced the one before
        served = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        locked = MemoryView(store, Identity.of("agent-b", "/tmp", "s1"))
        patches: list[dict[str, Any]] = [
            {
                "session": {"tactics": {"n": 1, "deep": {"n": 1}, "s": "a"}},
                "cwd": {"tactics": {"here": False}},
            },
            {"session": {"tactics": {"s": "b"}}},
            {"session": {"tactics": {"n": 2}}},  # '"n":1' twice: the loop
            {"session": {"tactics": {"new": {"k": 1}}}},
            {"session": {"tactics": {"s": "b"}}},  # as it was
            {"session": {"tactics": {"s": 3}}},  # a kind changed: the loop
            {"cwd": {"tactics": {"here": True}}},
            *({"session": {"tactics": {"pad": f"{i % 10}" * (40 * i)}}} for i in range(1, 16)),
            {"session": {"tactics": {"a": 1, "b": True}}},
            {"session": {"strategy": {"goal": "x"}}},  # a new member: the loop
            {"session": {"strategy": {"goal": "y"}, "tactics": {"n": 4}}},
        ]
        scopes = {served.keys["session"]: "session", served.keys["cwd"]: "cwd"}
        keys = list(scopes)
        merged = _server_merged(store)
        for patch in patches:
            if postgres:
                store._contended.update(dict.fromkeys(keys, math.inf))  # as another writer would leave it
            before = {key: store.get(key).revision for key in keys}
            served.patch_state(patch)
            locked.patch_state(patch)
            after = {key: store.get(key).revision for key in keys}
            if merged is not None and all(before[key] > 0 for key in keys if scopes[key] in patch):
                # merged by the server where it wrote (a document's first write creates its row)
                assert all(merged[key] == after[key] for key in keys if after[key] != before[key])
        for scope in ("session", "cwd"):
            assert _scope_rows(store, served.keys[scope]) == _scope_rows(store, locked.keys[scope])
        rows = _scope_rows(store, keys[0])
        assert any(len(row) == 3 and row[1] == "tactics" for row in rows)  # edits kept apart
        served_snapshots = _snapshot_rows(store, keys[0])
        assert served_snapshots and served_snapshots == _snapshot_rows(store, locked.keys["session"])
        assert (
            served.read_state({"path": "session.tactics"})["value"]
            == locked.read_state({"path": "session.tactics"})["value"]
        )
        assert served.read_state({"path": "session.tactics.n"})["value"] == 4
        assert served.read_state({"path": "cwd.tactics"})["value"] == {"here": True}
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted


_FLUSHED_APART_VERSION = 23


def test_a_schema_22_store_upgrades_to_23_and_merges_without_waiting_for_its_flush(
    backend: str, tmp_path: Path
) -> None:
    """Version 23 has PostgreSQL's server merge commit without waiting for its WAL flush (its
    caller waits for the flush after the locks are released; SQLite only records the version).
    After the upgrade, patches merged by the server leave the same rows as the same patches
    through the locked path, the session's ``synchronous_commit`` on the connection they ran on
    is as it was, and the counters equal a recount."""
    with _upgraded(_FLUSHED_APART_VERSION - 1, backend, tmp_path) as store:
        postgres = not isinstance(store, SqliteStore)
        if postgres:
            with store._read_tx() as tx:
                (source,) = tx.one(
                    "SELECT prosrc FROM pg_proc WHERE proname = 'stateflow_patch_commit' "
                    "AND pronamespace = current_schema()::regnamespace"
                ) or ("",)
                # the version's function replaced the one before
                assert "set_config('synchronous_commit', 'off', true)" in source
        served = MemoryView(store, Identity.of("agent-a", "/tmp", "s1"))
        locked = MemoryView(store, Identity.of("agent-b", "/tmp", "s1"))
        patches: list[dict[str, Any]] = [
            {"session": {"tactics": {"n": 1, "s": "a"}}, "cwd": {"tactics": {"here": False}}},
            {"session": {"tactics": {"s": "b"}}},  # one key at once
            {"session": {"tactics": {"new": {"k": 1}}}},  # the loop
            {"cwd": {"tactics": {"here": True}}},
            {"session": {"strategy": {"goal": "y"}, "tactics": {"n": 4}}},
        ]
        keys = [served.keys["session"], served.keys["cwd"]]
        merged = _server_merged(store)
        for patch in patches:
            if postgres:
                store._contended.update(dict.fromkeys(keys, math.inf))  # as another writer would leave it
            served.patch_state(patch)
            locked.patch_state(patch)
        if merged is not None:
            assert merged  # the server merged them
        for scope in ("session", "cwd"):
            assert _scope_rows(store, served.keys[scope]) == _scope_rows(store, locked.keys[scope])
        assert (
            served.read_state({"path": "session"})["value"] == locked.read_state({"path": "session"})["value"]
        )
        assert served.read_state({"path": "session.tactics.n"})["value"] == 4
        if postgres:
            with psycopg.connect(backend, autocommit=True) as fresh:
                (default,) = fresh.execute("SHOW synchronous_commit").fetchone() or ("",)
            for _ in range(2):  # (the pool's connections: the merges ran on one of them)
                with store._pool.connection() as conn:  # type: ignore[attr-defined]
                    assert conn.execute("SHOW synchronous_commit").fetchone() == (default,)
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted


_ROWS_AS_ONE_VERSION = 24
_ODD = 'q"uo\\te {a,b} NULL ünï \U0001f600 \n\t'
"""A name, subject and value that an array literal or JSON text must escape."""


def test_a_schema_23_store_upgrades_to_24_and_commits_the_same_rows_by_either_path(
    backend: str, tmp_path: Path
) -> None:
    """Version 24 has PostgreSQL's write functions take a commit's rows as one json object
    (SQLite only records the version). After the upgrade, the same writes committed in one
    statement (``stateflow_commit``) and on the locked path (``stateflow_write_rows``) leave
    the same rows — names, subjects and values that need escaping, members added, rewritten and
    deleted, a member held as a tree, snapshots, op claims, shared documents with and without a
    row, a document deleted and written again — and read back as written by a store that has
    cached nothing."""
    with _upgraded(_ROWS_AS_ONE_VERSION - 1, backend, tmp_path) as store:
        if not isinstance(store, SqliteStore):
            with store._read_tx() as tx:
                found = tx.all(
                    "SELECT proname, pg_get_function_arguments(oid) FROM pg_proc "
                    "WHERE proname IN ('stateflow_commit', 'stateflow_write_rows') "
                    "AND pronamespace = current_schema()::regnamespace ORDER BY proname"
                )
            # the version's functions replaced the ones before (one of each; version 29 added
            # the bytes beside the payload as their last parameters)
            assert [(name, args.split(", p_ins")[0]) for name, args in found] == [
                ("stateflow_commit", "p json, p_at text, p_origin bytea, p_seq_lock bigint"),
                ("stateflow_write_rows", "p_seq bigint, p json"),
            ]
        declared, never = DocKey("decl", _ODD), DocKey("decl", "never written")
        store.commit([Write.between(declared, None, {"schema": _ODD})])
        big = "b" * (TREE_MIN + 100)
        bodies: list[dict[str, Any] | None] = [
            {_ODD: "v" + _ODD, "n": 1, "obj": {_ODD: [1, None, True, 1.5, "\\x00"]}},
            {_ODD: "w", "n": 2, "obj": {_ODD: []}, "big": big},
            {_ODD: "w", "obj": {"k": _ODD}, "big": big + "c"},
            *({_ODD: "w", "filler": f"{n}" * 6000} for n in range(8)),
            None,
            {"again": _ODD},
        ]
        keys = {}
        for path, optimistic in (("one", True), ("locked", False)):
            key = keys[path] = DocKey("s" + _ODD, f'["agent","{path}","k","{_ODD}"]')
            for n, body in enumerate(bodies):

                def compute(
                    docs: dict[DocKey, Any], key: DocKey = key, body: dict[str, Any] | None = body
                ) -> tuple[list[Write], None]:
                    assert docs[declared].body == {"schema": _ODD} and docs[never].body is None
                    new = MISSING if body is None else body  # (None: the document deleted)
                    return [Write.between(key, docs[key].value, new, docs[key].revision)], None

                store.update(
                    [key],
                    compute,
                    {"by": _ODD},
                    shared=[declared, never],
                    claims=[(_ODD, f"{path}-{n}")],
                    optimistic=optimistic,
                )
        assert _scope_rows(store, keys["one"]) == _scope_rows(store, keys["locked"])
        assert _snapshot_rows(store, keys["one"]) == _snapshot_rows(store, keys["locked"])
        assert store.applied_op("one-11", _ODD) not in (False, None)
        assert store.applied_op("locked-11", _ODD) not in (False, None)
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
            assert stored == recounted
    fresh = open_store(backend, auto_migrate=False)
    try:
        for key in keys.values():
            assert fresh.get(key).body == bodies[-1]
            for revision, body in enumerate(bodies, 1):
                assert fresh.read_at(key, revision=revision).body == body, (key, revision)
    finally:
        fresh.close()


_KEYS_AS_SCALARS_VERSION = 25


def test_a_schema_24_store_upgrades_to_25_and_checks_its_keys_the_same(backend: str, tmp_path: Path) -> None:
    """Version 25 has PostgreSQL's ``stateflow_commit`` copy each key it looks up into a scalar
    before the lookup (SQLite only records the version). After the upgrade its checks decline
    as before — a shared document moved or created, a written one moved, an op id taken, on a
    table small enough to be scanned — and a commit that passes them writes its rows."""
    with _upgraded(_KEYS_AS_SCALARS_VERSION - 1, backend, tmp_path) as store:
        declared, item = DocKey("decl", _ODD), DocKey("s" + _ODD, f'["ns","k","{_ODD}"]')
        absent = DocKey("decl", "alias " + _ODD)
        store.commit([Write.between(declared, None, {"schema": _ODD})])
        store.commit([Write.between(item, None, {"v": 1})])

        def compute(docs: dict[DocKey, Any], n: int = 2) -> tuple[list[Write], None]:
            assert docs[declared].body == {"schema": _ODD} and docs[absent].body is None
            return [Write.between(item, docs[item].value, {"v": n}, docs[item].revision)], None

        store.update(
            [item], compute, {"by": _ODD}, shared=[declared, absent], claims=[(_ODD, "op 1")], optimistic=True
        )
        assert store.get(item).body == {"v": 2} and store.applied_op("op 1", _ODD) not in (False, None)
        if isinstance(store, SqliteStore):
            return
        with store._pool.connection() as conn:  # type: ignore[attr-defined]
            (source,) = conn.execute(
                "SELECT prosrc FROM pg_proc WHERE proname = 'stateflow_commit' "
                "AND pronamespace = current_schema()::regnamespace"
            ).fetchone() or ("",)
            # no key lookup compares a column with a subscript of the payload
            assert "state = w." not in source and "scope = w." not in source and "k_subject" in source
            rows = {
                key: conn.execute(
                    "SELECT doc_id, revision FROM documents WHERE state = %s AND subject = %s",
                    (key.state, key.subject),
                ).fetchone()
                for key in (declared, item)
            }
            share = [declared.state, declared.subject, *rows[declared]]
            lock = [item.state, item.subject, *rows[item]]

            def commit(**fields: Any) -> Any:
                payload = orjson.dumps({"doc_rows": [], **fields}).decode()
                (seq,) = conn.execute(
                    "SELECT stateflow_commit(%s::json, '', '\\x'::bytea, 0, NULL, NULL, NULL)", (payload,)
                ).fetchone() or (None,)
                return seq

            stale = [*lock[:3], lock[3] - 1]
            moved = [*share[:3], share[3] + 1]
            assert commit(share_keys=[moved], lock_keys=[lock]) is None
            assert commit(share_keys=[share], lock_keys=[stale]) is None
            assert commit(absent_keys=[[declared.state, declared.subject]], lock_keys=[lock]) is None
            assert commit(claim_keys=[[_ODD, "op 1"]], lock_keys=[lock]) is None
            conn.rollback()
        # nothing written by the declined calls; a commit after them passes every check
        store.update(
            [item], lambda docs: compute(docs, 3), {"by": _ODD}, shared=[declared, absent], optimistic=True
        )
        assert store.get(item).body == {"v": 3} and store.get(item).revision == 3


_NO_SEQ_SCANS_VERSION = 26


def _write_function_sources(store: Any) -> list[tuple[str, str]]:
    """Every write function of a PostgreSQL store checked to plan without sequential scans,
    then the source of the two write functions (``stateflow_commit``, ``stateflow_write_rows``)."""
    with store._pool.connection() as conn:
        for f in WRITE_FUNCTIONS:
            assert "enable_seqscan=off" in _function_column(conn, f, "proconfig", None), f
        return [(f, _function_column(conn, f, "prosrc", "")) for f in WRITE_FUNCTIONS[:2]]


def _function_column(conn: Any, signature: str, column: str, missing: Any) -> Any:
    """One column of ``pg_proc`` for the server function ``signature`` (``missing``: none)."""
    row = conn.execute(f"SELECT {column} FROM pg_proc WHERE oid = %s::regprocedure", (signature,)).fetchone()
    return row[0] if row else missing


def test_a_schema_25_store_upgrades_to_26_and_finds_rows_by_their_keys(backend: str, tmp_path: Path) -> None:
    """Version 26 has PostgreSQL's functions that find rows by key plan without sequential
    scans (SQLite only records the version). After the upgrade, on a table small enough that a
    scan looked as cheap as the key's index (analyzed), every lookup of a commit's checks, shared
    and locked rows, of the group's row locks and of the locked path's rows takes an index — the
    plans of their nested statements, as ``auto_explain`` reports them — and the same writes
    commit and read back; a declined check still writes nothing."""
    with _upgraded(_NO_SEQ_SCANS_VERSION - 1, backend, tmp_path) as store:
        declared, item = DocKey("decl", _ODD), DocKey("s" + _ODD, f'["ns","k","{_ODD}"]')
        absent = DocKey("decl", "alias " + _ODD)
        store.commit([Write.between(declared, None, {"schema": _ODD})])
        store.commit([Write.between(item, None, {"v": 1})])

        def compute(docs: dict[DocKey, Any], n: int) -> tuple[list[Write], None]:
            assert docs[declared].body == {"schema": _ODD} and docs[absent].body is None
            return [Write.between(item, docs[item].value, {"v": n}, docs[item].revision)], None

        store.update(
            [item],
            lambda d: compute(d, 2),
            {},
            shared=[declared, absent],
            claims=[(_ODD, "a")],
            optimistic=True,
        )
        assert store.get(item).body == {"v": 2}
        if isinstance(store, SqliteStore):
            return
        with store._pool.connection() as conn:  # type: ignore[attr-defined]
            conn.autocommit = True
            for f in WRITE_FUNCTIONS:
                assert "enable_seqscan=off" in _function_column(conn, f, "proconfig", None), f
            conn.execute("ANALYZE")  # a few rows: a scan costs the planner less than the index
            rows = {
                key: conn.execute(
                    "SELECT doc_id, revision FROM documents WHERE state = %s AND subject = %s",
                    (key.state, key.subject),
                ).fetchone()
                for key in (declared, item)
            }
            share = [declared.state, declared.subject, *rows[declared]]
            lock = [item.state, item.subject, *rows[item]]
            plans: list[str] = []
            conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
            conn.execute("BEGIN")
            conn.execute("LOAD 'auto_explain'")
            for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_level = notice"):
                conn.execute(f"SET LOCAL auto_explain.{setting}")
            payload = orjson.dumps(
                {
                    "doc_rows": [],
                    "absent_keys": [[absent.state, absent.subject]],
                    "claim_keys": [[_ODD, "b"]],
                    "share_keys": [share],
                    "lock_keys": [lock],
                }
            ).decode()
            (seq,) = conn.execute(
                "SELECT stateflow_commit(%s::json, '', '\\x'::bytea, 0, NULL, NULL, NULL)", (payload,)
            ).fetchone() or (None,)
            assert seq is not None  # every check passed
            conn.execute(
                "SELECT stateflow_lock_rows(true, %s::text[], %s::text[])", ([item.state], [item.subject])
            )
            doc_row = [rows[item][0], 3, "[]", None, 3, 1, 0, 0, 0, 1]
            conn.execute(
                "SELECT stateflow_write_rows(%s, %s::json, NULL, NULL, NULL)",
                (seq, orjson.dumps({"doc_rows": [doc_row]}).decode()),
            )
            conn.execute("ROLLBACK")
            nested = [p for p in plans if "documents" in p or "applied_ops" in p]
            # the absence check, the claim check, the shared and locked rows, the group's lock and
            # the locked path's document row: each through its table's index
            assert len(nested) >= 6, plans
            assert not [p for p in nested if "Seq Scan" in p], nested
            # a declined check writes nothing, and a commit after it passes
            moved = [*share[:3], share[3] + 1]
            declined = orjson.dumps({"doc_rows": [], "share_keys": [moved], "lock_keys": [lock]}).decode()
            (none,) = conn.execute(
                "SELECT stateflow_commit(%s::json, '', '\\x'::bytea, 0, NULL, NULL, NULL)", (declined,)
            ).fetchone() or (0,)
            assert none is None
        store.update([item], lambda d: compute(d, 3), {}, shared=[declared, absent], optimistic=True)
        assert store.get(item).body == {"v": 3} and store.get(item).revision == 3


_WHOLE_EDITS_VERSION = 27


def _whole_body(body: dict[str, Any]) -> Any:
    def build(shared: dict[DocKey, Any], current: dict[str, Any] | None) -> Whole:
        return Whole(body, [[]])

    return build


def test_a_schema_26_store_upgrades_to_27_and_builds_a_new_documents_change_from_its_members(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 27 has PostgreSQL's write functions build a new document's change — the whole
    body set — from the member rows the commit inserts, where the client marks it (the body sent
    once); SQLite only records the version. After the upgrade, on both write paths — the
    optimistic commit (``write_whole``: ``stateflow_commit``) and the locked path (``commit``:
    ``stateflow_write_rows``) — documents are written whole where they had no body, with awkward
    bytes: plain member names (marked), a name that needs escapes, a member held as a tree; then
    a member is added to a present one (edits that are not the whole body). On PostgreSQL each
    payload's document row (column 11) is marked exactly for the plain new documents, whose edits
    then travel as NULL; the others carry their edits as planned. Every stored change is the very
    bytes the client planned — what an unmarked write sends and stores — and every document reads
    back at each revision; the functions keep their plans without sequential scans."""
    sent: list[tuple[WritePlan, tuple[Any, ...]]] = []  # each document row a payload carried
    rows = postgres._rows

    def carried(plans: Sequence[WritePlan]) -> Any:  # (either write path's payload)
        fields, beside = rows(plans)
        # its inline edits beside it since version 29: put back in the row's column 4
        edits = bytea_elements(beside[2]) or [None] * len(plans)
        doc_rows = [(*r[:3], e, *r[4:]) for r, e in zip(fields["doc_rows"], edits, strict=True)]
        sent.extend(zip(plans, doc_rows, strict=True))
        return fields, beside

    monkeypatch.setattr(postgres, "_rows", carried)
    monkeypatch.setattr(postgres, "fast_values", lambda *args: None)  # (every commit through the function)
    with _upgraded(_WHOLE_EDITS_VERSION - 1, backend, tmp_path) as store:
        guard = DocKey("_guard", "g")
        store.commit([Write.between(guard, None, {"v": 1})])
        store.read([guard])
        new: dict[str, dict[str, Any]] = {
            "plain": {"saved": {"s": 'q"\\ \u00fc \U0001f600 \x00'}, "\u00fcn": [1], "n": None},
            "odd": {_ODD: 1, "n": "v"},  # a name to_json escapes: not marked
            "tree": {"big": ["x" * 1024] * (TREE_MIN // 1024), "n": 1},  # held as a tree
        }
        history: dict[DocKey, list[Any]] = {}  # each document's bodies by revision
        payload: dict[tuple[DocKey, int], tuple[WritePlan, tuple[Any, ...]]] = {}

        def write(key: DocKey, body: dict[str, Any], path: str) -> None:
            bodies = history.setdefault(key, [None])
            sent.clear()
            if path == "optimistic":
                assert store.write_whole(key, _whole_body(body), {"by": "t"}, shared=[guard])
            else:
                store.commit([Write.between(key, bodies[-1], body)])
            bodies.append(body)
            if isinstance(store, PostgresStore):
                ((plan, row),) = sent
                assert plan.revision == len(bodies) - 1
                payload[key, plan.revision] = plan, row

        for path in ("optimistic", "locked"):
            for name, body in new.items():
                write(DocKey("items", f'["a","b","{path}","{name}"]'), body, path)
            grown = dict(new["plain"], added={"m": [1, 2]})  # a member added: its edits alone
            write(DocKey("items", f'["a","b","{path}","plain"]'), grown, path)
        with store._read_tx() as tx:
            stored = {
                (key, revision): tx.one(
                    "SELECT c.edits FROM changes c JOIN documents d ON d.doc_id = c.doc_id "
                    "WHERE d.state = ? AND d.subject = ? AND c.revision = ?",
                    (key.state, key.subject, revision),
                )
                for key, bodies in history.items()
                for revision in range(1, len(bodies))
            }
        for (key, revision), found in stored.items():
            assert found is not None
            edits = None if found[0] is None else bytes(found[0])
            body = history[key][revision]
            if revision == 1:  # the whole body set (the tree's in rows of its own)
                whole = b'[["",[[[],' + orjson.dumps(body) + b"]]]]"
                assert edits == (None if "tree" in key.subject else whole), key
            if (key, revision) not in payload:
                continue  # (SQLite: no payload)
            plan, row = payload[key, revision]
            marked = revision == 1 and key.subject.endswith('plain"]')
            assert row[10] == int(marked), (key, revision)
            assert row[3] == (None if marked else plan.inline), (key, revision)
            assert edits == plan.inline, (key, revision)  # as an unmarked write stores them
            if "tree" in key.subject:
                assert plan.inline is None and plan.inserts[0][7] is not None
            else:  # each reached the check: inserts with inline edits
                assert plan.inserts and plan.inline is not None, (key, revision)
        assert len(payload) == (8 if isinstance(store, PostgresStore) else 0)
        for key, bodies in history.items():
            for revision, body in enumerate(bodies):
                assert store.read_at(key, revision=revision).body == body, (key, revision)
            assert store.get(key).body == bodies[-1]
        if isinstance(store, SqliteStore):
            return
        for f, source in _write_function_sources(store):
            assert "doc_rows[i][11] = '1'" in source, f


_CREATED_BY_INSERT_VERSION = 28


def _race(
    backend: str, keys: list[DocKey], rounds: int, edit: Callable[[int, int, dict[DocKey, Any]], list[Write]]
) -> None:
    """Four writers, each on a store of its own, run ``rounds`` optimistic updates of ``keys``
    at once; ``edit(n, round, documents)`` gives writer ``n``'s writes."""

    def writer(n: int) -> None:
        w = open_store(backend)
        try:
            for r in range(rounds):

                def turn(d: dict[DocKey, Any], r: int = r) -> tuple[list[Write], None]:
                    return edit(n, r, d), None

                w.update(keys, turn, optimistic=True)
        finally:
            w.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _increment(n: int, r: int, d: dict[DocKey, Any]) -> list[Write]:
    """Writer ``n``'s turn of a race: each document's ``n`` one up, and the writer's mark."""
    return [
        Write.between(k, doc.body, {"n": (doc.body or {"n": 0})["n"] + 1, f"w{n}": 1}) for k, doc in d.items()
    ]


def _race_and_purge(store: Any, backend: str, purged: str) -> dict[Any, int]:
    """Four writers race to create and count up the same four documents, then the state
    ``purged`` is purged: every stored counter equals a recount (returned), ``purged``'s all 0."""
    racing = [DocKey("race", f'["agent","x","k","r{i}"]') for i in range(4)]
    _race(backend, racing, 3, _increment)
    assert [(store.get(k).body or {}).get("n") for k in racing] == [12] * 4
    assert store.purge(purged) > 0
    with store._read_tx() as tx:
        stored, recounted = store.recount(tx)
    assert stored == recounted
    assert all(n == 0 for k, n in stored.items() if k[0] == purged)
    return dict(stored)


def test_a_schema_27_store_upgrades_to_28_and_creates_new_documents_without_locking_them_again(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 28 has PostgreSQL's ``stateflow_commit`` check that it created every new
    document's row by its insert's row count — the client sends no row locks for them — instead
    of looking each up again to lock it, and both write functions unpack the payload onto a
    record of no rows (SQLite only records the version). After the upgrade: a commit creating
    documents carries ``new_keys`` and no ``lock_keys``; one whose row another writer created
    meanwhile declines (NULL, nothing of it written) and lands through the locked path on that
    row; writers racing to create the same documents, members added and dropped, a document
    deleted and written again and a purge leave the counters equal to a recount, and the same
    deterministic writes leave the same counters under version 27's functions (put back) as
    under version 28's."""
    sent: list[dict[str, Any]] = []  # each optimistic payload's fields
    answers: list[int | None] = []  # each commit sent alone: its seq, or None (declined)
    payload, alone = postgres._payload, PostgresStore._send_alone

    def carried(fields: dict[str, Any]) -> str:
        sent.append(fields)
        return payload(fields)

    def answered(self: PostgresStore, params: Sequence[Any]) -> int | None:
        answers.append(alone(self, params))
        return answers[-1]

    monkeypatch.setattr(postgres, "_payload", carried)
    monkeypatch.setattr(PostgresStore, "_send_alone", answered)
    monkeypatch.setattr(postgres, "fast_values", lambda *args: None)  # (every commit through the function)
    with _upgraded(_CREATED_BY_INSERT_VERSION - 1, backend, tmp_path) as store:
        pg = isinstance(store, PostgresStore)
        # a commit creating documents: created by the function, not locked again
        sent.clear()
        created = [DocKey("made", f'["agent","x","k","{_ODD}{i}"]') for i in range(2)]
        store.update(
            created, lambda d: ([Write.between(k, None, {"v": _ODD}) for k in created], None), optimistic=True
        )
        assert [bool(f.get("new_keys")) for f in sent] == ([True] if pg else [])
        assert all("lock_keys" not in f for f in sent if f.get("new_keys"))
        # a row created meanwhile by another writer: declined, then written on that row
        raced = DocKey("made", '["agent","x","k","raced"]')
        other = open_store(backend)
        seen: list[Any] = []

        def compute(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
            if not seen:
                other.commit([Write.between(raced, None, {"by": "other"})])
            seen.append(docs[raced].body)
            return [Write.between(raced, docs[raced].body, {"by": "us", "saw": docs[raced].body})], None

        answers.clear()
        try:
            store.update([raced], compute, optimistic=True)
        finally:
            other.close()
        assert seen[0] is None and seen[-1] == {"by": "other"}
        assert answers[:1] == ([None] if pg else [])  # the function declined: nothing written
        ours = {"by": "us", "saw": {"by": "other"}}
        assert store.get(raced).body == ours
        assert [store.read_at(raced, revision=r).body for r in (1, 2)] == [{"by": "other"}, ours]
        with store._read_tx() as tx:  # one row, its two changes: the declined commit wrote none
            assert tx.all(
                "SELECT c.revision FROM changes c JOIN documents d ON d.doc_id = c.doc_id "
                "WHERE d.state = ? AND d.subject = ? ORDER BY c.revision",
                (raced.state, raced.subject),
            ) == [(1,), (2,)]
        # the same deterministic writes under version 27's functions and version 28's
        counts = {}
        for state, version in (("old", 27), ("new", 28)):
            if pg:
                with store._write_tx() as tx:
                    for statement in statements(POSTGRES[version]):
                        tx.run(statement)
            _counted_writes(store, state)
            counts[state] = _member_counts(store, state)
        assert counts["new"] == counts["old"] and counts["new"]
        # writers racing to create the same documents, then a purge of another state
        _race_and_purge(store, backend, "old")
        if not pg:
            return
        for f, source in _write_function_sources(store):
            assert "json_populate_record('(,,,,,,,,,,,,)'::stateflow_rows, p)" in source, f
            assert ("GET DIAGNOSTICS created = ROW_COUNT" in source) == f.startswith("stateflow_commit"), f


_BYTES_BESIDE_VERSION = 29


def test_a_schema_28_store_upgrades_to_29_and_sends_bodies_and_edits_beside_the_payload(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 29 has PostgreSQL's write functions take each inserted and rewritten member's
    body and each change's inline edits from three ``bytea[]`` parameters beside the payload,
    sent in binary (SQLite only records the version). After the upgrade, on both write paths
    (the optimistic commit, ``stateflow_commit``, and the locked path, ``stateflow_write_rows``):
    documents created (awkward bytes: quotes, backslashes, a NUL, non-ASCII), members rewritten,
    added and dropped, a member held as a tree, a document deleted and written again — every
    payload carries no body and no inline edits, the arrays beside it carry exactly the planned
    bytes in row order, and every stored member body and change is those very bytes (each
    document reads back at every revision); writers racing on the same documents, the same writes
    as the counters' tests make and a purge leave every counter equal to a recount; the functions
    keep their plans without sequential scans."""
    sent: list[tuple[list[WritePlan], dict[str, Any], list[Any]]] = []  # each payload and its arrays
    rows = postgres._rows

    def carried(plans: Sequence[WritePlan]) -> tuple[dict[str, Any], list[Any]]:
        fields, beside = rows(plans)
        sent.append((list(plans), fields, beside))
        return fields, beside

    monkeypatch.setattr(postgres, "_rows", carried)
    monkeypatch.setattr(postgres, "fast_values", lambda *args: None)  # (every commit through the function)
    with _upgraded(_BYTES_BESIDE_VERSION - 1, backend, tmp_path) as store:
        pg = isinstance(store, PostgresStore)
        history: dict[DocKey, list[Any]] = {}
        big = ["x" * 1024] * (TREE_MIN // 1024)
        bodies = [
            {"saved": {"s": 'q"\\ \u00fc \U0001f600 \x00'}, _ODD: 1, "n": None},  # created
            {"saved": {"s": 'x\\"y'}, _ODD: 1, "n": None, "added": [1]},  # rewritten, added
            {"added": [1, 2], "big": big},  # dropped, rewritten, a tree
            None,  # deleted
            {"again": "\\u0000 \u00e9", "n": 2},  # written again
        ]
        updated = 0  # member rows rewritten (their bodies through p_upd)
        for path in ("optimistic", "locked"):
            key = DocKey("items", f'["a","b","{path}","{_ODD}"]')
            for body in bodies:
                before = history.setdefault(key, [None])[-1]
                if path == "optimistic":

                    def compute(
                        d: dict[DocKey, Any], k: DocKey = key, b: Any = body
                    ) -> tuple[list[Write], None]:
                        return [Write.between(k, d[k].body, b)], None

                    store.update([key], compute, optimistic=True)
                else:
                    store.commit([Write.between(key, before, body)])
                history[key].append(body)
                if pg:  # each member row written by this write holds the very bytes sent
                    ((plans, _, _),) = sent[-1:]
                    with store._read_tx() as tx:
                        found = {
                            (d, n): None if b is None else bytes(b)
                            for d, n, b in tx.all("SELECT doc_id, name, body FROM members")
                        }
                    written = [(i[0], i[1], i[6]) for p in plans for i in p.inserts]
                    written += [(u[5], u[6], u[0]) for p in plans for u in p.updates]
                    assert written or body is None
                    for d, n, b in written:
                        assert found[d, n] == b, (d, n)
                    updated += sum(len(p.updates) for p in plans)
        for key, revisions in history.items():
            for revision, body in enumerate(revisions):
                assert store.read_at(key, revision=revision).body == body, (key, revision)
            assert store.get(key).body == revisions[-1]
        if pg:
            planned_edits: dict[tuple[int, int], bytes | None] = {}
            for plans, fields, (ins, upd, edits) in sent:
                inserts = [i for p in plans for i in p.inserts]
                updates = [u for p in plans for u in p.updates]
                assert all(r[6] is None for r in fields.get("ins_rows", []))
                assert all(r[0] is None for r in fields.get("upd_rows", []))
                assert all(r[3] is None for r in fields["doc_rows"])
                assert bytea_elements(ins) == ([i[6] for i in inserts] or None)
                assert bytea_elements(upd) == ([u[0] for u in updates] or None)
                inline = [None if r[10] else p.inline for p, r in zip(plans, fields["doc_rows"], strict=True)]
                assert bytea_elements(edits) == (inline if any(e is not None for e in inline) else None)
                for p in plans:
                    planned_edits[p.doc_id, p.revision] = p.inline
            assert updated >= 4 and any(e for _, _, (_, _, e) in sent if e)
            with store._read_tx() as tx:
                changes = tx.all("SELECT doc_id, revision, edits FROM changes")
            checked = 0
            for d, r, e in changes:
                if planned_edits.get((d, r)) is not None:
                    assert bytes(e) == planned_edits[d, r], (d, r)
                    checked += 1
            assert checked >= 6
        # the counters: the same writes as the counters' tests, writers racing, a purge
        _counted_writes(store, "counted")
        stored_counts = _race_and_purge(store, backend, "counted")
        assert any(n for k, n in stored_counts.items() if k[0] == "race")
        if not pg:
            return
        for f, source in _write_function_sources(store):
            assert "p_ins[i]" in source and "SET body = p_upd[i]" in source, f
            assert "doc_edits := p_edits[i];" in source and "w.ins_rows[j][7]" not in source, f


_KIND_BY_LIKE_VERSION = 30
_KIND_PATTERN = r'^\["(?:[^"\\]|\\.)*","(?:[^"\\]|\\.)*","([^"\\]*)","(?:[^"\\]|\\.)*"\]$'
"""The subject pattern ``stateflow_subject_kind`` answers for (version 13's, kind captured)."""


def test_a_schema_29_store_upgrades_to_30_and_tells_subject_kinds_the_same(
    backend: str, tmp_path: Path
) -> None:
    """Version 30 has PostgreSQL's ``stateflow_subject_kind`` tell a subject without a backslash
    by one ``LIKE`` and a count of its quotes (SQLite only records the version). After the
    upgrade it answers as the pattern for every subject built of awkward parts — empty, a lone
    comma (which forms a '","' with its neighbours' quotes), quotes, escapes, non-ASCII — and
    random ones; and the kind counters of new documents, deleted ones, ones written again,
    writers racing to create and delete the same documents and a purge equal the kinds
    written, and a recount."""
    with _upgraded(_KIND_BY_LIKE_VERSION - 1, backend, tmp_path) as store:
        pg = isinstance(store, PostgresStore)
        if pg:
            parts = [
                "",
                ",",
                "a",
                ",,",
                ',"',
                '","',
                '\\"',
                "\\\\",
                "\\",
                '"',
                "é😀",
                '["',
                '"]',
                "x,y",
                _ODD,
            ]
            subjects = ['["' + '","'.join(p) + '"]' for p in itertools.product(parts, repeat=4)]
            rnd = random.Random(30)
            alphabet = '[]",a\\é'
            subjects += [
                "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 16))) for _ in range(3000)
            ]
            subjects += [
                '["' + "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 14))) + '"]'
                for _ in range(3000)
            ]
            with store._read_tx() as tx:
                rows = tx.all(
                    "SELECT s, stateflow_subject_kind(s), coalesce((regexp_match(s, ?))[1], '') "
                    "FROM unnest(?::text[]) AS s",
                    (_KIND_PATTERN, subjects),
                )
                source = tx.one("SELECT pg_get_functiondef('stateflow_subject_kind(text)'::regprocedure)")
            assert [r for r in rows if r[1] != r[2]] == []
            assert sum(1 for r in rows if r[1]) > 1000  # most built subjects match: kinds told
            assert source is not None and "~~" in source[0]  # (LIKE, as the server prints it)
        # the kind counters through every write that moves them
        kinds = ["x", "y", "a,b", ",", "", "é😀", 'q"t', "\\"]
        keys = [DocKey("kinds", encode_subject("agent", ",", kind, f"k{i}")) for i, kind in enumerate(kinds)]
        store.commit([Write.between(k, None, {"n": 1}) for k in keys])
        store.commit([Write.between(keys[0], {"n": 1}, None), Write.between(keys[3], {"n": 1}, None)])
        store.commit([Write.between(keys[0], None, {"n": 2})])
        # a kind holding a quote or a backslash is escaped in its subject: PostgreSQL's pattern
        # counts it under None with the empty kind, SQLite's decoded subject under its own name
        expected: dict[str | None, int] = {"x": 1, "y": 1, "a,b": 1, "é😀": 1}
        expected.update({None: 3} if pg else {None: 1, 'q"t': 1, "\\": 1})
        assert store.kind_counts("kinds") == expected
        racing = [DocKey("race", encode_subject("agent", "a", f"r{i % 2}", f"k{i}")) for i in range(4)]

        def flip(n: int, r: int, d: dict[DocKey, Any]) -> list[Write]:
            # deleted on odd turns where present, written again on the others
            delete = (r + n) % 2
            return [
                Write.between(k, d[k].body, None if d[k].body is not None and delete else {"w": n, "r": r})
                for k in racing
            ]

        _race(backend, racing, 4, flip)
        present = sum(1 for k in racing if store.get(k).body is not None)
        assert sum(store.kind_counts("race").values()) == present
        assert store.purge("kinds") > 0
        assert store.kind_counts("kinds") == {}
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
        assert stored == recounted


_SCALAR_CONTAINMENT_VERSION = 31


def _searched(i: int) -> dict[str, Any]:
    """A document holding every kind of member a search meets: scalars common and rare, ones too
    long for the value index, ones jsonb cannot hold (an escaped NUL), objects and arrays."""
    return {
        "title": f"t{i % 5}",
        "n": i,
        "f": i / 4,
        "flag": i % 3 == 0,
        "none": None if i % 2 else "x",
        "tags": {"a": i % 7, "b": [f"x{i % 3}", i % 2]},
        "list": [i % 4, "s"],
        "nul": "a\u0000b" if i % 10 == 0 else "ab",
        "long": "L" * 300 + str(i % 2),
        "deep": {"nul": "a\u0000" if i % 4 == 0 else "b", "k": [{"v": i % 6}]},
    }


_SCALAR_CONTAINS = (
    "SELECT m.doc_id FROM members m WHERE m.name = ? AND "
    f"({postgres._SCALAR_INDEXABLE}) AND stateflow_jsonb(m.scalar) @> ?::jsonb"
)
"""PostgreSQL: a scalar pattern's containment check, as the store's search spells it."""


def _member_indexes(store: SqlStore) -> dict[str, str]:
    """PostgreSQL: the indexes on ``members`` by name, with their definitions."""
    with store._read_tx() as tx:
        return dict(
            tx.all(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = 'members'"
            )
        )


def _rewrite_and_delete_some(store: SqlStore, bodies: dict[str, dict[str, Any]]) -> None:
    """Two of the ``found`` documents rewritten (members changed, added and dropped) and one
    deleted, ``bodies`` kept as they now are."""
    for k in ("s003", "s050"):
        new = dict(bodies[k], title="t9", tags={"a": 99}, extra=[1, {"z": "q"}])
        del new["list"]
        store.commit([Write.between(DocKey("found", k), bodies[k], new)])
        bodies[k] = new
    store.commit([Write.between(DocKey("found", "s004"), bodies.pop("s004"), None)])


def _searches_find_what_contains(
    store: SqlStore, bodies: dict[str, dict[str, Any]], filters: list[dict[str, Any]]
) -> None:
    """Every filter's search of ``found`` answers the documents of ``bodies`` that contain it
    (checked in Python), and so does a search of the fixture's ``notes`` by each member of one."""
    for f in filters:
        want = sorted(k for k, b in bodies.items() if json_contains(b, f))
        assert [x.key.subject for x in store.search("found", f)] == want, f
    notes = {
        d["subject"]: d["revisions"][-1]
        for d in _expected()["documents"].values()
        if d["state"] == "notes" and d["revisions"][-1] is not None
    }
    for name, value in next(iter(notes.values())).items():
        want = sorted(k for k, b in notes.items() if json_contains(b, {name: value}))
        assert [x.key.subject for x in store.search("notes", {name: value})] == want, name


def test_a_schema_30_store_upgrades_to_31_and_searches_the_same_with_scalars_alone_in_the_containment_index(
    backend: str, tmp_path: Path
) -> None:
    """Version 31 keeps only scalar members in PostgreSQL's containment index ``members_json``
    (only a scalar pattern's check can read it; SQLite never had the index and only records the
    version). After the upgrade the index's predicate leaves objects and arrays out, a scalar's
    check still reads it, and every search — scalars common, rare, long or holding a NUL, objects,
    arrays, several members at once — over the fixture's documents and new ones (written,
    rewritten and deleted after the upgrade) answers as containment checked in Python over every
    document."""
    with _upgraded(_SCALAR_CONTAINMENT_VERSION - 1, backend, tmp_path) as store:
        if isinstance(store, PostgresStore):
            indexes = _member_indexes(store)
            assert sorted(indexes) == ["members_by_value", "members_json", "members_pkey"]
            # (since version 35 told by the generated column ``scalar``: NULL for objects and arrays)
            assert "WHERE (scalar IS NOT NULL)" in indexes["members_json"]
            assert "members_json" in _plan(store, _SCALAR_CONTAINS, ("title", '"t1"'))
            with store._read_tx() as tx:
                objects = tx.one(
                    f"SELECT COUNT(*) FROM members m WHERE {INDEXABLE} "
                    "AND substring(m.body FROM 1 FOR 1) IN ('\\x5b', '\\x7b')"
                )
            assert objects is not None and objects[0] > 0  # members the index now leaves out
        bodies = {f"s{i:03d}": _searched(i) for i in range(120)}
        store.commit([Write.between(DocKey("found", k), None, b) for k, b in bodies.items()])
        _rewrite_and_delete_some(store, bodies)
        filters: list[dict[str, Any]] = [
            {"title": "t1"},
            {"title": "t9"},
            {"n": 17},
            {"n": 4},
            {"f": 2.5},
            {"flag": True},
            {"none": None},
            {"tags": {"a": 3}},
            {"tags": {"b": ["x1"]}},
            {"tags": {"b": [1, "x2"]}},
            {"tags": {"a": 99}},
            {"list": [3]},
            {"list": 3},
            {"nul": "a\u0000b"},
            {"nul": "ab"},
            {"long": "L" * 300 + "1"},
            {"deep": {"nul": "a\u0000"}},
            {"deep": {"k": [{"v": 5}]}},
            {"extra": [{"z": "q"}]},
            {"title": "t2", "tags": {"a": 2}, "flag": False},
            {"n": 999},
        ]
        _searches_find_what_contains(store, bodies, filters)
        assert [x.key.subject for x in store.search("found", {"title": "t1"}, limit=7)] == sorted(
            k for k, b in bodies.items() if b["title"] == "t1"
        )[:7]


_MEMBERS_ONCE_VERSION = 32


def test_a_schema_31_store_upgrades_to_32_and_a_commit_of_many_new_documents_keeps_each_ones_change(
    backend: str, tmp_path: Path
) -> None:
    """Version 32 has PostgreSQL's write functions build the changes of a commit's new
    documents in one pass over its inserted member rows (a cursor), where version 27's loop
    scanned every inserted row for each new document; SQLite only records the version. After
    the upgrade, one commit of 150 new documents — with, between them, a document written
    again that gains members (inserted rows of a document whose change is not built from them,
    which the cursor passes over) — leaves each new document's first revision, rebuilt from its
    change once the document is written again, equal to what was written, and the document written again its own."""
    with _upgraded(_MEMBERS_ONCE_VERSION - 1, backend, tmp_path) as store:
        if isinstance(store, PostgresStore):
            with store._pool.connection() as conn:
                for f in WRITE_FUNCTIONS[:2]:  # (stateflow_commit, stateflow_write_rows)
                    source = _function_column(conn, f, "prosrc", "")
                    assert "at_ins := at_ins + 1;" in source and "FOR j IN" not in source, f
                    # (CREATE OR REPLACE dropped it: given again)
                    assert "enable_seqscan=off" in _function_column(conn, f, "proconfig", []), f
        middle = DocKey("many", "n074z")  # (a commit writes its documents in key order)
        before: dict[str, Any] = {"title": "old", "n": -1}
        store.commit([Write.between(middle, None, before)])
        again = dict(before, gained={"x": [1, 2]}, more="text")
        bodies = {
            f"n{i:03d}": {"title": f"t{i}", "n": i, "tags": {"a": i, "b": ["x", i]}} for i in range(150)
        }
        writes = [Write.between(DocKey("many", k), None, b) for k, b in bodies.items()]
        store.commit([*writes, Write.between(middle, before, again)])
        # each written again: its first revision is then rebuilt from its first change
        store.commit([Write.between(DocKey("many", k), b, dict(b, title="x")) for k, b in bodies.items()])
        for k, body in bodies.items():
            assert store.read_at(DocKey("many", k), revision=1).body == body
        assert store.get(middle).body == again
        assert store.read_at(middle, revision=2).body == again
        assert store.read_at(middle, revision=1).body == before


_ROWS_EXPANDED_VERSION = 33


def test_a_schema_32_store_upgrades_to_33_and_commits_many_documents_through_expanded_rows(
    backend: str, tmp_path: Path
) -> None:
    """Version 33 has PostgreSQL's locked write function read the payload's rows through array
    variables of its own (held expanded: a subscript finds its element by index) and plan
    generically from its first call, and both write functions leave ``present`` out of a
    document's update where it does not move; SQLite only records the version. A subscript of
    the payload's record field, or of the flat constant a custom plan folds a variable into,
    walked the array from its start: a commit of n documents cost ~n² (2,000 new documents 5 s,
    0.5 s now: the journal's table). After the upgrade the functions hold the copies and the
    settings; on a fresh store's first commits, one commit of 2,000 new documents and one
    writing them all again read back, each document's first revision too; three deleted, one
    written again, the counters — documents whose row is updated without ``present`` among
    them — equal a recount."""
    with _upgraded(_ROWS_EXPANDED_VERSION - 1, backend, tmp_path) as store:
        if isinstance(store, PostgresStore):
            with store._pool.connection() as conn:
                found = {
                    f.split("(")[0]: (
                        _function_column(conn, f, "prosrc", ""),
                        sorted(_function_column(conn, f, "proconfig", [])),
                    )
                    for f in WRITE_FUNCTIONS[:2]
                }
            source, config = found["stateflow_write_rows"]
            assert config == ["enable_seqscan=off", "plan_cache_mode=force_generic_plan"]
            assert "ins_rows TEXT[] := w.ins_rows;" in source and "w.ins_rows[" not in source
            assert "IF doc_rows[i][6] IS NULL THEN" in source
            source, config = found["stateflow_commit"]
            assert config == ["enable_seqscan=off"] and "IF w.doc_rows[i][6] IS NULL THEN" in source
        bodies = {
            DocKey("bulk", f"d{i:05d}"): {"t": f"t{i}", "n": i, "o": {"a": i, "b": ["x", i]}}
            for i in range(2000)
        }
        store.commit([Write.between(k, None, b) for k, b in bodies.items()])
        store.commit([Write.between(k, b, dict(b, t="again")) for k, b in bodies.items()])
        for k, b in bodies.items():
            assert store.get(k).body == dict(b, t="again") and store.read_at(k, revision=1).body == b
        gone = list(bodies)[:3]
        store.commit([Write.between(k, store.get(k).body, None) for k in gone])
        store.commit([Write.between(gone[0], None, {"t": "back"})])
        assert [store.get(k).body for k in gone] == [{"t": "back"}, None, None]
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
        assert stored == recounted and stored[("bulk", "member", "o")] == 2000 - 3


_FEWER_SET_UPS_VERSION = 34
_RARE_FIELDS = {"claim_keys", "node_rows", "del_rows", "gone", "ed_rows", "snap_rows"}
"""The payload's fields version 34's ``stateflow_commit`` tells by one flag."""


def test_a_schema_33_store_upgrades_to_34_and_commits_and_counts_the_same_with_fewer_set_ups(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 34 has PostgreSQL's ``stateflow_commit`` tell the payload's rarely sent fields by
    one flag and cast a written member's and a document's key once, and the kinds' counter's
    trigger on ``present`` gate a ``present`` that does not move in its function instead of by
    a ``WHEN``; SQLite only records the version. After the upgrade, optimistic commits (each one
    ``stateflow_commit``) that send every one of those fields — an op id claimed, members
    dropped, a member held as a tree, a change's edits apart, snapshots, a document deleted and
    written again — and others that send none of them read back at every revision; a claim taken
    again is refused and writes nothing; an update setting ``present`` to what it is, the
    counters' writes, writers racing and a purge leave every counter equal to a recount."""
    sent: list[set[str]] = []  # the fields of each payload stateflow_commit took
    alone = postgres._commit_alone

    def recorded(conn: Any, params: Sequence[Any]) -> int | None:
        sent.append(set(orjson.loads(params[0])))
        return alone(conn, params)

    monkeypatch.setattr(postgres, "_commit_alone", recorded)
    monkeypatch.setattr(postgres, "fast_values", lambda *args: None)  # (every commit through the function)
    with _upgraded(_FEWER_SET_UPS_VERSION - 1, backend, tmp_path) as store:
        pg = isinstance(store, PostgresStore)
        if isinstance(store, PostgresStore):
            with store._pool.connection() as conn:
                source = _function_column(conn, WRITE_FUNCTIONS[0], "prosrc", "")
                config = _function_column(conn, WRITE_FUNCTIONS[0], "proconfig", [])
                gated = conn.execute(
                    "SELECT tgqual IS NULL FROM pg_trigger "
                    "WHERE tgrelid = 'documents'::regclass AND tgname = 'count_documents_present'"
                ).fetchone()
            assert config == ["enable_seqscan=off"] and source.count("IF rare THEN") == 3
            assert (
                "WHERE doc_id = k_doc AND name = k_subject;" in source
                and "w.upd_rows[i][6]::bigint AND" not in source
            )
            assert gated is None  # (dropped by version 36: each writer counts what it writes)
        key = DocKey("items", '["a","b","rare","d"]')
        history: list[Any] = [None]

        def write(body: Any, claims: Sequence[tuple[str, str]] = ()) -> None:
            def compute(d: dict[DocKey, Any]) -> tuple[list[Write], None]:
                return [Write.between(key, d[key].body, body)], None

            store.update([key], compute, optimistic=True, claims=claims)
            history.append(body)

        big = [f"{i:04d}" + "x" * 1020 for i in range(TREE_MIN // 1024)]
        write({"a": 1, "b": [1], "c": {"d": 1}})
        write({"a": 2, "b": [2], "c": {"d": 2}}, claims=[("scope", "op-1")])  # a claim
        write({"a": 3, "big": big})  # members dropped, a tree
        for i in range(24):  # its members' edits apart, snapshots
            write({"a": 4 + i, "big": [f"{i}" * 1024, *big[1:]], "s": "y" * 3000 * (i % 2)})
        write(None)  # deleted
        write({"again": "\\u0000", "n": 1})  # written again
        with pytest.raises(OpIdTaken):  # (refused: nothing written, nothing added to history)
            write({"taken": True}, claims=[("scope", "op-1")])
        for revision, body in enumerate(history):
            assert store.read_at(key, revision=revision).body == body, revision
        assert store.get(key).body == history[-1]
        if pg:
            assert set().union(*sent) >= _RARE_FIELDS  # each rare field went through the function
            assert any(not fields & _RARE_FIELDS for fields in sent)
            with store._write_tx() as tx:  # present set to what it is: counts nothing
                tx.run("UPDATE documents SET present = present WHERE state = 'items'")
        _counted_writes(store, "counted")
        stored = _race_and_purge(store, backend, "counted")
        assert stored[("items", "kind", "rare")] == 1


_SCALAR_COLUMN_VERSION = 35


def _indexed_as_before(store: SqlStore) -> tuple[int, ...]:
    """PostgreSQL: how many members the value index holds by its predicate before version 35
    and by its own, the same for the containment index, and how many members one of the new
    predicates tells otherwise than the old one, or whose ``scalar`` is not its body."""
    old_value, old_json = POSTGRES_VALUE_WHERE.format(m=""), CONTAINMENT_WHERE.format(m="")
    with store._read_tx() as tx:
        row = tx.one(
            f"SELECT COUNT(*) FILTER (WHERE {old_value}), "
            f"COUNT(*) FILTER (WHERE {POSTGRES_SCALAR_VALUE_WHERE.format(m='')}), "
            f"COUNT(*) FILTER (WHERE {old_json}), COUNT(*) FILTER (WHERE scalar IS NOT NULL), "
            f"COUNT(*) FILTER (WHERE ({old_value}) <> coalesce(octet_length(scalar) <= 1024, false) "
            f"OR ({old_json}) <> (scalar IS NOT NULL) OR scalar <> body) FROM members"
        )
    assert row is not None
    return tuple(int(n) for n in row)


def test_a_schema_34_store_upgrades_to_35_and_rewrites_an_object_member_as_a_hot_update(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 35 has PostgreSQL's value indexes read ``members.scalar`` alone — a generated
    column, a member's body where the member is a scalar jsonb can hold, else NULL — so a commit
    that rewrites an object member (``scalar`` NULL before and after) updates its row as a HOT
    update: no index entry; SQLite only records the version. After the upgrade every member the
    old predicates put in an index is in the new one, a commit rewriting an object member makes
    a HOT update and one rewriting a scalar does not, and every search — scalars common, rare,
    long or holding a NUL, objects, arrays, a member turned from scalar to object and back, held
    as a tree — over the fixture's documents and new ones answers as containment checked in
    Python, through the indexes."""
    updates: list[tuple[int, int]] = []  # (members updated, of them HOT) by each commit
    alone = postgres._commit_alone

    def counted(conn: Any, params: Sequence[Any]) -> int | None:
        if not isinstance(conn, psycopg.Connection):
            return alone(conn, params)
        # the commit statement in a transaction whose counts are read before and after it (a
        # backend's counts also hold its earlier transactions' until it reports them)
        counts = (
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = 'members'::regclass"
        )
        conn.execute("BEGIN")
        try:
            before = conn.execute(counts).fetchone()
            seq = alone(conn, params)
            after = conn.execute(counts).fetchone()
        finally:
            conn.execute("COMMIT")
        assert before is not None and after is not None
        updates.append((after[0] - before[0], after[1] - before[1]))
        return seq

    monkeypatch.setattr(postgres, "_commit_alone", counted)
    with _upgraded(_SCALAR_COLUMN_VERSION - 1, backend, tmp_path) as store:
        pg = isinstance(store, PostgresStore)
        if isinstance(store, PostgresStore):
            indexes = _member_indexes(store)
            held = _indexed_as_before(store)
            assert sorted(indexes) == ["members_by_value", "members_json", "members_pkey"]
            assert all(
                "body" not in indexes[i] and "scalar" in indexes[i]
                for i in ("members_by_value", "members_json")
            )
            assert (
                held is not None and held[0] == held[1] > 0 and held[2] == held[3] > held[0] and held[4] == 0
            )
            match = store._value_match("n", 99)
            assert match is not None
            assert "members_by_value" in _plan(
                store, f"SELECT m.doc_id FROM members m WHERE {match[0]}", tuple(match[1])
            )
            assert "members_json" in _plan(store, _SCALAR_CONTAINS, ("title", '"t1"'))
        bodies = {f"s{i:03d}": _searched(i) for i in range(120)}
        store.commit([Write.between(DocKey("found", k), None, b) for k, b in bodies.items()])
        key = DocKey("found", "s007")

        def rewrite(**members: Any) -> None:
            def compute(d: dict[DocKey, Any]) -> tuple[list[Write], None]:
                return [Write.between(key, d[key].body, dict(d[key].body, **members))], None

            updates.clear()
            store.update([key], compute, optimistic=True)
            bodies[key.subject] = dict(bodies[key.subject], **members)

        rewrite(tags={"a": 5, "b": ["x9"]})  # an object member rewritten: scalar NULL before and after
        assert not pg or updates == [(1, 1)]
        rewrite(title="t8")  # a scalar rewritten: its index entries move
        assert not pg or updates == [(1, 0)]
        rewrite(title={"was": "t8"})  # a scalar turned object, and back
        assert not pg or updates == [(1, 0)]
        assert store.search("found", {"title": "t8"}) == []
        rewrite(title="t8")
        rewrite(big=[f"{i:04d}" + "x" * 1020 for i in range(TREE_MIN // 1024)])  # held as a tree
        rewrite(list={"now": "an object"}, nul="x\u0000y")
        _rewrite_and_delete_some(store, bodies)
        filters: list[dict[str, Any]] = [
            {"title": "t1"},
            {"title": "t8"},
            {"title": "t9"},
            {"title": {"was": "t8"}},
            {"n": 17},
            {"f": 2.5},
            {"flag": True},
            {"none": None},
            {"tags": {"a": 5}},
            {"tags": {"b": ["x9"]}},
            {"tags": {"a": 99}},
            {"list": [3]},
            {"list": {"now": "an object"}},
            {"nul": "a\u0000b"},
            {"nul": "x\u0000y"},
            {"nul": "ab"},
            {"long": "L" * 300 + "1"},
            {"deep": {"k": [{"v": 5}]}},
            {"extra": [{"z": "q"}]},
            {"big": ["0001" + "x" * 1020]},
            {"title": "t2", "tags": {"a": 2}, "flag": False},
            {"n": 999},
        ]
        _searches_find_what_contains(store, bodies, filters)
        assert [x.key.subject for x in store.search("found", {"title": "t8"})] == ["s007"]
        if pg:  # the members written since (a tree, NULs, kinds changed) too
            assert _indexed_as_before(store)[4] == 0


_COUNTED_BY_WRITERS_VERSION = 36


def test_a_schema_35_store_upgrades_to_36_and_its_writers_count_what_the_triggers_counted(
    backend: str, tmp_path: Path
) -> None:
    """Version 36 gives both backends ``count_deltas`` (empty: the counters' rows are kept as
    they are) and has PostgreSQL's writers append their counters' deltas instead of the
    counting triggers on inserts and on ``present`` (dropped; the triggers on deletes append
    deltas too); SQLite keeps its triggers. After the upgrade the counters read what version
    35's rows held, equal to a recount; writes of every kind, writers racing and a purge keep
    them so."""
    _store_at(_COUNTED_BY_WRITERS_VERSION - 1, backend, tmp_path)
    query = "SELECT state, counter, name, n FROM state_counts WHERE n <> 0"
    if backend.startswith("postgresql://"):
        with psycopg.connect(backend) as conn:
            rows = conn.execute(query).fetchall()
    else:
        rows = _sqlite_rows(backend, query)
    before = {(s, c, n): int(k) for s, c, n, k in rows}
    assert before
    store = open_store(backend, auto_migrate=False)
    try:
        assert store.migrate() == (_COUNTED_BY_WRITERS_VERSION - 1, SCHEMA_VERSION)
        _reads_back(store, _expected())
        with store._read_tx() as tx:
            stored, counted = store.recount(tx)
            assert tx.all("SELECT * FROM count_deltas") == []
        assert stored == counted == before
        if isinstance(store, PostgresStore):
            with store._read_tx() as tx:
                triggers = tx.all(
                    "SELECT tgname FROM pg_trigger WHERE tgrelid IN ('documents'::regclass, 'members'::regclass) "
                    "AND NOT tgisinternal ORDER BY 1"
                )
                functions = tx.all("SELECT to_regproc('stateflow_count_members_added')")
            assert [t for (t,) in triggers] == [
                "count_documents_delete",
                "count_members_delete",
                "documents_delete_dependents",
            ]
            assert functions == [(None,)]
        _counted_writes(store, "after")
        _race_and_purge(store, backend, "after")
    finally:
        store.close()


_EDITS_ORD_VERSION = 37


def test_a_schema_36_store_upgrades_to_37_and_its_changes_keep_their_members_order(
    backend: str, tmp_path: Path
) -> None:
    """Version 37 adds ``change_edits.ord``: the rows written before read 0 — in member name
    order, as they did: the fixture reads back as it was — and every write path since
    (PostgreSQL's write functions and server merge replaced) records each change's members in
    the order written, which a read as of a revision gives back."""
    with _upgraded(_EDITS_ORD_VERSION - 1, backend, tmp_path) as store:
        with store._read_tx() as tx:
            assert tx.all("SELECT DISTINCT ord FROM change_edits") == [(0,)]
        writes_keep_member_order(store)


_VERSION_IN_PLANS_VERSION = 38


def test_a_schema_37_store_upgrades_to_38_and_its_writers_fold_the_version_they_check(
    backend: str, tmp_path: Path
) -> None:
    """Version 38 keeps PostgreSQL's schema version also as ``stateflow_schema_version()``'s
    body, which a trigger on ``stateflow_meta`` defines again whenever the version is written:
    after the upgrade it returns the new version, writes land, and a newer version written later
    refuses them. SQLite only records the version."""
    with _upgraded(_VERSION_IN_PLANS_VERSION - 1, backend, tmp_path) as store:
        key = DocKey("notes", "folded")
        store.commit([Write.between(key, None, {"n": 0})])
        for n in range(1, 8):  # (the fast statement planned generically from its sixth run)
            store.update([key], _rewritten(key, {"n": n}), optimistic=True)
        if isinstance(store, PostgresStore):
            with store._read_tx() as tx:
                assert tx.all("SELECT stateflow_schema_version()") == [(str(SCHEMA_VERSION),)]
            with psycopg.connect(backend, autocommit=True) as pg:
                pg.execute("UPDATE stateflow_meta SET value = '99999' WHERE key = 'schema_version'")
                try:
                    with pytest.raises(StoreTooNew, match="schema version 99999"):
                        store.update([key], _rewritten(key, {"n": 8}), optimistic=True)
                finally:
                    pg.execute(
                        "UPDATE stateflow_meta SET value = %s WHERE key = 'schema_version'",
                        (str(SCHEMA_VERSION),),
                    )
        store.update([key], _rewritten(key, {"n": 8}), optimistic=True)
        assert store.get(key).body == {"n": 8} and store.get(key).revision == 9


def _rewritten(key: DocKey, body: dict[str, Any]) -> Callable[[dict[DocKey, Any]], tuple[list[Write], None]]:
    def compute(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].body, body, docs[key].revision)], None

    return compute


_WIDE_COMMITS_VERSION = 39


def test_a_schema_38_store_upgrades_to_39_and_writes_wide_documents_whole(
    backend: str, tmp_path: Path
) -> None:
    """Version 39 has PostgreSQL's ``stateflow_commit`` write more than 64 member rows of a kind
    set-wise: it read each row's fields by subscripts of the payload that walked the array from
    its start, appended each member to a new document's change, and planned the snapshot's copy
    of a new document's members as each against all, so a write of n members cost n² (8,000: 18
    s; 50,000 ran past the 60 s statement timeout, nothing written). A document of 20,000 members
    is now created, rewritten whole and reshaped within the store's statement timeout, with the
    same rows as every write leaves: each revision reads back in its key order, its counters
    count its members. SQLite only records the version."""
    n = 20_000
    with _upgraded(_WIDE_COMMITS_VERSION - 1, backend, tmp_path) as store:
        key = DocKey("notes", "wide")
        first = {f"m{i}": i for i in range(n)}
        second = {f"m{i}": -i for i in range(n)}  # every member rewritten
        third = {**{f"m{i}": -i for i in range(0, n, 2)}, **{f"new{i}": [i] for i in range(500)}}
        store.commit([Write.between(key, None, first, 0)])
        store.update([key], _rewritten(key, second), optimistic=True)
        store.update([key], _rewritten(key, third), optimistic=True)  # members removed and added
        for revision, body in ((1, first), (2, second), (3, third)):
            got = store.read_at(key, revision=revision).body
            assert got == body and list(got or {}) == list(body), revision
        current = store.get(key).body
        assert current == third and list(current or {}) == list(third)
        counts = store.member_counts("notes")
        assert counts["m0"] == 1 and counts["new499"] == 1 and "m1" not in counts
        edits = store.history([key], limit=3)
        assert [c.revision for c in edits] == [3, 2, 1] and all(c.edits for c in edits)


_SCALAR_BY_WRITERS_VERSION = 40


def test_a_schema_39_store_upgrades_to_40_and_every_writer_sets_its_members_scalar(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 40 makes PostgreSQL's ``members.scalar`` a plain column that each writer sets by
    ``stateflow_scalar`` in the statement writing the row (as a stored generated column its
    expression was set up again in every statement writing ``members``); SQLite only records the
    version. The scalars the upgrade kept are what their bodies make them, and after writes by
    every path — the locked path's rows, the fast statements creating and rewriting a document,
    the commit function (a member deleted beside; more than 64 rows at once), the server's merge
    of a memory patch — so is every member's: ``stateflow check`` finds nothing, and searches find
    the scalars written and not the ones replaced. A scalar set wrong by hand is named by the
    check, with its fix."""

    def put(store: SqlStore, key: DocKey, body: Any) -> None:
        def compute(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
            return [Write.between(key, docs[key].body, body, docs[key].revision)], None

        store.update([key], compute, optimistic=True)

    with _upgraded(_SCALAR_BY_WRITERS_VERSION - 1, backend, tmp_path) as store:
        pg = isinstance(store, PostgresStore)
        if pg:
            with store._read_tx() as tx:
                generated = tx.all(
                    "SELECT attgenerated FROM pg_attribute WHERE attrelid = 'members'::regclass "
                    "AND attname = 'scalar'"
                )
                kept = tx.one("SELECT count(*) FROM members WHERE scalar IS NOT NULL")
            assert generated == [("",)] and kept is not None and kept[0] > 0
        assert check_store(store).problems == []
        bodies = {f"s{i:03d}": _searched(i) for i in range(3)}
        store.commit([Write.between(DocKey("found", k), None, b) for k, b in bodies.items()])  # locked path
        s000, s001, s002 = (DocKey("found", f"s00{i}") for i in range(3))
        store.commit([Write.between(s000, bodies["s000"], dict(bodies["s000"], title="t8"))])
        bodies["s000"]["title"] = "t8"
        for key, body in (  # the fast statements: created; a scalar rewritten, made an object, added
            (DocKey("found", "s100"), {"title": "t7", "n": 100}),
            (s001, dict(bodies["s001"], title="t9")),
            (s001, dict(bodies["s001"], title={"was": "t9"}, added=41)),
            (s002, {k: v for k, v in bodies["s002"].items() if k != "n"} | {"title": "t6"}),  # function
        ):
            put(store, key, body)
            bodies[key.subject] = body
        wide = DocKey("found", "s200")  # the commit function's many rows: inserted, then rewritten
        put(store, wide, {f"w{i}": i for i in range(70)})
        put(store, wide, {f"w{i}": -i for i in range(70)})
        bodies["s200"] = {f"w{i}": -i for i in range(70)}
        monkeypatch.setattr(store, "contended", lambda keys: True)  # merged by the server
        view = MemoryView(store, Identity.of("acme", "/scalars", "agent"))
        view.patch_state({"session": {"tactics": {"next": "a"}}})
        view.patch_state({"session": {"tactics": {"next": "b"}}})
        view.patch_state({"session": {"tactics": {"next": "c"}, "strategy": {"goal": "d"}}})
        report = check_store(store)
        assert report.problems == [], report.problems
        for f, want in (
            ({"title": "t8"}, ["s000"]),
            ({"title": "t9"}, []),
            ({"title": {"was": "t9"}}, ["s001"]),
            ({"added": 41}, ["s001"]),
            ({"title": "t6"}, ["s002"]),
            ({"n": 2}, []),
            ({"title": "t7"}, ["s100"]),
            ({"w69": -69}, ["s200"]),
            ({"w69": 69}, []),
        ):
            assert [x.key.subject for x in store.search("found", f)] == want, f
        if pg:
            with psycopg.connect(backend, autocommit=True) as conn:
                doc = conn.execute(
                    "UPDATE members SET scalar = NULL WHERE name = 'title' AND doc_id = "
                    "(SELECT doc_id FROM documents WHERE subject = 's000') RETURNING doc_id"
                ).fetchone()
            assert doc is not None
            report = check_store(store)
            assert report.problems == [
                f"members: member 'title' of document {doc[0]} keeps a scalar its body does not make, so "
                "searches by its value go wrong; set it again: UPDATE members SET scalar = "
                f"stateflow_scalar(body, size) WHERE doc_id = {doc[0]}"
            ]
            assert report.advised == 1


_NODES_SLICED_VERSION = 41


def _tree_member(tag: str) -> dict[str, str]:
    """A member of ~1.2 MiB, stored as a tree of about six hundred nodes."""
    return {f"k{i:05d}{tag}": f"{tag}{i:05d}" * 12 for i in range(15_000)}


def test_a_schema_40_store_upgrades_to_41_and_every_writer_writes_tree_nodes(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 41 has PostgreSQL's two write functions read a commit's tree nodes as two slices
    of its node rows unnested together (each row read by subscript walked the array from its
    start: n² for n nodes, a 20 MB member 69 s, a 50 MB one past the statement timeout); SQLite
    only records the version. After the upgrade the functions read the slices, keep the
    settings they are planned with, and every writer writes what it wrote before: the locked
    path's rows (a tree member created, then changed inside), the commit function (a tree member
    added to a document, a document created with one), the fast statements, the server's merge of
    a memory patch. A store opened afresh reads every revision back from its nodes, and ``stateflow
    check`` finds nothing."""

    def put(store: SqlStore, key: DocKey, body: Any, *, optimistic: bool = True) -> None:
        def compute(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
            return [Write.between(key, docs[key].body, body, docs[key].revision)], None

        store.update([key], compute, optimistic=optimistic)

    a, b, c, d = (DocKey("trees", s) for s in "abcd")
    big = {tag: _tree_member(tag) for tag in "abc"}
    assert all(len(orjson.dumps(v)) > TREE_MIN for v in big.values())
    changed = dict(big["a"], k07500a="inside")
    revisions: dict[DocKey, list[Any]] = {}
    with _upgraded(_NODES_SLICED_VERSION - 1, backend, tmp_path) as store:
        if isinstance(store, PostgresStore):
            from .pg_helpers import assert_node_rows_read_as_slices

            assert_node_rows_read_as_slices(backend)
        store.commit([Write.between(a, None, {"big": big["a"], "n": 1})])  # locked path: write_rows
        put(store, a, {"big": changed, "n": 1}, optimistic=False)  # a change inside the tree
        store.commit([Write.between(b, None, {"n": 1})])
        put(store, b, {"n": 1, "big": big["b"]})  # the commit function: a tree member added
        put(store, c, {"big": big["c"]})  # ... and a document created with one
        put(store, d, {"n": 1})  # the fast statements: created, rewritten
        put(store, d, {"n": 2})
        revisions = {
            a: [None, {"big": big["a"], "n": 1}, {"big": changed, "n": 1}],
            b: [None, {"n": 1}, {"n": 1, "big": big["b"]}],
            c: [None, {"big": big["c"]}],
            d: [None, {"n": 1}, {"n": 2}],
        }
        monkeypatch.setattr(store, "contended", lambda keys: True)  # merged by the server
        view = MemoryView(store, Identity.of("acme", "/trees", "agent"))
        view.patch_state({"session": {"tactics": {"next": "a"}}})
        view.patch_state({"session": {"tactics": {"next": "b"}, "strategy": {"goal": "c"}}})
        assert view.read_state({"path": "session.tactics"}) == {"value": {"next": "b"}}
        with store._read_tx() as tx:
            nodes = tx.one("SELECT count(*) FROM nodes")
        assert nodes is not None and nodes[0] > 1_500
    store = open_store(backend)  # read back from the nodes: nothing cached
    try:
        for key, bodies in revisions.items():
            assert store.get(key).body == bodies[-1], key
            for revision, body in enumerate(bodies[1:], start=1):
                assert store.read_at(key, revision=revision).body == body, (key, revision)
        report = check_store(store)
        assert report.problems == [], report.problems
    finally:
        store.close()


_WHOLE_FORM_VERSION = 42


def test_a_schema_41_store_upgrades_to_42_and_its_documents_keep_their_member_rows(
    backend: str, tmp_path: Path
) -> None:
    """Version 42 adds ``documents.body`` (NULL: member form) on both backends and rewrites
    nothing: the fixture reads back exactly, and with no state keeping whole bodies every
    writer — a cohort commit, the locked and optimistic updates, a new document — writes member
    rows and leaves the column NULL; a store opened afresh reads every revision back and
    ``stateflow check`` finds nothing."""
    with _upgraded(_WHOLE_FORM_VERSION - 1, backend, tmp_path) as store:
        with store._read_tx() as tx:
            keys = [DocKey(s, j) for s, j in tx.all("SELECT state, subject FROM documents WHERE present = 1")]
        before = store.read(keys)
        written: dict[DocKey, list[Any]] = {}
        for i, key in enumerate(sorted(keys)):
            doc = before[key]
            assert doc.body is not None
            body = {**doc.body, "upgraded": i}
            if i % 3 == 0:
                store.commit([Write.between(key, doc.body, body, doc.revision)])
            else:
                store.update([key], _rewritten(key, body), optimistic=i % 3 == 1)
            written[key] = [doc.body, body]
        new = DocKey("notes", "new-after-42")
        store.commit([Write.between(new, None, {"a": 1})])
        written[new] = [None, {"a": 1}]
        with store._read_tx() as tx:
            assert tx.one("SELECT count(*) FROM documents WHERE body IS NOT NULL") == (0,)
            members = tx.one(
                "SELECT count(*) FROM members m JOIN documents d ON d.doc_id = m.doc_id "
                "WHERE d.state = 'notes' AND d.subject = 'new-after-42'"
            )
        assert members == (1,)
    reopened = open_store(backend, auto_migrate=False)
    try:
        for key, (was, body) in written.items():
            doc = reopened.get(key)
            assert doc.body == body, key
            assert reopened.read_at(key, revision=doc.revision - 1).body == was, key
        report = check_store(reopened)
        assert report.problems == [], report.problems
    finally:
        reopened.close()


def test_a_schema_41_store_upgrades_to_42_and_every_writer_and_reader_handles_both_forms(
    backend: str, tmp_path: Path
) -> None:
    """Version 42 adds ``documents.body``: a small document of a state that keeps whole bodies
    (``keep_whole``) is its row alone, no member rows ("whole form"). Nothing is rewritten: the
    fixture's documents stay in member form and read back exactly; on SQLite, once their state
    keeps whole bodies, each converts on its next write — by the locked path, the optimistic
    one, ``write_whole`` and a cohort commit — and a new one is written whole; every revision
    still reads back, a store opened afresh reads them from their rows, and ``stateflow check``
    finds nothing. PostgreSQL gets the column and never sets it: its writers keep member form."""
    with _upgraded(_WHOLE_FORM_VERSION - 1, backend, tmp_path) as store:
        with store._read_tx() as tx:
            assert tx.one("SELECT count(*) FROM documents WHERE body IS NOT NULL") == (0,)
            keys = [DocKey(s, j) for s, j in tx.all("SELECT state, subject FROM documents WHERE present = 1")]
        before = store.read(keys)
        states = {key.state for key in keys}
        kept = [store.keep_whole(state) for state in sorted(states)]
        assert kept == [not isinstance(store, PostgresStore)] * len(states)
        written: dict[DocKey, list[Any]] = {}
        for i, key in enumerate(sorted(keys)):
            doc = before[key]
            assert doc.body is not None
            body = {**doc.body, "upgraded": i}
            way = i % 4
            if way == 0:
                store.commit([Write.between(key, doc.body, body, doc.revision)])
            elif way == 3:

                def build(_: dict[DocKey, Any], was: dict[str, Any] | None, b: Any = body) -> Whole:
                    return Whole(dict(b), [[]])

                if not store.write_whole(key, build, {}):  # (not as last seen here: the locked path)
                    store.update([key], _rewritten(key, body))
            else:
                store.update([key], _rewritten(key, body), optimistic=way == 1)
            written[key] = [doc.body, body]
        new = DocKey(sorted(states)[0], "new-after-42")
        store.commit([Write.between(new, None, {"a": 1})])
        written[new] = [None, {"a": 1}]
        with store._read_tx() as tx:
            whole = tx.one("SELECT count(*) FROM documents WHERE body IS NOT NULL")
        if isinstance(store, PostgresStore):
            assert whole == (0,)
        else:
            fits = [k for k, b in written.items() if len(orjson.dumps(b[-1])) <= 3584]
            assert whole == (len(fits),) and len(fits) > 1
    reopened = open_store(backend, auto_migrate=False)
    try:
        for key, (was, body) in written.items():
            doc = reopened.get(key)
            assert doc.body == body, key
            assert reopened.read_at(key, revision=doc.revision - 1).body == was, key
        report = check_store(reopened)
        assert report.problems == [], report.problems
    finally:
        reopened.close()


_COUNTED_IN_TRANSITIONS_VERSION = 43


def _every_writer_counted(store: SqlStore, backend: str) -> None:
    """Every write path after an upgrade — commit, update on both paths, a delete, ``write_whole``,
    ``update_parts``, a memory patch, prune, a purge with ``erase``, four racing writers —, each
    followed by the counters equal to a recount."""

    def exact() -> None:
        with store._read_tx() as tx:
            stored, recounted = store.recount(tx)
        assert stored == recounted

    _counted_writes(store, "after")
    exact()
    crossing = DocKey("after", encode_subject("agent", "x", "fold", "f"))
    for n in range(FOLD_EVERY + 1):  # (a fold's boundary of seqs crossed, whichever seq is now)
        store.commit([Write.between(crossing, None, {"n": n, f"m{n % 3}": n}, None)])
    exact()
    guard = DocKey("_guard", "g")
    store.commit([Write.between(guard, None, {"v": 1})])
    store.read([guard])
    whole = DocKey("after", encode_subject("agent", "x", "item", "w"))
    assert store.write_whole(whole, _whole_body({"a": 1, "b": 2}), {"by": "t"}, shared=[guard])
    assert store.write_whole(whole, _whole_body({"a": 1, "c": 2}), {"by": "t"}, shared=[guard])
    exact()
    parted = [DocKey("after", encode_subject("agent", "x", "part", f"p{i}")) for i in range(4)]

    def parts(part: Sequence[DocKey], docs: dict[DocKey, Any]) -> list[Write]:
        return [Write.between(k, docs[k].body, {"p": 1, k.subject[-3:-1]: 1}, docs[k].revision) for k in part]

    store.update_parts([parted[:2], parted[2:]], parts, {"by": "parts"})
    exact()
    MemoryView(store, Identity.of("acme", "/counted", "agent")).patch_state(
        {"session": {"tactics": {"next": "a"}}, "global": {"strategy": {"goal": "b"}}}
    )
    exact()
    assert store.prune_history("after", "2999-01-01T00:00:00Z") > 0
    exact()
    entry = DocKey("_catalog", "race")
    store.commit([Write.between(entry, None, {"declared": True})])
    counted = _race_and_purge(store, backend, "race")
    assert not [k for k in counted if k[0] == "race"]
    store.purge("after", erase=[entry])
    exact()
    report = check_store(store)
    assert report.problems == [], report.problems


def test_a_schema_42_store_upgrades_to_43_and_its_writers_count_in_their_transitions(
    backend: str, tmp_path: Path
) -> None:
    """Version 43 has SQLite's writers keep their counters' deltas in their transition rows
    (``transitions.counted``) and drops its counting triggers; ``counts_folded`` starts at the
    newest seq (no older row holds deltas). The counters read what version 41's rows held, equal
    to a recount, and every writer after keeps them so (a fold included: the writes cross a
    ``FOLD_EVERY`` boundary of seqs). PostgreSQL only records the version."""
    _store_at(_COUNTED_IN_TRANSITIONS_VERSION - 1, backend, tmp_path)
    query = "SELECT state, counter, name, n FROM state_counts WHERE n <> 0"
    pg = backend.startswith("postgresql://")
    if pg:
        with psycopg.connect(backend) as conn:
            rows = conn.execute(query).fetchall()
    else:
        rows = _sqlite_rows(backend, query)
        seq = _sqlite_rows(backend, "SELECT MAX(seq) FROM transitions")[0][0]
    before = {(s, c, n): int(k) for s, c, n, k in rows}
    assert before
    store = open_store(backend, auto_migrate=False)
    try:
        assert store.migrate() == (_COUNTED_IN_TRANSITIONS_VERSION - 1, SCHEMA_VERSION)
        _reads_back(store, _expected())
        with store._read_tx() as tx:
            stored, counted = store.recount(tx)
        assert stored == counted == before
        if not pg:
            with store._read_tx() as tx:
                assert (
                    tx.all("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'count_%'")
                    == []
                )
                assert tx.all("SELECT value FROM stateflow_meta WHERE key = 'counts_folded'") == [(str(seq),)]
                assert tx.all("SELECT COUNT(*) FROM transitions WHERE counted IS NOT NULL") == [(0,)]
        _every_writer_counted(store, backend)
        if not pg:
            with store._read_tx() as tx:
                assert tx.all("SELECT COUNT(*) FROM transitions WHERE counted IS NOT NULL") != [(0,)]
    finally:
        store.close()


_CHANGE_MARK_VERSION = 44


def test_a_schema_43_store_upgrades_to_44_and_marks_the_creations_of_whole_form_documents(
    backend: str, tmp_path: Path
) -> None:
    """Version 44 has the creating change of a whole-form document keep the mark ``=`` (the body
    its row holds at that revision) instead of a copy, replaced by the copy when a write moves
    the document past it; nothing is rewritten. The fixture reads back exactly; on SQLite, with
    its states keeping whole bodies, the fixture's documents convert on their next write (no
    mark: not a creation), a new document written whole by every writer keeps the mark, every
    revision reads back before and after its copy — also from a store opened afresh — and
    ``stateflow check`` finds nothing. PostgreSQL only records the version: no mark, ever."""
    with _upgraded(_CHANGE_MARK_VERSION - 1, backend, tmp_path) as store:
        pg = isinstance(store, PostgresStore)
        with store._read_tx() as tx:
            keys = [DocKey(s, j) for s, j in tx.all("SELECT state, subject FROM documents WHERE present = 1")]
        states = sorted({key.state for key in keys})
        assert [store.keep_whole(state) for state in states] == [not pg] * len(states)
        before = store.read(keys)
        written: dict[DocKey, list[Any]] = {}
        for i, key in enumerate(sorted(keys)):
            body = {**(before[key].body or {}), "upgraded": i}
            store.update([key], _rewritten(key, body), optimistic=i % 2 == 0)
            written[key] = [before[key].body, body]
        fresh = [DocKey(states[0], f"new-after-44-{way}") for way in range(3)]
        for way, key in enumerate(fresh):
            body = {"way": way, "pad": "p" * (700 * way)}
            if way == 0:
                store.commit([Write.between(key, None, body)])
            elif way == 1:

                def build(_: dict[DocKey, Any], was: dict[str, Any] | None, b: Any = body) -> Whole:
                    return Whole(dict(b), [[]])

                assert store.write_whole(key, build, {})
            else:
                store.update([key], _rewritten(key, body))
            written[key] = [None, body]

        def marks() -> list[str]:
            with store._read_tx() as tx:
                return sorted(
                    s
                    for (s,) in tx.all(
                        "SELECT d.subject FROM changes c JOIN documents d ON d.doc_id = c.doc_id "
                        "WHERE c.edits = ?",
                        (b"=",),
                    )
                )

        assert marks() == ([] if pg else sorted(k.subject for k in fresh))
        for key, (_, body) in written.items():
            assert store.read_at(key, revision=store.get(key).revision).body == body
        for key in fresh:  # (the mark read as the body set whole, as member form keeps it)
            assert store.history([key], limit=1)[0].edits == [Edit((), written[key][1])]
        for key in fresh:
            body = written[key][1]
            store.commit([Write.between(key, body, {"after": 1}, 1)])
            written[key] = [body, {"after": 1}]
        assert marks() == []
    reopened = open_store(backend, auto_migrate=False)
    try:
        for key, (was, body) in written.items():
            doc = reopened.get(key)
            assert doc.body == body, key
            assert reopened.read_at(key, revision=doc.revision - 1).body == was, key
        report = check_store(reopened)
        assert report.problems == [], report.problems
    finally:
        reopened.close()


_FAST_COUNTED_VERSION = 46


def test_a_schema_45_store_upgrades_to_46_and_its_fast_statements_count_in_their_transitions(
    backend: str, tmp_path: Path
) -> None:
    """Version 46 has PostgreSQL's fast statements keep their counters' deltas in their
    transition rows (``transitions.counted``, SQLite's column) instead of ``count_deltas`` rows;
    ``counts_folded`` starts at the newest seq. The counters read what version 45 left — rows,
    and deltas not yet folded — equal to a recount, every writer after keeps them so (a fold
    included), and the deltas left by version 45 are folded with the transitions'. SQLite only
    records the version."""
    _store_at(_FAST_COUNTED_VERSION - 1, backend, tmp_path)
    query = "SELECT state, counter, name, n FROM state_counts WHERE n <> 0"
    pg = backend.startswith("postgresql://")
    if pg:
        with psycopg.connect(backend) as conn:
            before = {(s, c, n): int(k) for s, c, n, k in conn.execute(query).fetchall()}
            # one counter partly in a delta not yet folded, as a version-45 writer leaves it
            state, counter, name = min(before)
            conn.execute(
                "UPDATE state_counts SET n = n - 1 WHERE state = %s AND counter = %s AND name = %s",
                (state, counter, name),
            )
            conn.execute(
                "INSERT INTO count_deltas (state, counter, name, delta) VALUES (%s, %s, %s, 1)",
                (state, counter, name),
            )
            ((seq,),) = conn.execute("SELECT MAX(seq) FROM transitions").fetchall()
    else:
        before = {(s, c, n): int(k) for s, c, n, k in _sqlite_rows(backend, query)}
    assert before
    store = open_store(backend, auto_migrate=False)
    try:
        with pytest.raises(StoreNotMigrated, match=f"schema version {_FAST_COUNTED_VERSION - 1}"):
            store.get(DocKey("notes", "a"))
        assert store.migrate() == (_FAST_COUNTED_VERSION - 1, SCHEMA_VERSION)
        _reads_back(store, _expected())
        with store._read_tx() as tx:
            stored, counted = store.recount(tx)
        assert stored == counted == before
        if pg:
            with store._read_tx() as tx:
                assert tx.all("SELECT value FROM stateflow_meta WHERE key = 'counts_folded'") == [(str(seq),)]
                assert tx.all("SELECT COUNT(*) FROM transitions WHERE counted IS NOT NULL") == [(0,)]
        _every_writer_counted(store, backend)
        if pg:
            with store._read_tx() as tx:
                assert tx.all("SELECT COUNT(*) FROM transitions WHERE counted IS NOT NULL") != [(0,)]
                ((value,),) = tx.all("SELECT value FROM stateflow_meta WHERE key = 'counts_folded'")
            folded = int(value)
            assert folded > seq  # (a fold crossed: the transitions' deltas folded with the rows')
    finally:
        store.close()
