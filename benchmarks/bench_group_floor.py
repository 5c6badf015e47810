"""The floor of group commit for 8 callers on SQLite: the least ``apply`` by hand, grouped.

``bench_states_vs_langgraph`` asks 8 concurrent callers' ``apply`` for at least twice the rate
of LangGraph's ``put`` at equal durability. With one caller that is out of reach (a durable
commit alone takes more than half a ``put``, ``bench_commit_floor``); with 8 only group commit
can get there: one commit (one ``fdatasync``) for the writes of every caller that queued while
the previous one was flushing. This measures the best such a design can do here: 8 threads
each doing the least ``apply`` of the benchmark's op batch by hand (``bench_commit_floor``'s
``by_hand``: the record computed from the one held in memory, validated against the schema,
its members encoded canonically; then its audit, member, history and revision rows), where
the thread that finds no commit under way writes every queued caller's rows in one
transaction and commits once for all of them (a leader/follower group commit, no savepoints,
no conflict checks). Against it, in alternating rounds: LangGraph's ``SqliteStore.put`` on
WAL (tuned like ours) with the same 8 threads, and stateflow's ``apply``.

If the grouped floor does not reach 2× LangGraph, no implementation of the contract (versioned,
audited, schema-checked, durable) reaches it on this machine with Python callers: the callers'
own CPU (one core at a time under the GIL) is what is left once the fsyncs are shared.

With ``--synchronous off`` no side waits for the disk: the rates are the callers' CPU alone, the
most any grouping of commits could give (a group commit at best hides the fsyncs entirely).

    python3 -m benchmarks.bench_group_floor [--ops 3000] [--rounds 5] [--threads 8] [--synchronous full|normal|off]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_commit_floor import CONTRACT_TABLES, LeastRecords, Rows, utc_now, write_rows
from benchmarks.bench_states_vs_langgraph import DECL, document_for, ops_for, rate, subject
from benchmarks.rounds import Pair, report
from stateflow.states import StatesService
from stateflow.store import open_store


class Grouped:
    """A leader/follower group commit on one connection: a caller queues its rows; the caller
    that finds no commit under way takes every queued write, writes them in one transaction,
    commits once and wakes their callers; the others wait for the commit that carries theirs."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._cond = threading.Condition()
        self._queued: list[tuple[Rows, list[bool]]] = []
        self._busy = False
        self.commits = 0
        self.writes = 0

    def write(self, rows: Rows, origin: bytes, paths: bytes) -> None:
        done = [False]
        with self._cond:
            self._queued.append((rows, done))
            while not done[0]:
                if self._busy:
                    self._cond.wait()
                    continue
                batch, self._queued = self._queued, []
                self._busy = True
                self._cond.release()
                try:
                    self._commit([r for r, _ in batch], origin, paths)
                finally:
                    self._cond.acquire()
                    self._busy = False
                    for _, flag in batch:
                        flag[0] = True
                    self._cond.notify_all()

    def _commit(self, batch: list[Rows], origin: bytes, paths: bytes) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        at = utc_now()
        for rows in batch:
            write_rows(conn, rows, at, origin, paths)
        conn.execute("COMMIT")
        self.commits += 1
        self.writes += len(batch)


def grouped_by_hand(conn: sqlite3.Connection) -> tuple[Callable[[int], object], Grouped]:
    """``bench_commit_floor.by_hand``'s least ``apply``, its rows written through :class:`Grouped`.
    Each caller owns its subjects (``rate`` gives thread ``t`` the calls ``t, t + threads, …``),
    so the record held in memory and its revision are that caller's alone."""
    conn.executescript(CONTRACT_TABLES)
    least = LeastRecords()
    group = Grouped(conn)

    def apply(i: int) -> None:
        rows, new = least.rows(i)
        group.write(rows, least.origin, least.paths)
        least.written(rows, new)

    return apply, group


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=8, help="callers (must divide 200)")
    parser.add_argument(
        "--synchronous",
        choices=["full", "normal", "off"],
        default="full",
        help="off: no fsync on any side — the callers' CPU alone, the ceiling of any grouping",
    )
    args = parser.parse_args()
    from langgraph.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        conns = []
        for name in ("langgraph", "hand"):
            conn = sqlite3.connect(Path(tmp) / f"{name}.db", check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {args.synchronous}")
            conns.append(conn)
        lg = SqliteStore(conns[0])
        lg.setup()
        hand, group = grouped_by_hand(conns[1])
        service = StatesService(open_store(f"sqlite:///{tmp}/stateflow.db?synchronous={args.synchronous}"))
        service.declare("bench", DECL)
        docs: dict[str, dict[str, Any]] = {}

        def put(i: int) -> None:
            key = subject(i)["key"]
            docs[key] = document_for(i, docs.get(key))
            lg.put(("bench", "agent", "bench"), key, docs[key])

        def ours(i: int) -> None:
            service.apply("bench", subject(i), ops_for(i))

        sides: dict[str, Callable[[int], object]] = {"hand": hand, "langgraph": put, "ours": ours}
        rates: dict[str, list[float]] = {name: [] for name in sides}
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for name in order:
                rates[name].append(rate(sides[name], args.ops, args.threads))
        label = f"sqlite/{args.synchronous} {args.threads} thr"
        report(
            f"{label}: least apply by hand, grouped, vs LangGraph put (WAL)",
            Pair(rates["hand"], rates["langgraph"], higher_better=True),
            "/s",
            ">= 2x reachable?",
        )
        report(
            f"{label}: apply vs LangGraph put (WAL)",
            Pair(rates["ours"], rates["langgraph"], higher_better=True),
            "/s",
            ">= 2x",
        )
        report(
            f"{label}: apply vs least apply by hand, grouped",
            Pair(rates["ours"], rates["hand"], higher_better=True),
            "/s",
        )
        print(
            f"{label}: by hand {group.writes} writes in {group.commits} commits "
            f"({group.writes / max(1, group.commits):.2f} per commit); per write "
            f"{1000 / statistics.median(rates['hand']):.3f} ms by hand, "
            f"{1000 / statistics.median(rates['langgraph']):.3f} ms LangGraph, "
            f"{1000 / statistics.median(rates['ours']):.3f} ms ours",
            flush=True,
        )
        service.store.close()
        for conn in conns:
            conn.close()


if __name__ == "__main__":
    main()
