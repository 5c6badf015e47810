"""Instructions per ``patch_state`` and per ``apply`` (issue 17), counted by callgrind, which the
machine's load does not move; or, with ``--bytecodes``, the Python bytecodes and calls each
function makes per op (its own and with what it calls): where the instructions go.

Cases, each on a SQLite store of its own at ``synchronous=off``, one caller:

- ``patch``: ``bench_memory``'s three-scope ``patch_state`` (global strategy, cwd tactics,
  session tactics and an intent);
- ``apply``: ``bench_commit_floor``'s op batch (two ``set`` and a ``set_by_key``) through the
  states service;
- ``replace``: ``bench_http``'s small record ``replace`` through the states service.

Each count is a process of its own under ``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``):
``--warm`` ops, then ``--ops`` counted, only inside the loop that makes them
(``--toggle-collect`` on ``itertools.starmap``'s iterator). ``--baseline-src DIR`` counts
another source tree's ``stateflow`` beside this one's.

    python3 -m benchmarks.profile_states_instructions [--ops 60] [--warm 200]
        [--cases patch apply replace] [--baseline-src DIR] [--jobs 2] [--bytecodes CASE]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks import callgrind, record_workloads
from benchmarks.bytecodes import print_bytecodes

MODULE = "benchmarks.profile_states_instructions"
CASES = ("patch", "apply", "replace")


@contextmanager
def operation(case: str) -> Iterator[Callable[[range], None]]:
    """``run(indexes)``: the case's ops, one per index, on a store of their own."""
    from stateflow.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/counted.db?synchronous=off", auto_migrate=True)
        try:
            if case == "patch":
                from stateflow.memory import Identity, MemoryView

                view = MemoryView(store, Identity.of("bench", tmp, "s"))

                def patches(indexes: range) -> None:
                    for i in indexes:
                        view.patch_state(
                            {
                                "global": {"strategy": {"style": f"v{i}"}},
                                "cwd": {"tactics": {"build": f"ok {i}"}},
                                "session": {
                                    "tactics": {"next": f"step {i}"},
                                    "intents": {"ship": {"goal": f"release {i}"}},
                                },
                            }
                        )

                yield patches
                return
            from stateflow.config import Config
            from stateflow.http.server import service_for

            service = service_for(store, Config())
            try:
                yield (record_workloads.replaces if case == "replace" else record_workloads.applies)(service)
            finally:
                service.close()
        finally:
            store.close()


LAYERS = (
    "compute",
    "stateflow.states.service:parse_ops",
    "stateflow.memory.view:MemoryView._patch_args",
    "stateflow.memory.view:MemoryView._state_updates",
    "stateflow.store.model:Write.between",
    "stateflow.states.pipeline:apply_ops",
    "stateflow.store.writes:validate_writes",
    "stateflow.states.pipeline:_check_valid",
)
"""what ``--layers`` counts: each called twice per op (the first result dropped), so the
instructions added are the layer's own (plus a wrapper's call, ~1,000 instructions);
``compute`` is the computation the store's ``update`` runs (kept no state between calls: an
optimistic write may run it twice anyway)"""


def _doubled(layer: str) -> None:
    """Make ``layer`` run twice per call in this process (``noop``: none does). The store's
    ``update`` is wrapped in every case, so that its wrapper costs the same in each count."""
    import importlib

    from stateflow.store.writes import Writes

    def twice(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            fn(*args, **kwargs)
            return fn(*args, **kwargs)

        return wrapper

    update = Writes.update
    again = layer == "compute"

    def wrapped_update(self: Writes, keys: Any, compute: Any, *args: Any, **kwargs: Any) -> Any:
        return update(self, keys, twice(compute) if again else compute, *args, **kwargs)

    Writes.update = wrapped_update  # type: ignore[method-assign]
    if layer in ("compute", "noop"):
        return
    module_name, attr = layer.split(":")
    owner: Any = importlib.import_module(module_name)
    *outer, name = attr.split(".")
    for part in outer:
        owner = getattr(owner, part)
    fn = owner.__dict__[name]
    if isinstance(fn, staticmethod):
        setattr(owner, name, staticmethod(twice(fn.__func__)))
    else:
        setattr(owner, name, twice(fn))


def _work(case: str, ops: int, warm: int, layer: str = "") -> None:
    """The counted process: ``warm`` ops, then ``ops`` inside ``starmap`` (the toggle)."""
    if layer:
        _doubled(layer)
    with operation(case) as run:
        run(range(warm))
        for _ in itertools.starmap(run, [(range(10_000, 10_000 + ops),)]):
            pass


def _count(src: Path, case: str, ops: int, warm: int, layer: str = "") -> float:
    args = ["--work", case, str(ops), str(warm), *([layer] if layer else [])]
    return callgrind.count(MODULE, args, src=src) / ops


def layers(case: str, ops: int, warm: int, jobs: int, chosen: list[str]) -> None:
    """Instructions per op of each of ``chosen`` (``module:attribute``, or ``compute``), as the
    count with it doubled less the count with a wrapper only (``noop``)."""
    src = callgrind.REPO / "src"
    names = ["noop", *chosen]
    with ThreadPoolExecutor(jobs) as pool:
        counts = dict(zip(names, pool.map(lambda n: _count(src, case, ops, warm, n), names), strict=True))
    print(f"== {case}: instructions per op of each layer ({ops} counted after {warm} warm)")
    print(f"  {'(with wrappers only)':50s} {counts['noop']:>12,.0f}")
    for name in chosen:
        print(f"  {name:50s} {counts[name] - counts['noop']:>12,.0f}")


def bytecodes(case: str, ops: int, warm: int, top: int) -> None:
    """Bytecodes and calls per op by function, own and with callees (a function counted once
    per bytecode however deep it recurses)."""
    with operation(case) as run:
        print_bytecodes(case, run, ops, warm, top, ("profile_states_instructions",))


def main() -> None:
    if len(sys.argv) in (5, 6) and sys.argv[1] == "--work":
        _work(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=60)
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--baseline-src", type=Path, default=None, help="another tree's src/, counted beside")
    parser.add_argument("--jobs", type=int, default=2, help="counts run at once")
    parser.add_argument("--bytecodes", choices=CASES, default=None, help="bytecodes by function instead")
    parser.add_argument("--top", type=int, default=60, help="functions --bytecodes prints")
    parser.add_argument("--layers", choices=CASES, default=None, help="instructions by layer instead")
    parser.add_argument("--layer-names", nargs="+", default=list(LAYERS), help="what --layers counts")
    args = parser.parse_args()
    if args.bytecodes is not None:
        bytecodes(args.bytecodes, args.ops, args.warm, args.top)
        return
    if args.layers is not None:
        layers(args.layers, args.ops, args.warm, args.jobs, args.layer_names)
        return
    callgrind.print_against_baseline(
        f"instructions per op ({args.ops} counted after {args.warm} warm)",
        args.cases,
        lambda src, case: _count(src, case, args.ops, args.warm),
        baseline_src=args.baseline_src,
        jobs=args.jobs,
        width=10,
    )


if __name__ == "__main__":
    main()
