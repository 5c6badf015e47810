"""`stateflow check` and fail-closed opening: damaged files are refused at once with
`corrupt-store`, nothing is written to them; read commands never create a store."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
import time
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from stateflow.errors import StoreNotMigrated, StoreTooNew
from stateflow.store import DocKey, Write, open_store
from stateflow.store.check import check_store
from stateflow.store.migrations import SCHEMA_VERSION
from stateflow.store.sqlite import SqliteStore
from tests.conftest import WHOLE_FORM, store_location


def sf(store: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATEFLOW_STORE=store)
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=timeout, env=env)


def fill(location: str) -> None:
    """Three documents, a few revisions each."""
    store = open_store(location, auto_migrate=True)
    try:
        for i in range(3):
            key = DocKey("notes", f"n{i}")
            for r in range(4):
                old = store.get(key)
                new = {"n": r, "text": "x" * (r * 10)}
                store.commit([Write.between(key, old.value, new, old.revision)], {"door": "test"})
    finally:
        store.close()


def test_check_walks_every_revision_of_a_whole_store(backend: str) -> None:
    fill(backend)
    out = sf(backend, "check", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["checked"]["documents"] == 3
    assert report["checked"]["revisions"] == 12
    assert report["checked"]["transitions"] == 12
    assert report["checked"]["counters"] == 3  # the kind's, and the members n and text
    if not backend.startswith("postgres"):
        assert report["checked"]["pages"] > 0


def _damage_a_change(backend: str) -> None:
    sql = (
        "UPDATE changes SET edits = {blob} WHERE doc_id = (SELECT doc_id FROM documents WHERE subject = 'n1') "
        "AND revision = 2"
    )
    if backend.startswith("postgres"):
        with psycopg.connect(backend, autocommit=True) as pg:
            pg.execute(sql.format(blob="'\\x7b7b7b'::bytea"))
    else:
        import sqlite3

        lite = sqlite3.connect(backend)
        with lite:
            lite.execute(sql.format(blob="x'7b7b7b'"))
        lite.close()


def test_check_names_a_revision_that_no_longer_replays(backend: str) -> None:
    fill(backend)
    _damage_a_change(backend)
    out = sf(backend, "check")
    assert out.returncode == 1
    assert "notes/n1 revision 2" in out.stdout, out.stdout
    assert "error[corrupt-store]" in out.stderr
    # a backup to restore, made as this backend makes them (`stateflow backup` copies SQLite files)
    made = "(make them with pg_dump, or `stateflow dump`)" if "://" in backend else "`stateflow backup`"
    assert made in out.stderr, out.stderr
    assert "notes/n0" not in out.stdout and "notes/n2" not in out.stdout  # the others are whole


_N1 = "(SELECT doc_id FROM documents WHERE subject = 'n1')"


def _in_whole_form(backend: str) -> bool:
    """Whether the store at ``backend`` keeps its documents in whole form (no member rows: the
    same damage is then done to ``documents.body``)."""
    if backend.startswith("postgres"):
        return False
    with closing(sqlite3.connect(backend)) as lite:
        return lite.execute("SELECT 1 FROM documents WHERE body IS NOT NULL LIMIT 1").fetchone() is not None


def _lose_text(doc: str) -> str:
    """The member ``text`` of the document ``doc`` (its id, in SQL) lost from a whole-form body."""
    return (
        "UPDATE documents SET body = CAST(json_remove(CAST(body AS TEXT), '$.text') AS BLOB) "
        f"WHERE doc_id = {doc}"
    )


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (f"DELETE FROM members WHERE doc_id = {_N1} AND name = 'text'", "members missing ['text']"),
        (f"DELETE FROM changes WHERE doc_id = {_N1} AND revision = 4", "notes/n1 revision 4"),
        (f"UPDATE documents SET revision = 5 WHERE doc_id = {_N1}", "notes/n1 revision 5"),
    ],
    ids=["lost member row", "lost newest change", "revision past the history"],
)
def test_check_compares_the_current_body_with_what_the_history_builds(
    backend: str, damage: str, named: str
) -> None:
    """Damage to the head that every revision before it survives: a member row gone (the record
    silently lost a field), the newest change gone (the audit trail lost its last write), a
    revision the history never reached. Each reads as a sound document, so each is found by
    building the current revision from the history and comparing."""
    fill(backend)
    if backend.startswith("postgres"):
        with psycopg.connect(backend, autocommit=True) as pg:
            pg.execute(damage)
    else:
        if _in_whole_form(backend) and damage.startswith("DELETE FROM members"):
            damage = _lose_text(_N1)
        with closing(sqlite3.connect(backend)) as lite, lite:
            lite.execute(damage)
    out = sf(backend, "check")
    assert out.returncode == 1, out.stdout
    assert named in out.stdout and "notes/n1" in out.stdout, out.stdout
    assert "notes/n0" not in out.stdout and "notes/n2" not in out.stdout  # the others are whole


def test_check_reads_current_bodies_in_batches_and_still_names_the_damaged_one(backend: str) -> None:
    # the current bodies are read a batch at a time (a read per document was most of a check's
    # statements); a body that does not decode is still named alone, its batch's others whole
    store = open_store(backend, auto_migrate=True)
    try:
        keys = [DocKey("notes", f"n{i:03d}") for i in range(300)]
        store.commit([Write.between(key, None, {"n": i, "text": "x"}, 0) for i, key in enumerate(keys)], {})
        store.get(keys[0])  # (this thread's reading connection is open)
        statements: list[str] = []
        traced = list(store._all) if isinstance(store, SqliteStore) else []
        for conn in traced:
            conn.set_trace_callback(statements.append)
        report = check_store(store)
        for conn in traced:
            conn.set_trace_callback(None)
        assert report.problems == [] and report.checked["documents"] == 300
        if traced:
            # (in whole form each document's creating change is the mark "=", resolved from its
            # row by one statement a document: history.resolve_marks, as check replays each)
            marks = 300 if _in_whole_form(backend) else 0
            assert len(statements) < 4 * 300 + marks, len(statements)
    finally:
        store.close()
    damage = (
        "UPDATE members SET body = {blob} WHERE name = 'text' AND doc_id = "
        "(SELECT doc_id FROM documents WHERE subject = 'n007')"
    )
    if backend.startswith("postgres"):
        with psycopg.connect(backend, autocommit=True) as pg:
            pg.execute(damage.format(blob="'\\x7b7b7b'::bytea"))
    else:
        if _in_whole_form(backend):
            damage = "UPDATE documents SET body = {blob} WHERE subject = 'n007'"
        with closing(sqlite3.connect(backend)) as lite, lite:
            lite.execute(damage.format(blob="x'7b7b7b'"))
    out = sf(backend, "check")
    assert out.returncode == 1, out.stdout
    named = [line for line in out.stdout.splitlines() if "notes/n" in line]
    assert named and all("notes/n007" in line for line in named), out.stdout


def test_check_replays_a_large_documents_history_without_rebuilding_each_revision(backend: str) -> None:
    """A document with a member stored as a tree (over 1 MiB) and 48 small revisions: each
    revision was rebuilt from its snapshot, reading and decoding the whole tree per revision
    (531 s for 1,005 revisions beside a 10 MB plane). Now the history is replayed forward, a
    tree decoded only where a snapshot holds a new version of it, and only its new nodes; every
    revision is still checked, and damage still names its own revision."""
    store = open_store(backend, auto_migrate=True)
    key = DocKey("notes", "big")
    try:
        body: dict[str, object] = {"lazy": [f"{i:05d} " + "y" * 500 for i in range(3000)], "n": 0}
        store.commit([Write.between(key, None, body, 0)], {"door": "test"})
        for r in range(2, 49):
            old = store.get(key)
            assert old.value is not None
            new = dict(old.value, n=r)
            if r % 10 == 0:  # now and then the tree changes too
                lazy = list(new["lazy"])
                lazy[r] = f"edited {r}"
                new["lazy"] = lazy
            store.commit([Write.between(key, old.value, new, old.revision)], {"door": "test"})
        store.get(key)  # (this thread's reading connection is open)
        statements: list[str] = []
        traced = list(store._all) if isinstance(store, SqliteStore) else []
        for conn in traced:
            conn.set_trace_callback(statements.append)
        report = check_store(store)
        for conn in traced:
            conn.set_trace_callback(None)
        assert report.problems == [] and report.checked["revisions"] == 48, report.problems
        if traced:
            node_reads = [s for s in statements if "FROM nodes" in s]
            assert len(node_reads) < 48, len(node_reads)  # (each revision's rebuild read the tree)
    finally:
        store.close()
    damage = (
        "UPDATE changes SET edits = {blob} WHERE revision = 37 AND doc_id = "
        "(SELECT doc_id FROM documents WHERE subject = 'big')"
    )
    if backend.startswith("postgres"):
        with psycopg.connect(backend, autocommit=True) as pg:
            pg.execute(damage.format(blob="'\\x7b7b7b'::bytea"))
    else:
        if _in_whole_form(backend):
            damage = "UPDATE documents SET body = {blob} WHERE subject = 'n007'"
        with closing(sqlite3.connect(backend)) as lite, lite:
            lite.execute(damage.format(blob="x'7b7b7b'"))
    store = open_store(backend)
    try:
        report = check_store(store)
    finally:
        store.close()
    assert report.checked["revisions"] == 36
    replayed = [p for p in report.problems if p.startswith("revisions:")]
    assert len(replayed) == 1 and replayed[0].startswith("revisions: notes/big revision 37: "), replayed


def test_check_finds_damaged_pages_of_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    fill(str(path))
    import sqlite3

    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'changes'").fetchone()
    conn.close()
    with path.open("r+b") as file:  # scribble over the history table's first page
        file.seek((root - 1) * page_size)
        file.write(b"\xa5" * page_size)
    out = sf(str(path), "check", "--json")
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert report["ok"] is False and any(p.startswith("file: ") for p in report["problems"])


def test_check_names_a_damaged_page_the_full_check_stops_at(tmp_path: Path) -> None:
    """A page whose b-tree header is damaged can stop SQLite's full check at an index entry
    that leads through it ("malformed", no page named), where its lighter check still names
    the page: ``check`` answers with that, one problem a line, not the bare error."""
    path = tmp_path / "s.db"
    store = open_store(str(path))
    try:
        for i in range(2000):
            store.commit(
                [Write.between(DocKey("notes", f"k{i}"), None, {"pad": "p" * 300}, 0)], {"door": "t"}
            )
    finally:
        store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size, pages = (
        conn.execute("PRAGMA page_size").fetchone()[0],
        conn.execute("PRAGMA page_count").fetchone()[0],
    )
    conn.close()
    pristine = path.read_bytes()
    for page in range(2, pages + 1):  # (the first page whose damage stops the full check only)
        path.write_bytes(pristine)
        with path.open("r+b") as file:
            file.seek((page - 1) * page_size)
            file.write(b"\xff" * 12)
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA integrity_check(100)").fetchall()
        except sqlite3.DatabaseError:
            with contextlib.suppress(sqlite3.DatabaseError):
                if "btreeInitPage" in conn.execute("PRAGMA quick_check(100)").fetchone()[0]:
                    break
        finally:
            conn.close()
    else:
        pytest.fail("no page whose damage stops only the full check")
    out = sf(str(path), "check", "--json")
    assert out.returncode == 1
    problems = json.loads(out.stdout)["problems"]
    assert f"file: Page {page}: btreeInitPage() returns error code 11" in problems, problems
    assert not any("*** in database" in p or "malformed" in p for p in problems), problems


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(b"not a database at all, just some text" * 200), id="header"),
        pytest.param(lambda p: _scribble(p, 100, 3000), id="schema"),
    ],
)
def test_a_damaged_file_is_refused_at_once_and_left_as_it_was(tmp_path: Path, damage: object) -> None:
    path = tmp_path / "s.db"
    fill(str(path))
    damage(path)  # type: ignore[operator]
    before = path.read_bytes()
    began = time.monotonic()
    out = sf(str(path), "doc", "put", "notes", "n9", '{"a": 1}')
    assert time.monotonic() - began < 15  # not a 30 s lock wait
    assert out.returncode == 1
    assert out.stderr.startswith("error[corrupt-store]: "), out.stderr
    assert path.read_bytes() == before
    assert sf(str(path), "check").returncode == 1


def test_a_write_touching_a_damaged_page_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """Damage inside the file (not its header or schema) that a write runs into: the write fails
    with `corrupt-store` instead of building on the damaged page (each page's cells are checked
    as it is read, ``cell_size_check``), and the file is left as it was."""
    path = tmp_path / "s.db"
    fill(str(path))
    import sqlite3

    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'changes'").fetchone()
    conn.close()
    with path.open("r+b") as file:  # the history table's page: its header kept, its cells scribbled
        file.seek((root - 1) * page_size + 8)
        file.write(b"\xa5" * (page_size - 8))
    before = path.read_bytes()
    out = sf(str(path), "doc", "put", "notes", "n1", '{"a": 1}')
    assert out.returncode == 1
    assert out.stderr.startswith("error[corrupt-store]: "), out.stderr
    assert path.read_bytes() == before
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    assert sf(str(path), "check").returncode == 1


def _scribble(path: Path, offset: int, length: int) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(bytes(range(256)) * (length // 256) + b"\x00" * (length % 256))


def test_an_empty_file_next_to_a_stale_wal_is_refused(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    conn = sqlite3.connect(other, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    wal = Path(f"{other}-wal").read_bytes()
    conn.close()
    path = tmp_path / "s.db"
    path.write_bytes(b"")
    Path(f"{path}-wal").write_bytes(wal)
    began = time.monotonic()
    out = sf(str(path), "doc", "get", "notes", "n1")
    assert time.monotonic() - began < 15
    assert out.returncode == 1 and out.stderr.startswith("error[corrupt-store]: ")
    assert "truncated or replaced" in out.stderr
    assert path.stat().st_size == 0 and Path(f"{path}-wal").read_bytes() == wal


def test_read_commands_never_create_a_store(tmp_path: Path) -> None:
    typo = tmp_path / "no-such-dir" / "stor.db"
    subject = ["--target-name", "a", "--key", "k"]
    for args in (
        ["doc", "get", "notes", "n1"],
        ["doc", "history", "notes", "n1"],
        ["check"],
        ["context"],
        ["states", "list"],
        ["states", "get", "memory"],
        ["states", "read", "memory", *subject],
        ["states", "writes", "memory", *subject],
        ["states", "subjects", "memory"],
        ["states", "search", "memory", "--filters", "{}"],
        ["states", "template-jq", "eval", "memory", *subject, "t.p"],
        ["tool", "read_state", '{"path": "tactics"}'],
        ["tool", "state_read", '{"state": "memory"}'],
        ["knowledge", "status", "--knowledge-root", str(tmp_path)],
    ):
        out = sf(str(typo), *args)
        assert out.returncode == 1, args
        assert out.stderr.startswith("error[store-not-found]: "), (args, out.stderr)
    assert not typo.parent.exists()


def test_store_files_are_private_to_their_owner(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    path = tmp_path / "new" / "sub" / "s.db"
    assert sf(str(path), "doc", "put", "notes", "n1", '{"a": 1}').returncode == 0
    store = open_store(str(path))  # keeps the WAL and its index open
    try:
        store.get(DocKey("notes", "n1"))
        for name in ("s.db", "s.db-wal", "s.db-shm"):
            assert oct((path.parent / name).stat().st_mode & 0o777) == "0o600", name
        # every folder the store created is private, the one that was there is left alone
        assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
        assert oct(path.parent.parent.stat().st_mode & 0o777) == "0o700"
        assert oct(tmp_path.stat().st_mode & 0o777) == "0o755"
    finally:
        store.close()


def test_tool_calls_that_only_read_never_create_the_default_store(tmp_path: Path) -> None:
    """With no --store, a read answers store-not-found; the first write creates the default
    store, each folder of the data directory it makes private (0700)."""
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "STATEFLOW_STORE"}
    env["XDG_DATA_HOME"] = str(data)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, env=env)

    for name, arguments in (("read_state", '{"path": "tactics"}'), ("state_read", '{"state": "memory"}')):
        out = run("tool", name, arguments)
        assert out.returncode == 1 and out.stderr.startswith("error[store-not-found]: "), out.stderr
        assert not data.exists()
    out = run("tool", "patch_state", '{"session": {"tactics": {"next": "review"}}}')
    assert out.returncode == 0, out.stderr
    assert run("tool", "read_state", '{"path": "session.tactics"}').stdout == '{"value":{"next":"review"}}\n'
    for folder in (data, data / "stateflow"):
        assert oct(folder.stat().st_mode & 0o777) == "0o700", folder


def test_mode_ro_serves_reads_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    fill(str(path))
    before = path.read_bytes()
    ro = f"sqlite://{path}?mode=ro"
    out = sf(ro, "doc", "get", "notes", "n2")
    assert out.returncode == 0 and json.loads(out.stdout)["n"] == 3
    out = sf(ro, "doc", "put", "notes", "n2", '{"a": 1}')
    assert out.returncode == 1 and out.stderr.startswith("error[store-read-only]: "), out.stderr
    assert path.read_bytes() == before


def test_check_names_a_change_its_transition_does_not_list(tmp_path: Path) -> None:
    """On SQLite the audit page finds a transition's changes through the keys its row lists
    (``transitions.changed``): a change missing from that list, or naming no transition, is
    named; a listed key whose change was pruned is not damage."""
    import sqlite3

    location = str(tmp_path / "s.db")
    fill(location)
    store = open_store(location)
    try:
        cut = store.transitions(after_seq=1, limit=1)[0].at
        assert store.prune_history("notes", cut) == 1  # n0's first change: its key stays listed
    finally:
        store.close()
    out = sf(location, "check", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["problems"] == [], out.stdout
    lite = sqlite3.connect(location)
    with lite:
        lite.execute("UPDATE transitions SET changed = '[]' WHERE seq = 3")
        lite.execute("UPDATE changes SET seq = 99 WHERE seq = 4")
    lite.close()
    out = sf(location, "check", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["problems"] == [
        "transitions: the change of document 1 at revision 3 names transition 3, which does not list it",
        "transitions: the change of document 1 at revision 4 names transition 99, which is missing",
    ]


def test_check_refuses_a_store_of_another_schema_version_with_what_to_do_not_as_damage(
    backend: str, tmp_path: Path
) -> None:
    """A store an older stateflow left (a lower schema version) is not damaged: `check` says to
    migrate it, and one a newer stateflow left says to upgrade — neither lists every revision as
    damaged nor sends the operator to a backup. It reads only: the version stays as it was."""
    fill(backend)
    pg = backend.startswith("postgresql://")
    location = backend  # (a SQLite file as named: a command that only reads never upgrades it)

    def set_version(version: int) -> None:
        if pg:
            with psycopg.connect(backend, autocommit=True) as conn:
                conn.execute(
                    "UPDATE stateflow_meta SET value = %s WHERE key = 'schema_version'", (str(version),)
                )
        else:
            with closing(sqlite3.connect(backend)) as lite, lite:
                lite.execute(
                    "UPDATE stateflow_meta SET value = ? WHERE key = 'schema_version'", (str(version),)
                )

    def version_now() -> int:
        store = open_store(location, auto_migrate=False)
        try:
            return int(store.schema_version() or 0)
        finally:
            store.close()

    set_version(SCHEMA_VERSION - 1)
    out = sf(location, "check")
    assert out.returncode == 1
    assert "error[store-not-migrated]" in out.stderr
    assert f"is not migrated (schema version {SCHEMA_VERSION - 1}, need {SCHEMA_VERSION})" in out.stderr
    assert "migrate`" in out.stderr
    assert "damaged" not in out.stdout and "corrupt-store" not in out.stderr and "backup" not in out.stderr
    assert version_now() == SCHEMA_VERSION - 1

    set_version(SCHEMA_VERSION + 1)
    out = sf(location, "check", "--json")
    assert out.returncode == 1 and out.stdout == ""
    assert "error[store-too-new]" in out.stderr and "upgrade stateflow" in out.stderr
    assert version_now() == SCHEMA_VERSION + 1

    set_version(SCHEMA_VERSION)
    assert sf(location, "check").returncode == 0


def test_a_store_migrated_while_a_process_holds_it_is_refused_by_check_not_reported_damaged(
    backend: str,
) -> None:
    """A store this process already found at its version and then migrated by another release
    (or put back to an older one): its check refuses it as at open — upgrade stateflow, or
    migrate — rather than listing the version as a damage whose fix is a backup."""
    fill(backend)
    store = open_store(backend, auto_migrate=True)  # checked and in use, as a running server's
    try:
        assert check_store(store).ok
        for version, refusal in ((SCHEMA_VERSION + 1, StoreTooNew), (SCHEMA_VERSION - 1, StoreNotMigrated)):
            _set_version(backend, version)
            with pytest.raises(refusal, match=f"{re.escape(store.url)} .*schema version {version}"):
                check_store(store)
        _set_version(backend, SCHEMA_VERSION)
        assert check_store(store).ok
    finally:
        store.close()


def _set_version(location: str, version: int) -> None:
    if location.startswith("postgresql://"):
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute("UPDATE stateflow_meta SET value = %s WHERE key = 'schema_version'", (str(version),))
    else:
        with closing(sqlite3.connect(location)) as lite, lite:
            lite.execute("UPDATE stateflow_meta SET value = ? WHERE key = 'schema_version'", (str(version),))


def test_check_names_memory_records_its_record_rule_refuses(backend: str) -> None:
    """Memory records holding a ``null`` or a key of index form, written whole through the
    operator's door before memory's record rule refused them, are named by check — record and
    path, exit 1, not damage — and pass once rewritten as the report says."""
    from stateflow.api import states_service
    from stateflow.memory import Identity

    store = open_store(backend, auto_migrate=True)
    try:
        states_service(store)
        written = {
            Identity.of("a", "/", "s1").key("global"): {"tactics": {"x": None, "ok": 1}},
            Identity.of("a", "/", "s1").key("session"): {"strategy": {"plan": {"[0]": "first"}}},
            Identity.of("b", "/", "s1").key("global"): {"tactics": {"fine": True}},
        }
        for doc_key, body in written.items():  # (the store layer: what the door let through then)
            old = store.get(doc_key)
            store.commit([Write.between(doc_key, old.value, body, old.revision)], {"door": "operator"})
    finally:
        store.close()

    out = sf(backend, "check", "--json")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert report["problems"] == [] and report["ok"] is False
    assert report["refused_records"] == [
        "record global/global of agent a in state 'memory': memory cannot store null (at tactics.x); "
        "leave the key out instead",
        "record session/s1 of agent a in state 'memory': memory cannot store an index key as an object key "
        "(at strategy.plan['[0]'])",
    ]
    text = sf(backend, "check")
    assert text.returncode == 1
    assert "refused record: record global/global of agent a in state 'memory'" in text.stdout
    assert "error[invalid-document]: 2 record(s)" in text.stderr and "damaged" not in text.stdout

    for kind, key, data in (
        ("global", "global", '{"tactics": {"ok": 1}}'),
        ("session", "s1", '{"strategy": {}}'),
    ):
        rewritten = sf(
            backend,
            "states",
            "replace",
            "memory",
            "--target-name",
            "a",
            "--kind",
            kind,
            "--key",
            key,
            "--data",
            data,
        )
        assert rewritten.returncode == 0, rewritten.stderr
    assert sf(backend, "check").returncode == 0


@pytest.fixture(params=["sqlite", WHOLE_FORM, "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each backend, and SQLite with this module's states in whole form."""
    return store_location(request, tmp_path, ("notes",))
