"""SQLite writer processes on one memory scope: the CPU (user + system time of every writer
process, over its calls only) per call with 8 writers against 1 — this tree, another, and the
floor by hand with its ``flock`` queue (``bench_sqlite_writers_floor``).

On a machine with few cores, 8 writers' rate is bounded by the CPU each call costs all of them
together, whoever spends it: the turn holder merging other processes' patches, a requester
publishing its request and waiting to be woken, the kernel creating its files. The turn's own
thread CPU (``bench_writer_turn``) sees none of what happens before the turn or in the kernel
on another process's behalf; this counts it all, from ``getrusage`` in each process, and the
context switches beside it. ``--phases`` also splits each call's thread CPU among the parts of
the call (inclusive of what they call; this tree's names), for this tree and the baseline.

Each phase forks fresh writer processes (``bench_writers``' ``patch_state`` loop); rounds
alternate the trees and which phase goes first. CPU time moves with the machine's load less
than wall time, but it does move (caches, frequency): compare the trees within one run.

    python3 -m benchmarks.profile_writers_cpu --baseline-src DIR [--rounds 3] [--calls 800] [--phases]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_writers import shared_view

ROOT = Path(__file__).resolve().parent.parent

PHASES = (
    # (module, owner, attribute, label) — wrapped where present
    ("stateflow.memory.view", "MemoryView", "patch_state", "patch_state (the whole call)"),
    ("stateflow.store.sqlite", "SqliteStore", "patch_on_server", "· the store's part"),
    ("stateflow.store.writer_queue", "WriterQueue", "acquire", "· · waiting for the turn (acquire)"),
    ("stateflow.store.writer_requests", "Request", "publish", "· · · the request file written"),
    ("stateflow.store.sqlite", "SqliteStore", "_in_turn", "· · the turn's merges (own and carried)"),
    ("stateflow.store.sqlite", "SqliteStore", "_take_behind", "· · · the requests carried"),
    ("stateflow.store.sqlite", "_GroupCommit", "_settle", "· · the commit, answers, hand-on"),
    ("stateflow.store.writer_requests", "", "answered", "· · an answer decoded"),
)

Acc = dict[str, list[float]]


def _wrap(owner: Any, name: str, label: str, acc: Acc) -> None:
    original = getattr(owner, name)
    clock = time.thread_time

    def timed(*args: Any, **kwargs: Any) -> Any:
        begin = clock()
        try:
            return original(*args, **kwargs)
        finally:
            entry = acc.setdefault(label, [0.0, 0.0])
            entry[0] += clock() - begin
            entry[1] += 1

    setattr(owner, name, timed)


def _install(acc: Acc) -> None:
    import importlib

    for module, owner, name, label in PHASES:
        target: Any = importlib.import_module(module)
        if owner:
            target = getattr(target, owner, None)
        if target is not None and hasattr(target, name):
            _wrap(target, name, label, acc)


def ours(path: str, calls: int, index: int, start: float, acc: Acc | None) -> None:
    if acc is not None:
        _install(acc)
    store, view = shared_view(path, start)
    if acc is not None:
        acc.clear()
    used = _usage()
    for i in range(calls):
        view.patch_state({"session": {"tactics": {f"w{index}": f"step {i}"}}})
    _report(used, acc)
    store.close()


def floor(path: str, calls: int, index: int, start: float, acc: Acc | None) -> None:
    from benchmarks.bench_sqlite_writers_floor import connect, write

    key = f"w{index}"
    conn = connect(path)
    with open(path + ".queue", "a+b") as queue:
        conn.execute("SELECT body FROM doc WHERE id = 1").fetchone()
        _until(start)
        used = _usage()
        for i in range(calls):
            write(conn, key, f"step {i}", queue)
        _report(used, None)
    conn.close()


_out = -1


def _until(start: float) -> None:
    while time.perf_counter() < start:
        time.sleep(0.001)


def _usage() -> tuple[float, float, int, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_nvcsw, r.ru_nivcsw


def _report(before: tuple[float, float, int, int], acc: Acc | None) -> None:
    after = _usage()
    used = [a - b for a, b in zip(after, before, strict=True)]
    os.write(
        _out, (json.dumps({"usage": used, "end": time.perf_counter(), "acc": acc or {}}) + "\n").encode()
    )


def phase(run: Callable[..., None], path: str, writers: int, calls: int, phases: bool) -> dict[str, Any]:
    """``writers`` fresh processes, ``calls`` in all: per call CPU (ms), switches, rate, phases."""
    global _out
    each = max(1, calls // writers)
    start = time.perf_counter() + 0.3
    read, _out = os.pipe()
    pids = []
    for i in range(writers):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(read)
            try:
                run(path, each, i, start, {} if phases else None)
            finally:
                os._exit(0)
        pids.append(pid)
    os.close(_out)
    for pid in pids:
        os.waitpid(pid, 0)
    with os.fdopen(read) as lines:
        got = [json.loads(line) for line in lines.read().splitlines()]
    n = each * writers
    acc: dict[str, float] = {}
    for g in got:
        for label, (cpu, _) in g["acc"].items():
            acc[label] = acc.get(label, 0.0) + cpu * 1000 / n
    return {
        "user": sum(g["usage"][0] for g in got) * 1000 / n,
        "sys": sum(g["usage"][1] for g in got) * 1000 / n,
        "vcs": sum(g["usage"][2] for g in got) / n,
        "ivcs": sum(g["usage"][3] for g in got) / n,
        "rate": n / (max(g["end"] for g in got) - start),
        "phases": acc,
    }


def side(kind: str, calls: int, writers: int, first: int, phases: bool) -> None:
    """One side's round, in this interpreter: 1 writer and ``writers``, ``first`` first."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "writers.db")
        if kind == "floor":
            from benchmarks.bench_sqlite_writers_floor import SETUP, connect

            setup = connect(path)
            setup.executescript(SETUP)
            setup.close()
            run: Callable[..., None] = floor
        else:
            import stateflow.memory  # noqa: F401 - imported once, before the forks
            from stateflow.store import open_store

            open_store(path).close()
            run = ours
        phase(run, path, writers, 80, False)  # warm up
        order = (1, writers) if first == 1 else (writers, 1)
        out = {n: phase(run, path, n, calls, phases and kind != "floor") for n in order}
    print(json.dumps({"one": out[1], "many": out[writers]}))


def run_side(kind: str, src: str, args: argparse.Namespace, first: int) -> dict[str, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(ROOT)])}
    command = [sys.executable, "-m", "benchmarks.profile_writers_cpu", "--side", kind, "--first", str(first)]
    command += ["--calls", str(args.calls), "--writers", str(args.writers)] + (
        ["--phases"] if args.phases else []
    )
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    answer: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--baseline-src", help="the other tree's src directory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=800, help="calls per phase (split among the writers)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--phases", action="store_true", help="each call's thread CPU by part, too")
    parser.add_argument("--side", choices=("ours", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side is not None:
        side(args.side, args.calls, args.writers, args.first, args.phases)
        return
    sides = {"this tree": ("ours", str(ROOT / "src"))}
    if args.baseline_src:
        sides["baseline"] = ("ours", args.baseline_src)
    sides["floor (flock)"] = ("floor", str(ROOT / "src"))
    got: dict[str, list[dict[str, dict[str, Any]]]] = {name: [] for name in sides}
    for r in range(args.rounds):
        names = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in names:
            kind, src = sides[name]
            got[name].append(run_side(kind, src, args, 1 if r % 2 == 0 else args.writers))
    n = args.writers
    print(f"per call, medians of {args.rounds} rounds (ms of CPU: user + system of every writer process)")
    print(
        f"{'':16s} {'CPU 1':>8s} {'CPU ' + str(n):>8s} {'ratio':>7s} {'sys ' + str(n):>8s} "
        f"{'switches ' + str(n):>12s} {'rate ' + str(n) + ' vs 1':>12s}"
    )
    for name, rounds in got.items():

        def med(which: str, key: str, rounds: list[dict[str, dict[str, Any]]] = rounds) -> float:
            return statistics.median(float(g[which][key]) for g in rounds)

        one = med("one", "user") + med("one", "sys")
        many = med("many", "user") + med("many", "sys")
        switches = med("many", "vcs") + med("many", "ivcs")
        rates = statistics.median(g["many"]["rate"] / g["one"]["rate"] for g in rounds)
        print(
            f"{name:16s} {one:8.3f} {many:8.3f} {many / one:6.2f}× {med('many', 'sys'):8.3f} "
            f"{switches:12.2f} {rates:11.2f}×"
        )
    if args.phases:
        for name, rounds in got.items():
            if sides[name][0] == "floor":
                continue
            print(f"{name}: thread CPU per call by part (ms, medians; 1 writer / {n} writers)")
            for _, _, _, label in PHASES:
                one_p = [g["one"]["phases"].get(label) for g in rounds]
                many_p = [g["many"]["phases"].get(label) for g in rounds]
                if all(v is None for v in one_p + many_p):
                    continue
                print(
                    f"  {label:42s} {statistics.median(v or 0.0 for v in one_p):8.3f} "
                    f"{statistics.median(v or 0.0 for v in many_p):8.3f}"
                )


if __name__ == "__main__":
    main()
