"""Instructions per write of the LangGraph adapters on SQLite, by layer: the writes of
``bench_langgraph_adapters`` (saver ``put``, ``put_writes``, store ``put`` of an existing item,
one caller, ``synchronous=off``) counted by callgrind, as shipped and with the layers of
:mod:`benchmarks.profile_langgraph_layers` answered without their work. Instructions do not
move with the machine's load, where process CPU does by factors of 2 and more.

Each count runs in a process of its own under ``valgrind --tool=callgrind``: a store warmed by
``--warm`` writes, then ``--ops`` writes counted — only inside the loop that makes them
(``--toggle-collect`` on the loop's own iterator, which nothing else uses), so the
interpreter's start, the imports and the warm-up are not counted. The collector's work is
(amortized, as a caller pays it). ``--baseline-src DIR`` counts another source tree's
``stateflow`` beside this one's. ``--bytecodes CASE``: instead, the Python bytecodes and calls
of each function per write of that case, as shipped (``benchmarks.bytecodes``; no valgrind).
``--postgres URL``: the writes on a PostgreSQL store (in a schema of its own, dropped after)
instead of SQLite — the client's instructions and bytecodes only (the server's are
``profile_pg_commit_instructions``'), at the session's ``synchronous_commit``.

The variant ``whole form`` keeps the LangGraph states' small documents in whole form
(``SqlStore.keep_whole`` on ``langgraph_checkpoints`` and ``langgraph_store``) from the store's
first write on, the layers as shipped; a tree without ``keep_whole`` (an older baseline)
counts it as shipped.

    python3 -m benchmarks.profile_langgraph_instructions [--ops 300] [--warm 300]
        [--cases "saver put" ...] [--variants "as shipped" ...] [--baseline-src DIR] [--jobs 3]
        [--bytecodes CASE [--top 60]] [--postgres URL] [--variants "whole form"]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path

from benchmarks import callgrind
from benchmarks.bytecodes import print_bytecodes
from benchmarks.profile_langgraph_layers import CASES, VARIANTS

MODULE = "benchmarks.profile_langgraph_instructions"
WHOLE_FORM = "whole form"
"""The variant keeping the LangGraph states in whole form from the first write (see above)."""
ALL_VARIANTS = [*VARIANTS, WHOLE_FORM]
WHOLE_STATES = ("langgraph_checkpoints", "langgraph_store")


@contextmanager
def _location(postgres: str | None) -> Iterator[str]:
    """A new store's URL: a SQLite file, or a fresh schema of the PostgreSQL server at ``postgres``."""
    if postgres is None:
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/counted.db?synchronous=off"
        return
    import psycopg

    schema = f"profile_langgraph_{os.getpid()}"
    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            sep = "&" if "?" in postgres else "?"
            yield f"{postgres}{sep}options=-csearch_path%3D{schema}"
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@contextmanager
def _warmed(
    case: str, warm: int, postgres: str | None = None, whole: bool = False
) -> Iterator[Callable[[int], object]]:
    """``case``'s write on a new store as shipped (``whole``: its LangGraph states in whole
    form), warmed by ``warm`` writes."""
    from benchmarks.bench_langgraph_adapters import saver_cases, store_cases
    from stateflow.langgraph import StateflowSaver, StateflowStore
    from stateflow.states import StatesService
    from stateflow.store import open_store

    with _location(postgres) as url:
        store = open_store(url, auto_migrate=True)
        keep_whole = getattr(store, "keep_whole", None)
        if whole and keep_whole is not None:
            for state in WHOLE_STATES:
                keep_whole(state)
        service = StatesService(store)
        cases = {**saver_cases(StateflowSaver(service), "p"), **store_cases(StateflowStore(service), "p")}
        for i in range(warm):  # checkpoints for put_writes, every item written once
            cases["saver put"](i)
            cases[case](i)
        gc.collect()
        gc.freeze()
        try:
            yield cases[case]
        finally:
            service.close()
            service.store.close()


def _work(case: str, variant: str, ops: int, warm: int, postgres: str | None = None) -> None:
    """The counted process: warm a store as shipped, then ``ops`` writes under ``variant``."""
    whole = variant == WHOLE_FORM
    with _warmed(case, warm, postgres, whole) as write, nullcontext() if whole else VARIANTS[variant]():
        # counted: only while ``starmap`` makes the calls (its C iterator is the toggle)
        for _ in itertools.starmap(write, ((i,) for i in range(10_000, 10_000 + ops))):
            pass


def bytecodes(case: str, ops: int, warm: int, top: int, postgres: str | None = None) -> None:
    """Bytecodes and calls per write by function, own and with callees."""
    with _warmed(case, warm, postgres) as write:

        def run(numbers: range) -> None:
            for i in numbers:
                write(i)

        print_bytecodes(case, run, ops, 0, top, ("profile_langgraph_instructions",))


def _count(src: Path, case: str, variant: str, ops: int, warm: int, postgres: str | None) -> float:
    args = ["--work", case, variant, str(ops), str(warm), *([postgres] if postgres else [])]
    return callgrind.count(MODULE, args, src=src) / ops


def main() -> None:
    if len(sys.argv) in (6, 7) and sys.argv[1] == "--work":
        _work(
            sys.argv[2],
            sys.argv[3],
            int(sys.argv[4]),
            int(sys.argv[5]),
            sys.argv[6] if len(sys.argv) == 7 else None,
        )
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=ALL_VARIANTS)
    parser.add_argument("--baseline-src", type=Path, default=None, help="another tree's src/, counted beside")
    parser.add_argument("--jobs", type=int, default=3, help="counts run at once")
    parser.add_argument("--bytecodes", choices=CASES, default=None, help="bytecodes by function instead")
    parser.add_argument("--top", type=int, default=60, help="functions --bytecodes prints")
    parser.add_argument("--postgres", default=None, help="count the writes on this PostgreSQL server")
    args = parser.parse_args()
    if args.bytecodes is not None:
        bytecodes(args.bytecodes, args.ops, args.warm, args.top, args.postgres)
        return
    trees = {"this tree": callgrind.REPO / "src"}
    if args.baseline_src is not None:
        trees["baseline"] = args.baseline_src.resolve()
    runs = [(t, c, v) for c in args.cases for v in args.variants for t in trees]
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = dict(
            zip(
                runs,
                pool.map(lambda r: _count(trees[r[0]], r[1], r[2], args.ops, args.warm, args.postgres), runs),
                strict=True,
            )
        )
    for case in args.cases:
        print(f"== {case}: instructions per write ({args.ops} counted after {args.warm} warm)")
        for variant in args.variants:
            line = f"  {variant:20s} {counts[('this tree', case, variant)]:>10,.0f}"
            if "baseline" in trees:
                base = counts[("baseline", case, variant)]
                line += f"   baseline {base:>10,.0f}   {counts[('this tree', case, variant)] / base:.3f}×"
            print(line)


if __name__ == "__main__":
    main()
