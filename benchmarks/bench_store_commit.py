"""Read-modify-write cohort commit through the store vs the same transaction in raw SQL.

Each iteration reads two small JSON documents, changes one field in each and commits both
atomically with a history row. The baseline does exactly that with ``sqlite3`` (same file
system, same ``synchronous`` setting) or ``psycopg`` (same server); the store additionally
keeps revisions, transitions, net changes and snapshots. The two sides alternate round by round
(``--rounds`` rounds of ``--iterations`` commits each, the side that goes first swapping every
round), so a drift in fsync speed hits both alike; prints the median time per side and the
median and spread (min–max) of the per-round ratios (store / raw).

    python3 -m benchmarks.bench_store_commit [--rounds 15] [--iterations 100]
        [--synchronous full|normal] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from benchmarks.rounds import Pair, alternate, per_call_ms, report
from stateflow.store import DocKey, Document, Write, open_store

KEYS = [DocKey("bench", "a"), DocKey("bench", "b")]
START: dict[str, Any] = {
    "title": "benchmark document",
    "counter": 0,
    "tags": ["x", "y", "z"],
    "notes": {"k": "v" * 200},
}


def bump(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
    writes = []
    for key, doc in docs.items():
        body = doc.body or START
        writes.append(Write.between(key, doc.value, dict(body, counter=body["counter"] + 1), doc.revision))
    return writes, None


def raw_sqlite(path: Path, synchronous: str) -> Callable[[], None]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE docs (k TEXT PRIMARY KEY, body BLOB, rev INTEGER)")
    conn.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, k TEXT, body BLOB)")
    for key in KEYS:
        conn.execute("INSERT INTO docs VALUES (?, ?, 0)", (key.subject, orjson.dumps(START)))

    def step() -> None:
        conn.execute("BEGIN IMMEDIATE")
        for key in KEYS:
            (raw,) = conn.execute("SELECT body FROM docs WHERE k = ?", (key.subject,)).fetchone()
            body = orjson.loads(raw)
            body["counter"] += 1
            new = orjson.dumps(body)
            conn.execute("UPDATE docs SET body = ?, rev = rev + 1 WHERE k = ?", (new, key.subject))
            conn.execute("INSERT INTO log (k, body) VALUES (?, ?)", (key.subject, new))
        conn.execute("COMMIT")

    return step


def raw_postgres(url: str) -> Callable[[], None]:
    import psycopg

    conn = psycopg.connect(url)
    with conn.transaction():
        conn.execute("DROP TABLE IF EXISTS bench_docs, bench_log")
        conn.execute("CREATE TABLE bench_docs (k TEXT PRIMARY KEY, body BYTEA, rev INTEGER)")
        conn.execute("CREATE TABLE bench_log (seq BIGSERIAL PRIMARY KEY, k TEXT, body BYTEA)")
        for key in KEYS:
            conn.execute("INSERT INTO bench_docs VALUES (%s, %s, 0)", (key.subject, orjson.dumps(START)))

    def step() -> None:
        with conn.transaction():
            for key in KEYS:
                row = conn.execute(
                    "SELECT body FROM bench_docs WHERE k = %s FOR UPDATE", (key.subject,)
                ).fetchone()
                assert row is not None
                body = orjson.loads(row[0])
                body["counter"] += 1
                new = orjson.dumps(body)
                conn.execute(
                    "UPDATE bench_docs SET body = %s, rev = rev + 1 WHERE k = %s", (new, key.subject)
                )
                conn.execute("INSERT INTO bench_log (k, body) VALUES (%s, %s)", (key.subject, new))

    return step


def through_store(location: str) -> Callable[[], None]:
    store = open_store(location, auto_migrate=True)

    def step() -> None:
        store.update(KEYS, bump, {"door": "bench"})

    return step


def measure(ours: Callable[[], None], raw: Callable[[], None], rounds: int, iterations: int) -> Pair:
    """Milliseconds per commit of each side, ``iterations`` commits per side per round."""
    ours()  # warm up connections and caches
    raw()
    return alternate(lambda _: per_call_ms(ours, iterations), lambda _: per_call_ms(raw, iterations), rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--iterations", type=int, default=100, help="commits per side per round")
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        raw = raw_sqlite(Path(tmp) / "raw.db", args.synchronous)
        ours = through_store(f"sqlite:///{tmp}/store.db?synchronous={args.synchronous}")
        report(
            f"sqlite synchronous={args.synchronous}",
            measure(ours, raw, args.rounds, args.iterations),
            "ms",
            "≤ 3×",
        )
    if args.postgres:
        import psycopg

        schema = "bench_store_commit"
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"CREATE SCHEMA {schema}")
        sep = "&" if "?" in args.postgres else "?"
        url = f"{args.postgres}{sep}options=-csearch_path%3D{schema}"
        report(
            "postgresql",
            measure(through_store(url), raw_postgres(url), args.rounds, args.iterations),
            "ms",
            "≤ 3×",
        )
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    else:
        print("postgresql: skipped (pass --postgres URL or set STATEFLOW_TEST_POSTGRES)")


if __name__ == "__main__":
    main()
