"""What a SQLite writer's turn costs per memory patch it carries for other processes
(``store/writer_requests.py``), in counts: a holder process takes its turn, waits until
``--requests`` requester processes have published their patches right behind it, and then
writes them (``SqliteStore._take_behind``) — traced for Python bytecodes, timed by the thread's
CPU (a second, untraced turn), and its SQL statements counted (those that read ``documents`` or
``members`` apart). Every request is one ``patch_state`` of another process on one memory scope,
as in ``bench_writers``; ``--baseline-src`` counts another tree beside (alternating).

    python3 -m benchmarks.profile_writer_group [--requests 7] [--rounds 3] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SETUP = """
import json, sys, time
from pathlib import Path
from stateflow.memory import Identity, MemoryView
from stateflow.store import open_store
location = sys.argv[1]
store = open_store(location)
view = MemoryView(store, Identity.of("bench", "/bench", "shared"))
key = view.keys["session"]
store._contended[key] = time.monotonic() + 3600  # as a writer that just lost to another
"""

REQUESTER = SETUP + textwrap.dedent(
    """
    receipt = view.patch_state({"session": {"tactics": {sys.argv[2]: "step"}}})
    """
)

HOLDER = SETUP + textwrap.dedent(
    """
    from stateflow.store import sqlite as backend
    wanted, traced = int(sys.argv[2]), sys.argv[3] == "traced"
    folder = Path(location + "-requests")
    take_behind = backend.SqliteStore._take_behind
    counts = {"bytecodes": 0}

    def trace(frame, event, arg):
        if event == "call":
            frame.f_trace_opcodes = True
        elif event == "opcode":
            counts["bytecodes"] += 1
        return trace

    def holding(self, tx):
        ticket = self._group.queue.behind()[0]
        print("turn", ticket, flush=True)
        deadline = time.monotonic() + 120
        while not all((folder / f"r{ticket + k}").exists() for k in range(1, wanted + 1)):
            assert time.monotonic() < deadline, "the requests never came"
            time.sleep(0.005)
        statements = []
        self._group._conn.set_trace_callback(statements.append)
        cpu = time.thread_time()
        if traced:
            sys.settrace(trace)
        try:
            take_behind(self, tx)
        finally:
            sys.settrace(None)
            cpu = time.thread_time() - cpu
            self._group._conn.set_trace_callback(None)
        reads = sum(1 for s in statements if "FROM documents" in s or "FROM members" in s)
        taken = len(self._group.pending.answers) if self._group.pending is not None else 0
        counts.update(cpu_ms=cpu * 1000, statements=len(statements), reads=reads, answered=taken)

    backend.SqliteStore._take_behind = holding
    view.patch_state({"session": {"tactics": {"holder": sys.argv[4]}}})  # (a new value: a write)
    print(json.dumps(counts), flush=True)
    store.close()
    """
)


def turn(src: str, location: str, requests: int, traced: bool, index: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src, "PYTHONHASHSEED": "0"}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, location, str(requests), "traced" if traced else "timed", f"h{index}"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line.startswith("turn"), line
    ticket = int(line.split()[1])
    requesters: list[subprocess.Popen[bytes]] = []
    try:
        return _carried(holder, requesters, ticket, env, location, requests, index)
    finally:
        for proc in [holder.pid, *(r.pid for r in requesters)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc, signal.SIGKILL)
        holder.wait()
        for requester in requesters:
            requester.wait()


def _carried(
    holder: subprocess.Popen[str],
    requesters: list[subprocess.Popen[bytes]],
    ticket: int,
    env: dict[str, str],
    location: str,
    requests: int,
    index: int,
) -> dict[str, float]:
    assert holder.stdout is not None
    for k in range(1, requests + 1):  # one at a time: their tickets in this order
        requesters.append(
            subprocess.Popen([sys.executable, "-c", REQUESTER, location, f"r{index}-{k}"], env=env)
        )
        while not Path(f"{location}-requests/r{ticket + k}").exists():
            if requesters[-1].poll() is not None:  # (the last: taken and answered already, maybe)
                assert requesters[-1].returncode == 0 and k == requests, "a requester failed"
                break
            time.sleep(0.005)
    counts: dict[str, float] = json.loads(holder.stdout.readline())
    holder.wait(60)
    for proc in requesters:
        assert proc.wait(60) == 0
    assert counts["answered"] == requests, counts
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", default=None)
    args = parser.parse_args()
    sides = {"this tree": str(Path(__file__).resolve().parent.parent / "src")}
    if args.baseline_src:
        sides["baseline"] = str(Path(args.baseline_src).resolve())
    results: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for side, src in sides.items():
            location = f"{tmp}/{side.replace(' ', '-')}.db"
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; from stateflow.memory import Identity, MemoryView; "
                    "from stateflow.store import open_store; "
                    "s = open_store(sys.argv[1], auto_migrate=True); "
                    "MemoryView(s, Identity.of('bench', '/bench', 'shared')).patch_state("
                    "{'session': {'tactics': {'seed': 'x'}}}); s.close()",
                    location,
                ],
                env={**os.environ, "PYTHONPATH": src},
                check=True,
            )
        for index in range(args.rounds):
            for side, src in sides.items() if index % 2 == 0 else reversed(sides.items()):
                location = f"{tmp}/{side.replace(' ', '-')}.db"
                traced = turn(src, location, args.requests, True, 2 * index)
                timed = turn(src, location, args.requests, False, 2 * index + 1)
                traced["cpu_ms"] = timed["cpu_ms"]
                results[side].append(traced)
    n = args.requests
    for what in ("bytecodes", "cpu_ms", "statements", "reads"):
        line = f"per request in a turn carrying {n}, {what}:"
        medians = {}
        for side in sides:
            values = [r[what] / n for r in results[side]]
            medians[side] = statistics.median(values)
            line += f"  {side} {medians[side]:,.3f} ({min(values):,.3f}–{max(values):,.3f})"
        if len(sides) == 2 and medians["baseline"]:
            line += f"  ratio {medians['this tree'] / medians['baseline']:.3f}×"
        print(line)


if __name__ == "__main__":
    main()
