"""What a SQLite writer's ``patch_state`` costs as one of several writers on one scope that it
does not cost alone (issue 17), in counts: instructions (callgrind), Python bytecodes and system
calls per call, split into before the writers' turn, inside it and after it.

``bench_writers`` runs 8 writer processes, each with its own store, patching one session scope
in turn; every call then finds the scope moved by the writer before it. Here the same happens
in one process, without the noise of 8: ``--writers`` store objects (each with its own
connection and writer queue ticket, as separate processes have) call ``patch_state`` round
robin, so every call finds the scope moved by the others (``contended``); ``alone`` is one store
calling in a loop. A call's **turn** runs from the writer queue's ``acquire`` returning to its
``release`` (the transaction under SQLite's write lock and its ``COMMIT``): what 8 writer
processes serialize on.

- instructions: callgrind (``PYTHONHASHSEED=0``, ``synchronous=off``), the calls counted inside
  ``itertools.starmap`` after ``--warm``; ``--baseline-src`` counts another tree beside;
- bytecodes: the calling thread traced (``sys.settrace``, opcode events), each bytecode counted
  in the phase it ran in, and per function inside the turn (``--top``);
- system calls: ``strace`` of the counted calls, each call attributed to its phase by marker
  calls the wrappers make (``getpgid``), the markers themselves left out.

    python3 -m benchmarks.profile_sqlite_writers [--writers 8] [--ops 200] [--warm 100]
        [--baseline-src DIR] [--what instructions bytecodes syscalls] [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks import callgrind, strace

MODULE = "benchmarks.profile_sqlite_writers"
MODES = ("alone", "contended")
PRICED = ("shared", "shared-locked")
"""Modes that price a cache of the committed state shared across processes (``--modes``): the
same round robin, with every store's caches fed whatever any of them commits (``calls``)."""
PHASES = ("before", "inside", "after")
_MARKS = {-11: "inside", -12: "after", -13: "before"}
"""``os.getpgid(pid)`` of these negative pids (an error, one system call each) marks where a
phase begins in ``strace``'s output"""


def calls(mode: str, writers: int, tmp: str) -> tuple[Callable[[int], object], list[Any]]:
    """The counted call made with ``i``, and the stores to close: one writer, or ``writers``
    stores taking calls round robin (each finds the scope moved by the others)."""
    from stateflow.memory import Identity, MemoryView
    from stateflow.store import open_store

    location = f"sqlite:///{tmp}/writers.db?synchronous=off"
    stores = [open_store(location, auto_migrate=True) for _ in range(1 if mode == "alone" else writers)]
    views = [MemoryView(s, Identity.of("bench", "/bench", "shared")) for s in stores]
    if mode in PRICED:
        _shared_caches(stores)
    key = views[0].keys["session"]

    def call(i: int) -> object:
        n = i % len(views)
        if mode == "shared-locked":  # (the turn's locked path, as 8 processes take it)
            stores[n]._contended[key] = time.monotonic() + 3600
        return views[n].patch_state({"session": {"tactics": {f"w{n}": f"step {i}"}}})

    return call, stores


def _shared_caches(stores: list[Any]) -> None:
    """Every store's caches fed what any of them commits, at once: the most a cache of the
    committed state shared by the writer processes could give (its own upkeep aside: the
    feeding runs outside the turn, once per store, and is counted there). ``shared``: each call
    then finds its caches current and writes as a writer alone does (computed before its turn,
    checked in it); ``shared-locked``: the contended mark held, each call's turn takes the locked
    path with the caches current (only the rows read again)."""
    from stateflow.store.base import SqlStore

    remember = SqlStore._remember

    def everyone(self: Any, fresh: Any) -> None:
        for store in stores:
            remember(store, fresh)

    SqlStore._remember = everyone  # type: ignore[method-assign]


def _marking(mark: Callable[[str], None]) -> None:
    """Call ``mark(phase)`` where each phase begins: the turn when the writer queue's
    ``acquire`` returns, after it when its ``release`` is called."""
    from stateflow.store import writer_queue

    queue = writer_queue.WriterQueue
    acquire, release = queue.acquire, queue.release

    def acquired(self: Any, *args: Any, **kwargs: Any) -> None:
        acquire(self, *args, **kwargs)
        mark("inside")

    def released(self: Any) -> None:
        mark("after")
        release(self)

    queue.acquire = acquired  # type: ignore[method-assign]
    queue.release = released  # type: ignore[method-assign]


def _work(mode: str, writers: int, ops: int, warm: int, what: str) -> None:
    """The counted process: ``warm`` calls, then ``ops`` counted ones."""
    from stateflow.store import writes

    # under a tracer or callgrind a call takes 10-50 times as long: a store's calls, ``writers``
    # apart, would outlast the contended mark its last call renewed (``CONTENDED_SECONDS``)
    writes.CONTENDED_SECONDS = 3600.0
    with tempfile.TemporaryDirectory() as tmp:
        call, stores = calls(mode, writers, tmp)
        for i in range(warm):
            call(i)
        gc.collect()
        gc.freeze()
        counted = range(10_000, 10_000 + ops)
        if what == "syscalls":
            marks = {phase: pid for pid, phase in _MARKS.items()}

            def mark(phase: str) -> None:
                with contextlib.suppress(OSError):
                    os.getpgid(marks[phase])

            _marking(mark)

            def marked(i: int) -> object:
                mark("before")
                return call(i)

            for _ in itertools.starmap(marked, ((i,) for i in counted)):
                pass
            mark("before")
        elif what == "bytecodes":
            _bytecodes(mode, call, counted)
        else:
            for _ in itertools.starmap(call, ((i,) for i in counted)):
                pass
        for store in stores:
            store.close()


def _name(frame: FrameType) -> str:
    code = frame.f_code
    where = code.co_filename.split("site-packages/")[-1].split("/src/")[-1]
    return f"{where}:{code.co_name}"


def _bytecodes(mode: str, call: Callable[[int], object], counted: range) -> None:
    """Trace the counted calls: bytecodes per phase, and per function (with callees) inside
    the turn; printed as one line of ``key<TAB>count`` per entry."""
    phase = ["before"]
    per_phase: collections.Counter[str] = collections.Counter()
    inside: collections.Counter[str] = collections.Counter()

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
        elif event == "opcode":
            now = phase[0]
            per_phase[now] += 1
            if now == "inside":
                seen = set()
                outer: FrameType | None = frame
                while outer is not None:
                    seen.add(_name(outer))
                    outer = outer.f_back
                inside.update(seen)
        return trace

    turns = [0]

    def mark(p: str) -> None:
        phase[0] = p
        turns[0] += p == "inside"

    _marking(mark)
    for i in counted:
        phase[0] = "before"
        sys.settrace(trace)
        try:
            call(i)
        finally:
            sys.settrace(None)
    for key, n in per_phase.items():
        print(f"phase:{key}\t{n}")
    print(f"phase:turns\t{turns[0]}")
    for key, n in inside.items():
        print(f"inside:{key}\t{n}")


def _env(src: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": os.pathsep.join((str(src), str(callgrind.REPO))),
    }


def _args(mode: str, writers: int, ops: int, warm: int, what: str) -> list[str]:
    return ["--work", mode, str(writers), str(ops), str(warm), what]


def syscalls(src: Path, mode: str, writers: int, ops: int, warm: int) -> dict[str, collections.Counter[str]]:
    """System calls by phase and name over the counted calls (the markers left out)."""
    trace = strace.traced(MODULE, _args(mode, writers, ops, warm, "syscalls"), src=src)
    found: dict[str, collections.Counter[str]] = {p: collections.Counter() for p in PHASES}
    phase: str | None = None
    call = re.compile(r"^\d+\s+(\w+)\(")
    for line in trace.splitlines():
        m = call.match(line)
        if not m:
            continue
        name = m.group(1)
        if name == "getpgid":
            pid = re.search(r"getpgid\((-?\d+)\)", line)
            if pid and int(pid.group(1)) in _MARKS:
                phase = _MARKS[int(pid.group(1))]
                continue
        if phase is not None:
            found[phase][name] += 1
    found["before"].pop("exit_group", None)
    return found


def bytecodes(
    src: Path, mode: str, writers: int, ops: int, warm: int
) -> tuple[dict[str, int], dict[str, int]]:
    done = subprocess.run(
        [sys.executable, "-m", MODULE, *_args(mode, writers, ops, warm, "bytecodes")],
        env=_env(src),
        check=True,
        capture_output=True,
        text=True,
    )
    phases: dict[str, int] = {}
    inside: dict[str, int] = {}
    for line in done.stdout.splitlines():
        key, _, n = line.rpartition("\t")
        kind, _, name = key.partition(":")
        (phases if kind == "phase" else inside)[name] = int(n)
    return phases, inside


def main() -> None:
    if len(sys.argv) == 7 and sys.argv[1] == "--work":
        _work(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--warm", type=int, default=100)
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--what", nargs="+", default=["instructions", "bytecodes", "syscalls"])
    parser.add_argument("--top", type=int, default=25, help="functions listed inside the turn")
    parser.add_argument(
        "--modes", nargs="+", choices=MODES + PRICED, default=list(MODES), help="priced: " + ", ".join(PRICED)
    )
    args = parser.parse_args()
    trees = {"this tree": callgrind.REPO / "src"}
    if args.baseline_src is not None:
        trees["baseline"] = args.baseline_src.resolve()
    per = args.ops
    for tree, src in trees.items():
        for mode in args.modes:
            label = f"[{tree}] {mode}" + (f" ({args.writers} stores)" if mode != "alone" else "")
            if "instructions" in args.what:
                n = callgrind.count(
                    MODULE, _args(mode, args.writers, args.ops, args.warm, "instructions"), src=src
                )
                print(f"{label}: {n / per:,.0f} instructions per call", flush=True)
            if "bytecodes" in args.what:
                phases, inside = bytecodes(src, mode, args.writers, args.ops, args.warm)
                split = ", ".join(f"{p} {phases.get(p, 0) / per:,.0f}" for p in PHASES)
                turns = phases.get("turns", 0) / per
                print(f"{label}: bytecodes per call: {split}; turns per call {turns:.2f}", flush=True)
                for name, n in sorted(inside.items(), key=lambda kv: -kv[1])[: args.top]:
                    print(f"    inside the turn {n / per:9,.0f}  {name}")
            if "syscalls" in args.what:
                found = syscalls(src, mode, args.writers, args.ops, args.warm)
                for phase in PHASES:
                    names = ", ".join(f"{k} {v / per:.2f}" for k, v in found[phase].most_common())
                    print(
                        f"{label}: system calls per call {phase} the turn: {sum(found[phase].values()) / per:.2f} ({names})",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
