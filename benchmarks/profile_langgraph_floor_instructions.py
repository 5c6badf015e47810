"""Instructions per saver ``put`` and store ``put`` on SQLite: ours, the least write by hand that
keeps history and audit (``bench_langgraph_floor``'s ``SqliteHand``), and LangGraph's own
``SqliteSaver`` / ``SqliteStore`` — each split into the statements (every ``Cursor.execute``:
binding, SQLite's work with its triggers, ``BEGIN`` and ``COMMIT``), of which SQLite's WAL
frames, and everything outside the statements (the Python that builds and plans the rows, and
the C it calls). Where ``bench_langgraph_floor`` times the three sides, this counts them, which
the machine's load does not move.

Each count is a process of its own under ``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``,
``synchronous=off`` on every side, WAL): ``--warm`` writes, then ``--ops`` counted, only inside
the loop that makes them (``--toggle-collect`` on ``itertools.starmap``'s iterator); the split
is read from ``callgrind_annotate``'s inclusive counts.

    python3 -m benchmarks.profile_langgraph_floor_instructions [--ops 300] [--warm 300] [--jobs 2]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks import callgrind
from benchmarks.bench_langgraph_floor import LEAN_LAYOUTS

MODULE = "benchmarks.profile_langgraph_floor_instructions"
SIDES = ("stateflow", "by hand", "langgraph")
CASES = ("saver put", "store put")
_PARTS = {
    "statements": "cursor.c:_pysqlite_query_execute ",
    "WAL frames": ":sqlite3WalFrames ",
}


class Side(NamedTuple):
    """One side's write on a new SQLite file, with the file, the connections that write it and
    what closes them."""

    write: Callable[[int], Any]
    path: Path
    connections: list[sqlite3.Connection]
    close: Callable[[], None]


def open_side(side: str, case: str, tmp: str, synchronous: str = "off") -> Side:
    """The write ``case`` of ``side``, on a new WAL file in ``tmp`` at ``synchronous``."""
    from benchmarks.bench_langgraph_adapters import KEYS, saver_cases, store_cases

    if side == "stateflow":
        from stateflow.langgraph import StateflowSaver, StateflowStore
        from stateflow.states import StatesService
        from stateflow.store import open_store

        path = Path(tmp) / "ours.db"
        service = StatesService(open_store(f"sqlite:///{path}?synchronous={synchronous}", auto_migrate=True))
        ours = service.store._all  # type: ignore[attr-defined]  # (its connections, opened as used)
        if case == "saver put":
            return Side(
                saver_cases(StateflowSaver(service), "s")["saver put"], path, ours, service.store.close
            )
        return Side(store_cases(StateflowStore(service), "s")["store put"], path, ours, service.store.close)
    path = Path(tmp) / f"{side}.db"
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    if side == "by hand" or side in LEAN_LAYOUTS:
        from benchmarks.bench_langgraph_floor import LeanHand, SqliteHand, _Hand

        hand = SqliteHand(conn) if side == "by hand" else LeanHand(conn, side)
        if case == "saver put":
            return Side(saver_cases(_Hand(hand), "h")["saver put"], path, [conn], conn.close)  # type: ignore[arg-type]

        def store_put(i: int) -> None:
            hand.store_put(
                ("bench", "h", f"ns{i % 4}"),
                f"k{i % KEYS}",
                {"n": i, "text": "remember this", "tags": ["a", "b"]},
            )

        return Side(store_put, path, [conn], conn.close)
    if case == "saver put":
        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(conn)
        saver.setup()
        return Side(saver_cases(saver, "l")["saver put"], path, [conn], conn.close)
    from langgraph.store.sqlite import SqliteStore

    store = SqliteStore(conn)
    store.setup()
    return Side(store_cases(store, "l")["store put"], path, [conn], conn.close)


def _work(side: str, case: str, ops: int, warm: int) -> None:
    """The counted process: ``warm`` writes, then ``ops`` counted."""
    with tempfile.TemporaryDirectory() as tmp:
        write = open_side(side, case, tmp).write
        for i in range(warm):
            write(i)
        gc.collect()
        gc.freeze()
        for _ in itertools.starmap(write, ((i,) for i in range(10_000, 10_000 + ops))):
            pass


def _count(side: str, case: str, ops: int, warm: int) -> dict[str, float]:
    """Instructions per write: all, and each of ``_PARTS`` (inclusive)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        callgrind.count(MODULE, ["--work", side, case, str(ops), str(warm)], out=out)
        shown = callgrind.annotate_inclusive(out)
    counts: dict[str, float] = {}
    total = re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", shown)
    if total is None:
        raise RuntimeError(f"no total in callgrind's output:\n{shown[:2000]}")
    counts["all"] = int(total.group(1).replace(",", "")) / ops
    for part, needle in _PARTS.items():
        line = next((row for row in shown.splitlines() if needle in row), None)
        counts[part] = 0.0 if line is None else int(line.split()[0].replace(",", "")) / ops
    return counts


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--work":
        _work(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2, help="counts run at once")
    parser.add_argument(
        "--lean",
        nargs="*",
        choices=LEAN_LAYOUTS,
        default=[],
        metavar="LAYOUT",
        help=f"also the writes by hand with fewer rows, of {', '.join(LEAN_LAYOUTS)}",
    )
    args = parser.parse_args()
    sides = (*SIDES, *args.lean)
    runs = [(side, case) for case in CASES for side in sides]
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = dict(
            zip(runs, pool.map(lambda r: _count(r[0], r[1], args.ops, args.warm), runs), strict=True)
        )
    for case in CASES:
        print(f"== {case}: instructions per write ({args.ops} counted after {args.warm} warm)")
        print(f"  {'side':15s} {'all':>10s} {'statements':>11s} {'of it WAL':>10s} {'outside':>10s}")
        for side in sides:
            c = counts[(side, case)]
            print(
                f"  {side:15s} {c['all']:>10,.0f} {c['statements']:>11,.0f} {c['WAL frames']:>10,.0f}"
                f" {c['all'] - c['statements']:>10,.0f}"
            )


if __name__ == "__main__":
    main()
