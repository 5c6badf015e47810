"""Concurrent writer processes on one memory scope against one writer.

Each writer is a separate process with its own store object (as separate agents or CLI calls
are), calling ``patch_state`` on the same session scope in a loop. Per round: the combined
throughput of 8 writers against that of 1, and every call's latency. A fair wait passes the
write lock on as soon as it is free; with polling, a writer sleeps past the moment it could
have written, and one that keeps missing it stalls. A call's wait "beyond its turn" is its
latency minus its own service time and that of the calls ahead of it — the other writers'
calls under way when it started that ended before it — each counted as the median time of
one call alone in the same round (``beyond_turn``); it is reported per call. Order is reported
on its own: per call, how many calls that started after it finished before it (``overtaken``) —
with a first-come, first-served queue that stays near zero whatever the machine's load.

    python3 -m benchmarks.bench_writers [--rounds 5] [--calls 200] [--postgres URL] [--only postgres]
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
from typing import TYPE_CHECKING
from urllib.parse import quote

from benchmarks.rounds import Pair, report

if TYPE_CHECKING:
    from stateflow.memory import MemoryView
    from stateflow.store import SqlStore

Call = tuple[int, float, float]
"""(writer, start, end) of one call, on the clock all processes share (``perf_counter``)."""


def shared_view(location: str, start: float) -> tuple[SqlStore, MemoryView]:
    """A writer process's store at ``location`` and its view of the one memory scope every
    writer patches, connected, returned once the clock all processes share reaches ``start``.
    (stateflow imported here: a process may wrap parts of it first.)"""
    from stateflow.memory import Identity, MemoryView
    from stateflow.store import open_store

    store = open_store(location)
    view = MemoryView(store, Identity.of("bench", "/bench", "shared"))
    view.read_state({"path": "session"})  # connect before the clock starts
    while time.perf_counter() < start:
        time.sleep(0.001)
    return store, view


def writer(args: tuple[str, int, float, int]) -> tuple[float, float, list[Call]]:
    """One process: ``calls`` patches after ``start``; (first start, last end, its calls)."""
    location, calls, start, index = args
    store, view = shared_view(location, start)
    timed: list[Call] = []
    begin = time.perf_counter()
    for i in range(calls):
        t = time.perf_counter()
        view.patch_state({"session": {"tactics": {f"w{index}": f"step {i}"}}})
        timed.append((index, t, time.perf_counter()))
    end = time.perf_counter()
    store.close()
    return begin, end, timed


def beyond_turn(calls: list[Call], unit: float) -> list[float]:
    """Each call's wait beyond its turn: its latency minus its own service and that of the
    other writers' calls that were already under way when it started and ended while it waited
    (the writers ahead of it), each counted as ``unit`` (one call's time alone). What remains
    is time lost to calls that started later and went first, and to hand-offs that stalled."""
    waits = []
    for me, start, end in calls:
        ahead = sum(1 for w, s, e in calls if w != me and s < start < e <= end)
        waits.append(max(0.0, (end - start) - (ahead + 1) * unit))
    return waits


def overtaken(calls: list[Call]) -> list[int]:
    """Per call: the other writers' calls that started after it and were done before it."""
    return [sum(1 for w, s, e in calls if w != me and start < s and e < end) for me, start, end in calls]


def phase(
    pool: multiprocessing.pool.Pool, location: str, writers: int, calls: int
) -> tuple[float, list[Call]]:
    """``writers`` processes at once, ``calls`` each: (calls per second, every latency)."""
    start = time.perf_counter() + 0.5
    results = pool.map(writer, [(location, calls, start, i) for i in range(writers)])
    begin = min(r[0] for r in results)
    end = max(r[1] for r in results)
    return writers * calls / (end - begin), [x for r in results for x in r[2]]


def _ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000:.1f} ms"


def case(label: str, location: str, rounds: int, calls: int, writers: int = 8) -> None:
    with multiprocessing.get_context("fork").Pool(writers) as pool:
        phase(pool, location, writers, 20)  # migrate, warm up
        many: list[float] = []
        one: list[float] = []
        alone: list[float] = []
        waits: list[float] = []
        passed: list[int] = []
        latencies: list[float] = []
        for r in range(rounds):
            order = (1, writers) if r % 2 == 0 else (writers, 1)
            measured: dict[int, list[Call]] = {}
            for n in order:
                rate, measured[n] = phase(pool, location, n, calls if n == 1 else max(1, calls // writers))
                (one if n == 1 else many).append(rate)
            unit = statistics.median(e - s for _, s, e in measured[1])  # this round's call alone
            alone.append(unit)
            waits += beyond_turn(measured[writers], unit)
            passed += overtaken(measured[writers])
            latencies += [e - s for _, s, e in measured[writers]]
    pair = Pair(many, one, higher_better=True)
    report(f"{label}: {writers} writer processes vs 1 (patch_state/s)", pair, "/s", ">= 0.9x (PG >= 1x)")
    over = sum(1 for w in waits if w > 0.05)
    print(
        f"{label}: one call alone {statistics.median(alone) * 1000:.1f} ms; with {writers} writers "
        f"latency p50 {_ms(latencies, 0.5)}, p99 {_ms(latencies, 0.99)}, max {_ms(latencies, 1.0)}; "
        f"wait beyond its turn per call: p50 {_ms(waits, 0.5)}, p90 {_ms(waits, 0.9)}, "
        f"p99 {_ms(waits, 0.99)}, max {_ms(waits, 1.0)}; {over} of {len(waits)} calls over 50 ms "
        "(target: none)",
        flush=True,
    )
    ordered = sorted(passed)
    print(
        f"{label}: calls overtaken by a later call: {sum(1 for p in passed if p)} of {len(passed)}; "
        f"later calls that went first, per call: p50 {ordered[len(ordered) // 2]}, "
        f"p99 {ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]}, max {ordered[-1]}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="calls per phase (split among the writers)")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--only", choices=("sqlite", "postgres"), help="run one backend's case")
    args = parser.parse_args()
    if args.only != "postgres":
        with tempfile.TemporaryDirectory() as tmp:
            case("SQLite", str(Path(tmp) / "writers.db"), args.rounds, args.calls)
    if args.postgres and args.only != "sqlite":
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
