"""What one write costs on each side, counted rather than timed: the adapters' writes against
LangGraph's own (``bench_langgraph_adapters``' cases, single caller, same durability).

- SQLite (WAL, ``synchronous=FULL`` on both sides): pages written per write (WAL frames, read
  from the frame headers after the WAL was emptied; ours mapped to the tables and indexes they
  belong to with ``dbstat``) and the process's CPU time per write.
- PostgreSQL: the server's time executing each write's statements and the WAL they generate,
  per write (``auto_explain`` on every connection of both sides, its output sent to the client
  as notices: nothing goes to the server's log; the time is the executor's, without the
  commit's flush), the client's CPU time per write, and the connection uses (round trips) per
  write on our side.

Wall time is left to ``bench_langgraph_adapters``: on a shared machine these counts hold still
where rates move by 2× from one run to the next.

    python -m benchmarks.bench_langgraph_write_costs [--ops 200] [--only sqlite|postgres]
        [--postgres URL]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sqlite3
import statistics
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from benchmarks.bench_langgraph_adapters import Case, postgres_schemas, saver_cases, store_cases
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import open_store

CASES = ("saver put", "saver put_writes", "store put")
WARM = 200


def _cases(saver: Any, store: Any) -> dict[str, Case]:
    cases = {**saver_cases(saver, "c"), **store_cases(store, "c")}
    for i in range(WARM):  # checkpoints for put_writes, and every store key written once
        cases["saver put"](i)
        cases["store put"](i)
    return cases


def _wal_frames(wal: Path) -> list[int]:
    """The page number of every frame in a WAL file."""
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < 32:
        return []
    page_size = struct.unpack(">I", data[8:12])[0]
    return [struct.unpack(">I", data[at : at + 4])[0] for at in range(32, len(data) - 23, 24 + page_size)]


def _frames_per_write(
    conn: sqlite3.Connection, db: Path, fn: Case, start: int, n: int
) -> tuple[list[int], float]:
    """Frames written by ``n`` calls of ``fn`` (no checkpoint meanwhile), and CPU ms per call."""
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cpu = time.process_time()
    for i in range(start, start + n):
        fn(i)
    cpu = (time.process_time() - cpu) / n * 1e3
    frames = _wal_frames(Path(f"{db}-wal"))
    conn.execute("PRAGMA wal_autocheckpoint = 1000")
    return frames, cpu


def sqlite_costs(n: int) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "stateflow.db"
        ours = StatesService(open_store(f"sqlite:///{db}?synchronous=full"))
        saver_db, store_db = Path(tmp) / "lg-saver.db", Path(tmp) / "lg-store.db"
        saver_conn = sqlite3.connect(saver_db, check_same_thread=False)
        saver_conn.execute("PRAGMA synchronous = FULL")
        lg_saver = SqliteSaver(saver_conn)
        lg_saver.setup()
        store_conn = sqlite3.connect(store_db, check_same_thread=False, isolation_level=None)
        store_conn.execute("PRAGMA journal_mode = WAL")
        store_conn.execute("PRAGMA synchronous = FULL")
        lg_store = SqliteStore(store_conn)
        lg_store.setup()
        try:
            mine = _cases(StateflowSaver(ours), StateflowStore(ours))
            theirs = _cases(lg_saver, lg_store)
            writer: sqlite3.Connection = ours.store._writer()  # type: ignore[attr-defined]
            for case in CASES:
                lg_conn, lg_db = (saver_conn, saver_db) if "saver" in case else (store_conn, store_db)
                ours_frames, ours_cpu, lg_frames, lg_cpu = [], [], [], []
                for r in range(3):  # alternating, as every benchmark here
                    start = 1000 + r * n
                    for side in ("ours", "lg") if r % 2 == 0 else ("lg", "ours"):
                        if side == "ours":
                            frames, cpu = _frames_per_write(writer, db, mine[case], start, n)
                            ours_frames.append(frames)
                            ours_cpu.append(cpu)
                        else:
                            frames, cpu = _frames_per_write(lg_conn, lg_db, theirs[case], start, n)
                            lg_frames.append(frames)
                            lg_cpu.append(cpu)
                names = {
                    page: name
                    for name, page in sqlite3.connect(db).execute("SELECT name, pageno FROM dbstat")
                }
                by_tree = collections.Counter(names.get(p, "(new page)") for f in ours_frames for p in f)
                per = 3 * n
                print(
                    f"sqlite      {case:<17} pages per write: stateflow {sum(map(len, ours_frames)) / per:5.1f}"
                    f"  langgraph {sum(map(len, lg_frames)) / per:4.1f}   CPU ms per write: stateflow "
                    f"{statistics.median(ours_cpu):.3f}  langgraph {statistics.median(lg_cpu):.3f}",
                    flush=True,
                )
                print(
                    "            stateflow's pages: "
                    + ", ".join(f"{name} {k / per:.1f}" for name, k in by_tree.most_common()),
                    flush=True,
                )
        finally:
            ours.store.close()
            saver_conn.close()
            store_conn.close()


_EXPLAIN_SETTINGS = (
    ("log_min_duration", "0"),
    ("log_analyze", "on"),
    ("log_timing", "off"),
    ("log_wal", "on"),
    ("log_nested_statements", "off"),
    ("log_level", "notice"),
)
_DURATION = re.compile(r"duration: ([\d.]+) ms")
_WAL = re.compile(r"WAL: records=\d+(?: fpi=\d+)? bytes=(\d+)")


def _explained(conn: psycopg.Connection[Any], notes: list[str]) -> None:
    """Every statement on ``conn`` reports its server time and WAL to ``notes``."""
    conn.execute("LOAD 'auto_explain'")
    for name, value in _EXPLAIN_SETTINGS:
        conn.execute(f"SET auto_explain.{name} = {value}")
    conn.add_notice_handler(lambda d: notes.append(d.message_primary or ""))


def _server_cost(notes: list[str], n: int) -> tuple[float, float]:
    """Server ms and WAL bytes per write from ``n`` writes' notes."""
    ms = wal = 0.0
    for note in notes:
        took = _DURATION.search(note)
        if took:
            ms += float(took.group(1))
            wrote = _WAL.search(note)  # the plan's top node: the statement's whole WAL
            wal += float(wrote.group(1)) if wrote else 0.0
    return ms / n, wal / n


@contextmanager
def _postgres_sides(url: str) -> Iterator[tuple[StatesService, list[str], dict[str, Case], list[str]]]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from psycopg_pool import ConnectionPool

    with ExitStack() as stack:
        at = stack.enter_context(postgres_schemas(url, "bench_lgc_lg", "bench_lgc_sf"))
        theirs_notes: list[str] = []
        ours_notes: list[str] = []
        conns = [
            stack.enter_context(
                psycopg.connect(
                    at["bench_lgc_lg"], autocommit=True, prepare_threshold=0, row_factory=dict_row
                )
            )
            for _ in range(2)
        ]
        lg_saver, lg_store = PostgresSaver(conns[0]), PostgresStore(conns[1])
        lg_saver.setup()
        lg_store.setup()
        ours = StatesService(open_store(at["bench_lgc_sf"], auto_migrate=True))
        stack.callback(ours.store.close)
        store: Any = ours.store
        store._pool.close()  # the same pool, with every connection explained
        store._pool = ConnectionPool(
            at["bench_lgc_sf"],
            min_size=1,
            max_size=4,
            kwargs={"autocommit": True},
            configure=lambda conn: _explained(conn, ours_notes),
        )
        theirs = _cases(lg_saver, lg_store)
        for conn in conns:
            _explained(conn, theirs_notes)
        yield ours, ours_notes, theirs, theirs_notes


def postgres_costs(url: str, n: int) -> None:
    with _postgres_sides(url) as (ours, ours_notes, theirs, theirs_notes):
        mine = _cases(StateflowSaver(ours), StateflowStore(ours))
        pool: Any = ours.store._pool  # type: ignore[attr-defined]
        for case in CASES:
            ours_cost, lg_cost, uses, ours_cpu, lg_cpu = [], [], [], [], []
            for r in range(3):
                start = 1000 + r * n
                for side in ("ours", "lg") if r % 2 == 0 else ("lg", "ours"):
                    if side == "ours":
                        ours_notes.clear()
                        taken = _counting(pool)
                        cpu = time.process_time()
                        for i in range(start, start + n):
                            mine[case](i)
                        ours_cpu.append((time.process_time() - cpu) / n * 1e3)
                        uses.append(taken() / n)
                        ours_cost.append(_server_cost(ours_notes, n))
                    else:
                        theirs_notes.clear()
                        cpu = time.process_time()
                        for i in range(start, start + n):
                            theirs[case](i)
                        lg_cpu.append((time.process_time() - cpu) / n * 1e3)
                        lg_cost.append(_server_cost(theirs_notes, n))
            print(
                f"postgresql  {case:<17} server ms per write: stateflow "
                f"{statistics.median(c[0] for c in ours_cost):.3f}  langgraph "
                f"{statistics.median(c[0] for c in lg_cost):.3f}   WAL bytes per write: stateflow "
                f"{statistics.median(c[1] for c in ours_cost):6.0f}  langgraph "
                f"{statistics.median(c[1] for c in lg_cost):5.0f}   client CPU ms per write: stateflow "
                f"{statistics.median(ours_cpu):.3f}  langgraph {statistics.median(lg_cpu):.3f}   "
                f"stateflow's round trips per write {statistics.median(uses):.2f}",
                flush=True,
            )


def _counting(pool: Any) -> Callable[[], int]:
    """Count the connections taken from ``pool`` from now on (each use is one round trip): every
    one is taken by ``getconn``, through the pool's context manager or not."""
    taken = [0]
    real = pool.__class__.getconn

    def counting(*args: Any, **kwargs: Any) -> Any:
        taken[0] += 1
        return real(pool, *args, **kwargs)

    pool.getconn = counting
    return lambda: taken[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=200, help="writes per case and round")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--only", choices=["sqlite", "postgres"], help="measure one backend only")
    args = parser.parse_args()
    if args.only != "postgres":
        sqlite_costs(args.ops)
    if args.postgres and args.only != "sqlite":
        postgres_costs(args.postgres, args.ops)


if __name__ == "__main__":
    main()
