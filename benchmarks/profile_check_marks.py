"""Instructions ``stateflow check`` spends on a SQLite store of LangGraph checkpoints, each a
document whose history is its creating change kept as the change mark (``rows.CHANGE_MARK``: the
body is its row's, which ``history.resolve_marks`` reads, one statement per document replayed),
counted by callgrind over the check alone (the store is filled, and its garbage collected and
frozen, before the count starts); ``--baseline-src`` counts another tree beside.

    python3 -m benchmarks.profile_check_marks [--checkpoints 5000] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import sys
import tempfile
from pathlib import Path

from benchmarks import callgrind

MODULE = "benchmarks.profile_check_marks"


def _work(checkpoints: int) -> None:
    """Fill a store with ``checkpoints`` saver puts, then check it (the counted call)."""
    from benchmarks.bench_langgraph_adapters import saver_cases
    from stateflow.langgraph import StateflowSaver
    from stateflow.states import StatesService
    from stateflow.store import open_store
    from stateflow.store.check import check_store

    with tempfile.TemporaryDirectory() as tmp:
        location = f"sqlite:///{tmp}/check.db?synchronous=off"
        store = open_store(location, auto_migrate=True)
        put = saver_cases(StateflowSaver(StatesService(store)), "c")["saver put"]
        for i in range(checkpoints):
            put(i)
        store.close()
        # (the filling's garbage out of the count: a collection of it inside the check would
        # weigh the heap the filling left, not the check)
        gc.collect()
        gc.freeze()
        checked = open_store(location)  # (as ``stateflow check`` opens it: nothing in memory)
        for report in itertools.starmap(check_store, [(checked,)]):
            assert report.ok, report.to_json()
            print(report.to_json()["checked"], file=sys.stderr)
        checked.close()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--work":
        _work(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--checkpoints", type=int, default=5000)
    parser.add_argument("--baseline-src", type=Path, default=None)
    args = parser.parse_args()
    trees = {"this tree": callgrind.REPO / "src"}
    if args.baseline_src is not None:
        trees["baseline"] = args.baseline_src.resolve()
    for tree, src in trees.items():
        n = callgrind.count(MODULE, ["--work", str(args.checkpoints)], src=src)
        print(
            f"[{tree}] check of {args.checkpoints:,} checkpoints: {n:,} instructions "
            f"({n / args.checkpoints:,.0f} a checkpoint)",
            flush=True,
        )


if __name__ == "__main__":
    main()
