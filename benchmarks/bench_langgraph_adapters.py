"""``StateflowStore`` / ``StateflowSaver`` vs LangGraph's own backends, through LangGraph's API.

Store: ``put`` and ``get`` of small documents over 200 keys in 4 namespaces, ``search`` of one
namespace with a filter. Saver: ``put`` of a checkpoint chain (4 threads; each checkpoint
updates one of three channels, the others referenced from earlier checkpoints, as a graph
does), ``put_writes`` of two writes (each call a new task, spread over the checkpoints the
puts made, a few per checkpoint as a graph's steps make them), ``get_tuple`` of a thread's latest checkpoint. The
baselines are LangGraph's ``SqliteStore``/``SqliteSaver`` and ``PostgresStore``/
``PostgresSaver`` at the same durability: SQLite at ``synchronous=FULL`` on both sides (every
acknowledged write fsynced; LangGraph's store as shipped — a rollback journal — and on WAL like
ours; its saver switches itself to WAL), PostgreSQL on the same server with autocommit. One
caller. Every round measures each case on both sides, alternating which side goes first;
prints the median throughput of each side, the ratio stateflow / LangGraph of the medians and
the range of the rounds' ratios.

    python -m benchmarks.bench_langgraph_adapters [--ops 1500] [--repeat 5] [--only sqlite|postgres]
        [--part store|saver]
        [--postgres URL]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint
from langgraph.store.base import BaseStore

from benchmarks.rounds import alternate
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import open_store

KEYS = 200
THREADS = 4
Case = Callable[[int], object]


def store_cases(store: BaseStore, tag: str) -> dict[str, Case]:
    def put(i: int) -> None:
        store.put(
            ("bench", tag, f"ns{i % 4}"),
            f"k{i % KEYS}",
            {"n": i, "text": "remember this", "tags": ["a", "b"]},
        )

    def get(i: int) -> None:
        store.get(("bench", tag, f"ns{i % 4}"), f"k{i % KEYS}")

    def search(i: int) -> None:
        store.search(("bench", tag, f"ns{i % 4}"), filter={"n": {"$gte": 100}}, limit=10)

    return {"store put": put, "store get": get, "store search": search}


def saver_cases(saver: BaseCheckpointSaver[Any], tag: str) -> dict[str, Case]:
    heads: dict[int, RunnableConfig] = {}
    written: list[RunnableConfig] = []
    versions: dict[int, dict[str, int]] = {}

    def put(i: int) -> None:
        thread = i % THREADS
        current = versions.setdefault(thread, {"messages": 0, "step": 0, "plan": 0})
        channel = ("messages", "step", "plan")[i % 3]
        current[channel] += 1
        values = {
            "messages": [f"message {n}" for n in range(current["messages"] % 20)],
            "step": i,
            "plan": {"next": i},
        }
        checkpoint: Checkpoint = {
            "v": 4,
            "id": str(uuid.uuid7()) if hasattr(uuid, "uuid7") else f"{time.time_ns():032x}",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": values,
            "channel_versions": dict(current),
            "versions_seen": {"node": dict(current)},
            "updated_channels": [channel],
        }
        config: RunnableConfig = heads.get(thread) or {
            "configurable": {"thread_id": f"{tag}-{thread}", "checkpoint_ns": ""}
        }
        heads[thread] = saver.put(
            config, checkpoint, {"source": "loop", "step": i, "parents": {}}, {channel: current[channel]}
        )
        written.append(heads[thread])

    tasks = itertools.count()

    def put_writes(i: int) -> None:
        # a few tasks' writes on each checkpoint, as a graph's steps make them; a new task each
        # call (a repeated task id writes nothing on either side)
        checkpoint = written[i % len(written)]
        saver.put_writes(checkpoint, [("messages", f"reply {i}"), ("step", i)], f"task-{next(tasks)}")

    def get_tuple(i: int) -> None:
        assert saver.get_tuple({"configurable": {"thread_id": f"{tag}-{i % THREADS}", "checkpoint_ns": ""}})

    return {"saver put": put, "saver put_writes": put_writes, "saver get_tuple": get_tuple}


def rate(fn: Case, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - start)


def compare(label: str, ours: dict[str, Case], theirs: dict[str, Case], n: int, repeat: int) -> None:
    for case in ours:  # warm up and fill: the reads find what the writes wrote
        for i in range(KEYS):
            ours[case](i)
            theirs[case](i)
    for case in ours:
        ours_fn, theirs_fn = ours[case], theirs[case]

        def ours_rate(_r: int, fn: Case = ours_fn) -> float:
            return rate(fn, n)

        def theirs_rate(_r: int, fn: Case = theirs_fn) -> float:
            return rate(fn, n)

        pair = alternate(ours_rate, theirs_rate, repeat, higher_better=True)
        target = 0.8 if "put" in case else 1.0
        print(
            f"{label:<32} {case:<18} stateflow {statistics.median(pair.ours):8.0f}/s   "
            f"langgraph {statistics.median(pair.base):8.0f}/s   ratio {pair.ratio:5.2f}x  rounds {pair.spread()}"
            f"  (target >= {target:g}x){'' if pair.meets(target) else '  MISSED'}",
            flush=True,
        )


@contextmanager
def sqlite_pair(journal: str) -> Iterator[tuple[StatesService, BaseStore, BaseCheckpointSaver[Any]]]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "lg-store.db", check_same_thread=False, isolation_level=None)
        if journal == "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        lg_store = SqliteStore(conn)
        lg_store.setup()
        saver_conn = sqlite3.connect(Path(tmp) / "lg-saver.db", check_same_thread=False)
        saver_conn.execute("PRAGMA synchronous = FULL")
        lg_saver = SqliteSaver(saver_conn)
        lg_saver.setup()
        ours = StatesService(open_store(f"sqlite:///{tmp}/stateflow.db?synchronous=full"))
        try:
            yield ours, lg_store, lg_saver
        finally:
            ours.store.close()
            conn.close()
            saver_conn.close()


@contextmanager
def postgres_pair(url: str) -> Iterator[tuple[StatesService, BaseStore, BaseCheckpointSaver[Any]]]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    schemas = ("bench_lga_store", "bench_lga_saver", "bench_lga_sf")
    with psycopg.connect(url, autocommit=True) as admin:
        for schema in schemas:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in url else "?"
    at = {s: f"{url}{sep}options=-csearch_path%3D{s}" for s in schemas}
    try:
        with ExitStack() as stack:
            lg_store = stack.enter_context(PostgresStore.from_conn_string(at["bench_lga_store"]))
            lg_store.setup()
            lg_saver = stack.enter_context(PostgresSaver.from_conn_string(at["bench_lga_saver"]))
            lg_saver.setup()
            ours = StatesService(open_store(at["bench_lga_sf"], auto_migrate=True))
            stack.callback(ours.store.close)
            yield ours, lg_store, lg_saver
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            for schema in schemas:
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=5, help="rounds per case (medians are reported)")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--only", choices=["sqlite", "postgres"], help="measure one backend only")
    parser.add_argument("--part", choices=["store", "saver"], help="measure the store or the saver only")
    args = parser.parse_args()
    runs: list[tuple[str, Any]] = []
    if args.only != "postgres":
        runs += [("sqlite FULL, lg store as shipped", lambda: sqlite_pair("shipped"))]
        runs += [("sqlite FULL, lg store on WAL", lambda: sqlite_pair("wal"))]
    if args.postgres and args.only != "sqlite":
        runs += [("postgresql", lambda: postgres_pair(args.postgres))]
    for label, pair in runs:
        with pair() as (states, lg_store, lg_saver):
            ours_store, ours_saver = StateflowStore(states), StateflowSaver(states)
            if args.part != "saver":
                compare(
                    label, store_cases(ours_store, "x"), store_cases(lg_store, "x"), args.ops, args.repeat
                )
            if (
                "WAL" not in label and args.part != "store"
            ):  # LangGraph's saver is on WAL either way: measure it once
                compare(
                    label, saver_cases(ours_saver, "x"), saver_cases(lg_saver, "x"), args.ops, args.repeat
                )


if __name__ == "__main__":
    main()
