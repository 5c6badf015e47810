"""What each part of a LangGraph saver ``put``'s commit costs SQLite (issue 16): the process's
CPU and the WAL frames per commit, with one part of the schema or of the statements left out at
a time.

A store is filled by real saver ``put``s (``bench_langgraph_adapters``' case); then, on a copy of
it per variant, the statements of a new checkpoint's commit are replayed by hand with the rows
the saver wrote last (the transition with its checks, the document's row, its member row, the
change with its edits inline), one transaction per checkpoint: what the store sends, without
our Python. The checks are the saver's own statement (``ledger.checked_transition``): the
state's aliases' row, its declaration's and the parent checkpoint's unmoved, no row under the
new key; the new keys sort last within the thread, as the saver's ascending ids do. Each variant leaves one part out: the transition's checks that nothing moved, the
counting triggers (or only the JSON parses of the subject that find its kind), the foreign
keys, the ``changes_by_seq`` index (a store of schema 15 or before; since 16 the transition's
row lists its changes' keys instead, and the variant adds the index back with its foreign key
as 15 had them), the change's edits (the first body, which the member row holds too), the
whole change row. The WAL is not checkpointed while a variant runs (its frames
are counted from the file's growth). Variants alternate round by round, their order reversing;
the report gives each one's median CPU per commit and its ratio to the commit as written. A store
of schema 42 or later has no counting triggers (its writers count: the replayed transition keeps
the checkpoint's deltas), so there the trigger variants change nothing.
Two variants keep every part and count differently: ``state_counts`` rebuilt ``WITHOUT ROWID``
(the same triggers), and the insert triggers' upserts split into an ``UPDATE`` and an ``INSERT``
run only when it changed nothing.

None of the variants is a valid store: each shows what a schema step that removes that part
could save at most, not a change to make as it stands.

    python3 -m benchmarks.profile_sqlite_commit_parts [--commits 2000] [--rounds 3]
        [--synchronous off|full] [--filled FILE] [--keep FILE] [--variants NAME ...]

To count instructions, fill once (``--keep``), then run one variant on that file under
callgrind with two numbers of commits (``--filled FILE --rounds 1 --variants "as written"``)
and divide the difference: the replay is the only part that grows. Run it with each tree's
``src`` on ``PYTHONPATH`` to compare schemas (the replay writes what the file's schema has).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from dataclasses import dataclass

import orjson

from benchmarks.bench_langgraph_adapters import saver_cases
from stateflow.langgraph import StateflowSaver
from stateflow.states import StatesService
from stateflow.states.pipeline import ALIASES, CATALOG
from stateflow.store import open_store
from stateflow.store.ledger import checked_transition
from stateflow.store.migrations import SQLITE_SUBJECT_KIND

VARIANTS = (
    "as written",
    "no transition checks",
    "no count triggers",
    "kind counted without JSON",
    "no foreign keys",
    "changes_by_seq toggled",
    "counts without rowid",
    "counts: update + insert",
    "change without its edits",
    "no change row",
)
FRAME = 4096 + 24
"""Bytes of one WAL frame (the default page size and its header)."""


@dataclass(frozen=True)
class Rows:
    """The last checkpoint's rows as the saver wrote them, and what its checks name."""

    state: str
    subject: str
    member: tuple[str, int, bytes | None, bytes]
    paths: bytes
    edits: bytes | None
    origin: bytes
    catalog: tuple[int, int]
    aliases: tuple[int, int] | None
    parent: tuple[int, int]


def fill(path: str, puts: int) -> Rows:
    """A store at ``path`` holding ``puts`` checkpoints in member form (the layout these
    replays take apart: the saver keeps a choice the store records); the rows of the last one."""
    store = open_store(path, auto_migrate=True)
    store.keep_whole("langgraph_checkpoints", 0)
    service = StatesService(store)
    put = saver_cases(StateflowSaver(service), "p")["saver put"]
    for i in range(puts):
        put(i)
    service.close()
    service.store.close()
    return last_rows(path)


def last_rows(path: str) -> Rows:
    """The rows of the last checkpoint in the filled store at ``path`` (its WAL emptied)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        doc_id, state, subject = conn.execute(
            "SELECT doc_id, state, subject FROM documents WHERE state NOT LIKE '\\_%' ESCAPE '\\' "
            "ORDER BY doc_id DESC LIMIT 1"
        ).fetchone()
        name, size, outline, body = conn.execute(
            "SELECT name, size, outline, body FROM members WHERE doc_id = ?", (doc_id,)
        ).fetchone()
        paths, edits = conn.execute("SELECT paths, edits FROM changes WHERE doc_id = ?", (doc_id,)).fetchone()
        (origin,) = conn.execute("SELECT origin FROM transitions ORDER BY seq DESC LIMIT 1").fetchone()
        # the rows every commit of the state checks: its aliases' (a row once the state has
        # one), its declaration's, and a checkpoint's parent's (here: the last checkpoint)
        aliases, catalog = (
            conn.execute(
                "SELECT doc_id, revision FROM documents WHERE state = ? AND subject = ?", (owner, state)
            ).fetchone()
            for owner in (ALIASES, CATALOG)
        )
        parent = conn.execute("SELECT revision FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
    finally:
        conn.close()
    return Rows(
        state,
        subject,
        (name, size, outline, body),
        paths,
        edits,
        origin,
        (catalog[0], catalog[1]),
        None if aliases is None else (aliases[0], aliases[1]),
        (doc_id, parent[0]),
    )


def without_rowid(conn: sqlite3.Connection) -> None:
    """``state_counts`` rebuilt ``WITHOUT ROWID``, its rows and triggers as they were (the triggers
    are dropped first: renaming a table rewrites the triggers that name it)."""
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        conn.execute(f'DROP TRIGGER "{name}"')
    conn.executescript(
        "ALTER TABLE state_counts RENAME TO state_counts_old; "
        "CREATE TABLE state_counts (state TEXT NOT NULL, counter TEXT NOT NULL, name TEXT NOT NULL, "
        "n BIGINT NOT NULL, PRIMARY KEY (state, counter, name)) WITHOUT ROWID; "
        "INSERT INTO state_counts SELECT state, counter, name, n FROM state_counts_old; "
        "DROP TABLE state_counts_old;"
    )
    for _, sql in triggers:
        conn.execute(sql)


def updated_then_inserted(conn: sqlite3.Connection) -> None:
    """The insert triggers' counter upserts as an ``UPDATE``, then an ``INSERT`` only when the
    update changed nothing (``changes()`` in a trigger counts its own last statement)."""
    kind = SQLITE_SUBJECT_KIND.format(s="NEW.subject")
    conn.execute("DROP TRIGGER count_documents_insert")
    conn.execute("DROP TRIGGER count_members_insert")
    conn.executescript(
        "CREATE TRIGGER count_documents_insert AFTER INSERT ON documents WHEN NEW.present = 1 BEGIN "
        f"UPDATE state_counts SET n = n + 1 WHERE state = NEW.state AND counter = 'kind' AND name = {kind}; "
        "INSERT INTO state_counts (state, counter, name, n) "
        f"SELECT NEW.state, 'kind', {kind}, 1 WHERE changes() = 0; END; "
        "CREATE TRIGGER count_members_insert AFTER INSERT ON members BEGIN "
        "UPDATE state_counts SET n = n + 1 WHERE counter = 'member' AND name = NEW.name "
        "AND state = (SELECT d.state FROM documents d WHERE d.doc_id = NEW.doc_id); "
        "INSERT INTO state_counts (state, counter, name, n) SELECT d.state, 'member', NEW.name, 1 "
        "FROM documents d WHERE d.doc_id = NEW.doc_id AND changes() = 0; END;"
    )


def seq_key(conn: sqlite3.Connection) -> None:
    """A schema-16 store given schema 15's ``changes_by_seq`` and foreign key from ``changes.seq``
    to ``transitions`` (written into the table's SQL: the rows do not change)."""
    conn.execute("CREATE INDEX changes_by_seq ON changes (seq)")
    (version,) = conn.execute("PRAGMA schema_version").fetchone()
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = replace(sql, 'seq BIGINT NOT NULL,', "
        "'seq BIGINT NOT NULL REFERENCES transitions (seq),') WHERE type = 'table' AND name = 'changes'"
    )
    conn.execute(f"PRAGMA schema_version = {version + 1}")
    conn.execute("PRAGMA writable_schema = OFF")


def replay(
    source: str, where: str, variant: str, rows: Rows, commits: int, synchronous: str
) -> tuple[float, float]:
    """CPU seconds and WAL frames per commit of ``commits`` new checkpoints under ``variant``."""
    path = os.path.join(where, "replay.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    shutil.copy(source, path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(f"PRAGMA foreign_keys = {'OFF' if variant == 'no foreign keys' else 'ON'}")
        conn.execute("PRAGMA cell_size_check = ON")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        if variant == "no count triggers":
            for (trigger,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger'"
            ).fetchall():
                conn.execute(f'DROP TRIGGER "{trigger}"')
        triggered = bool(
            conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'count_documents_insert'").fetchall()
        )
        if variant == "kind counted without JSON" and triggered:  # the same counter rows, the kind not parsed
            conn.execute("DROP TRIGGER count_documents_insert")
            conn.execute(
                "CREATE TRIGGER count_documents_insert AFTER INSERT ON documents WHEN NEW.present = 1 "
                "BEGIN INSERT INTO state_counts (state, counter, name, n) VALUES (NEW.state, 'kind', "
                "'checkpoint', 1) ON CONFLICT (state, counter, name) DO UPDATE SET n = n + 1; END"
            )
        indexed = bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'changes_by_seq'").fetchall())
        if variant == "changes_by_seq toggled" and indexed:
            conn.execute("DROP INDEX changes_by_seq")
        elif variant == "changes_by_seq toggled":  # schema 15's index and foreign key, not the list
            seq_key(conn)
            indexed = True
        listed = not indexed  # (schema 16: the transition lists its changes' keys)
        if variant == "counts without rowid" and triggered:
            without_rowid(conn)
        if variant == "counts: update + insert" and triggered:
            updated_then_inserted(conn)
        (top,) = conn.execute("SELECT max(doc_id) FROM documents").fetchone()
        wal = path + "-wal"
        before = os.path.getsize(wal) if os.path.exists(wal) else 0
        name, size, outline, body = rows.member
        # the saver's own check, shaped as it sends it (ledger.checked_transition): the aliases'
        # row where it exists (else none), the declaration's and the parent's rows unmoved, and
        # no row yet under the new key
        known = [*([rows.aliases] if rows.aliases else []), rows.catalog, rows.parent]
        shape = ("r" if rows.aliases else "n") + "rr" + "n"
        # a store of schema 42 or later: the transition keeps the commit's counters' deltas
        counts = any(c[1] == "counted" for c in conn.execute("PRAGMA table_info(transitions)").fetchall())
        counted = orjson.dumps(
            [[rows.state, "kind", "checkpoint", 1], [rows.state, "member", name, 1]]
        ).decode()
        checked = checked_transition(listed, shape, 0, counts) + " RETURNING seq"
        ahead = () if rows.aliases else (ALIASES, rows.state)
        started = time.process_time()
        for i in range(commits):
            doc_id = top + 1 + i
            # after the thread's others (the last written is its newest), as the saver's ids sort
            subject = f"{rows.subject[:-2]}{i:08d}{rows.subject[-2:]}"
            at = 1_796_209_654_984_516 + i
            conn.execute("BEGIN IMMEDIATE")
            columns, values, given = (
                ("at, origin, changed", "?, ?, ?", (at, rows.origin, f"[[{doc_id},1]]"))
                if listed
                else ("at, origin", "?, ?", (at, rows.origin))
            )
            if counts:
                columns, values, given = f"{columns}, counted", f"{values}, ?", (*given, counted)
            if variant == "no transition checks":
                inserted = conn.execute(
                    f"INSERT INTO transitions ({columns}) VALUES ({values}) RETURNING seq", given
                ).fetchall()
            else:
                found = [v for row in known for v in row]
                inserted = conn.execute(checked, (*given, *ahead, *found, rows.state, subject)).fetchall()
            seq = inserted[0][0]
            conn.execute(
                "INSERT INTO documents (doc_id, state, subject, revision, present, updated_seq, "
                "snapshot_revision, bytes_since_snapshot, body_size, next_position) "
                "VALUES (?, ?, ?, 1, 1, ?, 0, ?, ?, 1)",
                (doc_id, rows.state, subject, seq, len(rows.edits or b""), size),
            )
            conn.execute(
                "INSERT INTO members (doc_id, name, position, revision, size, outline, body, root) "
                "VALUES (?, ?, 0, 1, ?, ?, ?, NULL)",
                (doc_id, name, size, outline, body),
            )
            if variant != "no change row":
                edits = None if variant == "change without its edits" else rows.edits
                conn.execute(
                    "INSERT INTO changes (doc_id, revision, seq, paths, edits) VALUES (?, 1, ?, ?, ?)",
                    (doc_id, seq, rows.paths, edits),
                )
            conn.execute("COMMIT")
        cpu = (time.process_time() - started) / commits
        frames = (os.path.getsize(wal) - before) / FRAME / commits
    finally:
        conn.close()
    return cpu, frames


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fill", type=int, default=2000, help="saver puts in the store first")
    parser.add_argument("--synchronous", default="off", choices=["off", "normal", "full"])
    parser.add_argument("--filled", help="replay on a copy of this filled store instead of filling one")
    parser.add_argument("--keep", help="copy the filled store here")
    parser.add_argument("--variants", nargs="*", choices=VARIANTS, help="only these (default: all)")
    args = parser.parse_args()
    variants = tuple(v for v in VARIANTS if not args.variants or v in args.variants)
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "filled.db")
        if args.filled:
            shutil.copy(args.filled, source)
            rows = last_rows(source)
        else:
            rows = fill(source, args.fill)
        if args.keep:
            shutil.copy(source, args.keep)
        cpu: dict[str, list[float]] = {v: [] for v in variants}
        frames: dict[str, list[float]] = {v: [] for v in variants}
        for round_ in range(args.rounds):
            for variant in variants if round_ % 2 == 0 else reversed(variants):
                spent, written = replay(source, tmp, variant, rows, args.commits, args.synchronous.upper())
                cpu[variant].append(spent)
                frames[variant].append(written)
        print(
            f"== a new checkpoint's commit, replayed: synchronous={args.synchronous}, "
            f"{args.commits} commits x {args.rounds} rounds (member {rows.member[1]} B, "
            f"change edits {len(rows.edits or b'')} B)"
        )
        whole = statistics.median(cpu[variants[0]])
        for variant in variants:
            median = statistics.median(cpu[variant])
            print(
                f"  {variant:26s} CPU {median * 1e6:7.1f} µs per commit ({median / whole:4.2f}×, "
                f"rounds {min(cpu[variant]) * 1e6:.0f}–{max(cpu[variant]) * 1e6:.0f} µs)  "
                f"WAL frames {statistics.median(frames[variant]):5.2f} per commit"
            )


if __name__ == "__main__":
    main()
