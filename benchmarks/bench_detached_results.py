"""What handing callers their own copy of a result costs, against the call it belongs to.

Reads return copies of what they select (the store caches decoded documents and shares them
between readers). The copy is one ``detach`` of the returned value, so its cost is measured as
the call plus one more ``detach`` of the same result against the call alone, in alternating
rounds (each round's time: the median of its single calls): the ratio minus one is the copy's
share of the call. Cases: the 10-item range read of
``bench_memory`` (from a 100,000-element lazy array), ``context()`` of a session holding
``--lazy-mb`` of lazy state, and a warm declared-state ``read`` of the small record of
``bench_states_vs_langgraph``.

    python3 -m benchmarks.bench_detached_results [--rounds 21] [--calls 200] [--lazy-mb 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_states_vs_langgraph import DECL, ops_for, subject
from benchmarks.rounds import alternate, report
from stateflow.doc.canonical import detach
from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.store import open_store


def median_call_ms(fn: Callable[[], object], calls: int) -> float:
    """The median of ``calls`` single-call times: a call the scheduler preempts on a busy
    machine moves the mean of a round, not its median."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(label: str, call: Callable[[], Any], rounds: int, calls: int) -> None:
    result = call()

    def with_copy(_: int) -> float:
        return median_call_ms(lambda: (call(), detach(result)), calls)

    def alone(_: int) -> float:
        return median_call_ms(call, calls)

    alone(0)  # warm both paths once
    report(label, alternate(with_copy, alone, rounds), "ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=200, help="calls per round and side")
    parser.add_argument("--lazy-mb", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "memory.db"))
        view = MemoryView(store, Identity.of("bench", tmp, "s"))
        view.patch_state({"session": {"lazy": {"big": [f"thought {i}" for i in range(100_000)]}}})
        read = {"path": "session.lazy.big[50000:50010]"}
        measure(
            "copy of a 10-item range read's result / the read", lambda: view.read_state(read), **vars_of(args)
        )
        per_key = max(1, args.lazy_mb * 1000 // 20)
        for k in range(20):
            view.patch_state({"session": {"lazy": {f"archive{k}": ["x" * 1000] * per_key}}})
        view.patch_state(
            {
                "session": {
                    "intents": {"ship": {"goal": "release"}},
                    "tactics": {"next": "benchmark"},
                    "strategy": {"lang": "python"},
                }
            }
        )
        measure(
            f"copy of context()'s head / context() ({args.lazy_mb} MB lazy)", view.context, **vars_of(args)
        )
        store.close()

        states = StatesService(open_store(str(Path(tmp) / "states.db")))
        states.declare("bench", DECL)
        for i in range(3):
            states.apply("bench", subject(0), ops_for(i))
        measure(
            "copy of a declared-state read's record / the read",
            lambda: states.read("bench", subject(0)),
            **vars_of(args),
        )
        states.close()


def vars_of(args: argparse.Namespace) -> dict[str, int]:
    return {"rounds": args.rounds, "calls": args.calls}


if __name__ == "__main__":
    main()
