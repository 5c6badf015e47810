"""A busy checkpointer: many threads' graphs stepping in turn, against LangGraph's saver.

``bench_langgraph_adapters`` times each saver call on its own; a process serving many
conversations interleaves them. Here ``--threads`` threads step in turn, a step being what a
graph's superstep writes: the thread's next checkpoint (its parent the thread's previous one)
and two tasks' pending writes on it. With more threads than the records the store holds for
its latest writes (``Store.cache_recent``: 1,024 writes), each put finds its parent's record let
go long ago — the case of a process whose nodes run for seconds while other conversations write.

Both sides write the same steps through LangGraph's API (ours: ``StateflowSaver``; LangGraph's:
``SqliteSaver`` — WAL, ``synchronous=FULL`` on both — or ``PostgresSaver`` with ``--backend
postgres``, each in a fresh schema), after a warm-up of two steps per thread; each round times
one more step of every thread on each side (:mod:`benchmarks.rounds`: alternating, the first
side turning round by round). Printed: steps a second, ours against LangGraph's (a rate ratio:
above 1, ours is faster), the median of the rounds' ratios and their spread; then a check that
both sides hold the same checkpoints and pending writes.

    python3 -m benchmarks.bench_langgraph_busy [--threads 2000] [--rounds 5] [--backend sqlite|postgres]
        [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.bench_langgraph_adapters import postgres_schemas, saver_cases
from benchmarks.rounds import alternate, report
from stateflow.langgraph import StateflowSaver
from stateflow.states import StatesService
from stateflow.store import open_store


def _stepper(saver: Any, threads: int) -> Callable[[int], None]:
    """A step of thread ``i % threads``: its next checkpoint, then two tasks' writes on it."""
    cases = saver_cases(saver, "busy", threads=threads)
    put, put_writes = cases["saver put"], cases["saver put_writes"]

    def step(i: int) -> None:
        put(i)
        put_writes(i)  # (the i-th checkpoint written: the one just put)
        put_writes(i)

    return step


def _sides(stack: ExitStack, backend: str, url: str | None) -> tuple[Any, Any]:
    """(ours, LangGraph's) savers on the backend, each on storage of its own."""
    if backend == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        if not url:
            raise SystemExit("--backend postgres needs --postgres URL or $STATEFLOW_TEST_POSTGRES")
        at = stack.enter_context(postgres_schemas(url, "bench_busy_sf", "bench_busy_lg"))
        store = open_store(at["bench_busy_sf"], auto_migrate=True)
        stack.callback(store.close)
        theirs = stack.enter_context(PostgresSaver.from_conn_string(at["bench_busy_lg"]))
        theirs.setup()
        return StateflowSaver(StatesService(store)), theirs
    from langgraph.checkpoint.sqlite import SqliteSaver

    tmp = stack.enter_context(tempfile.TemporaryDirectory())
    store = open_store(f"sqlite:///{tmp}/stateflow.db?synchronous=full")
    stack.callback(store.close)
    conn = sqlite3.connect(Path(tmp) / "langgraph.db", check_same_thread=False, isolation_level=None)
    stack.callback(conn.close)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    lite = SqliteSaver(conn)
    lite.setup()
    return StateflowSaver(StatesService(store)), lite


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--threads", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    args = parser.parse_args()
    threads: int = args.threads
    with ExitStack() as stack:
        ours, theirs = _sides(stack, args.backend, args.postgres)
        steps = {"ours": _stepper(ours, threads), "theirs": _stepper(theirs, threads)}
        next_step = {"ours": 0, "theirs": 0}
        for side, step in steps.items():  # (warm-up: every thread two steps in)
            for i in range(2 * threads):
                step(i)
            next_step[side] = 2 * threads

        def timed(side: str) -> float:
            step, first = steps[side], next_step[side]
            start = time.perf_counter()
            for i in range(first, first + threads):
                step(i)
            next_step[side] = first + threads
            return threads / (time.perf_counter() - start)

        pair = alternate(
            lambda _r: timed("ours"), lambda _r: timed("theirs"), args.rounds, higher_better=True
        )
        report(
            f"{args.backend}: a step (put, 2 put_writes) of {threads} threads in turn",
            pair,
            "steps/s",
        )
        # both sides wrote the same steps: a thread's checkpoints and their pending writes
        config = {"configurable": {"thread_id": "busy-0", "checkpoint_ns": ""}}
        listed = [
            [
                (len(t.checkpoint["channel_values"]["messages"]), len(t.pending_writes or ()))
                for t in saver.list(config)
            ]
            for saver in (ours, theirs)
        ]
        if listed[0] != listed[1] or len(listed[0]) != 2 + args.rounds:
            raise SystemExit(f"the sides' checkpoints differ: {listed}")


if __name__ == "__main__":
    main()
