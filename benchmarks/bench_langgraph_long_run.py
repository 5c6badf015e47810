"""A long run of checkpoints: what a process writing them for hours keeps alive, against
LangGraph's ``SqliteSaver`` in the same run.

Each side runs in a process of its own (its memory and its garbage collector's work are its
own): ``--puts`` saver ``put`` calls of ``bench_langgraph_adapters``' checkpoint chain, spread
over ``--threads`` threads — on SQLite (WAL; ``synchronous=off`` on both sides, so the time is
the processes' own work, not the disk's) against LangGraph's ``SqliteSaver``, or with
``--backend postgres`` (``--postgres URL`` or ``$STATEFLOW_TEST_POSTGRES``; each side in a fresh
schema, the server's ``synchronous_commit`` for both) against its ``PostgresSaver``. Measured in
``--rounds`` alternating rounds (:mod:`benchmarks.rounds`: each round runs both sides, the first
side turning round by round).
Printed per side, the median of the rounds: the wall time a put, the garbage collector's time a
put (``gc.callbacks``), its longest pause, its full collections, the objects it tracks at the end
and the process's peak resident memory; then ours ÷ LangGraph's, the median of the rounds'
ratios and their spread.

The benchmark's own list of the configs its puts returned (two dicts a put) is in both sides'
counts.

    python3 -m benchmarks.bench_langgraph_long_run [--puts 30000] [--threads 64] [--rounds 3]
        [--backend sqlite|postgres] [--postgres URL]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.rounds import Pair, alternate

SIDES = ("stateflow", "langgraph")


def _run(side: str, puts: int, threads: int, postgres: str | None = None) -> dict[str, float]:
    """One side's run, in this process: its numbers (``postgres``: on that server, in a fresh
    schema, else on a SQLite file)."""
    from benchmarks.bench_langgraph_adapters import postgres_schemas, saver_cases

    paused = {"start": 0.0, "longest": 0.0, "total": 0.0, "full": 0}

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            paused["start"] = time.perf_counter()
            return
        took = time.perf_counter() - paused["start"]
        paused["total"] += took
        paused["longest"] = max(paused["longest"], took)
        paused["full"] += info["generation"] == 2

    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        url = None
        if postgres is not None:
            schema = f"bench_long_{side}_{os.getpid()}"
            url = stack.enter_context(postgres_schemas(postgres, schema))[schema]
        saver: Any
        if side == "stateflow":
            from stateflow.langgraph import StateflowSaver
            from stateflow.states import StatesService
            from stateflow.store import open_store

            store = open_store(url or f"sqlite:///{tmp}/stateflow.db?synchronous=off", auto_migrate=True)
            stack.callback(store.close)
            saver = StateflowSaver(StatesService(store))
        elif url is not None:
            from langgraph.checkpoint.postgres import PostgresSaver

            saver = stack.enter_context(PostgresSaver.from_conn_string(url))
            saver.setup()
        else:
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(Path(tmp) / "langgraph.db", check_same_thread=False)
            stack.callback(conn.close)
            conn.execute("PRAGMA synchronous = OFF")
            saver = SqliteSaver(conn)
            saver.setup()
        put = saver_cases(saver, "long", threads=threads)["saver put"]
        gc.collect()
        gc.callbacks.append(watch)
        started = time.perf_counter()
        for i in range(puts):
            put(i)
        took = time.perf_counter() - started
        gc.callbacks.remove(watch)
        tracked = len(gc.get_objects())
    return {
        "put_us": took / puts * 1e6,
        "gc_us": paused["total"] / puts * 1e6,
        "longest_ms": paused["longest"] * 1e3,
        "full": paused["full"],
        "tracked": tracked,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _side(side: str, puts: int, threads: int, postgres: str | None) -> dict[str, float]:
    """One side's run in a process of its own: its numbers."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.bench_langgraph_long_run", "--side", side),
            *("--puts", str(puts), "--threads", str(threads)),
            *(("--postgres", postgres) if postgres else ()),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


ROWS = (
    ("put_us", "wall a put (µs)", "{:.0f}"),
    ("gc_us", "garbage collector a put (µs)", "{:.1f}"),
    ("longest_ms", "longest collection (ms)", "{:.1f}"),
    ("full", "full collections", "{:.0f}"),
    ("tracked", "objects tracked at the end", "{:,.0f}"),
    ("peak_mib", "peak resident memory (MiB)", "{:.0f}"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--puts", type=int, default=30_000)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--postgres", default=None, help="the server (default $STATEFLOW_TEST_POSTGRES)")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # (a side's own process)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(_run(args.side, args.puts, args.threads, args.postgres)))
        return
    postgres = None
    if args.backend == "postgres":
        postgres = args.postgres or os.environ.get("STATEFLOW_TEST_POSTGRES")
        if not postgres:
            parser.error("--backend postgres needs --postgres URL or $STATEFLOW_TEST_POSTGRES")
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}

    def measured(side: str) -> float:
        runs[side].append(_side(side, args.puts, args.threads, postgres))
        return runs[side][-1]["put_us"]

    alternate(lambda _: measured("stateflow"), lambda _: measured("langgraph"), args.rounds)
    where = "PostgreSQL" if postgres else "SQLite, synchronous=off"
    print(
        f"{args.puts:,} saver puts over {args.threads} threads ({where}), "
        f"{args.rounds} alternating rounds: medians, ours ÷ LangGraph's (rounds' spread)"
    )
    print(f"  {'':30} {'stateflow':>12} {'langgraph':>12} {'ratio':>8}  rounds")
    for key, label, spec in ROWS:
        pair = Pair([r[key] for r in runs["stateflow"]], [r[key] for r in runs["langgraph"]])
        ours, theirs = statistics.median(pair.ours), statistics.median(pair.base)
        ratio, spread = (f"{pair.ratio:.2f}×", pair.spread()) if pair.ratios else ("—", "—")
        print(f"  {label:30} {spec.format(ours):>12} {spec.format(theirs):>12} {ratio:>8}  {spread}")


if __name__ == "__main__":
    main()
