"""Instructions per search, sorted search, count and scan over a SQLite state whose documents
are in member form, against the same state in whole form (``SqlStore.keep_whole``: small
documents' bodies in their rows, no member rows, no value index), counted by callgrind, which
the machine's load does not move.

One state of ``--records`` records (``bench_sorted_search``'s bodies: one in 10 with status
"open", a number ``n``, a text ``owner``), filled in commits of 500 at ``synchronous=off``,
then per case ``--warm`` calls and ``--ops`` counted (only inside ``itertools.starmap``):

- ``search``: ``{"status": "open"}``, the first page of 50 (member form: from the value index);
- ``sorted``: the same filter sorted by ``n`` descending, the first page of 50;
- ``counts``: the state's counters (``Store.counts``);
- ``scan``: the first 200 documents in subject order.

Each case runs in each form (``search member``, ``search whole``, ...). ``--baseline-src DIR``
counts another source tree's ``stateflow`` beside this one's.

    python3 -m benchmarks.profile_search_instructions [--records 2000] [--ops 5] [--warm 2]
        [--cases search sorted counts scan] [--baseline-src DIR] [--jobs 2]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import callgrind
from benchmarks.bench_sorted_search import fill
from stateflow.store import SqlStore

MODULE = "benchmarks.profile_search_instructions"
CASES = ("search", "sorted", "counts", "scan")
FORMS = ("member", "whole")
STATE = "searched"


def _call(store: SqlStore, case: str) -> Callable[[], Any]:
    if case == "search":
        return lambda: store.search(STATE, {"status": "open"}, limit=50)
    if case == "sorted":
        return lambda: store.search_sorted(STATE, {"status": "open"}, [(("n",), True)], limit=50)
    if case == "counts":
        return lambda: store.counts(STATE)
    return lambda: store.scan(STATE, limit=200)


def _work(case: str, form: str, records: int, ops: int, warm: int) -> None:
    """The counted process: a state filled in ``form``, ``warm`` calls, then ``ops`` inside
    ``starmap`` (the toggle)."""
    from stateflow.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/searched.db?synchronous=off", auto_migrate=True)
        try:
            if form == "whole":
                assert store.keep_whole(STATE)
            fill(store, STATE, records)
            call = _call(store, case)
            answer = call()
            assert answer, f"{case} found nothing"
            for _ in range(warm):
                call()

            def run(indexes: range) -> None:
                for _ in indexes:
                    call()

            for _ in itertools.starmap(run, [(range(ops),)]):
                pass
        finally:
            store.close()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--work":
        case, form, records, ops, warm = sys.argv[2:7]
        _work(case, form, int(records), int(ops), int(warm))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--ops", type=int, default=5)
    parser.add_argument("--warm", type=int, default=2)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--baseline-src", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    named = [f"{case} {form}" for case in args.cases for form in FORMS]

    def count_case(src: Path, name: str) -> float:
        case, form = name.split()
        work = ["--work", case, form, str(args.records), str(args.ops), str(args.warm)]
        return callgrind.count(MODULE, work, src=src) / int(args.ops)

    callgrind.print_against_baseline(
        f"instructions a call, {args.records:,} records ({args.ops} counted after {args.warm})",
        named,
        count_case,
        baseline_src=args.baseline_src,
        jobs=args.jobs,
        width=max(len(n) for n in named),
    )


if __name__ == "__main__":
    main()
