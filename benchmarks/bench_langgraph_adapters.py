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
import asyncio
import itertools
import os
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint
from langgraph.store.base import BaseStore

from benchmarks.rounds import alternate
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import open_store

KEYS = 200
THREADS = 4
_UUID7: Callable[[], uuid.UUID] | None = getattr(uuid, "uuid7", None)
"""``uuid.uuid7`` where the interpreter has it, looked up once: on one without it, each
``hasattr`` raises and formats an AttributeError inside (~6,500 instructions a checkpoint on
both sides of every comparison)."""
Case = Callable[[int], object]


def store_cases(store: BaseStore, tag: str, *, aio: bool = False) -> dict[str, Case]:
    """The store's cases (``aio``: through its async methods, each case returning a coroutine)."""
    put_, get_, search_ = (
        (store.aput, store.aget, store.asearch) if aio else (store.put, store.get, store.search)
    )

    def put(i: int) -> Any:
        return put_(
            ("bench", tag, f"ns{i % 4}"),
            f"k{i % KEYS}",
            {"n": i, "text": "remember this", "tags": ["a", "b"]},
        )

    def get(i: int) -> Any:
        return get_(("bench", tag, f"ns{i % 4}"), f"k{i % KEYS}")

    def search(i: int) -> Any:
        return search_(("bench", tag, f"ns{i % 4}"), filter={"n": {"$gte": 100}}, limit=10)

    return {"store put": put, "store get": get, "store search": search}


def saver_cases(
    saver: BaseCheckpointSaver[Any], tag: str, *, aio: bool = False, threads: int = THREADS
) -> dict[str, Case]:
    """The saver's cases (``aio``: through its async methods, each case returning a coroutine),
    their checkpoints spread over ``threads`` threads in turn."""
    heads: dict[int, RunnableConfig] = {}
    written: list[RunnableConfig] = []
    versions: dict[int, dict[str, int]] = {}

    def checkpoint_of(i: int) -> tuple[RunnableConfig, Checkpoint, Any, Any]:
        thread = i % threads
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
            "id": str(_UUID7()) if _UUID7 is not None else f"{time.time_ns():032x}",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": values,
            "channel_versions": dict(current),
            "versions_seen": {"node": dict(current)},
            "updated_channels": [channel],
        }
        config: RunnableConfig = heads.get(thread) or {
            "configurable": {"thread_id": f"{tag}-{thread}", "checkpoint_ns": ""}
        }
        return config, checkpoint, {"source": "loop", "step": i, "parents": {}}, {channel: current[channel]}

    def put(i: int) -> None:
        heads[i % threads] = saver.put(*checkpoint_of(i))
        written.append(heads[i % threads])

    async def aput(i: int) -> None:
        heads[i % threads] = await saver.aput(*checkpoint_of(i))
        written.append(heads[i % threads])

    tasks = itertools.count()

    def put_writes(i: int) -> Any:
        # a few tasks' writes on each checkpoint, as a graph's steps make them; a new task each
        # call (a repeated task id writes nothing on either side)
        checkpoint = written[i % len(written)]
        writes = [("messages", f"reply {i}"), ("step", i)]
        if aio:
            return saver.aput_writes(checkpoint, writes, f"task-{next(tasks)}")
        return saver.put_writes(checkpoint, writes, f"task-{next(tasks)}")

    def get_tuple(i: int) -> Any:
        config: RunnableConfig = {"configurable": {"thread_id": f"{tag}-{i % threads}", "checkpoint_ns": ""}}
        if aio:
            return _present(saver.aget_tuple(config))
        assert saver.get_tuple(config)

    return {"saver put": aput if aio else put, "saver put_writes": put_writes, "saver get_tuple": get_tuple}


async def _present(found: Awaitable[object]) -> None:
    assert await found


def floor_cases(states: StatesService, tag: str) -> dict[str, Case]:
    """What a store put costs below the adapter, on the same item documents: the states write
    it makes (schema check, audit row with origin, history) called directly, and the store's
    bare versioned write of the document (transition, change and member rows; no states
    pipeline)."""
    from stateflow.langgraph.records import Records
    from stateflow.langgraph.store import ITEM
    from stateflow.states.langgraph_items import STATE
    from stateflow.store import DocKey, Document, Write

    records = Records(states, STATE, "langgraph")

    def document(i: int) -> tuple[dict[str, str], DocKey, dict[str, Any]]:
        namespace, key = ("floor", tag, f"ns{i % 4}"), f"k{i % KEYS}"
        subject_key = StateflowStore.subject_key(namespace, key)
        body = {
            "namespace": list(namespace),
            "key": key,
            "value": {"n": i, "text": "remember this", "tags": ["a", "b"]},
            "created_at": "2026-01-01T00:00:00Z",
            "expires_at": None,
            "ttl_minutes": None,
        }
        return records.subject(ITEM, subject_key), records.doc_key(ITEM, subject_key), body

    def states_write(i: int) -> None:
        subject, _, body = document(i)
        states.replace(STATE, subject, body, origin={"consumer": "langgraph"})

    def store_write(i: int) -> None:
        _, key, body = document(i)

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            return [Write.between(key, docs[key].body, body, docs[key].revision)], None

        states.store.update([key], compute, {"consumer": "langgraph"}, optimistic=True)

    return {"store put": states_write, "store put (bare store write)": store_write}


def rate(fn: Case, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - start)


def rate_threads(cases: list[Case], n: int) -> float:
    """Operations per second of ``len(cases)`` callers on threads, each making ``n // callers``
    calls of its own case, started together."""
    per = n // len(cases)
    start = threading.Barrier(len(cases) + 1)

    def run(fn: Case) -> None:
        start.wait()
        for i in range(per):
            fn(i)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in cases]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return per * len(cases) / (time.perf_counter() - began)


def rate_tasks(loop: asyncio.AbstractEventLoop, cases: list[Case], n: int) -> float:
    """The same with ``len(cases)`` tasks on one event loop (the async methods)."""
    per = n // len(cases)

    async def run(fn: Case) -> None:
        for i in range(per):
            await cast(Awaitable[object], fn(i))

    async def all_of() -> float:
        began = time.perf_counter()
        await asyncio.gather(*(run(fn) for fn in cases))
        return per * len(cases) / (time.perf_counter() - began)

    return loop.run_until_complete(all_of())


def compare_callers(
    label: str,
    ours: list[dict[str, Case]],
    theirs: list[dict[str, Case]],
    n: int,
    repeat: int,
    measure: Callable[[list[Case], int], float],
) -> None:
    """Each side's callers (one dict of cases per caller, on their own keys and threads) run
    together, in alternating rounds; the target is the single caller's."""
    callers = len(ours)
    for case in ours[0]:  # warm up and fill
        measure([c[case] for c in ours], KEYS * callers)
        measure([c[case] for c in theirs], KEYS * callers)
    for case in ours[0]:
        mine, base = [c[case] for c in ours], [c[case] for c in theirs]

        def ours_rate(_r: int, cases: list[Case] = mine) -> float:
            return measure(cases, n)

        def theirs_rate(_r: int, cases: list[Case] = base) -> float:
            return measure(cases, n)

        pair = alternate(ours_rate, theirs_rate, repeat, higher_better=True)
        target = 0.8 if "put" in case else 1.0
        print(
            f"{label:<32} {case:<18} {callers} callers  stateflow {statistics.median(pair.ours):8.0f}/s   "
            f"langgraph {statistics.median(pair.base):8.0f}/s   ratio {pair.ratio:5.2f}x  rounds {pair.spread()}"
            f"  (single-caller target >= {target:g}x){'' if pair.meets(target) else '  MISSED'}",
            flush=True,
        )


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
def postgres_schemas(url: str, *schemas: str) -> Iterator[dict[str, str]]:
    """A URL per schema, each schema fresh (dropped afterwards)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        for schema in schemas:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in url else "?"
    try:
        yield {s: f"{url}{sep}options=-csearch_path%3D{s}" for s in schemas}
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            for schema in schemas:
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@contextmanager
def postgres_pair(
    url: str, *, pooled: bool = False
) -> Iterator[tuple[StatesService, BaseStore, BaseCheckpointSaver[Any]]]:
    """``pooled``: LangGraph's side on connection pools as large as ours (for several callers;
    one connection serializes them)."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    with ExitStack() as stack:
        at = stack.enter_context(postgres_schemas(url, "bench_lga_store", "bench_lga_saver", "bench_lga_sf"))
        pool: Any = {"max_size": 10} if pooled else None
        lg_store = stack.enter_context(
            PostgresStore.from_conn_string(at["bench_lga_store"], pool_config=pool)
        )
        lg_store.setup()
        if pooled:
            saver_pool = ConnectionPool(
                at["bench_lga_saver"],
                max_size=10,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            )
            stack.callback(saver_pool.close)
            lg_saver: BaseCheckpointSaver[Any] = PostgresSaver(saver_pool)  # type: ignore[arg-type]
        else:
            lg_saver = stack.enter_context(PostgresSaver.from_conn_string(at["bench_lga_saver"]))
        lg_saver.setup()  # type: ignore[attr-defined]
        ours = StatesService(open_store(at["bench_lga_sf"], auto_migrate=True))
        stack.callback(ours.store.close)
        yield ours, lg_store, lg_saver


@contextmanager
def postgres_async_pair(
    url: str, loop: asyncio.AbstractEventLoop
) -> Iterator[tuple[StateflowStore, StateflowSaver, BaseStore, BaseCheckpointSaver[Any]]]:
    """Both sides async on PostgreSQL: ours opened with ``aopen`` (psycopg's async pool),
    LangGraph's ``AsyncPostgresStore``/``AsyncPostgresSaver`` on async pools as large."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.store.postgres.aio import AsyncPostgresStore
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    run = loop.run_until_complete
    with postgres_schemas(url, "bench_lga_store", "bench_lga_saver", "bench_lga_sf") as at:
        store_cm = AsyncPostgresStore.from_conn_string(at["bench_lga_store"], pool_config={"max_size": 10})
        lg_store = run(store_cm.__aenter__())
        run(lg_store.setup())
        saver_pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            at["bench_lga_saver"],
            max_size=10,
            open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        )
        run(saver_pool.open())

        async def made() -> AsyncPostgresSaver:  # (it binds the running loop)
            return AsyncPostgresSaver(saver_pool)

        lg_saver = run(made())
        run(lg_saver.setup())
        ours_saver = run(StateflowSaver.aopen(at["bench_lga_sf"]))
        ours_store = run(asyncio_call(ours_saver, lambda: StateflowStore(ours_saver.states)))
        try:
            yield ours_store, ours_saver, lg_store, lg_saver
        finally:
            run(ours_saver.aclose())
            run(saver_pool.close())
            run(store_cm.__aexit__(None, None, None))


async def asyncio_call(saver: StateflowSaver, fn: Callable[[], StateflowStore]) -> StateflowStore:
    from stateflow.aio import call

    return await call(saver.states.store, fn)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=5, help="rounds per case (medians are reported)")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--only", choices=["sqlite", "postgres"], help="measure one backend only")
    parser.add_argument("--part", choices=["store", "saver"], help="measure the store or the saver only")
    parser.add_argument(
        "--floors",
        action="store_true",
        help="instead of the adapters: the states write a store put makes, and the store's bare "
        "versioned write of the same document, each against LangGraph's put",
    )
    parser.add_argument(
        "--callers",
        type=int,
        default=1,
        help="concurrent callers (threads, each on its own keys and threads); 1: the single-caller run",
    )
    parser.add_argument(
        "--async",
        dest="aio",
        action="store_true",
        help="with --callers: PostgreSQL only, the callers are tasks on one event loop using the "
        "async methods (ours on psycopg's async pool, LangGraph's AsyncPostgresStore/Saver)",
    )
    args = parser.parse_args()
    if args.aio:
        if not args.postgres:
            parser.error("--async needs PostgreSQL (--postgres or $STATEFLOW_TEST_POSTGRES)")
        return async_main(args)
    runs: list[tuple[str, Any]] = []
    if args.only != "postgres":
        runs += [("sqlite FULL, lg store as shipped", lambda: sqlite_pair("shipped"))]
        runs += [("sqlite FULL, lg store on WAL", lambda: sqlite_pair("wal"))]
    if args.postgres and args.only != "sqlite":
        runs += [("postgresql", lambda: postgres_pair(args.postgres, pooled=args.callers > 1))]
    callers = range(args.callers)
    for label, pair in runs:
        with pair() as (states, lg_store, lg_saver):
            ours_store, ours_saver = StateflowStore(states), StateflowSaver(states)
            # LangGraph's saver is on WAL either way: measure it once
            if args.floors:
                for case, fn in floor_cases(states, "x").items():
                    compare(
                        label,
                        {case: fn},
                        {case: store_cases(lg_store, "x")["store put"]},
                        args.ops,
                        args.repeat,
                    )
                continue
            parts = [
                p
                for p in ("store", "saver")
                if args.part in (None, p) and (p == "store" or "WAL" not in label)
            ]
            for part in parts:
                if args.callers == 1:
                    if part == "store":
                        compare(
                            label,
                            store_cases(ours_store, "x"),
                            store_cases(lg_store, "x"),
                            args.ops,
                            args.repeat,
                        )
                    else:
                        compare(
                            label,
                            saver_cases(ours_saver, "x"),
                            saver_cases(lg_saver, "x"),
                            args.ops,
                            args.repeat,
                        )
                    continue
                if part == "store":
                    ours = [store_cases(ours_store, f"c{c}") for c in callers]
                    theirs = [store_cases(lg_store, f"c{c}") for c in callers]
                else:
                    ours = [saver_cases(ours_saver, f"c{c}") for c in callers]
                    theirs = [saver_cases(lg_saver, f"c{c}") for c in callers]
                compare_callers(
                    label,
                    ours,
                    theirs,
                    args.ops,
                    args.repeat,
                    rate_threads,
                )


def async_main(args: argparse.Namespace) -> None:
    loop = asyncio.new_event_loop()
    try:
        with postgres_async_pair(args.postgres, loop) as (ours_store, ours_saver, lg_store, lg_saver):
            label = "postgresql async"

            def measure(cases: list[Case], n: int) -> float:
                return rate_tasks(loop, cases, n)

            callers = range(max(1, args.callers))
            if args.part in (None, "store"):
                compare_callers(
                    label,
                    [store_cases(ours_store, f"c{c}", aio=True) for c in callers],
                    [store_cases(lg_store, f"c{c}", aio=True) for c in callers],
                    args.ops,
                    args.repeat,
                    measure,
                )
            if args.part in (None, "saver"):
                compare_callers(
                    label,
                    [saver_cases(ours_saver, f"c{c}", aio=True) for c in callers],
                    [saver_cases(lg_saver, f"c{c}", aio=True) for c in callers],
                    args.ops,
                    args.repeat,
                    measure,
                )
    finally:
        loop.close()


if __name__ == "__main__":
    main()
