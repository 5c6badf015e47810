"""Where the adapters' writes spend their CPU on SQLite, by layer: each write of
``bench_langgraph_adapters`` (saver ``put``, ``put_writes``, store ``put`` of an existing item,
one caller) timed in process CPU as it is, then with the layers below a point answered without
their work, in alternating rounds (the variants' order turns round by round):

- ``as shipped``: the whole write;
- ``no writer queue``: the other processes' writer queue (its lock files) skipped — one process
  writes here, so nothing changes but its cost;
- ``no SQL transaction``: the commit answered without the database (a new seq each time; no
  turn, no ``BEGIN``, no statements, no ``COMMIT``): what is left is the adapter, the planner
  and the caches' stamping;
- ``adapter only``: ``Store.write_whole`` only builds the body from the cached documents and
  answers that it wrote (no plan, no commit, no caches): the adapter's Python (and the
  benchmark's own making of the arguments).

The differences between neighbouring rows are each layer's CPU. ``synchronous=off``: the
flush is the kernel's time, not the process's. Measurement only: the patched variants write
nothing real, each in a store of its own that is thrown away.

    python3 -m benchmarks.profile_langgraph_layers [--ops 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

from benchmarks.bench_langgraph_adapters import saver_cases, store_cases
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import DocKey, Whole, open_store
from stateflow.store.sqlite import SqliteStore
from stateflow.store.writer_queue import WriterQueue

CASES = ("saver put", "saver put_writes", "store put")


@contextmanager
def _replaced(owner: type, **methods: Any) -> Iterator[None]:
    """``owner``'s ``methods`` replaced while inside, put back after."""
    # (the class's own entries: an inherited method is deleted again, not left set on ``owner``)
    saved = {name: vars(owner).get(name) for name in methods}
    for name, method in methods.items():
        setattr(owner, name, method)
    try:
        yield
    finally:
        for name, method in saved.items():
            if method is None:
                delattr(owner, name)
            else:
                setattr(owner, name, method)


def _no_queue() -> ContextManager[None]:
    return _replaced(
        WriterQueue, acquire=lambda self, timeout, limit=None, request=None: None, release=lambda self: None
    )


def _no_transaction() -> ContextManager[None]:
    seqs = itertools.count(10**9)

    def answered(self: SqliteStore, *args: Any) -> tuple[int, str]:
        self._unborn.clear()  # (the reserved ids it would have created: spent)
        return next(seqs), "2026-12-02T00:00:00.000000Z"

    return _replaced(SqliteStore, _commit_planned=answered)


def _adapter_only() -> ContextManager[None]:
    # the bodies answered as written: a saver put's parent (``also``) is the record of the put
    # before, which the store never wrote here
    written: dict[DocKey, Any] = {}

    def built(
        self: SqliteStore,
        key: DocKey,
        build: Callable[[dict[DocKey, Any], dict[str, Any] | None], Whole],
        origin: dict[str, Any],
        *,
        shared: Any = (),
        also: DocKey | None = None,
        exists: bool = False,
    ) -> bool:
        known = self._known(key)
        bodies = {k: known_k[1] for k in shared if (known_k := self._known(k))}
        if also is not None:  # (a saver put's parent)
            bodies[also] = written[also] if also in written else (self._known(also) or (None, None))[1]
        if len(written) > 1_000:
            written.clear()
        written[key] = build(bodies, known and known[1]).body
        return True

    return _replaced(SqliteStore, write_whole=built)


@contextmanager
def _chain(*layers: Callable[[], ContextManager[None]]) -> Iterator[None]:
    with ExitStack() as stack:
        for layer in layers:
            stack.enter_context(layer())
        yield


VARIANTS: dict[str, Callable[[], ContextManager[None]]] = {
    "as shipped": nullcontext,
    "no writer queue": _no_queue,
    "no SQL transaction": lambda: _chain(_no_queue, _no_transaction),
    "adapter only": lambda: _chain(_no_queue, _no_transaction, _adapter_only),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            # a store per variant: the patched commits leave the caches ahead of the database
            services: dict[str, StatesService] = {}
            writes: dict[str, Callable[[int], object]] = {}
            for n, name in enumerate(VARIANTS):
                url = "sqlite:///" + os.path.join(tmp, f"layers{n}.db") + "?synchronous=off"
                service = services[name] = StatesService(open_store(url, auto_migrate=True))
                cases = {
                    **saver_cases(StateflowSaver(service), "p"),
                    **store_cases(StateflowStore(service), "p"),
                }
                writes[name] = cases[case]
                for i in range(300):  # warm: checkpoints for put_writes, every item written once
                    cases["saver put"](i)
                    cases[case](i)
            gc.collect()
            gc.freeze()
            cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
            start = 10_000
            names = list(VARIANTS)
            for r in range(args.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    fn = writes[name]
                    with VARIANTS[name]():
                        began = time.process_time()
                        for i in range(start, start + args.ops):
                            fn(i)
                        cpu[name].append((time.process_time() - began) / args.ops * 1e6)
                start += args.ops
            gc.unfreeze()
            for service in services.values():
                service.close()
                service.store.close()
        print(f"== {case}: process CPU per write, median of {args.rounds} rounds (range)")
        shipped = statistics.median(cpu["as shipped"])
        for name, values in cpu.items():
            median = statistics.median(values)
            print(
                f"  {name:20s} {median:7.1f} µs ({min(values):.1f}–{max(values):.1f})  "
                f"{median / shipped:5.2f} of as shipped"
            )


if __name__ == "__main__":
    main()
