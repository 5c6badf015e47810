"""Concurrent writer processes on one memory scope against one writer.

Each writer is a separate process with its own store object (as separate agents or CLI calls
are), calling ``patch_state`` on the same session scope in a loop. Per round: the combined
throughput of 8 writers against that of 1, and every call's latency. A fair wait passes the
write lock on as soon as it is free; with polling, a writer sleeps past the moment it could
have written, and one that keeps missing it stalls. "Beyond its turn" is a call's latency
minus the time the writers ahead of it need: (writers − 1) × the median latency of one writer
alone, plus its own.

    python3 -m benchmarks.bench_writers [--rounds 5] [--calls 200] [--postgres URL]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

from benchmarks.rounds import Pair, report


def writer(args: tuple[str, int, float, int]) -> tuple[float, float, list[float]]:
    """One process: ``calls`` patches after ``start``; (first start, last end, latencies)."""
    location, calls, start, index = args
    from stateflow.memory import Identity, MemoryView
    from stateflow.store import open_store

    store = open_store(location)
    view = MemoryView(store, Identity.of("bench", "/bench", "shared"))
    view.read_state({"path": "session"})  # connect before the clock starts
    while time.perf_counter() < start:
        time.sleep(0.001)
    latencies = []
    begin = time.perf_counter()
    for i in range(calls):
        t = time.perf_counter()
        view.patch_state({"session": {"tactics": {f"w{index}": f"step {i}"}}})
        latencies.append(time.perf_counter() - t)
    end = time.perf_counter()
    store.close()
    return begin, end, latencies


def phase(
    pool: multiprocessing.pool.Pool, location: str, writers: int, calls: int
) -> tuple[float, list[float]]:
    """``writers`` processes at once, ``calls`` each: (calls per second, every latency)."""
    start = time.perf_counter() + 0.5
    results = pool.map(writer, [(location, calls, start, i) for i in range(writers)])
    begin = min(r[0] for r in results)
    end = max(r[1] for r in results)
    return writers * calls / (end - begin), [x for r in results for x in r[2]]


def case(label: str, location: str, rounds: int, calls: int, writers: int = 8) -> None:
    with multiprocessing.get_context("fork").Pool(writers) as pool:
        phase(pool, location, writers, 20)  # migrate, warm up
        many: list[float] = []
        one: list[float] = []
        alone: list[float] = []
        latencies: list[float] = []
        for r in range(rounds):
            order = (1, writers) if r % 2 == 0 else (writers, 1)
            for n in order:
                rate, lat = phase(pool, location, n, calls if n == 1 else max(1, calls // writers))
                (one if n == 1 else many).append(rate)
                (alone if n == 1 else latencies).extend(lat)
    pair = Pair(many, one, higher_better=True)
    report(f"{label}: {writers} writer processes vs 1 (patch_state/s)", pair, "/s", ">= 0.9x (PG >= 1x)")
    turn = statistics.median(alone) * writers  # the writers ahead of a call, and the call itself
    latencies.sort()
    beyond = max(latencies) - turn
    p99 = latencies[int(len(latencies) * 0.99)]
    print(
        f"{label}: with {writers} writers p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms; a turn is ~{turn * 1000:.1f} ms, "
        f"so the longest call waited {beyond * 1000:.1f} ms beyond its turn (target <= 50 ms)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="calls per phase (split among the writers)")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        case("SQLite", str(Path(tmp) / "writers.db"), args.rounds, args.calls)
    if args.postgres:
        import psycopg

        schema = f"bench_writers_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        try:
            sep = "&" if "?" in args.postgres else "?"
            url = f"{args.postgres}{sep}options={quote(f'-csearch_path={schema}')}"
            from stateflow.store import open_store

            open_store(url, auto_migrate=True).close()
            case("PostgreSQL", url, args.rounds, args.calls)
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
