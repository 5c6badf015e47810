"""Bytes a store keeps per small declared record, against the record's own JSON.

Writes ``--records`` small records (about 100 bytes of compact JSON each; ``--nested`` adds an
object and an array member), one ``replace`` per
record as a service writes them (each its own transition, with its history), into a store that
holds only the declaration, and prints the bytes the store grew by per record and the ratio to
the records' raw JSON:

- SQLite: pages in use (``page_count - freelist_count``, after a truncating checkpoint) times
  the page size, after minus before;
- PostgreSQL: the main fork of every table of the store's schema, its indexes, TOAST tables
  and their indexes (``pg_relation_size``), after minus before, in a schema of its own; not
  the free-space and visibility maps, which appear (32 KiB a relation) when autovacuum first
  visits a table, so that they made small runs differ by hundreds of bytes per record.

Sizes, not times: one run is the answer (the issue's ceilings: 3.6× on SQLite, 6.5× on
PostgreSQL).

    python3 -m benchmarks.bench_record_bytes [--records 2000] [--backend sqlite|postgres|both]
        [--nested] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from stateflow.states import StatesService
from stateflow.store import open_store

DECL = {
    "schema": {
        "type": "object",
        "properties": {"status": {"type": "string"}, "n": {"type": "integer"}, "owner": {"type": "string"}},
    },
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
CEILING = {"sqlite": 3.6, "postgres": 6.5}


def record(i: int, nested: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": "open",
        "n": i,
        "owner": f"owner-{i % 50:02d}",
        "title": f"thread {i:06d} about the release",
    }
    if nested:  # two members no equality search looks up by value: an object and an array
        body |= {"meta": {"p": i % 3}, "tags": ["a"]}
    return body


Sizes = dict[str, int]
"""Bytes per table and per index (SQLite: its b-tree's pages; PostgreSQL: its relation's main fork)."""


def measure(
    location: str,
    size: Callable[[], Sizes],
    records: int,
    tag: str,
    nested: bool = False,
    by_relation: bool = False,
) -> None:
    store = open_store(location, auto_migrate=True)
    try:
        service = StatesService(store)
        service.declare("records", DECL)
        before = size()
        raw = 0
        for i in range(records):
            body = record(i, nested)
            raw += len(orjson.dumps(body))
            subject = {"target_kind": "agent", "target_name": "bench", "kind": "thread", "key": f"t{i:06d}"}
            service.replace("records", subject, body)
        after = size()
    finally:
        store.close()
    grown = sum(after.values()) - sum(before.values())
    ratio = grown / raw
    print(
        f"{tag}: {records:,} records, {raw / records:.0f} B of JSON each; the store grew "
        f"{grown / records:,.0f} B per record: {ratio:.2f}× the raw JSON "
        f"(ceiling {CEILING[tag]}×: {'met' if ratio <= CEILING[tag] else 'MISSED'})",
        flush=True,
    )
    if by_relation:
        for name in sorted(after, key=lambda n: after[n] - before.get(n, 0), reverse=True):
            grew = after[name] - before.get(name, 0)
            if grew:
                print(f"  {name:<40} {grew / records:8,.1f} B per record", flush=True)


def sqlite_size(path: str) -> Callable[[], Sizes]:
    def size() -> Sizes:
        # pages in use per b-tree (dbstat), after a truncating checkpoint: the file's pages less
        # its free list, split by table and index
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
        return {str(name): int(total) for name, total in rows}

    return size


@contextmanager
def postgres_schema(url: str) -> Iterator[tuple[str, Callable[[], Sizes]]]:
    import psycopg

    schema = f"bench_record_bytes_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")

    def size() -> Sizes:
        # the main fork of every table, index, TOAST table and TOAST index: not the free-space
        # and visibility maps, 32 KiB a relation that appear whenever (auto)vacuum first runs
        # on it — a step of their own, not bytes per record, and the noise of a small run
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "WITH t AS (SELECT c.oid, c.relname, c.reltoastrelid FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'), "
                "r AS (SELECT oid, relname AS label FROM t "
                "UNION ALL SELECT reltoastrelid, relname || ' (TOAST)' FROM t WHERE reltoastrelid <> 0), "
                "i AS (SELECT i.indexrelid AS oid, c.relname || CASE WHEN r.label LIKE '%% (TOAST)' "
                "THEN ' (TOAST)' ELSE '' END AS label FROM pg_index i JOIN r ON r.oid = i.indrelid "
                "JOIN pg_class c ON c.oid = i.indexrelid) "
                "SELECT label, pg_relation_size(oid, 'main') FROM (SELECT * FROM r UNION ALL SELECT * FROM i) x",
                (schema,),
            ).fetchall()
        return {str(name): int(total) for name, total in rows}

    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{schema}", size
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument(
        "--nested", action="store_true", help="records with an object and an array member too"
    )
    parser.add_argument("--by-relation", action="store_true", help="the growth per table and per index too")
    args = parser.parse_args()
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/records.db"
            measure(
                f"sqlite:///{path}", sqlite_size(path), args.records, "sqlite", args.nested, args.by_relation
            )
    if args.backend in ("postgres", "both"):
        if not args.postgres:
            print("postgres: skipped (pass --postgres URL or set STATEFLOW_TEST_POSTGRES)")
            return
        with postgres_schema(args.postgres) as (url, size):
            measure(url, size, args.records, "postgres", args.nested, args.by_relation)


if __name__ == "__main__":
    main()
