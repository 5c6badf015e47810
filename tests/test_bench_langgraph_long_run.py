"""``benchmarks/bench_langgraph_long_run.py`` runs each side in a process of its own, in
alternating rounds, and prints every row for both, with their ratio and the rounds' spread: a
short run, through its command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_a_short_run_prints_each_row_for_both_sides() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.bench_langgraph_long_run"),
            *("--puts", "120", "--threads", "4", "--rounds", "2"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "120 saver puts over 4 threads (SQLite, synchronous=off), "
        "2 alternating rounds: medians, ours ÷ LangGraph's (rounds' spread)"
    )
    rows = {line[:32].strip(): line[32:].split() for line in lines[2:]}
    assert list(rows) == [
        "wall a put (µs)",
        "garbage collector a put (µs)",
        "longest collection (ms)",
        "full collections",
        "objects tracked at the end",
        "peak resident memory (MiB)",
    ]
    wall = rows["wall a put (µs)"]
    assert float(wall[0]) > 0 and float(wall[1]) > 0 and wall[2].endswith("×")
    low, high = wall[3].rstrip("×").split("–")  # (the two rounds' ratios)
    assert 0 < float(low) <= float(wall[2].rstrip("×")) <= float(high)
    assert float(rows["peak resident memory (MiB)"][0]) > 10
