"""Where a SQLite store ``put``'s time goes outside the instructions counted, on three sides: ours
(``StateflowStore``), the least write by hand that keeps history and audit
(``bench_langgraph_floor``'s ``SqliteHand``) and LangGraph's ``SqliteStore`` — the same files,
WAL at ``synchronous=FULL``, as ``bench_langgraph_floor`` (``profile_langgraph_floor_instructions``
counts the same writes' instructions, split into the statements and the rest).

- Frames: after ``--fill`` writes the WAL is checkpointed empty and every connection of the
  side stops checkpointing; ``--ops`` writes later, each frame header of the ``-wal`` file names
  its page and ``dbstat`` the page's b-tree (as ``profile_sqlite_commit_pages`` does).
- System calls (``--strace``): ``strace -f -c`` over a process of the side's own making
  ``--fill`` writes and then ``--ops``, and over one making ``--fill`` and ``2 × --ops``: the
  difference per write, so the start, the imports and the fill cancel out.
- Times: ``--rounds`` rounds of ``--ops`` writes per side, the order rotating each round; per
  write the wall time, the process's user and system CPU (``getrusage``) and the wall time no
  CPU of this process covers (the fsync's wait, mostly), medians of the rounds.

    python3 -m benchmarks.profile_store_put_sides [--fill 2000] [--ops 1000] [--rounds 6] [--strace]
"""

from __future__ import annotations

import argparse
import collections
import re
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.profile_langgraph_floor_instructions import SIDES, open_side
from benchmarks.profile_sqlite_commit_pages import wal_pages

MODULE = "benchmarks.profile_store_put_sides"
CASE = "store put"
SYNCHRONOUS = "full"
_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def frames(side: str, fill: int, ops: int) -> tuple[float, collections.Counter[str]]:
    """WAL frames per write of ``ops`` writes after ``fill``, and frames per write by b-tree."""
    with tempfile.TemporaryDirectory() as tmp:
        made = open_side(side, CASE, tmp, SYNCHRONOUS)
        for i in range(fill):
            made.write(i)
        conn = sqlite3.connect(made.path, isolation_level=None)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for own in made.connections:
            own.execute("PRAGMA wal_autocheckpoint = 0")
        for i in range(10_000, 10_000 + ops):
            made.write(i)
        pages = wal_pages(made.path)
        names = dict(conn.execute("SELECT pageno, name FROM dbstat"))
        conn.close()
        made.close()
    by_tree = collections.Counter(names.get(page, "(a page allocated since)") for page in pages)
    return len(pages) / ops, by_tree


def _work(side: str, fill: int, ops: int) -> None:
    """The traced process: ``fill`` writes, then ``ops``."""
    with tempfile.TemporaryDirectory() as tmp:
        made = open_side(side, CASE, tmp, SYNCHRONOUS)
        for i in range(fill):
            made.write(i)
        for i in range(10_000, 10_000 + ops):
            made.write(i)
        made.close()


def _traced(side: str, fill: int, ops: int) -> collections.Counter[str]:
    """System calls by name of a whole worker process (``strace -f -c``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "calls"
        work = ["--work", side, str(fill), str(ops)]
        subprocess.run(
            ["strace", "-f", "-c", "-o", str(out), sys.executable, "-m", MODULE, *work],
            check=True,
            capture_output=True,
        )
        calls: collections.Counter[str] = collections.Counter()
        for row in out.read_text().splitlines():
            found = _STRACE_ROW.match(row)
            if found and found.group(2) != "total":
                calls[found.group(2)] += int(found.group(1))
    return calls


def syscalls(side: str, fill: int, ops: int) -> dict[str, float]:
    """System calls per write by name: a process of ``2 × ops`` writes less one of ``ops``."""
    more, less = _traced(side, fill, 2 * ops), _traced(side, fill, ops)
    return {name: (more[name] - less[name]) / ops for name in more | less}


def _round(write: Callable[[int], Any], start: int, ops: int) -> tuple[float, float, float]:
    """Wall, user CPU and system CPU milliseconds per write of ``ops`` writes."""
    before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for i in range(start, start + ops):
        write(i)
    wall, after = time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_SELF)
    per = 1e3 / ops
    return wall * per, (after.ru_utime - before.ru_utime) * per, (after.ru_stime - before.ru_stime) * per


def times(fill: int, ops: int, rounds: int) -> dict[str, list[tuple[float, float, float]]]:
    """Each side's (wall, user, system) per write, round by round, the order rotating."""
    measured: dict[str, list[tuple[float, float, float]]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        made = {side: open_side(side, CASE, tmp, SYNCHRONOUS) for side in SIDES}
        for side in SIDES:
            for i in range(fill):
                made[side].write(i)
        for r in range(rounds):
            for side in SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]:
                measured[side].append(_round(made[side].write, 10_000 + r * ops, ops))
        for side in SIDES:
            made[side].close()
    return measured


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--work":
        _work(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--fill", type=int, default=2000, help="writes before any is measured")
    parser.add_argument("--ops", type=int, default=1000, help="writes measured (per round)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--strace", action="store_true", help="also count system calls per write")
    args = parser.parse_args()
    print(f"== {CASE}, WAL, synchronous={SYNCHRONOUS}: WAL frames per write (after {args.fill})")
    for side in SIDES:
        per_write, by_tree = frames(side, args.fill, args.ops)
        trees = ", ".join(f"{name} {n / args.ops:.2f}" for name, n in by_tree.most_common())
        print(f"  {side:10s} {per_write:5.2f}  ({trees})", flush=True)
    if args.strace:
        print(f"== system calls per write ({args.ops} and {2 * args.ops} writes after {args.fill})")
        for side in SIDES:
            calls = syscalls(side, args.fill, args.ops)
            shown = sorted(((n, c) for n, c in calls.items() if abs(c) >= 0.05), key=lambda nc: -nc[1])
            print(f"  {side:10s} " + ", ".join(f"{name} {n:.2f}" for name, n in shown), flush=True)
    print(f"== per write, ms (median of {args.rounds} rounds of {args.ops}; wall − CPU: time no CPU covered)")
    print(f"  {'side':10s} {'wall':>7s} {'user':>7s} {'system':>7s} {'wall − CPU':>11s}  rate vs langgraph")
    measured = times(args.fill, args.ops, args.rounds)
    for side in SIDES:
        rows = measured[side]
        wall, user, system = (statistics.median(column) for column in zip(*rows, strict=True))
        waited = statistics.median(w - u - s for w, u, s in rows)
        ratios = [lg[0] / ours[0] for ours, lg in zip(rows, measured["langgraph"], strict=True)]
        print(
            f"  {side:10s} {wall:7.3f} {user:7.3f} {system:7.3f} {waited:11.3f}  "
            f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}×)",
            flush=True,
        )


if __name__ == "__main__":
    main()
