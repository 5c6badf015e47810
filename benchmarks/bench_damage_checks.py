"""What detecting mid-file damage of a SQLite store costs, to decide where to check.

1. A whole-file check on open: opening a store (the first statement, which reads the header)
   against ``PRAGMA quick_check`` (every page, no index cross-check) on a store of ``--mb`` MB.
   Both read a warm page cache; a cold one only makes the check dearer.
2. The check on write the store runs: ``PRAGMA cell_size_check`` on every connection, which
   checks each b-tree page's cells as the page is read, so a write touching a damaged page fails
   instead of spreading the damage. Read-modify-write commits (``synchronous=normal``, so the
   CPU shows, not fsync) and historical reads with the check on vs off.

    python3 -m benchmarks.bench_damage_checks [--mb 100] [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from benchmarks.rounds import alternate, report
from stateflow.store import DocKey, SqlStore, Write, open_store


def build(path: Path, mb: int) -> None:
    store = open_store(str(path))
    try:
        per_doc = 2_000  # characters of text per document (hex of random bytes: incompressible)
        docs = max(1, mb * 1_000_000 // (per_doc * 2))  # stored about twice (body, first change)
        for start in range(0, docs, 500):
            writes = [
                Write.between(DocKey("notes", f"n{i}"), None, {"text": os.urandom(per_doc // 2).hex()}, 0)
                for i in range(start, min(docs, start + 500))
            ]
            store.commit(writes, {"door": "bench"})
    finally:
        store.close()


def timed_statement(path: Path, sql: str) -> float:
    """Milliseconds for a fresh read-only connection's first statement ``sql``."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        start = time.perf_counter()
        conn.execute(sql).fetchall()
        return (time.perf_counter() - start) * 1000
    finally:
        conn.close()


def workload(directory: Path, check: bool, commits: int) -> float:
    """Milliseconds per read-modify-write commit (and a few historical reads) on a new store."""
    store = open_store(f"sqlite:///{directory / f'w{time.perf_counter_ns()}.db'}?synchronous=normal")
    assert isinstance(store, SqlStore)
    try:
        writer = store._writer()  # type: ignore[attr-defined]
        reader = store._enter()  # type: ignore[attr-defined]
        store._leave(reader)  # type: ignore[attr-defined]
        for conn in [writer, reader.conn]:
            conn.execute(f"PRAGMA cell_size_check = {'ON' if check else 'OFF'}")
        start = time.perf_counter()
        for i in range(commits):
            key = DocKey("notes", f"n{i % 50}")
            old = store.get(key)
            store.commit(
                [Write.between(key, old.value, {"n": i, "t": "x" * 200}, old.revision)], {"door": "b"}
            )
        for i in range(50):
            for revision in range(1, commits // 50, 3):
                store.read_at(DocKey("notes", f"n{i}"), revision=revision)
        return (time.perf_counter() - start) * 1000 / commits
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--commits", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = directory / "big.db"
        print(f"building a store of ~{args.mb} MB …", flush=True)
        build(path, args.mb)
        size_mb = path.stat().st_size / 1e6
        print(f"  {size_mb:.0f} MB")
        pair = alternate(
            lambda _: timed_statement(path, "PRAGMA quick_check"),
            lambda _: timed_statement(path, "PRAGMA schema_version"),
            args.rounds,
        )
        report(f"open + quick_check vs open ({size_mb:.0f} MB)", pair, "ms")
        pair = alternate(
            lambda _: workload(directory, True, args.commits),
            lambda _: workload(directory, False, args.commits),
            args.rounds,
        )
        report("commit + history reads: cell_size_check on vs off", pair, "ms")


if __name__ == "__main__":
    main()
