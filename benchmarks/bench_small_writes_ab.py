"""Small writes on this source tree against another one (e.g. the previous release), A/B.

Changes to the write path for large documents must not make small ones slower. Two worker
processes — one importing ``stateflow`` from this tree, one from ``--baseline-src`` — each open
their own SQLite store in the same directory and run the same small writes; the sides
alternate round by round (the side that goes first swapping every round), and the script
prints the median time per side and the median and spread of the per-round ratios.

Cases (a 10 KB lazy plane beside a few hot keys, as in ``bench_large_documents``):
``patch_state`` of ``lazy.big[5]``, of a new key in ``lazy.obj`` and of ``tactics``; a
declared-states ``set`` op on a 10 KB record.

    python3 -m benchmarks.bench_small_writes_ab --baseline-src /path/to/other/src [--rounds 10]
        [--iterations 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_large_documents import RECORD_DECL
from benchmarks.rounds import alternate, report

WORKER = r"""
import hashlib, json, sys, time
from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.store import open_store

def lazy_plane(kb):  # as bench_large_documents builds it (not imported: the baseline may lack it)
    count = max(4, kb * 1024 // 2 // 100)
    text = [hashlib.sha256(str(i).encode()).hexdigest() * 2 for i in range(count)]
    return {
        "big": [f"{i:09d}{text[i][:80]}" for i in range(count)],
        "obj": {f"k{i:09d}": text[i][-80:] for i in range(count)},
    }

RECORD_DECL = json.loads(sys.argv[2])
store = open_store(f"sqlite:///{sys.argv[1]}", auto_migrate=True)
view = MemoryView(store, Identity.of("bench", "/", "small"))
view.patch_state({"session": {"lazy": lazy_plane(10), "tactics": {"next": "start"}}})
states = StatesService(store)
states.declare("records", RECORD_DECL)
subject = {"target_kind": "agent", "target_name": "bench", "kind": "thread", "key": "small"}
states.replace("records", subject, {"status": "new", "items": lazy_plane(10)["big"]})
n = 0

def step(case):
    global n
    n += 1
    if case == "[5] changed length":
        view.patch_state({"session": {"lazy": {"big": {"[5]": "y" * (10 + n % 50)}}}})
    elif case == "new key":
        view.patch_state({"session": {"lazy": {"obj": {f"new{n}": 1}}}})
    elif case == "hot tactics":
        view.patch_state({"session": {"tactics": {"next": f"step {n}"}}})
    else:
        states.apply("records", subject, [{"op": "set", "path": ["status"], "value": f"s{n}"}])

for line in sys.stdin:
    case, iterations = json.loads(line)
    step(case)  # warm
    start = time.perf_counter()
    for _ in range(iterations):
        step(case)
    print(json.dumps((time.perf_counter() - start) * 1000 / iterations), flush=True)
"""

CASES = ("[5] changed length", "new key", "hot tactics", "record set")


class Worker:
    def __init__(self, src: str, store: Path) -> None:
        env = {**os.environ, "PYTHONPATH": src}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(store), json.dumps(RECORD_DECL)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ms(self, case: str, iterations: int) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([case, iterations]) + "\n")
        self.proc.stdin.flush()
        return float(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-src", required=True, help="the other tree's src directory")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    ours_src = str(Path(__file__).resolve().parent.parent / "src")
    with tempfile.TemporaryDirectory() as tmp:
        ours = Worker(ours_src, Path(tmp) / "ours.db")
        base = Worker(args.baseline_src, Path(tmp) / "base.db")
        try:
            for case in CASES:
                pair = alternate(
                    lambda _, c=case: ours.ms(c, args.iterations),  # type: ignore[misc]
                    lambda _, c=case: base.ms(c, args.iterations),  # type: ignore[misc]
                    args.rounds,
                )
                report(f"  {case} (this tree vs baseline)", pair, "ms", "")
        finally:
            ours.close()
            base.close()


if __name__ == "__main__":
    main()
