"""SQLite: 8 writer processes on one document against 1, written by hand — the floor.

``bench_writers`` measures ``patch_state`` of 8 processes on one memory scope against one
process. This measures the same shape with no store around it, so the ratio our writers reach
can be read against what SQLite's single write lock allows on this machine. Each writer is its
own process with its own connection (WAL, ``synchronous=FULL``, as the store opens it), writing
its own key of one JSON document: ``BEGIN IMMEDIATE``, read the body, merge in Python (decode,
set the key, encode), update it, insert an audit row, ``COMMIT`` — every call its own durable
commit, as SQLite has no way to commit two connections' transactions with one fsync. Two ways
to wait for the write lock:

- **busy timeout**: SQLite's own wait (it sleeps and retries: 1, 2, 5, 10 … ms);
- **flock queue**: an exclusive ``flock`` on a side file around the transaction, so the
  kernel wakes a waiter the moment the lock is free (the shape of the store's writer queue,
  without its ticket order).

Rounds alternate the 1-writer and 8-writer phases; the ratio is 8 writers' combined throughput
over one writer's.

    python3 -m benchmarks.bench_sqlite_writers_floor [--rounds 5] [--calls 800] [--writers 8]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import multiprocessing
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.rounds import alternate, report

SETUP = """
CREATE TABLE doc (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE audit (seq INTEGER PRIMARY KEY, at REAL NOT NULL, patch TEXT NOT NULL);
INSERT INTO doc VALUES (1, '{"session": {"tactics": {}}}');
"""


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def write(conn: sqlite3.Connection, key: str, value: str, queue: Any | None) -> None:
    """One write by hand, durable and audited: the key set in the document, in a transaction
    of its own (under an exclusive ``flock`` of ``queue`` where one is given)."""
    patch = json.dumps({"session": {"tactics": {key: value}}})
    if queue is not None:
        fcntl.flock(queue, fcntl.LOCK_EX)
    try:
        conn.execute("BEGIN IMMEDIATE")
        body = json.loads(conn.execute("SELECT body FROM doc WHERE id = 1").fetchone()[0])
        body["session"]["tactics"][key] = value
        conn.execute("UPDATE doc SET body = ? WHERE id = 1", (json.dumps(body),))
        conn.execute("INSERT INTO audit (at, patch) VALUES (?, ?)", (time.time(), patch))
        conn.execute("COMMIT")
    finally:
        if queue is not None:
            fcntl.flock(queue, fcntl.LOCK_UN)


def writer(args: tuple[str, str, int, float, int]) -> tuple[float, float]:
    """One process: ``calls`` writes of its own key after ``start``; (first start, last end)."""
    path, how, calls, start, index = args
    key = f"w{index}"
    conn = connect(path)
    queue = open(path + ".queue", "a+b")  # noqa: SIM115 - held for the process's life
    conn.execute("SELECT body FROM doc WHERE id = 1").fetchone()  # open before the clock
    while time.perf_counter() < start:
        time.sleep(0.001)
    held = queue if how == "flock queue" else None
    begin = time.perf_counter()
    for i in range(calls):
        write(conn, key, f"step {i}", held)
    end = time.perf_counter()
    conn.close()
    queue.close()
    return begin, end


def phase(pool: Any, path: str, how: str, writers: int, calls: int) -> float:
    """``writers`` processes at once, ``calls`` in all: calls per second."""
    start = time.perf_counter() + 0.3
    each = max(1, calls // writers)
    results = pool.map(writer, [(path, how, each, start, i) for i in range(writers)])
    elapsed: float = max(r[1] for r in results) - min(r[0] for r in results)
    return writers * each / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=800, help="calls per phase (split among the writers)")
    parser.add_argument("--writers", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "floor.db")
        setup = connect(path)
        setup.executescript(SETUP)
        setup.close()
        with multiprocessing.get_context("fork").Pool(args.writers) as pool:
            for how in ("busy timeout", "flock queue"):
                phase(pool, path, how, args.writers, 80)  # open the files, warm the cache
                pair = alternate(
                    lambda _, h=how: phase(pool, path, h, args.writers, args.calls),  # type: ignore[misc]
                    lambda _, h=how: phase(pool, path, h, 1, args.calls),  # type: ignore[misc]
                    args.rounds,
                    higher_better=True,
                )
                report(
                    f"SQLite by hand, {how}: {args.writers} writers vs 1 (writes/s)",
                    pair,
                    "/s",
                    ">= 0.9x",
                )


if __name__ == "__main__":
    main()
