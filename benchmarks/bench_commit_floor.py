"""The cheapest durable commit each database can make, next to LangGraph's ``put``.

A bare single-row upsert in a loop (a new value every time, so every commit writes), one caller,
at the durability the other benchmarks use: SQLite in WAL mode at ``synchronous=FULL`` (one page
and one ``fdatasync`` per commit) and an autocommit upsert on PostgreSQL (one round trip, one
WAL flush). Next to it, LangGraph's ``put`` of a small document, measured the same way. When the
bare commit takes more than half of a ``put``, no write that is acknowledged only once durable
can run at twice LangGraph's rate with one caller — whatever the work around its commit costs.

    python benchmarks/bench_commit_floor.py [--ops 2000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def per_op_ms(fn: Callable[[int], object], n: int) -> float:
    """Median over three rounds of the time per call of ``fn(i)``, in milliseconds."""
    for i in range(min(100, n)):
        fn(i)  # warm up
    rounds = []
    for r in range(3):
        start = time.perf_counter()
        for i in range(n):
            fn(n * (r + 1) + i)
        rounds.append((time.perf_counter() - start) / n * 1000)
    return statistics.median(rounds)


def report(label: str, bare: float, put: float) -> None:
    verdict = "out of reach" if bare > put / 2 else "within reach"
    print(
        f"{label:<34} bare durable commit {bare:6.3f} ms   langgraph put {put:6.3f} ms   "
        f"2x langgraph needs {put / 2:6.3f} ms per write: {verdict}",
        flush=True,
    )


def sqlite_case(n: int, journal: str) -> None:
    from langgraph.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        bare = sqlite3.connect(Path(tmp) / "bare.db", isolation_level=None)
        bare.execute("PRAGMA journal_mode = WAL")
        bare.execute("PRAGMA synchronous = FULL")
        bare.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL)")
        upsert = "INSERT INTO t VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
        bare_ms = per_op_ms(lambda i: bare.execute(upsert, (i % 200, str(i).encode())), n)
        bare.close()
        conn = sqlite3.connect(Path(tmp) / "langgraph.db", check_same_thread=False, isolation_level=None)
        if journal == "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        lg = SqliteStore(conn)
        lg.setup()
        put_ms = per_op_ms(lambda i: lg.put(("bench",), f"k{i % 200}", {"count": i}), n)
        conn.close()
    report(f"sqlite (langgraph {journal})", bare_ms, put_ms)


def postgres_case(url: str, n: int) -> None:
    import psycopg
    from langgraph.store.postgres import PostgresStore

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP SCHEMA IF EXISTS bench_floor CASCADE")
        admin.execute("CREATE SCHEMA bench_floor")
        admin.execute("CREATE TABLE bench_floor.t (k integer PRIMARY KEY, v jsonb NOT NULL)")
        upsert = "INSERT INTO bench_floor.t VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
        bare_ms = per_op_ms(lambda i: admin.execute(upsert, (i % 200, f'{{"count": {i}}}')), n)
    sep = "&" if "?" in url else "?"
    with PostgresStore.from_conn_string(f"{url}{sep}options=-csearch_path%3Dbench_floor") as lg:
        lg.setup()
        put_ms = per_op_ms(lambda i: lg.put(("bench",), f"k{i % 200}", {"count": i}), n)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP SCHEMA bench_floor CASCADE")
    report("postgresql", bare_ms, put_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    args = parser.parse_args()
    for journal in ("wal", "shipped"):
        sqlite_case(args.ops, journal)
    if args.postgres:
        postgres_case(args.postgres, args.ops)


if __name__ == "__main__":
    main()
