"""PostgreSQL: 8 writer processes on one document against 1, written by hand — the floor.

``bench_writers`` measures ``patch_state`` of 8 processes on one memory scope against one
process. This measures the same shape with no store around it, two ways, so the ratio our
writers reach can be read against what the locking itself allows on this machine:

- **client merge**: what a read-modify-write must do when the merge is computed by the client
  (as the store's locked path does): ``BEGIN`` and ``SELECT … FOR UPDATE`` of the document in
  one round trip, the merge in Python (decode, set the writer's key, encode), then the update,
  an audit row and ``COMMIT`` in a second round trip. The row lock is held across the client's
  merge and one round trip.
- **server merge**: the merge done by the server inside one statement on an autocommit
  connection (``jsonb_set`` and the audit row): the row lock is held only inside that
  statement and its commit.

Each writer is its own process (as separate agents are) writing its own key of one JSON
document, durable (``synchronous_commit=on``). Rounds alternate the 1-writer and 8-writer
phases; the ratio is 8 writers' combined throughput over one writer's.

    python3 -m benchmarks.bench_pg_writers_floor [--rounds 5] [--calls 800] [--postgres URL]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
import uuid
from typing import Any
from urllib.parse import quote

from benchmarks.rounds import alternate, report

SETUP = """
CREATE TABLE doc (id INT PRIMARY KEY, body JSONB NOT NULL);
CREATE TABLE audit (seq BIGSERIAL PRIMARY KEY, at TIMESTAMPTZ NOT NULL, patch JSONB NOT NULL);
INSERT INTO doc VALUES (1, '{"session": {"tactics": {}}}');
"""
SERVER_MERGE = """
WITH a AS (INSERT INTO audit (at, patch) VALUES (now(), %(patch)s::jsonb))
UPDATE doc SET body = jsonb_set(body, ARRAY['session', 'tactics', %(key)s], to_jsonb(%(value)s::text))
WHERE id = 1
"""


def writer(args: tuple[str, str, int, float, int]) -> tuple[float, float]:
    """One process: ``calls`` writes of its own key after ``start``; (first start, last end)."""
    import psycopg

    url, how, calls, start, index = args
    key = f"w{index}"
    with psycopg.connect(url, autocommit=True) as conn:
        while time.perf_counter() < start:
            time.sleep(0.001)
        begin = time.perf_counter()
        for i in range(calls):
            value = f"step {i}"
            patch = json.dumps({"session": {"tactics": {key: value}}})
            if how == "server merge":
                conn.execute(SERVER_MERGE, {"patch": patch, "key": key, "value": value})
                continue
            with conn.pipeline():  # BEGIN and the locking read: one round trip
                conn.execute("BEGIN")
                cur = conn.execute("SELECT body::text FROM doc WHERE id = 1 FOR UPDATE")
            row = cur.fetchone()
            assert row is not None
            body = json.loads(row[0])
            body["session"]["tactics"][key] = value
            with conn.pipeline():  # the writes and COMMIT: the second round trip
                conn.execute("UPDATE doc SET body = %s::jsonb WHERE id = 1", (json.dumps(body),))
                conn.execute("INSERT INTO audit (at, patch) VALUES (now(), %s::jsonb)", (patch,))
                conn.execute("COMMIT")
        return begin, time.perf_counter()


def phase(pool: Any, url: str, how: str, writers: int, calls: int) -> float:
    """``writers`` processes at once, ``calls`` in all: calls per second."""
    start = time.perf_counter() + 0.3
    each = max(1, calls // writers)
    results = pool.map(writer, [(url, how, each, start, i) for i in range(writers)])
    elapsed: float = max(r[1] for r in results) - min(r[0] for r in results)
    return writers * each / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=800, help="calls per phase (split among the writers)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    args = parser.parse_args()
    if not args.postgres:
        parser.error("--postgres URL (or $STATEFLOW_TEST_POSTGRES) is required")
    import psycopg

    schema = f"bench_writers_floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.postgres, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in args.postgres else "?"
    url = f"{args.postgres}{sep}options={quote(f'-csearch_path={schema} -csynchronous_commit=on')}"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SETUP)
        with multiprocessing.get_context("fork").Pool(args.writers) as pool:
            for how in ("client merge", "server merge"):
                phase(pool, url, how, args.writers, 80)  # connect paths, warm the server
                pair = alternate(
                    lambda _, h=how: phase(pool, url, h, args.writers, args.calls),  # type: ignore[misc]
                    lambda _, h=how: phase(pool, url, h, 1, args.calls),  # type: ignore[misc]
                    args.rounds,
                    higher_better=True,
                )
                report(
                    f"PostgreSQL by hand, {how}: {args.writers} writers vs 1 (writes/s)",
                    pair,
                    "/s",
                    ">= 1x",
                )
    finally:
        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
