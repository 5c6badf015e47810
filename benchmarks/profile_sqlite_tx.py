"""Where one SQLite write's transaction goes, in instructions (issues 16, 17): for a
declared-states ``apply``, a three-scope ``patch_state``, a LangGraph saver ``put``, a
``put_writes`` and a store ``put`` (one caller, ``synchronous=off``), callgrind's count of the
whole write split by object file (SQLite's library, the ``_sqlite3`` module, the interpreter,
libc, ...), and the inclusive count of each named Python function of the commit's layer (the
group commit, the writer queue, the statement wrappers).

Each count runs in a process of its own under ``valgrind --tool=callgrind``
(``PYTHONHASHSEED=0``): a store warmed by ``--warm`` writes, then ``--ops`` writes counted
inside ``itertools.starmap`` (``--toggle-collect=starmap_next``). During the counted writes
each named function is called through a C function of the interpreter of its own that only
calls it (``operator.call``, ``Context.run``, ``sys.call_tracing``, ``methodcaller``,
``partial``: five functions a run), and that C function's inclusive count is the Python
function's: everything it calls, SQLite's C included (the kernel's work is not counted). The
wrappers themselves sit outside what they count, but inside the whole write, which reads a
few percent higher in these runs than without them. A ``module:name`` is a module's own
function (as the calling module imported it).

    python3 -m benchmarks.profile_sqlite_tx [--cases apply ...] [--functions module:Class.name ...]
        [--ops 200] [--warm 300] [--jobs 2] [--baseline-src DIR] [--keep DIR]
"""

from __future__ import annotations

import argparse
import collections
import contextvars
import functools
import gc
import importlib
import itertools
import operator
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import callgrind

MODULE = "benchmarks.profile_sqlite_tx"
CASES = ("apply", "patch_state", "saver put", "saver put_writes", "store put")
FUNCTIONS = (
    "stateflow.store.sqlite:_Member.__enter__",
    "stateflow.store.sqlite:_Member.__exit__",
    "stateflow.store.writer_queue:WriterQueue.acquire",
    "stateflow.store.writer_queue:WriterQueue.release",
    "stateflow.store.sqlite:SqliteStore._commit_planned",
    "stateflow.store.sqlite:_GroupCommit._settle",
    "stateflow.store.sqlite:_SqliteTx.run",
    "stateflow.store.sqlite:_SqliteTx.many",
    "stateflow.store.sqlite:_SqliteTx.insert_one",
    "stateflow.store.sqlite:_SqliteTx.all",
)
"""``module:Class.name`` of each function counted (inclusive) by default"""
WHOLE = "the whole write"


def writer(case: str, service: Any, tmp: str) -> tuple[Callable[[int], object], Callable[[int], object]]:
    """How to warm for ``case``, and its write made with ``i`` (each call a new value)."""
    if case in ("apply", "saver put", "patch_state"):
        from benchmarks.profile_sqlite_commit_pages import writer as pages_writer

        write = pages_writer(case, service, tmp)
        return write, write
    from benchmarks.bench_langgraph_adapters import saver_cases, store_cases
    from stateflow.langgraph import StateflowSaver, StateflowStore

    cases = {**saver_cases(StateflowSaver(service), "p"), **store_cases(StateflowStore(service), "p")}
    if case == "saver put_writes":
        put, put_writes = cases["saver put"], cases["saver put_writes"]

        def warm(i: int) -> object:  # (a checkpoint to write to: made while warming)
            put(i)
            return put_writes(i)

        return warm, put_writes
    return cases[case], cases[case]


def _call(original: Callable[..., Any]) -> Callable[..., Any]:
    call = operator.call
    return lambda *args, **kwargs: call(original, *args, **kwargs)


def _context(original: Callable[..., Any]) -> Callable[..., Any]:
    copy = contextvars.copy_context
    return lambda *args, **kwargs: copy().run(original, *args, **kwargs)


def _tracing(original: Callable[..., Any]) -> Callable[..., Any]:
    call_tracing = sys.call_tracing
    return lambda *args: call_tracing(original, args)


def _method(original: Callable[..., Any]) -> Callable[..., Any]:
    caller = operator.methodcaller
    return lambda *args, **kwargs: caller("__call__", *args, **kwargs)(original)


def _partial(original: Callable[..., Any]) -> Callable[..., Any]:
    partial = functools.partial
    return lambda *args, **kwargs: partial(original)(*args, **kwargs)


TRAMPOLINES: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "_operator_call": _call,
    "context_run": _context,
    "sys_call_tracing": _tracing,
    "methodcaller_call": _method,
    "partial_vectorcall": _partial,
}
"""C functions of the interpreter that call a Python function and nothing else here: each
counted function is called through one of them, whose inclusive count is then its own"""


def _through(target: str, trampoline: str) -> None:
    """Replace ``module:Class.name`` by a function calling the original through the C
    function ``trampoline``."""
    module_name, qualified = target.split(":")
    owner: Any = importlib.import_module(module_name)
    *path, name = qualified.split(".")  # (a module's own function: no class)
    for part in path:
        owner = getattr(owner, part)
    setattr(owner, name, TRAMPOLINES[trampoline](getattr(owner, name)))


def _work(case: str, targets: list[str], ops: int, warm: int) -> None:
    """The counted process: ``warm`` writes, then ``ops`` counted ones, each target function
    called through a trampoline of its own."""
    from stateflow.states import StatesService
    from stateflow.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        service = StatesService(open_store(f"sqlite:///{tmp}/tx.db?synchronous=off", auto_migrate=True))
        warming, write = writer(case, service, tmp)
        for i in range(warm):
            warming(i)
        gc.collect()
        gc.freeze()
        for target, trampoline in zip(targets, TRAMPOLINES, strict=False):
            _through(target, trampoline)
        for _ in itertools.starmap(write, ((i,) for i in range(10_000, 10_000 + ops))):
            pass
        service.close()
        service.store.close()


_OBJECT = re.compile(r"^c?ob=\((\d+)\)(?: (.*))?$")
_FN = re.compile(r"^fn=")


def by_object(out: Path) -> dict[str, int]:
    """Self instructions per object file in a callgrind output file."""
    names: dict[str, str] = {}
    totals: collections.Counter[str] = collections.Counter()
    current = "?"
    after_calls = False
    for line in out.read_text().splitlines():
        if line.startswith(("ob=", "cob=")):
            found = _OBJECT.match(line)
            if found:
                ident, name = found.groups()
                if name:
                    names[ident] = name
                if line.startswith("ob="):
                    current = names.get(ident, "?")
            continue
        if line.startswith("calls="):
            after_calls = True
            continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            if after_calls:
                after_calls = False  # the call's inclusive cost: not this function's own
                continue
            parts = line.split()
            if len(parts) >= 2:
                totals[Path(current).name] += int(parts[1])
    return dict(totals)


def _inclusive(out: Path, names: Sequence[str]) -> dict[str, int]:
    """Inclusive instructions of the C functions ``names`` (callgrind_annotate's answer)."""
    text = callgrind.annotate_inclusive(out)
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].replace(",", "").isdigit():
            function = parts[-2] if parts[-1].startswith("[") else parts[-1]
            function = function.rsplit(":", 1)[-1].split("'")[0]
            if function in names and function not in found:
                found[function] = int(parts[0].replace(",", ""))
    return found


def _run(
    src: Path, case: str, targets: list[str], ops: int, warm: int, out: Path
) -> tuple[int, dict[str, int]]:
    """The whole write's count and each target's (by its trampoline), per ``ops`` writes."""
    whole = callgrind.count(
        MODULE, ["--work", case, ",".join(targets), str(ops), str(warm)], src=src, out=out
    )
    trampolines = list(TRAMPOLINES)[: len(targets)]
    counts = _inclusive(out, trampolines)
    return whole, {t: counts.get(tr, 0) for t, tr in zip(targets, trampolines, strict=False)}


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--work":
        _work(sys.argv[2], [t for t in sys.argv[3].split(",") if t], int(sys.argv[4]), int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--functions", nargs="*", default=list(FUNCTIONS), help="module:Class.name")
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2, help="counts run at once")
    parser.add_argument("--baseline-src", type=Path, default=None, help="another tree's src/, counted beside")
    parser.add_argument("--keep", type=Path, default=None, help="a directory to keep callgrind's outputs in")
    args = parser.parse_args()
    trees = {"this tree": callgrind.REPO / "src"}
    if args.baseline_src is not None:
        trees["baseline"] = args.baseline_src.resolve()
    size = len(TRAMPOLINES)
    groups = [args.functions[i : i + size] for i in range(0, len(args.functions), size)] or [[]]
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep or tmp)
        runs = [(tree, case, n) for case in args.cases for n in range(len(groups)) for tree in trees]

        def one(run: tuple[str, str, int]) -> tuple[int, dict[str, int]]:
            tree, case, n = run
            out = where / f"{tree}-{case}-{n}.out".replace(" ", "_")
            return _run(trees[tree], case, groups[n], args.ops, args.warm, out)

        with ThreadPoolExecutor(args.jobs) as pool:
            futures = {run: pool.submit(one, run) for run in runs}
            whole: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
            parts: dict[tuple[str, str, str], int] = {}
            for (tree, case, n), future in futures.items():  # (printed as they come: they are slow)
                total, found = future.result()
                whole[(tree, case)].append(total)
                parts.update({(tree, case, t): c for t, c in found.items()})
                print(f"  [{tree}] {case} group {n}: {total / args.ops:,.0f} per write", flush=True)
        for case in args.cases:
            print(f"== {case}: instructions per write ({args.ops} counted after {args.warm}), inclusive")
            rows = [(WHOLE, {t: min(whole[(t, case)]) for t in trees})]
            rows += [(f, {t: parts[(t, case, f)] for t in trees}) for f in args.functions]
            for name, by_tree in rows:
                line = f"  {name:55s}"
                for tree in trees:
                    line += f" {by_tree[tree] / args.ops:12,.0f}"
                line += f"  {by_tree['this tree'] / max(1, rows[0][1]['this tree']):6.1%}"
                if len(trees) == 2 and by_tree["baseline"]:
                    line += f"  {by_tree['this tree'] / by_tree['baseline']:6.3f}x"
                print(line, flush=True)
            for tree in trees:
                objects = by_object(where / f"{tree}-{case}-0.out".replace(" ", "_"))
                total = sum(objects.values())
                print(f"  by object file ({tree}), self:")
                for name, n in sorted(objects.items(), key=lambda kv: -kv[1])[:6]:
                    print(f"    {name:40s} {n / args.ops:12,.0f}  {n / total:6.1%}")


if __name__ == "__main__":
    main()
