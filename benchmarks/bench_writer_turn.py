"""SQLite writer processes' turn: how long each call holds the writers' queue, and how long the
turn takes to pass from one process to the next — this tree against another.

``bench_writers`` measures what 8 writer processes on one memory scope reach against one.
Their calls are serialized by the writers' queue (``store/writer_queue.py``), so what they
reach is set by two times per call: the **turn** (from the queue's ``acquire`` returning to its
``release``: the transaction under SQLite's write lock and its commit) and the **hand-off**
(from one turn's ``release`` to the next ticket's ``acquire`` returning: waking the next
process and getting it a CPU). Both are timed from the outside, by wrapping the two methods in
each writer process; the turn also by the thread's CPU time, which load on the machine moves
less than the wall clock.

Each side runs in its own Python process importing ``stateflow`` from its tree (this one, and
``--baseline-src``), with a pool of writer processes doing ``bench_writers``' ``patch_state``
loop on a fresh store. Rounds alternate the sides and swap which goes first; in each, a side
runs 1 writer and then 8 (or 8, then 1). Printed: 8 writers' rate over 1 writer's per side
(higher is better), and the medians of the turn and the hand-off with 8 writers; and per call
the turns' thread CPU and the commits (a turn may commit other processes' memory patches with
its own, ``store/writer_requests.py``).

    python3 -m benchmarks.bench_writer_turn --baseline-src /path/to/other/src [--rounds 5] [--calls 800]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_writers import shared_view
from benchmarks.rounds import Pair, report

ROOT = Path(__file__).resolve().parent.parent

Timed = tuple[dict[int, float], dict[int, tuple[float, float, float]], float, float]
"""per ticket: its release's start; its acquire's (start, return, thread CPU at return), and
the process's first start and last end (``perf_counter``, shared by every process)"""


def writer(args: tuple[str, int, float, int]) -> tuple[Timed, list[float], int]:
    """One process: ``calls`` patches after ``start``; its tickets' times, its turns' CPU and its
    commits (a turn that carried other processes' patches commits them too, ``writer_requests``)."""
    location, calls, start, index = args
    from stateflow.store import writer_queue

    released: dict[int, float] = {}
    acquired: dict[int, tuple[float, float, float]] = {}
    cpu: list[float] = []
    queue = writer_queue.WriterQueue
    acquire, release = queue.acquire, queue.release

    def timed_acquire(self: Any, *args: Any, **kwargs: Any) -> None:
        begin = time.perf_counter()
        acquire(self, *args, **kwargs)
        if self._ticket is not None:
            acquired[self._ticket] = (begin, time.perf_counter(), time.thread_time())

    def timed_release(self: Any) -> None:
        ticket = self._ticket
        if ticket is not None and ticket in acquired:
            released[ticket] = time.perf_counter()
            cpu.append(time.thread_time() - acquired[ticket][2])
        release(self)

    queue.acquire, queue.release = timed_acquire, timed_release  # type: ignore[method-assign]
    store, view = shared_view(location, start)
    released.clear()
    acquired.clear()
    cpu.clear()
    commits = store._group.commits  # type: ignore[attr-defined]
    begin = time.perf_counter()
    for i in range(calls):
        view.patch_state({"session": {"tactics": {f"w{index}": f"step {i}"}}})
    end = time.perf_counter()
    commits = store._group.commits - commits  # type: ignore[attr-defined]
    store.close()
    return (released, acquired, begin, end), cpu, commits


def phase(pool: Any, location: str, writers: int, calls: int) -> dict[str, float]:
    """``writers`` processes, ``calls`` patches in all: the rate and the medians (seconds)."""
    start = time.perf_counter() + 0.5
    each = max(1, calls // writers)
    results = pool.map(writer, [(location, each, start, i) for i in range(writers)])
    released: dict[int, float] = {}
    acquired: dict[int, tuple[float, float, float]] = {}
    for (rel, acq, _, _), _, _ in results:
        released.update(rel)
        acquired.update(acq)
    turns = [released[t] - acquired[t][1] for t in acquired if t in released]
    # a hand-off only where the call had to wait: it asked before the ticket before it let go
    handoffs = [
        end - released[t - 1]
        for t, (begin, end, _) in acquired.items()
        if t - 1 in released and begin < released[t - 1]
    ]
    elapsed = max(r[0][3] for r in results) - min(r[0][2] for r in results)
    return {
        "rate": writers * each / elapsed,
        "turn": statistics.median(turns),
        "turn_cpu": statistics.median(c for _, cpu, _ in results for c in cpu),
        # every call's share of the turns' CPU and of the commits (fsyncs), with groups counted whole
        "turn_cpu_per_call": sum(c for _, cpu, _ in results for c in cpu) / (writers * each),
        "commits_per_call": sum(n for _, _, n in results) / (writers * each),
        "handoff": statistics.median(handoffs) if handoffs else 0.0,
    }


def side(calls: int, writers: int, first: int) -> None:
    """One side's round (in its own interpreter): 1 writer and ``writers``, ``first`` first."""
    with tempfile.TemporaryDirectory() as tmp:
        location = str(Path(tmp) / "writers.db")
        with multiprocessing.get_context("fork").Pool(writers) as pool:
            phase(pool, location, writers, 80)  # create, migrate, warm up
            order = (1, writers) if first == 1 else (writers, 1)
            out = {n: phase(pool, location, n, calls) for n in order}
    print(json.dumps({"one": out[1], "many": out[writers]}))


def run_side(src: str, calls: int, writers: int, first: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(ROOT)])}
    command = [sys.executable, "-m", "benchmarks.bench_writer_turn", "--side", str(first)]
    command += ["--calls", str(calls), "--writers", str(writers)]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    answer: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--baseline-src", help="the other tree's src directory")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=800, help="calls per phase (split among the writers)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--side", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side is not None:
        side(args.calls, args.writers, args.side)
        return
    if not args.baseline_src:
        parser.error("--baseline-src is required")
    ours_src = str(ROOT / "src")
    sides = {"ours": ours_src, "base": args.baseline_src}
    got: dict[str, list[dict[str, dict[str, float]]]] = {"ours": [], "base": []}
    for r in range(args.rounds):
        order = ("ours", "base") if r % 2 == 0 else ("base", "ours")
        first = 1 if r % 2 == 0 else args.writers
        for name in order:
            got[name].append(run_side(sides[name], args.calls, args.writers, first))
        print(
            f"round {r + 1}: "
            + "; ".join(
                f"{name} {got[name][-1]['many']['rate'] / got[name][-1]['one']['rate']:.2f}×"
                for name in ("ours", "base")
            ),
            flush=True,
        )
    n = args.writers

    def values(name: str, phase_name: str, key: str) -> list[float]:
        return [g[phase_name][key] for g in got[name]]

    ratios = {name: [g["many"]["rate"] / g["one"]["rate"] for g in got[name]] for name in ("ours", "base")}
    report(
        f"SQLite {n} writer processes vs 1, this tree vs baseline (ratio of ratios)",
        Pair(ratios["ours"], ratios["base"], higher_better=True),
        "",
    )
    print(
        f"SQLite {n} writers vs 1, medians: this tree {statistics.median(ratios['ours']):.2f}× "
        f"({min(ratios['ours']):.2f}–{max(ratios['ours']):.2f}×), baseline "
        f"{statistics.median(ratios['base']):.2f}× ({min(ratios['base']):.2f}–{max(ratios['base']):.2f}×)",
        flush=True,
    )
    for key, label in (
        ("rate", "rate (calls/s)"),
        ("turn_cpu", "turn, thread CPU (ms)"),
        ("turn_cpu_per_call", "turns' thread CPU per call (ms)"),
        ("commits_per_call", "commits per call"),
        ("turn", "turn, wall (ms)"),
        ("handoff", "hand-off (ms)"),
    ):
        for phase_name, count in (("many", n), ("one", 1)):
            if key == "handoff" and phase_name == "one":
                continue
            scale = 1.0 if key in ("rate", "commits_per_call") else 1000.0
            pair = Pair(
                [v * scale for v in values("ours", phase_name, key)],
                [v * scale for v in values("base", phase_name, key)],
                higher_better=key == "rate",
            )
            report(f"SQLite {count} writer(s): {label}, this tree vs baseline", pair, "")


if __name__ == "__main__":
    main()
