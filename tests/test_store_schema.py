"""Missing, newer and damaged stores fail closed with stable, actionable errors."""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from stateflow.doc.diff import Edit
from stateflow.errors import CorruptData, StoreNotMigrated, StoreTooNew, UnsupportedStore
from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.store.migrations import SCHEMA_VERSION
from stateflow.store.sqlite import SqliteStore

from .conftest import StoreFactory

A = DocKey("notes", "a")


def _raw_sql(location: str, sql: str, params: tuple[object, ...] = ()) -> None:
    if location.startswith("postgresql://"):
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(sql.replace("?", "%s"), params)
    else:
        with sqlite3.connect(location) as conn:
            conn.execute(sql, params)


def _every_call_refuses(store: SqlStore, error: type[Exception], code: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: store.get(A),
        lambda: store.read_at(A, revision=0),
        lambda: store.history([A]),
        lambda: store.transitions(),
        lambda: store.commit([Write(A, [Edit(("x",), 1)])]),
        lambda: store.applied_op("x"),
    ]
    for call in calls:
        with pytest.raises(error) as info:
            call()
        assert info.value.code == code  # type: ignore[attr-defined]


def test_an_unmigrated_store_refuses_every_read_and_write(backend: str) -> None:
    store = open_store(backend, auto_migrate=False)
    try:
        _every_call_refuses(store, StoreNotMigrated, "store-not-migrated")
        with pytest.raises(StoreNotMigrated, match=r"stateflow --store .* migrate"):
            store.get(A)
        assert store.schema_version() is None
        assert store.migrate() == (0, SCHEMA_VERSION)
        assert store.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
        assert store.get(A).revision == 0
    finally:
        store.close()


def test_the_migrate_advice_is_a_command_a_shell_runs_as_pasted(backend: str, tmp_path: Path) -> None:
    # it named the store unquoted, the password as ***: a shell globbed it, and a user pasting it
    # connected with the password "***"
    if backend.startswith("postgresql://"):
        location = backend.replace("postgresql://postgres@", "postgresql://postgres:s3cret@", 1)
        assert location != backend
        refused = subprocess.run(
            ["stateflow", "--store", location, "doc", "get", "notes", "a"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 1 and refused.stderr.startswith("error[store-not-migrated]: "), (
            refused.stderr
        )
        message = refused.stderr
        assert message.rstrip().endswith("(its password left out: give it in PGPASSWORD or ~/.pgpass)")
        env = {**os.environ, "PGPASSWORD": "s3cret"}
    else:  # a path a shell would split and glob
        location = str(tmp_path / "my stores [old]" / "*.db")
        Path(location).parent.mkdir()
        store = open_store(location, auto_migrate=False)
        try:
            with pytest.raises(StoreNotMigrated) as info:
                store.get(A)
        finally:
            store.close()
        message, env = info.value.message, dict(os.environ)
    assert "s3cret" not in message
    command = re.search(r"run `([^`]*)`", message)
    assert command is not None, message
    ran = subprocess.run(
        ["sh", "-c", command[1]], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env
    )
    assert ran.returncode == 0, ran.stderr
    migrated = open_store(backend if backend.startswith("postgresql://") else location, auto_migrate=False)
    try:
        assert migrated.schema_version() == SCHEMA_VERSION
    finally:
        migrated.close()


@contextmanager
def _unwritable(path: Path) -> Iterator[None]:
    """``path`` (a temporary copy) not writable by this process while inside."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    # root writes a file whatever its mode: only an immutable one keeps it out
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root where chattr +i is unavailable: no file is unwritable to root")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_an_old_store_that_cannot_be_written_here_says_why_migrate_is_not_enough(tmp_path: Path) -> None:
    # it said only to run migrate, which would be refused as well: the file or its directory is not
    # writable, or the store was opened read-only
    from . import servers

    path = tmp_path / "old" / "s.db"
    path.parent.mkdir()
    open_store(str(path)).close()
    _raw_sql(
        str(path),
        "UPDATE stateflow_meta SET value = ? WHERE key = 'schema_version'",
        (str(SCHEMA_VERSION - 1),),
    )
    url = f"sqlite:///{path}"
    command = shlex.join(["stateflow", "--store", url, "migrate"])

    def refusal(why: str) -> str:
        return (
            f"{url} is not migrated (schema version {SCHEMA_VERSION - 1}, need {SCHEMA_VERSION}) and cannot be "
            f"migrated as it is opened: {why}; run `{command}` where it can be written, or open it with the "
            "stateflow version that wrote it"
        )

    asked = subprocess.run(
        ["stateflow", "--store", f"{url}?mode=ro", "states", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (asked.returncode, asked.stderr) == (
        1,
        f"error[store-not-migrated]: {refusal('it is opened read-only (mode=ro)')}\n",
    )
    log = tmp_path / "serve.log"
    with _unwritable(path):
        server = servers.start(servers.base_env(tmp_path, str(path)), log=log)
        try:
            status, body, _ = server.call("GET", "/api/ready")
        finally:
            server.stop()
    assert status == 503 and body["code"] == "store-not-migrated", body
    warning = f"warning: {refusal(f'{path} or its directory is not writable by this process')}"
    assert warning in log.read_text().splitlines(), log.read_text()
    plain = subprocess.run(
        ["stateflow", "--store", str(path), "states", "list"], capture_output=True, text=True, timeout=60
    )
    assert plain.stderr.endswith(f"; run `{command}`\n")  # (writable: migrate is the whole answer)


def test_a_store_from_a_newer_version_is_refused(backend: str, open_migrated: StoreFactory) -> None:
    open_migrated()
    _raw_sql(backend, "UPDATE stateflow_meta SET value = '99' WHERE key = 'schema_version'")
    store = open_store(backend, auto_migrate=False)
    try:
        _every_call_refuses(store, StoreTooNew, "store-too-new")
        with pytest.raises(StoreTooNew, match="upgrade stateflow"):
            store.migrate()
    finally:
        store.close()


def test_a_corrupt_member_fails_closed_naming_what_is_corrupt(
    backend: str, open_migrated: StoreFactory
) -> None:
    writer = open_migrated()
    writer.commit([Write.between(A, None, {"good": 1, "bad": 2})])
    # (the size marks the row as too large for PostgreSQL's JSON index, which would refuse junk)
    _raw_sql(backend, "UPDATE members SET body = ?, size = 2000000 WHERE name = 'bad'", (b"{not json",))
    store = open_migrated()  # a fresh process: it reads the damaged bytes (nothing cached)
    with pytest.raises(CorruptData, match=r"notes/a member 'bad'"):
        store.get(A)
    # a reader that does not need the damaged member still works
    assert store.get(A, members=["good"]).body == {"good": 1}
    # a write that touches the damaged member refuses and changes nothing
    with pytest.raises(CorruptData):
        store.commit([Write(A, [Edit(("bad", "x"), 1)])])
    assert store.get(A, members=["good"]).revision == 1


def test_a_sqlite_file_that_is_not_a_stateflow_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE documents (x)")
    with pytest.raises(StoreNotMigrated, match="not a stateflow store"):
        open_store(str(path))


def test_a_file_that_is_not_sqlite_is_refused_without_being_rewritten(tmp_path: Path) -> None:
    # a file that was never a store (a mistyped path) is the wrong file, not a damaged store
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database file at all" * 100)
    before = path.read_bytes()
    with pytest.raises(UnsupportedStore, match="is not a SQLite database, so not a stateflow store"):
        open_store(str(path))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.db"]
    # one a store left its files beside lost its header: damage
    (tmp_path / "junk.db-writer").write_bytes(b"")
    with pytest.raises(CorruptData, match="not a database"):
        open_store(str(path))
    assert path.read_bytes() == before


def test_the_embedded_default_migrates_itself(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "deep" / "dir" / "s.db"))
    try:
        assert store.schema_version() == SCHEMA_VERSION
    finally:
        store.close()


def test_a_version_1_store_with_data_upgrades_in_place(backend: str) -> None:
    """A store written by the first schema keeps its documents and history through `migrate`."""
    from stateflow.store.migrations import POSTGRES, SQLITE, statements

    script = (POSTGRES if backend.startswith("postgresql://") else SQLITE)[1]
    for statement in statements(script):
        _raw_sql(backend, statement)
    _raw_sql(backend, "INSERT INTO stateflow_meta (key, value) VALUES ('schema_version', '1')")
    _raw_sql(backend, "INSERT INTO documents (state, subject, revision, present) VALUES ('notes', 'a', 0, 0)")
    store = open_store(backend, auto_migrate=False)
    try:
        with pytest.raises(StoreNotMigrated, match="schema version 1"):
            store.get(A)
        assert store.migrate() == (1, SCHEMA_VERSION)
        store.commit([Write.between(A, None, {"n": 1, "tags": ["x"]})])
        store.commit([Write.between(A, {"n": 1, "tags": ["x"]}, {"n": 2})])
        assert store.get(A).body == {"n": 2}
        assert [c.revision for c in store.history([A])] == [2, 1]
    finally:
        store.close()


def test_a_version_2_store_with_history_upgrades_in_place(backend: str) -> None:
    """Version 3 rebuilds SQLite's history tables (and adds inline edits on both backends): a
    version-2 store keeps its documents, its replayable history and its seq numbering."""
    from stateflow.store.migrations import POSTGRES, SQLITE, statements

    scripts = POSTGRES if backend.startswith("postgresql://") else SQLITE
    for version in (1, 2):
        for statement in statements(scripts[version]):
            _raw_sql(backend, statement)
    _raw_sql(backend, "INSERT INTO stateflow_meta (key, value) VALUES ('schema_version', '2')")
    _raw_sql(
        backend,
        "INSERT INTO documents (state, subject, revision, present, updated_seq, body_size, next_position) "
        "VALUES ('notes', 'a', 2, 1, 2, 1, 1)",
    )
    for n in (1, 2, 3):
        _raw_sql(
            backend, "INSERT INTO transitions (at, origin) VALUES (?, ?)", (f"2026-01-0{n}T00:00:00Z", b"{}")
        )
    _raw_sql(
        backend,
        "INSERT INTO members (doc_id, name, position, revision, size, body) VALUES (1, 'n', 0, 2, 1, ?)",
        (b"2",),
    )
    for n in (1, 2):
        _raw_sql(
            backend,
            "INSERT INTO changes (doc_id, revision, seq, paths) VALUES (1, ?, ?, ?)",
            (n, n, b'[["n"]]'),
        )
        _raw_sql(
            backend,
            "INSERT INTO change_edits (doc_id, revision, member, edits) VALUES (1, ?, 'n', ?)",
            (n, f'[[["n"],{n}]]'.encode()),
        )
    _raw_sql(backend, "DELETE FROM transitions WHERE seq = 3")  # the newest, left without changes
    store = open_store(backend, auto_migrate=False)
    try:
        assert store.migrate() == (2, SCHEMA_VERSION)
        assert store.get(A).body == {"n": 2}
        assert store.read_at(A, revision=1).body == {"n": 1}
        assert [(c.revision, c.seq, [e.value for e in c.edits]) for c in store.history([A])] == [
            (2, 2, [2]),
            (1, 1, [1]),
        ]
        commit = store.commit([Write(A, [Edit(("n",), 3)])])
        assert commit.seq is not None and commit.seq > 3  # seq 3 was handed out once
        assert store.read_at(A, revision=2).body == {"n": 2}
    finally:
        store.close()


def _raw_rows(location: str, sql: str) -> list[tuple[object, ...]]:
    if location.startswith("postgresql://"):
        with psycopg.connect(location, autocommit=True) as conn:
            return conn.execute(sql).fetchall()
    with sqlite3.connect(location) as conn:
        return conn.execute(sql).fetchall()


def test_small_changes_keep_their_edits_inline_and_large_ones_per_member(backend: str) -> None:
    store = open_store(backend, auto_migrate=True)
    try:
        store.commit([Write.between(A, None, {"hot": 1, "lazy": "x" * 5000})])  # large
        store.commit([Write(A, [Edit(("hot",), 2)])])
        store.commit([Write(A, [Edit((), {"hot": 3, "lazy": "y"})])])  # whole document, small
        assert _raw_rows(backend, "SELECT revision, edits IS NULL FROM changes ORDER BY revision") == [
            (1, True),
            (2, False),
            (3, False),
        ]
        assert {r[0] for r in _raw_rows(backend, "SELECT revision FROM change_edits")} == {1}
        hot = store.history([A], members=["hot"])
        assert [(c.revision, [(e.path, e.value) for e in c.edits]) for c in hot] == [
            (3, [((), {"hot": 3})]),
            (2, [(("hot",), 2)]),
            (1, [((), {"hot": 1})]),
        ]
        assert [len(c.edits) for c in store.history([A], members=["lazy"])] == [1, 0, 1]
        assert store.read_at(A, revision=1).body == {"hot": 1, "lazy": "x" * 5000}
        assert store.read_at(A, revision=2).body == {"hot": 2, "lazy": "x" * 5000}
        assert store.read_at(A, revision=2, members=["hot"]).body == {"hot": 2}
        assert store.read_at(A, revision=3).body == {"hot": 3, "lazy": "y"}
        [_, t2, _] = store.transitions()
        assert [e.value for e in t2.changes[0].edits] == [2]
        # a whole-document set up to 4 KiB (a new record's first revision) stays in its row too,
        # but on SQLite only while the row stays under CHANGE_ROW_MAX (it must not overflow its page)
        sqlite = not backend.startswith("postgresql://")
        small = DocKey("notes", "small")
        store.commit([Write.between(small, None, {"hot": 1, "lazy": "x" * 800})])
        assert _raw_rows(backend, "SELECT count(*) FROM change_edits") == [(1,)]
        medium = DocKey("notes", "medium")
        store.commit([Write.between(medium, None, {"hot": 1, "lazy": "x" * 2000})])
        assert {r[0] for r in _raw_rows(backend, "SELECT revision FROM change_edits")} == {1}
        assert _raw_rows(backend, "SELECT count(*) FROM change_edits") == [(2,) if sqlite else (1,)]
        assert store.read_at(small, revision=1).body == {"hot": 1, "lazy": "x" * 800}
        assert [len(c.edits) for c in store.history([medium], members=["hot"])] == [1]
        assert store.history([medium], members=["hot"])[0].edits[0].value == {"hot": 1}
        assert store.read_at(medium, revision=1).body == {"hot": 1, "lazy": "x" * 2000}
    finally:
        store.close()


def test_sqlite_writes_to_existing_documents_draw_no_new_ids(tmp_path: Path) -> None:
    """Only a document's first write inserts its row: on SQLite an upsert would draw a new
    AUTOINCREMENT id (and write the id sequence's page) on every commit."""
    location = str(tmp_path / "ids.db")
    store = open_store(location)
    try:
        keys = [DocKey("notes", f"d{i}") for i in range(5)]
        for i in range(50):
            key = keys[i % 5]
            store.commit([Write(key, [Edit(("n",), i)])])
            store.update([key], lambda docs: ([Write(key, [Edit(("m",), 1)])], None))  # noqa: B023 (called at once)
        assert _raw_rows(location, "SELECT name, seq FROM sqlite_sequence") == [("documents", 5)]
        assert store.get(keys[0]).body == {"n": 45, "m": 1}
    finally:
        store.close()


def test_a_store_migrated_past_a_running_writer_is_no_longer_written(
    backend: str, open_migrated: StoreFactory
) -> None:
    """A process of this version keeps running while a newer release migrates the store (its
    `stateflow migrate`): the writer notices at its next commit — SQLite reads the version under
    the write lock, PostgreSQL inside the statement that takes the seq lock — and refuses with
    store-too-new, writing nothing, instead of writing rows the newer schema does not expect."""
    store = open_migrated()  # checked and in use, as a running server's
    store.commit([Write(A, [Edit(("x",), 1)])])
    newer = str(SCHEMA_VERSION + 1)
    _raw_sql(backend, "UPDATE stateflow_meta SET value = ? WHERE key = 'schema_version'", (newer,))
    for _ in range(2):  # (the plain commit, then as a writer that has seen the document)
        with pytest.raises(StoreTooNew, match=f"schema version {newer}") as info:
            store.commit([Write(A, [Edit(("x",), 2)], 1)])
        # naming the store, as the check at open does (a PostgreSQL password masked: ``store.url``)
        assert str(info.value).startswith(f"{store.url} has schema version {newer}, newer than"), info.value
    with pytest.raises(StoreTooNew):
        store.update([A], lambda docs: ([Write.between(A, docs[A].body, {"x": 3}, docs[A].revision)], None))
    with pytest.raises(StoreTooNew):  # a new document
        store.commit([Write(DocKey("notes", "b"), [Edit(("x",), 1)])])
    _raw_sql(
        backend, "UPDATE stateflow_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
    )
    assert len(store.transitions()) == 1  # nothing was written


def test_a_sqlite_writer_alone_reads_the_version_only_after_another_connection_commits(
    tmp_path: Path,
) -> None:
    """The version is read under the write lock only when the WAL-index header's change counter
    is not the one this writer's own last commit made: a writer alone reads it once, and again
    after any other connection's commit (a migration is one), so the check costs nothing a write
    while nobody else writes."""
    url = f"sqlite:///{tmp_path}/s.db"
    store = open_store(url, auto_migrate=True)
    assert isinstance(store, SqliteStore)
    store.commit([Write(A, [Edit(("x",), 0)])])
    reads: list[str] = []
    writer = store._group._conn
    assert writer is not None
    writer.set_trace_callback(lambda sql: reads.append(sql) if "schema_version" in sql else None)
    for n in range(1, 21):
        store.commit([Write(A, [Edit(("x",), n)], n)])
    assert reads == []
    other = open_store(url, auto_migrate=True)
    other.commit([Write(DocKey("notes", "b"), [Edit(("x",), 1)])])
    store.commit([Write(A, [Edit(("x",), 21)], 21)])
    store.commit([Write(A, [Edit(("x",), 22)], 22)])
    assert len(reads) == 1
    other.close()
    store.close()
