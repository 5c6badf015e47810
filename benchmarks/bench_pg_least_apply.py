"""PostgreSQL: the least ``apply`` written by hand against the bare durable commit.

``bench_commit_floor`` shows, for SQLite, what the contract's own rows and checks cost with no
generality around them. This is the same on PostgreSQL, with the rows sent the cheapest way
there is: one statement on an autocommit connection (one round trip, one transaction, one WAL
flush). The least ``apply`` computes the record from the one held in memory, validates it
against the state's JSON Schema, encodes its members canonically and writes the audit row
(transition), the member rows, the history row (change) and the document's new revision; the
bare commit is one upsert of a single small row. Both alternate round by round, durable
(``synchronous_commit=on``) and unflushed (``off``): ``least / bare`` durable is what no
implementation of the contract gets under on PostgreSQL at one round trip per write.

    python3 -m benchmarks.bench_pg_least_apply [--ops 1000] [--rounds 6] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from benchmarks.bench_commit_floor import LeastRecords, alternating, upserting, utc_now
from benchmarks.rounds import report

TABLES = """
CREATE TABLE transitions (seq BIGSERIAL PRIMARY KEY, at TEXT NOT NULL, origin BYTEA NOT NULL);
CREATE TABLE documents (doc_id BIGINT PRIMARY KEY, revision BIGINT NOT NULL, updated_seq BIGINT);
CREATE TABLE members (doc_id BIGINT NOT NULL, name TEXT NOT NULL, revision BIGINT NOT NULL,
    body BYTEA NOT NULL, PRIMARY KEY (doc_id, name));
CREATE TABLE changes (doc_id BIGINT NOT NULL, revision BIGINT NOT NULL, seq BIGINT NOT NULL,
    paths BYTEA NOT NULL, edits BYTEA NOT NULL, PRIMARY KEY (doc_id, revision));
"""

WRITE = """
WITH t AS (INSERT INTO transitions (at, origin) VALUES (%s, %s) RETURNING seq),
m AS (INSERT INTO members (doc_id, name, revision, body)
      SELECT %s, x.n, %s, x.b FROM unnest(%s::text[], %s::bytea[]) AS x(n, b)
      ON CONFLICT (doc_id, name) DO UPDATE SET revision = excluded.revision, body = excluded.body),
c AS (INSERT INTO changes SELECT %s, %s, t.seq, %s, %s FROM t),
d AS (INSERT INTO documents SELECT %s, %s, t.seq FROM t
      ON CONFLICT (doc_id) DO UPDATE SET revision = excluded.revision, updated_seq = excluded.updated_seq)
SELECT seq FROM t
"""
"""Every row of the least ``apply`` in one statement: one round trip."""


def least_apply(conn: Any) -> Callable[[int], object]:
    """As ``bench_commit_floor.by_hand``, its rows written in one statement."""
    least = LeastRecords()

    def apply(i: int) -> None:
        rows, new = least.rows(i)
        doc_id, revision, encoded, edits = rows
        names, bodies = [n for n, _ in encoded], [b for _, b in encoded]
        conn.execute(
            WRITE,
            (
                utc_now(),
                least.origin,
                doc_id,
                revision,
                names,
                bodies,
                doc_id,
                revision,
                least.paths,
                edits,
                doc_id,
                revision,
            ),
        ).fetchone()
        least.written(rows, new)

    return apply


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=1000, help="calls per side per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    args = parser.parse_args()
    if not args.postgres:
        raise SystemExit("pass --postgres URL or set STATEFLOW_TEST_POSTGRES")
    schema = f"bench_least_{os.getpid()}"
    with psycopg.connect(args.postgres, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            for flush in ("on", "off"):
                sep = "&" if "?" in args.postgres else "?"
                url = f"{args.postgres}{sep}options=-csearch_path%3D{schema}%20-csynchronous_commit%3D{flush}"
                with (
                    psycopg.connect(url, autocommit=True) as bare,
                    psycopg.connect(url, autocommit=True) as hand,
                ):
                    for statement in TABLES.split(";"):
                        if statement.strip():
                            hand.execute(statement)
                    bare.execute("CREATE TABLE t (k integer PRIMARY KEY, v jsonb NOT NULL)")
                    upsert = "INSERT INTO t VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
                    pair = alternating(  # its first side is reported first: least / bare
                        least_apply(hand),
                        upserting(bare, upsert, lambda i: (i % 200, f'{{"count": {i}}}')),
                        args.ops,
                        args.rounds,
                    )
                    what = "durable" if flush == "on" else "unflushed (synchronous_commit=off)"
                    report(
                        f"postgresql: the least apply by hand vs bare commit, {what}",
                        pair,
                        "ms",
                        "<= 1.5x" if flush == "on" else None,
                    )
                    for table in ("t", "changes", "members", "documents", "transitions"):
                        hand.execute(f"DROP TABLE {table}")
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
