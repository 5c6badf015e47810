"""The least write that keeps history and audit, by hand, next to LangGraph's and ours.

``bench_langgraph_adapters`` asks our adapters' writes for at least 0.8× LangGraph's rate. This
script measures what no implementation of the contract gets under: a checkpoint ``put``, a
checkpoint's ``put_writes`` and a store ``put`` written by hand for these shapes — the record
built in memory, checked against the state's JSON Schema, its members encoded, and, in one
durable transaction, the audit row (transition with its origin), the document's row, its member
rows and the history row (the change with its edits) — on minimal tables (no per-state counts,
no value or state indexes, no checks that another writer moved anything, no generality).
``put_writes`` keeps a checkpoint's pending writes as ours does: one writes record per
checkpoint, a task's entries in the bucket member its id hashes to (the record new: one member;
a bucket new to it: a member row added; else the bucket's row rewritten whole), the change
holding the entries' edits, so each pending write is readable at every revision. Beside it,
LangGraph's saver ``put`` and ``put_writes`` and store ``put`` and ours (``StateflowSaver`` /
``StateflowStore``) through the same cases as ``bench_langgraph_adapters`` (one caller;
``put_writes``: two writes of a new task per call, calls 0…ops-1 every round as there, so most
add to a checkpoint's existing writes record).

- SQLite (the default): WAL, ``synchronous=FULL`` everywhere; the hand's transaction is
  ``BEGIN IMMEDIATE``, one statement per row, ``COMMIT``. LangGraph: ``SqliteSaver`` /
  ``SqliteStore``.
- PostgreSQL (``--backend postgres``, ``--postgres URL`` or ``$STATEFLOW_TEST_POSTGRES``): the
  same server for every side, each in a fresh schema, autocommit at the server's
  ``synchronous_commit`` (every acknowledged write flushed, as LangGraph's ``PostgresSaver`` /
  ``PostgresStore`` and ours). The hand's write is **one statement** (one round trip, prepared):
  the transition's insert — taking the transaction's advisory lock that makes seqs visible in
  commit order, as ours must — and the document's, members' and change's rows as data-modifying
  CTEs; the server's CPU per write is each side's backends' (``/proc/<pid>/stat``, the server
  on this machine), beside the client's.

Each round runs every side, the order rotating; the script prints each side's median wall time
and CPU time per write and the rate ratio against LangGraph (its time / ours) with the spread of
the rounds and how many rounds reached the issue's 0.8×, and ours against the floor by hand (its
time / ours), round by round.

    python3 -m benchmarks.bench_langgraph_floor [--ops 400] [--rounds 6] [--backend sqlite|postgres]
        [--cases "saver put" "saver put_writes" "store put"]   (≥ 15 rounds to settle a ratio;
        ``saver put_writes`` alone writes onto the 200 checkpoints of the warm-up's puts)
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson
from langgraph.checkpoint.base import WRITES_IDX_MAP

from benchmarks.bench_langgraph_adapters import (
    KEYS,
    THREADS,
    Case,
    postgres_schemas,
    saver_cases,
    store_cases,
)
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.langgraph.pending_writes import bucket as _bucket
from stateflow.langgraph.saver import DECLARATION as SAVER_DECLARATION
from stateflow.langgraph.saver import STATE
from stateflow.langgraph.store import DECLARATION as STORE_DECLARATION
from stateflow.states import StatesService
from stateflow.store import open_store

TARGET = 0.8
"""The issue's target for writes: this rate against LangGraph's."""

_TABLES = """
CREATE TABLE transitions (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, origin BLOB NOT NULL);
CREATE TABLE documents (doc_id INTEGER PRIMARY KEY, state TEXT NOT NULL, subject TEXT NOT NULL,
    revision INTEGER NOT NULL, updated_seq INTEGER, UNIQUE (state, subject));
CREATE TABLE members (doc_id INTEGER NOT NULL, name TEXT NOT NULL, revision INTEGER NOT NULL,
    body BLOB NOT NULL, PRIMARY KEY (doc_id, name));
CREATE TABLE changes (doc_id INTEGER NOT NULL, revision INTEGER NOT NULL, seq INTEGER NOT NULL,
    paths BLOB NOT NULL, edits BLOB NOT NULL, PRIMARY KEY (doc_id, revision));
"""

_SET_MEMBER = "UPDATE members SET revision = ?, body = ? WHERE doc_id = ? AND name = ?"
_ADD_MEMBER = "INSERT INTO members (revision, body, doc_id, name) VALUES (?, ?, ?, ?)"

_PG_TABLES = """
CREATE TABLE transitions (seq bigserial PRIMARY KEY, at text NOT NULL, origin bytea NOT NULL);
CREATE TABLE documents (doc_id bigserial PRIMARY KEY, state text NOT NULL, subject text NOT NULL,
    revision bigint NOT NULL, updated_seq bigint, UNIQUE (state, subject));
CREATE TABLE members (doc_id bigint NOT NULL, name text NOT NULL, revision bigint NOT NULL,
    body bytea NOT NULL, PRIMARY KEY (doc_id, name));
CREATE TABLE changes (doc_id bigint NOT NULL, revision bigint NOT NULL, seq bigint NOT NULL,
    paths bytea NOT NULL, edits bytea NOT NULL, PRIMARY KEY (doc_id, revision));
"""
_PG_TRANSITION = (
    "t AS (INSERT INTO transitions (at, origin) SELECT %(at)s::text, %(origin)s::bytea "
    "FROM (SELECT pg_advisory_xact_lock(%(lock)s::bigint)) l RETURNING seq)"
)
_PG_NEW = (
    f"WITH {_PG_TRANSITION}, "
    "d AS (INSERT INTO documents (state, subject, revision, updated_seq) "
    "SELECT %(state)s::text, %(subject)s::text, 1, seq FROM t RETURNING doc_id, updated_seq), "
    "m AS (INSERT INTO members (doc_id, name, revision, body) "
    "SELECT d.doc_id, x.n, 1, x.b FROM d, unnest(%(names)s::text[], %(bodies)s::bytea[]) AS x(n, b)) "
    "INSERT INTO changes (doc_id, revision, seq, paths, edits) "
    "SELECT doc_id, 1, updated_seq, %(paths)s::bytea, %(edits)s::bytea FROM d RETURNING doc_id"
)
"""A new document in one statement: transition, document, members, change."""
_PG_MEMBER = (
    f"WITH {_PG_TRANSITION}, "
    "d AS (UPDATE documents SET revision = %(revision)s::bigint, updated_seq = (SELECT seq FROM t) "
    "WHERE doc_id = %(doc_id)s::bigint), m AS ({member}) "
    "INSERT INTO changes (doc_id, revision, seq, paths, edits) "
    "SELECT %(doc_id)s::bigint, %(revision)s::bigint, seq, %(paths)s::bytea, %(edits)s::bytea FROM t"
)
_PG_REWRITE = _PG_MEMBER.format(
    member="UPDATE members SET revision = %(revision)s::bigint, body = %(body)s::bytea "
    "WHERE doc_id = %(doc_id)s::bigint AND name = %(name)s::text"
)
"""One member of a document rewritten in one statement: transition, document, member, change."""
_PG_ADD = _PG_MEMBER.format(
    member="INSERT INTO members (doc_id, name, revision, body) "
    "VALUES (%(doc_id)s::bigint, %(name)s::text, %(revision)s::bigint, %(body)s::bytea)"
)
"""``_PG_REWRITE`` with the member added to the document."""


def _micros() -> int:
    return int(datetime.now(UTC).timestamp() * 1e6)


class ByHand:
    """The least saver ``put`` and ``put_writes`` and store ``put`` for the benchmark's shapes
    (see the module); a backend writes the rows (``_new``, ``_rewrite``) on its connection."""

    conn: Any

    def __init__(self) -> None:
        self.checkpoints = jsonschema_rs.validator_for(SAVER_DECLARATION["schema"])
        self.items = jsonschema_rs.validator_for(STORE_DECLARATION["schema"])
        self.origin = orjson.dumps({"consumer": "langgraph", "door": "api", "action": "replace"})
        self.held: dict[int, tuple[int, int, dict[str, Any]]] = {}  # item → doc id, revision, record
        # a writes record's subject → its doc id, revision and buckets
        self.pending: dict[str, tuple[int, int, dict[str, dict[str, Any]]]] = {}

    def _new(
        self, state: str, subject: str, members: list[tuple[str, bytes]], paths: bytes, edits: bytes
    ) -> int:
        """A new document's rows in one durable transaction: its doc id."""
        raise NotImplementedError

    def _rewrite(
        self, doc_id: int, revision: int, name: str, body: bytes, paths: bytes, edits: bytes, added: bool
    ) -> None:
        """Member ``name`` rewritten (or ``added``), in one durable transaction."""
        raise NotImplementedError

    def _checkpoint_record(
        self, conf: Any, checkpoint: Any, metadata: Any, new_versions: Any
    ) -> dict[str, Any]:
        """A checkpoint's record as ours keeps it (names, the checkpoint without its values, its
        metadata, the values of the channels it wrote), checked against the state's schema."""
        values = checkpoint["channel_values"]
        record = {
            "config": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": conf.get("checkpoint_ns", ""),
                "checkpoint_id": checkpoint["id"],
                "parent_checkpoint_id": conf.get("checkpoint_id"),
                "run_id": None,
            },
            "saved": {
                "checkpoint": {"json": {k: v for k, v in checkpoint.items() if k != "channel_values"}},
                "metadata": {"json": metadata},
                "channel_values": {c: {"json": values[c]} for c in new_versions if c in values},
                "sources": {},
            },
        }
        if not self.checkpoints.is_valid(record):
            raise ValueError(record)
        return record

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        """A checkpoint record (names, the checkpoint without its values, its metadata, the
        values of the channels it wrote), new: one document, two members, one change."""
        conf = config["configurable"]
        record = self._checkpoint_record(conf, checkpoint, metadata, new_versions)
        members = [(name, orjson.dumps(value)) for name, value in record.items()]
        subject = f"{conf['thread_id']}/{checkpoint['id']}"
        self._new(STATE, subject, members, b"[[]]", orjson.dumps([[[], record]]))
        return {"configurable": {**conf, "checkpoint_id": checkpoint["id"]}}

    def store_put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        """An item record rewritten (its ``value`` member changed): one member row, one change."""
        item = hash((namespace, key))
        now = datetime.now(UTC).isoformat()
        held = self.held.get(item)
        record = {
            "namespace": list(namespace),
            "key": key,
            "value": value,
            "created_at": held[2]["created_at"] if held else now,
            "expires_at": None,
            "ttl_minutes": None,
        }
        if not self.items.is_valid(record):
            raise ValueError(record)
        body = orjson.dumps(value)
        if held is None:
            doc_id, revision = (
                self._new(
                    "langgraph_store",
                    "/".join((*namespace, key)),
                    [(n, orjson.dumps(v)) for n, v in record.items()],
                    b'[["value"]]',
                    orjson.dumps([[[], record]]),
                ),
                1,
            )
        else:
            doc_id, revision = held[0], held[1] + 1
            self._rewrite(
                doc_id, revision, "value", body, b'[["value"]]', b'[[["value"],' + body + b"]]", False
            )
        self.held[item] = (doc_id, revision, record)

    def put_writes(
        self, config: Any, writes: list[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """A task's pending writes into its checkpoint's writes record, in the bucket member its
        id hashes to, as ours keeps them: the record new (one document, one member, one change),
        the bucket new to it (a member row added) or the bucket rewritten whole with the task's
        entries (its member row); one change with the entries' edits."""
        conf = config["configurable"]
        bucket = _bucket(task_id)
        fresh = {}
        paths = []
        for n, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, n)
            name = f"{task_id}:{idx}"
            fresh[name] = [channel, {"json": value}, task_path]
            paths.append([bucket, name])
        if not self.checkpoints.is_valid({bucket: fresh}):  # (the bucket's other entries were)
            raise ValueError(fresh)
        subject = f"writes/{conf['thread_id']}/{conf.get('checkpoint_ns', '')}/{conf['checkpoint_id']}"
        held = self.pending.get(subject)
        if held is None:
            edits = orjson.dumps([[[], {bucket: fresh}]])
            doc_id = self._new(STATE, subject, [(bucket, orjson.dumps(fresh))], orjson.dumps(paths), edits)
            self.pending[subject] = (doc_id, 1, {bucket: fresh})
            return
        doc_id, revision, buckets = held
        current = buckets.get(bucket)
        if current is None:  # the bucket set whole
            merged, edits = fresh, orjson.dumps([[[bucket], fresh]])
        else:  # the task's entries set each
            merged, edits = {**current, **fresh}, orjson.dumps([[p, fresh[p[1]]] for p in paths])
        buckets[bucket] = merged
        self._rewrite(
            doc_id, revision + 1, bucket, orjson.dumps(merged), orjson.dumps(paths), edits, current is None
        )
        self.pending[subject] = (doc_id, revision + 1, buckets)


class SqliteHand(ByHand):
    """``BEGIN IMMEDIATE``, one statement per row, ``COMMIT``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__()
        conn.executescript(_TABLES)
        self.conn = conn

    def _commit(self, rows: Callable[[int], Any]) -> Any:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        seq = conn.execute(
            "INSERT INTO transitions (at, origin) VALUES (?, ?) RETURNING seq", (_micros(), self.origin)
        ).fetchone()[0]
        out = rows(seq)
        conn.execute("COMMIT")
        return out

    def _new(
        self, state: str, subject: str, members: list[tuple[str, bytes]], paths: bytes, edits: bytes
    ) -> int:
        def rows(seq: int) -> int:
            doc_id = int(
                self.conn.execute(
                    "INSERT INTO documents (state, subject, revision, updated_seq) VALUES (?, ?, 1, ?) "
                    "RETURNING doc_id",
                    (state, subject, seq),
                ).fetchone()[0]
            )
            self.conn.executemany(
                "INSERT INTO members VALUES (?, ?, 1, ?)", [(doc_id, n, body) for n, body in members]
            )
            self.conn.execute("INSERT INTO changes VALUES (?, 1, ?, ?, ?)", (doc_id, seq, paths, edits))
            return doc_id

        return int(self._commit(rows))

    def _rewrite(
        self, doc_id: int, revision: int, name: str, body: bytes, paths: bytes, edits: bytes, added: bool
    ) -> None:
        def rows(seq: int) -> None:
            conn = self.conn
            conn.execute(_ADD_MEMBER if added else _SET_MEMBER, (revision, body, doc_id, name))
            conn.execute(
                "UPDATE documents SET revision = ?, updated_seq = ? WHERE doc_id = ?", (revision, seq, doc_id)
            )
            conn.execute("INSERT INTO changes VALUES (?, ?, ?, ?, ?)", (doc_id, revision, seq, paths, edits))

        self._commit(rows)


_LEAN_TABLES = """
CREATE TABLE transitions (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, origin BLOB NOT NULL);
CREATE TABLE documents (doc_id INTEGER PRIMARY KEY, state TEXT NOT NULL, subject TEXT NOT NULL,
    revision INTEGER NOT NULL, body BLOB NOT NULL, UNIQUE (state, subject));
CREATE TABLE changes (doc_id INTEGER NOT NULL, revision INTEGER NOT NULL, seq INTEGER NOT NULL,
    edits BLOB, PRIMARY KEY (doc_id, revision));
"""
_LEANEST_TABLES = """
CREATE TABLE documents (doc_id INTEGER PRIMARY KEY, state TEXT NOT NULL, subject TEXT NOT NULL,
    revision INTEGER NOT NULL, body BLOB NOT NULL, UNIQUE (state, subject));
CREATE TABLE changes (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, origin BLOB NOT NULL,
    doc_id INTEGER NOT NULL, revision INTEGER NOT NULL, edits BLOB, UNIQUE (doc_id, revision));
"""
_LOG_TABLE = """
CREATE TABLE log (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, origin BLOB NOT NULL,
    state TEXT NOT NULL, subject TEXT NOT NULL, revision INTEGER NOT NULL, body BLOB NOT NULL,
    UNIQUE (state, subject, revision));
"""
LEAN_LAYOUTS = ("lean 3", "lean 3, no copy", "lean 2", "lean 1")
"""The leaner layouts ``LeanHand`` writes (see it), each a side of the SQLite comparison."""


class LeanHand(ByHand):
    """The saver's ``put`` and the store's ``put`` with fewer rows than ``SqliteHand``'s, keeping
    the same guarantees — the record checked against its schema, every revision readable from
    the rows, an audit row with the write's origin — in one durable transaction:

    - ``lean 3``: a document's whole body in its own row (no member rows); the transition, the
      document and the change (the whole body on creation, the edits after) — three rows.
    - ``lean 3, no copy``: the same, but a creating change keeps no copy of the body (its
      ``edits`` NULL: revision 1 *is* the document's row until a rewrite, which first moves the
      old body into that change) — three rows, the body written once.
    - ``lean 2``: ``lean 3, no copy`` with the audit (seq, time, origin) in the change row —
      two rows: the document and its change.
    - ``lean 1``: one row a write, appended to a log keyed by seq and by (state, subject,
      revision): the audit and the revision's whole body — LangGraph's own row with the audit's
      columns added; a record's newest revision is its highest (no row of it is ever rewritten).

    The rows' ids are read from ``lastrowid`` (no ``RETURNING``). ``put_writes`` is not written
    for these layouts (a writes record is several members)."""

    def __init__(self, conn: sqlite3.Connection, layout: str) -> None:
        super().__init__()
        if layout not in LEAN_LAYOUTS:
            raise ValueError(layout)
        self.layout = layout
        self.log = layout == "lean 1"
        self.audit_apart = layout in ("lean 3", "lean 3, no copy")
        self.copy_first = layout == "lean 3"
        conn.executescript(_LOG_TABLE if self.log else _LEAN_TABLES if self.audit_apart else _LEANEST_TABLES)
        self.conn = conn

    def _append(self, state: str, subject: str, revision: int, record: dict[str, Any]) -> None:
        """``lean 1``: the revision's one row, in its own durable transaction."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO log (at, origin, state, subject, revision, body) VALUES (?, ?, ?, ?, ?, ?)",
            (_micros(), self.origin, state, subject, revision, orjson.dumps(record)),
        )
        conn.execute("COMMIT")

    def _change(self, doc_id: int, revision: int, edits: bytes | None) -> None:
        """The change's row and the audit: one row (``lean 2``) or the transition's and its own."""
        conn = self.conn
        if self.audit_apart:
            cur = conn.execute("INSERT INTO transitions (at, origin) VALUES (?, ?)", (_micros(), self.origin))
            conn.execute("INSERT INTO changes VALUES (?, ?, ?, ?)", (doc_id, revision, cur.lastrowid, edits))
        else:
            conn.execute(
                "INSERT INTO changes (at, origin, doc_id, revision, edits) VALUES (?, ?, ?, ?, ?)",
                (_micros(), self.origin, doc_id, revision, edits),
            )

    def _create(self, state: str, subject: str, record: dict[str, Any]) -> int:
        if self.log:
            self._append(state, subject, 1, record)
            return 0  # (no document row: a record is its state and subject)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        doc_id = conn.execute(
            "INSERT INTO documents (state, subject, revision, body) VALUES (?, ?, 1, ?)",
            (state, subject, orjson.dumps(record)),
        ).lastrowid
        self._change(doc_id, 1, orjson.dumps([[[], record]]) if self.copy_first else None)
        conn.execute("COMMIT")
        return int(doc_id)

    def _new(
        self, state: str, subject: str, members: list[tuple[str, bytes]], paths: bytes, edits: bytes
    ) -> int:
        raise NotImplementedError("a lean layout writes the record whole (_create)")

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        """``ByHand.put``'s record, checked, written as one document row and its change."""
        conf = config["configurable"]
        record = self._checkpoint_record(conf, checkpoint, metadata, new_versions)
        self._create(STATE, f"{conf['thread_id']}/{checkpoint['id']}", record)
        return {"configurable": {**conf, "checkpoint_id": checkpoint["id"]}}

    def store_put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        """``ByHand.store_put``'s record, checked; a rewrite sets the document's body whole and
        keeps the ``value`` edit in its change (first moving a creating change's body into it
        where that change kept none)."""
        item = hash((namespace, key))
        now = datetime.now(UTC).isoformat()
        held = self.held.get(item)
        record = {
            "namespace": list(namespace),
            "key": key,
            "value": value,
            "created_at": held[2]["created_at"] if held else now,
            "expires_at": None,
            "ttl_minutes": None,
        }
        if not self.items.is_valid(record):
            raise ValueError(record)
        if held is None:
            self.held[item] = (
                self._create("langgraph_store", "/".join((*namespace, key)), record),
                1,
                record,
            )
            return
        doc_id, revision = held[0], held[1] + 1
        if self.log:
            self._append("langgraph_store", "/".join((*namespace, key)), revision, record)
            self.held[item] = (doc_id, revision, record)
            return
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        if revision == 2 and not self.copy_first:  # revision 1 kept in the change before it goes
            conn.execute(
                "UPDATE changes SET edits = ? WHERE doc_id = ? AND revision = 1",
                (orjson.dumps([[[], held[2]]]), doc_id),
            )
        conn.execute(
            "UPDATE documents SET revision = ?, body = ? WHERE doc_id = ?",
            (revision, orjson.dumps(record), doc_id),
        )
        self._change(doc_id, revision, b'[[["value"],' + orjson.dumps(value) + b"]]")
        conn.execute("COMMIT")
        self.held[item] = (doc_id, revision, record)

    def put_writes(
        self, config: Any, writes: list[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        raise NotImplementedError("not written for the lean layouts")


def _up_to_values(statement: str) -> str:
    """A statement up to its values: an insert's table and columns."""
    return re.split(r" (?:SELECT|VALUES) ", statement, maxsplit=1)[0]


class OurRows:
    """A saver ``put``'s rows exactly as ours commits them, sent by hand with nothing else: on
    a store file of our own schema, the statements SQLite's trace shows for one put of
    ``StateflowSaver`` — ``BEGIN IMMEDIATE``; the transition (with its checks that the state's
    declaration rows did not move, and its ``changed`` and ``counted`` columns); the document's
    row in whole form; the change keeping the mark; ``COMMIT`` — with that put's values, each
    call under a new document id and subject. No record built, encoded or checked, no cache, no
    turn, no Python of ours: what the layout's statements cost alone, beside LangGraph's whole
    ``put``. The shape is checked against the trace when made, so a store that changes its
    statements (a table or a column) fails here rather than measuring rows it no longer writes."""

    _TRANSITION = "INSERT INTO transitions (at, origin, changed, counted) SELECT ?, ?, ?, ? WHERE {checks} RETURNING seq"
    _DOCUMENT = (
        "INSERT INTO documents (doc_id, state, subject, revision, present, updated_seq, snapshot_revision, "
        "bytes_since_snapshot, body_size, next_position, body) VALUES (?, ?, ?, 1, 1, ?, 0, ?, ?, 1, ?)"
    )
    _CHANGE = "INSERT INTO changes (doc_id, revision, seq, paths, edits) VALUES (?, 1, ?, ?, ?)"

    def __init__(self, path: Path) -> None:
        store = open_store(f"sqlite:///{path}?synchronous=full")
        sent: list[str] = []
        try:
            cases = saver_cases(StateflowSaver(StatesService(store)), "r")
            for i in range(8):  # (past the first puts, which create the declaration and head rows)
                cases["saver put"](i)
            writer = store._writer()  # type: ignore[attr-defined]
            writer.set_trace_callback(sent.append)
            cases["saver put"](8)
            writer.set_trace_callback(None)
        finally:
            store.close()
        # (each insert's table and columns, up to its values, as ours writes them)
        mine = ("BEGIN IMMEDIATE", self._TRANSITION, self._DOCUMENT, self._CHANGE, "COMMIT")
        if list(map(_up_to_values, sent)) != list(map(_up_to_values, mine)):
            raise RuntimeError(f"a saver put no longer sends these statements: {sent}")
        checks = re.findall(r"doc_id = (\d+) AND revision = (\d+)", sent[1])
        self._transition = self._TRANSITION.format(
            checks=" AND ".join(
                f"EXISTS (SELECT 1 FROM documents WHERE doc_id = {d} AND revision = {r})" for d, r in checks
            )
        )
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA synchronous = FULL")
        self.conn = conn
        self.origin, self.counted = conn.execute(
            "SELECT origin, counted FROM transitions ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        self.doc_id, self.state, subject, self.body, self.size, self.body_size = conn.execute(
            "SELECT doc_id, state, subject, body, bytes_since_snapshot, body_size FROM documents "
            "ORDER BY doc_id DESC LIMIT 1"
        ).fetchone()
        self.thread = subject[: subject.index("//") - 1]  # (up to the thread's number)
        self.paths, self.edits = conn.execute(
            "SELECT paths, edits FROM changes WHERE doc_id = ?", (self.doc_id,)
        ).fetchone()
        self.doc_id += 1_000_000  # (clear of the ids the store reserved)

    def put(self, i: int) -> None:
        """One put's rows: a new document (its id and subject new) in one durable transaction."""
        conn = self.conn
        doc_id = self.doc_id = self.doc_id + 1
        conn.execute("BEGIN IMMEDIATE")
        seq = conn.execute(
            self._transition, (_micros(), self.origin, f"[[{doc_id},1]]", self.counted)
        ).fetchone()[0]
        conn.execute(
            self._DOCUMENT,
            # (four threads in turn, each one's ids ascending, as the benchmark's puts)
            (
                doc_id,
                self.state,
                f'{self.thread}{i % THREADS}//{i:064x}"]',
                seq,
                self.size,
                self.body_size,
                self.body,
            ),
        )
        conn.execute(self._CHANGE, (doc_id, seq, self.paths, self.edits))
        conn.execute("COMMIT")


class PostgresHand(ByHand):
    """One prepared statement per write on an autocommit connection (see the module)."""

    def __init__(self, conn: Any) -> None:
        super().__init__()
        conn.execute(_PG_TABLES)
        self.conn = conn

    def _params(self) -> dict[str, Any]:
        return {"at": datetime.now(UTC).isoformat(), "origin": self.origin, "lock": 0x5EF10}

    def _new(
        self, state: str, subject: str, members: list[tuple[str, bytes]], paths: bytes, edits: bytes
    ) -> int:
        params = self._params()
        params.update(
            state=state,
            subject=subject,
            names=[n for n, _ in members],
            bodies=[b for _, b in members],
            paths=paths,
            edits=edits,
        )
        row = self.conn.execute(_PG_NEW, params, prepare=True).fetchone()
        return int(row[0])

    def _rewrite(
        self, doc_id: int, revision: int, name: str, body: bytes, paths: bytes, edits: bytes, added: bool
    ) -> None:
        params = self._params()
        params.update(doc_id=doc_id, revision=revision, name=name, body=body, paths=paths, edits=edits)
        self.conn.execute(_PG_ADD if added else _PG_REWRITE, params, prepare=True)


class _Hand:
    """``ByHand`` behind the two methods the benchmark's cases call."""

    def __init__(self, hand: ByHand) -> None:
        self.put = hand.put
        self.put_writes = hand.put_writes
        self.hand = hand

    def get_next_version(self, current: Any, channel: Any) -> Any:
        return (current or 0) + 1


Sides = dict[str, dict[str, Case]]
ServerCpu = Callable[[str], float]
"""A side's server CPU seconds so far (its backends'), or 0 where the server is not measured."""


def _no_server() -> float:
    return 0.0


def _side(fn: Case, n: int, start: int, server: Callable[[], float]) -> tuple[float, float, float]:
    """Wall, client CPU and server CPU milliseconds per call of ``n`` calls."""
    served = server()
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(start, start + n):
        fn(i)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / n * 1e3, cpu / n * 1e3, (server() - served) / n * 1e3


CASES = ("saver put", "saver put_writes", "store put")
"""Every case, in the order measured (``saver put_writes`` writes onto the checkpoints of the
``saver put`` before it)."""


def _compare(
    label: str, sides: Sides, ops: int, rounds: int, cases: list[str], server: ServerCpu | None = None
) -> None:
    if "saver put_writes" in cases and "saver put" not in cases:  # (its checkpoints: 200 puts)
        for i in range(KEYS):
            for side in sides.values():
                if "saver put_writes" in side:
                    side["saver put"](i)
    for case in [c for c in CASES if c in cases]:
        names = [name for name, side in sides.items() if case in side]  # (a lean side: two cases)
        for i in range(KEYS):  # warm: every store key written once, a chain started, its writes
            for name in names:
                sides[name][case](i)
        measured: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            # put_writes as ``bench_langgraph_adapters`` runs it: calls 0…ops-1 every round, so
            # each round adds a task's writes to the same checkpoints' writes records
            start = 0 if case == "saver put_writes" else 1000 + r * ops
            for name in order:
                cpu_of = partial(server, name) if server else _no_server
                measured[name].append(_side(sides[name][case], ops, start, cpu_of))
        lg = measured["langgraph"]
        for name in names:
            walls = [w for w, _, _ in measured[name]]
            cpus = [c for _, c, _ in measured[name]]
            servers = [s for _, _, s in measured[name]]
            ratios = [b[0] / m[0] for m, b in zip(measured[name], lg, strict=True)]
            reached = sum(r >= TARGET for r in ratios)
            on_server = f", server {statistics.median(servers):.3f} ms" if server else ""
            print(
                f"{label} {case:<16} {name:<15} {statistics.median(walls):6.3f} ms/write "
                f"(CPU {statistics.median(cpus):.3f} ms{on_server})   rate vs LangGraph "
                f"{statistics.median(ratios):4.2f}× ({min(ratios):.2f}–{max(ratios):.2f}×), "
                f"{reached} of {len(ratios)} rounds ≥ {TARGET}×",
                flush=True,
            )
            if name == "stateflow":  # ours against the floor by hand, round by round
                floor = [h[0] / m[0] for m, h in zip(measured[name], measured["by hand"], strict=True)]
                print(
                    f"{label} {case:<16} stateflow ÷ by hand      {statistics.median(floor):4.2f}× "
                    f"({min(floor):.2f}–{max(floor):.2f}×)",
                    flush=True,
                )


def _sides(
    lg_saver: Any,
    lg_store: Any,
    hand: ByHand,
    ours: StatesService,
    lean: dict[str, LeanHand] | None = None,
    rows: OurRows | None = None,
) -> Sides:
    def store_put(hand: ByHand) -> Case:
        def put(i: int) -> None:
            hand.store_put(
                ("bench", "h", f"ns{i % 4}"),
                f"k{i % KEYS}",
                {"n": i, "text": "remember this", "tags": ["a", "b"]},
            )

        return put

    def saver(cases: dict[str, Case]) -> dict[str, Case]:
        return {case: cases[case] for case in ("saver put", "saver put_writes")}

    leaner: Sides = {
        name: {"saver put": saver_cases(_Hand(h), "h")["saver put"], "store put": store_put(h)}  # type: ignore[arg-type]
        for name, h in (lean or {}).items()
    }
    return {
        "langgraph": {
            **saver(saver_cases(lg_saver, "l")),
            "store put": store_cases(lg_store, "l")["store put"],
        },
        "by hand": {**saver(saver_cases(_Hand(hand), "h")), "store put": store_put(hand)},  # type: ignore[arg-type]
        **leaner,
        **({"our rows": {"saver put": rows.put}} if rows is not None else {}),
        "stateflow": {
            **saver(saver_cases(StateflowSaver(ours), "s")),
            "store put": store_cases(StateflowStore(ours), "s")["store put"],
        },
    }


def sqlite_main(args: argparse.Namespace) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        ours = StatesService(open_store(f"sqlite:///{tmp}/stateflow.db?synchronous=full"))
        hand_conn = sqlite3.connect(Path(tmp) / "hand.db", isolation_level=None, check_same_thread=False)
        lg_saver_conn = sqlite3.connect(Path(tmp) / "lg-saver.db", check_same_thread=False)
        lg_store_conn = sqlite3.connect(
            Path(tmp) / "lg-store.db", isolation_level=None, check_same_thread=False
        )
        for conn in (hand_conn, lg_store_conn):
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
        lg_saver_conn.execute("PRAGMA synchronous = FULL")
        lg_saver = SqliteSaver(lg_saver_conn)
        lg_saver.setup()
        lg_store = SqliteStore(lg_store_conn)
        lg_store.setup()
        lean: dict[str, LeanHand] = {}
        for n, layout in enumerate(args.lean):
            lean_conn = sqlite3.connect(
                Path(tmp) / f"lean{n}.db", isolation_level=None, check_same_thread=False
            )
            lean_conn.execute("PRAGMA journal_mode = WAL")
            lean_conn.execute("PRAGMA synchronous = FULL")
            lean[layout] = LeanHand(lean_conn, layout)
        rows = OurRows(Path(tmp) / "rows.db") if args.rows else None
        try:
            sides = _sides(lg_saver, lg_store, SqliteHand(hand_conn), ours, lean, rows)
            _compare("sqlite FULL", sides, args.ops, args.rounds, args.cases)
        finally:
            ours.store.close()
            more = [h.conn for h in lean.values()] + ([rows.conn] if rows is not None else [])
            for conn in (hand_conn, lg_saver_conn, lg_store_conn, *more):
                conn.close()


_SCHEMAS = {"langgraph": "bench_lgf_lg", "by hand": "bench_lgf_hand", "stateflow": "bench_lgf_sf"}
"""Each side's schema; its backends are told by ``application_name``, the schema's name."""


def _backend_cpu(admin: Any, application: str) -> float:
    """CPU seconds so far of the server processes serving ``application`` (this machine's)."""
    pids = [
        r[0]
        for r in admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application,))
    ]
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # (not on this machine, or gone)
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


@contextmanager
def _postgres_sides(url: str) -> Iterator[tuple[Sides, ServerCpu]]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with ExitStack() as stack:
        at = stack.enter_context(postgres_schemas(url, "bench_lgf_lg", "bench_lgf_hand", "bench_lgf_sf"))
        urls = {side: f"{at[schema]}&application_name={schema}" for side, schema in _SCHEMAS.items()}
        lg_store = stack.enter_context(PostgresStore.from_conn_string(urls["langgraph"]))
        lg_store.setup()
        lg_saver = stack.enter_context(PostgresSaver.from_conn_string(urls["langgraph"]))
        lg_saver.setup()
        hand_conn = stack.enter_context(psycopg.connect(urls["by hand"], autocommit=True))
        ours = StatesService(open_store(urls["stateflow"], auto_migrate=True))
        stack.callback(ours.store.close)
        admin = stack.enter_context(psycopg.connect(url, autocommit=True))

        def server(side: str) -> float:
            return _backend_cpu(admin, _SCHEMAS[side])

        yield _sides(lg_saver, lg_store, PostgresHand(hand_conn), ours), server


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument(
        "--cases",
        nargs="+",
        choices=CASES,
        default=list(CASES),
        metavar="CASE",
        help=f"of {', '.join(CASES)}",
    )
    parser.add_argument(
        "--lean",
        nargs="*",
        choices=LEAN_LAYOUTS,
        default=[],
        metavar="LAYOUT",
        help=f"SQLite: the saver's and store's put also by hand with fewer rows, of {', '.join(LEAN_LAYOUTS)}",
    )
    parser.add_argument(
        "--rows",
        action="store_true",
        help="SQLite: the saver put's rows as ours commits them, sent by hand with nothing else (OurRows)",
    )
    args = parser.parse_args()
    if args.backend == "sqlite":
        return sqlite_main(args)
    if not args.postgres:
        parser.error("--backend postgres needs --postgres URL or $STATEFLOW_TEST_POSTGRES")
    with _postgres_sides(args.postgres) as (sides, server):
        _compare("postgresql", sides, args.ops, args.rounds, args.cases, server)


if __name__ == "__main__":
    main()
