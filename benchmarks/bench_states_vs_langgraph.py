"""Declared-states ``apply`` and ``read`` vs LangGraph's ``SqliteStore`` / ``PostgresStore``.

Both sides store the same small documents under the same keys in the same run, at equal
durability (SQLite: the same ``synchronous`` setting, LangGraph both as shipped — rollback
journal — and tuned to WAL like stateflow; PostgreSQL: the same server). stateflow's ``apply``
is a read-modify-write op batch that also validates against the JSON Schema and writes the
audit trail; LangGraph's ``put`` writes the already-computed document. Each case runs with one
caller and with several concurrent callers (threads, each owning its subjects, as separate
agents would). Each case runs ``--repeat`` rounds, the two sides alternating and swapping which
goes first every round (each round writes, then reads; ``benchmarks/rounds.py``); prints the
median throughput of each side (operations per second), the median of the per-round ratios
stateflow / LangGraph and their spread.

    python benchmarks/bench_states_vs_langgraph.py [--ops 3000] [--repeat 5] [--synchronous full|normal]
        [--threads 1,8] [--only sqlite|postgres] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.rounds import Pair, report
from stateflow.states import StatesService
from stateflow.store import open_store

SUBJECTS = 200
DECL = {
    "schema": {
        "type": "object",
        "properties": {
            "status": {"type": "string"},
            "count": {"type": "integer"},
            "people": {
                "type": "array",
                "items": {"type": "object", "properties": {"id": {"type": "string"}}},
            },
        },
    },
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def subject(i: int) -> dict[str, str]:
    return {"target_kind": "agent", "target_name": "bench", "kind": "thread", "key": f"t{i % SUBJECTS}"}


def ops_for(i: int) -> list[dict[str, Any]]:
    return [
        {"op": "set", "path": ["status"], "value": "open" if i % 2 else "closed"},
        {"op": "set", "path": ["count"], "value": i},
        {
            "op": "set_by_key",
            "path": ["people"],
            "key_field": "id",
            "value": [{"id": f"p{i % 3}", "seen": i}],
        },
    ]


def document_for(i: int, previous: dict[str, Any] | None) -> dict[str, Any]:
    """What the op batch produces, computed by hand for the LangGraph side."""
    people = list((previous or {}).get("people", []))
    person = {"id": f"p{i % 3}", "seen": i}
    for n, p in enumerate(people):
        if p["id"] == person["id"]:
            people[n] = person
            break
    else:
        people.append(person)
    return {"status": "open" if i % 2 else "closed", "count": i, "people": people}


def rate(fn: Callable[[int], object], n: int, threads: int = 1) -> float:
    """Operations per second of ``fn(i)`` for ``i < n``, spread over ``threads`` callers (each
    caller works on its own subjects, as separate agents would)."""
    for i in range(min(50, n)):
        fn(i)  # warm up
    if threads == 1:
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        return n / (time.perf_counter() - start)
    errors: list[BaseException] = []

    def caller(t: int) -> None:
        try:
            for i in range(t, n, threads):
                fn(i)
        except BaseException as exc:  # reported below
            errors.append(exc)

    pool = [threading.Thread(target=caller, args=(t,)) for t in range(threads)]
    start = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return n / elapsed


def run_pair(label: str, service: StatesService, lg: Any, n: int, threads: int, repeat: int) -> None:
    service.declare("bench", DECL)
    docs: dict[str, dict[str, Any]] = {}

    applied = [0]
    committed_before = commits_of(service)

    def ours_apply(i: int) -> None:
        service.apply("bench", subject(i), ops_for(i))
        applied[0] += 1

    def theirs_put(i: int) -> None:
        key = subject(i)["key"]
        docs[key] = document_for(i, docs.get(key))
        lg.put(("bench", "agent", "bench"), key, docs[key])

    def ours_read(i: int) -> None:
        service.read("bench", subject(i))

    def theirs_get(i: int) -> None:
        lg.get(("bench", "agent", "bench"), subject(i)["key"])

    cases = {"apply vs put": (ours_apply, theirs_put), "read vs get": (ours_read, theirs_get)}
    # Each round writes, then reads what it wrote: no read round is served from a cache that a
    # write round has not just invalidated. Within a round the side that goes first swaps.
    measured: dict[str, tuple[list[float], list[float]]] = {what: ([], []) for what in cases}
    for r in range(repeat):
        for what, (ours, theirs) in cases.items():
            ours_rates, base_rates = measured[what]
            if r % 2 == 0:
                ours_rates.append(rate(ours, n, threads))
                base_rates.append(rate(theirs, n, threads))
            else:
                base_rates.append(rate(theirs, n, threads))
                ours_rates.append(rate(ours, n, threads))
    for what, (ours_rates, base_rates) in measured.items():
        report(
            f"{label} {threads:>2} thr {what}",
            Pair(ours_rates, base_rates, higher_better=True),
            "/s",
            target=">= 2x",
        )
    commits, largest = commits_of(service)
    if commits:
        commits -= committed_before[0]
        print(
            f"{label} {threads:>2} thr: {applied[0]} applies in {commits} commits "
            f"({applied[0] / commits:.2f} per commit, largest group {largest})",
            flush=True,
        )


def commits_of(service: StatesService) -> tuple[int, int]:
    """The store's group commits so far and the most writes one carried (0, 0: not known)."""
    store: Any = service.store
    group = getattr(store, "_group", None)  # SQLite: one group commit per store
    if group is not None:
        return group.commits, group.largest
    groups = getattr(store, "_groups", None)  # PostgreSQL: optimistic commits' groups
    return (groups.groups, groups.largest) if groups is not None else (0, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument(
        "--repeat", type=int, default=5, help="alternating rounds per case (medians are reported)"
    )
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument(
        "--threads",
        default="1,8",
        help="comma-separated caller counts to measure (each must divide 200: callers own their subjects)",
    )
    parser.add_argument("--only", choices=["sqlite", "postgres"], help="measure one backend only")
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    if any(t < 1 or SUBJECTS % t for t in counts):
        parser.error(f"--threads: each count must divide {SUBJECTS}")
    from langgraph.store.sqlite import SqliteStore

    for journal in ("wal", "shipped") if args.only != "postgres" else ():
        # "shipped": LangGraph's connection as sqlite3 opens it (rollback journal); "wal": tuned
        # like ours. Both run with the same synchronous setting, so durability is equal.
        with tempfile.TemporaryDirectory() as tmp:
            conn = sqlite3.connect(Path(tmp) / "langgraph.db", check_same_thread=False, isolation_level=None)
            if journal == "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {args.synchronous}")
            lg = SqliteStore(conn)
            lg.setup()
            ours = StatesService(open_store(f"sqlite:///{tmp}/stateflow.db?synchronous={args.synchronous}"))
            for threads in counts:
                run_pair(
                    f"sqlite/{args.synchronous} vs langgraph {journal}",
                    ours,
                    lg,
                    args.ops,
                    threads,
                    args.repeat,
                )
    if args.postgres and args.only != "sqlite":
        import psycopg
        from langgraph.store.postgres import PostgresStore

        with psycopg.connect(args.postgres, autocommit=True) as admin:
            for schema in ("bench_lg", "bench_sf"):
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                admin.execute(f"CREATE SCHEMA {schema}")
        sep = "&" if "?" in args.postgres else "?"
        with PostgresStore.from_conn_string(f"{args.postgres}{sep}options=-csearch_path%3Dbench_lg") as pg_lg:
            pg_lg.setup()
            ours = StatesService(
                open_store(f"{args.postgres}{sep}options=-csearch_path%3Dbench_sf", auto_migrate=True)
            )
            for threads in counts:
                run_pair("postgresql", ours, pg_lg, args.ops, threads, args.repeat)
        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute("DROP SCHEMA bench_lg CASCADE")
            admin.execute("DROP SCHEMA bench_sf CASCADE")


if __name__ == "__main__":
    main()
