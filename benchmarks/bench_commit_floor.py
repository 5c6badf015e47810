"""The cheapest durable commit each database can make, next to LangGraph's ``put``.

A bare single-row upsert in a loop (a new value every time, so every commit writes), one caller,
at the durability the other benchmarks use: SQLite in WAL mode at ``synchronous=FULL`` (one page
and one ``fdatasync`` per commit) and an autocommit upsert on PostgreSQL (one round trip, one
WAL flush). Next to it, LangGraph's ``put`` of a small document, measured the same way. When the
bare commit takes more than half of a ``put``, no write that is acknowledged only once durable
can run at twice LangGraph's rate with one caller — whatever the work around its commit costs.
The two sides alternate round by round (the side that goes first swapping every round), so a
drift in fsync speed hits both alike; each prints its median per round and the spread of the
per-round ratios (bare / put).

First, a declared-states ``apply`` against the same bare commit (target: at most 1.5× its time),
and the same pair again without waiting for durability (SQLite ``synchronous=OFF``, PostgreSQL
``synchronous_commit=off``): what ``apply`` does beyond a bare commit, other than flushing more,
is its time there minus the bare commit's. Since a durable ``apply`` flushes at least what the
bare commit flushes, ``apply / bare`` at equal durability is at least ``1 + extra / bare`` —
the floor the script prints next to the target.

Last, the least ``apply`` written by hand for this one document shape (``by_hand``: the record
computed in memory, validated against the schema, its members encoded canonically, and the
audit, member, history and revision rows written in one transaction) against the same bare
commit: what the contract's own rows and checks cost, with no generality around them.

    python3 -m benchmarks.bench_commit_floor [--ops 2000] [--rounds 6] [--postgres URL] [--apply] [--contract]
        [--backend sqlite|postgres|both]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from benchmarks.rounds import Pair, alternate, per_call_ms
from benchmarks.rounds import report as report_pair


def alternating(bare: Callable[[int], object], put: Callable[[int], object], n: int, rounds: int) -> Pair:
    """Milliseconds per call of each side, ``n`` calls per side per round (a new value each)."""
    for i in range(min(100, n)):  # warm up
        bare(i)
        put(i)

    def side(fn: Callable[[int], object]) -> Callable[[int], float]:
        def one_round(r: int) -> float:
            values = iter(range(n * (r + 1), n * (r + 2)))
            return per_call_ms(lambda: fn(next(values)), n)

        return one_round

    return alternate(side(bare), side(put), rounds)


def report(label: str, measured: Pair) -> None:
    bare, put = statistics.median(measured.ours), statistics.median(measured.base)
    verdict = "out of reach" if bare > put / 2 else "within reach"
    print(
        f"{label:<34} bare durable commit {bare:6.3f} ms   langgraph put {put:6.3f} ms   "
        f"bare/put {measured.ratio:.2f} (rounds {measured.spread()})   "
        f"2x langgraph needs {put / 2:6.3f} ms per write: {verdict}",
        flush=True,
    )


def sqlite_case(n: int, rounds: int, journal: str) -> None:
    from langgraph.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        bare = sqlite3.connect(Path(tmp) / "bare.db", isolation_level=None)
        bare.execute("PRAGMA journal_mode = WAL")
        bare.execute("PRAGMA synchronous = FULL")
        bare.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL)")
        upsert = "INSERT INTO t VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
        conn = sqlite3.connect(Path(tmp) / "langgraph.db", check_same_thread=False, isolation_level=None)
        if journal == "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        lg = SqliteStore(conn)
        lg.setup()
        measured = alternating(
            lambda i: bare.execute(upsert, (i % 200, str(i).encode())),
            lambda i: lg.put(("bench",), f"k{i % 200}", {"count": i}),
            n,
            rounds,
        )
        bare.close()
        conn.close()
    report(f"sqlite (langgraph {journal})", measured)


def postgres_case(url: str, n: int, rounds: int) -> None:
    import psycopg
    from langgraph.store.postgres import PostgresStore

    sep = "&" if "?" in url else "?"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP SCHEMA IF EXISTS bench_floor CASCADE")
        admin.execute("CREATE SCHEMA bench_floor")
        admin.execute("CREATE TABLE bench_floor.t (k integer PRIMARY KEY, v jsonb NOT NULL)")
        upsert = "INSERT INTO bench_floor.t VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
        with PostgresStore.from_conn_string(f"{url}{sep}options=-csearch_path%3Dbench_floor") as lg:
            lg.setup()
            measured = alternating(
                lambda i: admin.execute(upsert, (i % 200, f'{{"count": {i}}}')),
                lambda i: lg.put(("bench",), f"k{i % 200}", {"count": i}),
                n,
                rounds,
            )
        admin.execute("DROP SCHEMA bench_floor CASCADE")
    report("postgresql", measured)


def apply_case(
    label: str, store_url: str, bare: Callable[[int], object], n: int, rounds: int, *, durable: bool = True
) -> Pair:
    """A declared-states ``apply`` (the three-op batch of ``bench_states_vs_langgraph``: read,
    modify, validate, audit, one durable commit) against the bare durable commit, one caller."""
    from benchmarks.bench_states_vs_langgraph import DECL, ops_for, subject
    from stateflow.states import StatesService
    from stateflow.store import open_store

    service = StatesService(open_store(store_url, auto_migrate=True))
    service.declare("bench", DECL)
    measured = alternating(lambda i: service.apply("bench", subject(i), ops_for(i)), bare, n, rounds)
    service.close()
    if durable:
        report_pair(f"{label}: apply vs bare durable commit", measured, "ms", target="<= 1.5x")
    else:
        report_pair(f"{label}: apply vs bare commit, neither flushed", measured, "ms")
    return measured


def upserting(conn: Any, sql: str, row: Callable[[int], tuple[object, ...]]) -> Callable[[int], object]:
    """The bare commit: one upsert of ``row(i)`` on ``conn`` (sqlite3 or psycopg, autocommit)."""
    return lambda i: conn.execute(sql, row(i))


def floor(label: str, durable: Pair, unflushed: Pair) -> None:
    """apply / bare at equal durability is at least 1 + (apply's extra work) / bare."""
    extra = statistics.median(unflushed.ours) - statistics.median(unflushed.base)
    bare = statistics.median(durable.base)
    print(
        f"{label}: apply's work beyond a bare commit (unflushed) {extra:.3f} ms = "
        f"{extra / bare:.2f}x the bare durable commit ({bare:.3f} ms): apply >= "
        f"{1 + extra / bare:.2f}x at equal durability (target <= 1.5x needs <= 0.50x)",
        flush=True,
    )


CONTRACT_TABLES = """
CREATE TABLE transitions (seq INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, origin BLOB NOT NULL);
CREATE TABLE documents (doc_id INTEGER PRIMARY KEY, revision INTEGER NOT NULL, updated_seq INTEGER);
CREATE TABLE members (doc_id INTEGER NOT NULL, name TEXT NOT NULL, revision INTEGER NOT NULL,
    body BLOB NOT NULL, PRIMARY KEY (doc_id, name)) WITHOUT ROWID;
CREATE TABLE changes (doc_id INTEGER NOT NULL, revision INTEGER NOT NULL, seq INTEGER NOT NULL,
    paths BLOB NOT NULL, edits BLOB NOT NULL, PRIMARY KEY (doc_id, revision)) WITHOUT ROWID;
"""


Rows = tuple[int, int, list[tuple[str, bytes]], bytes]
"""One least write: document id, its new revision, its members (name, canonical body), its edits."""


class LeastRecords:
    """The record side of the least ``apply``, shared by every by-hand floor (this one,
    ``bench_group_floor``, ``bench_pg_least_apply``): compute the record from the one held in
    memory, validate it against the state's JSON Schema and encode its members canonically.
    ``rows`` gives what to write; ``written`` keeps the record once its commit is done."""

    def __init__(self) -> None:
        import jsonschema_rs
        import orjson

        from benchmarks.bench_states_vs_langgraph import DECL, document_for, subject

        self._document_for, self._subject = document_for, subject
        self._dumps, self._sorted = orjson.dumps, orjson.OPT_SORT_KEYS
        self._validator = jsonschema_rs.validator_for(cast(dict[str, Any], DECL["schema"]))
        self._docs: dict[int, dict[str, Any]] = {}
        self._revisions: dict[int, int] = {}
        self.origin = orjson.dumps(
            {"action": "apply", "door": "python", "op_id": None}, option=orjson.OPT_SORT_KEYS
        )
        self.paths = orjson.dumps([["status"], ["count"], ["people"]])

    def rows(self, i: int) -> tuple[Rows, dict[str, Any]]:
        doc_id = int(self._subject(i)["key"][1:])
        new = self._document_for(i, self._docs.get(doc_id))
        if not self._validator.is_valid(new):
            raise ValueError(new)
        revision = self._revisions.get(doc_id, 0) + 1
        encoded = [(n, self._dumps(v, option=self._sorted)) for n, v in new.items()]
        edits = b"[" + b",".join(b'[["' + n.encode() + b'"],' + body + b"]" for n, body in encoded) + b"]"
        return (doc_id, revision, encoded, edits), new

    def written(self, rows: Rows, new: dict[str, Any]) -> None:
        self._docs[rows[0]], self._revisions[rows[0]] = new, rows[1]


def write_rows(conn: sqlite3.Connection, rows: Rows, at: str, origin: bytes, paths: bytes) -> None:
    """The least ``apply``'s rows on SQLite, inside the caller's transaction: the audit row
    (transition), the member rows, the history row (change) and the document's new revision."""
    doc_id, revision, members, edits = rows
    seq = conn.execute(
        "INSERT INTO transitions (at, origin) VALUES (?, ?) RETURNING seq", (at, origin)
    ).fetchone()[0]
    conn.executemany(
        "INSERT INTO members VALUES (?, ?, ?, ?) ON CONFLICT (doc_id, name) "
        "DO UPDATE SET revision = excluded.revision, body = excluded.body",
        [(doc_id, n, revision, body) for n, body in members],
    )
    conn.execute("INSERT INTO changes VALUES (?, ?, ?, ?, ?)", (doc_id, revision, seq, paths, edits))
    conn.execute(
        "INSERT INTO documents VALUES (?, ?, ?) ON CONFLICT (doc_id) "
        "DO UPDATE SET revision = excluded.revision, updated_seq = excluded.updated_seq",
        (doc_id, revision, seq),
    )


def by_hand(conn: sqlite3.Connection) -> Callable[[int], object]:
    """The least an ``apply`` of the benchmark's op batch must do, written by hand for this one
    document shape: compute the record from the one held in memory, validate it against the
    state's JSON Schema, encode the changed members canonically, and write — in one transaction
    — the audit row (transition), the member rows, the history row (change) and the document's
    new revision. No parsing, no generality, no checks that another writer moved anything."""
    conn.executescript(CONTRACT_TABLES)
    least = LeastRecords()

    def apply(i: int) -> None:
        rows, new = least.rows(i)
        conn.execute("BEGIN IMMEDIATE")
        write_rows(conn, rows, utc_now(), least.origin, least.paths)
        conn.execute("COMMIT")
        least.written(rows, new)

    return apply


def utc_now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat()


def contract_floor(n: int, rounds: int) -> None:
    """The hand-written least ``apply`` (``by_hand``) against the bare durable commit, durable
    and unflushed: the ratio no implementation of the contract gets under on SQLite."""
    for mode in ("FULL", "OFF"):
        with tempfile.TemporaryDirectory() as tmp:
            bare, hand = (sqlite3.connect(Path(tmp) / f"{name}.db", isolation_level=None) for name in "bh")
            for conn in (bare, hand):
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {mode}")
            bare.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL)")
            upsert = "INSERT INTO t VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
            measured = alternating(
                by_hand(hand), upserting(bare, upsert, lambda i: (i % 200, str(i).encode())), n, rounds
            )
            what = "durable" if mode == "FULL" else "unflushed"
            report_pair(f"sqlite {mode}: the least apply by hand vs bare commit ({what})", measured, "ms")
            bare.close()
            hand.close()


def apply_vs_floor(n: int, rounds: int, url: str | None, backend: str = "both") -> None:
    pairs: dict[str, Pair] = {}
    for mode in ("FULL", "OFF") if backend != "postgres" else ():
        with tempfile.TemporaryDirectory() as tmp:
            bare = sqlite3.connect(Path(tmp) / "bare.db", isolation_level=None)
            bare.execute("PRAGMA journal_mode = WAL")
            bare.execute(f"PRAGMA synchronous = {mode}")
            bare.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL)")
            upsert = "INSERT INTO t VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
            pairs[mode] = apply_case(
                f"sqlite {mode}",
                f"sqlite:///{tmp}/stateflow.db?synchronous={mode.lower()}",
                upserting(bare, upsert, lambda i: (i % 200, str(i).encode())),
                n,
                rounds,
                durable=mode == "FULL",
            )
            bare.close()
    if backend != "postgres":
        floor("sqlite", pairs["FULL"], pairs["OFF"])
    if not url or backend == "sqlite":
        return
    import psycopg

    sep = "&" if "?" in url else "?"
    for durable in (True, False):
        with psycopg.connect(url, autocommit=True) as admin:
            for schema in ("bench_floor", "bench_floor_sf"):
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                admin.execute(f"CREATE SCHEMA {schema}")
            admin.execute("CREATE TABLE bench_floor.t (k integer PRIMARY KEY, v jsonb NOT NULL)")
            flush = "on" if durable else "off"
            admin.execute(f"SET synchronous_commit = {flush}")
            upsert_pg = (
                "INSERT INTO bench_floor.t VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
            )
            pairs[f"pg{durable}"] = apply_case(
                "postgresql" if durable else "postgresql synchronous_commit=off",
                f"{url}{sep}options=-csearch_path%3Dbench_floor_sf%20-csynchronous_commit%3D{flush}",
                upserting(admin, upsert_pg, lambda i: (i % 200, f'{{"count": {i}}}')),
                n,
                rounds,
                durable=durable,
            )
            admin.execute("DROP SCHEMA bench_floor CASCADE")
            admin.execute("DROP SCHEMA bench_floor_sf CASCADE")
    floor("postgresql", pairs["pgTrue"], pairs["pgFalse"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=2000, help="calls per side per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument(
        "--apply",
        action="store_true",
        help="only: states apply and the least apply by hand vs the bare commit",
    )
    parser.add_argument(
        "--contract", action="store_true", help="only: the least apply written by hand vs the bare commit"
    )
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres", "both"],
        default="both",
        help="postgres: only the PostgreSQL pairs (apply vs bare commit, durable and unflushed; LangGraph)",
    )
    args = parser.parse_args()
    sqlite = args.backend != "postgres"
    if args.contract:
        contract_floor(args.ops, args.rounds)
        return
    apply_vs_floor(args.ops, args.rounds, args.postgres, args.backend)
    if sqlite:
        contract_floor(args.ops, args.rounds)
    if args.apply:
        return
    for journal in ("wal", "shipped") if sqlite else ():
        sqlite_case(args.ops, args.rounds, journal)
    if args.postgres and args.backend != "sqlite":
        postgres_case(args.postgres, args.ops, args.rounds)


if __name__ == "__main__":
    main()
