"""Declared states at scale: ``stats`` and a selective search on a state of many records.

One state grows to each size in ``--records`` (default 10,000, 100,000 and 1,000,000; filled in
batched commits of 500 through the store's ``commit``, the path ``stateflow load`` takes for a
dump without history — a commit creates the rows of its new documents together, one statement on
PostgreSQL; synchronous=off on SQLite: only reads are measured) beside a second state of 1,000
records of the same shape, in the same store. At each size, against a baseline in the same run, in
alternating rounds:

- ``stats`` on the big state (maintained counters) against counting its rows in SQL (what
  ``stats`` did before the counters: a group-by over every record and member); the target is
  an absolute one, ≤ 50 ms, flat in the number of records;
- a selective search (``{"tag": "needle"}``, held by 10 records of either state, whatever its
  size) on the big state against the same search on the 1k state (target ≤ 3×), and the same
  for ``{"status": "rare"}`` (one record in 1,000: a page of 20 on the big state, 1 match on
  the small one);
- the needle search against walking the state in subject order with the value checked per
  record in SQL (what search did before the value index).

    python3 -m benchmarks.bench_states_scale [--records 10000,100000,1000000] [--rounds 5]
        [--postgres URL] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

from benchmarks.rounds import alternate, report
from stateflow.states import StatesService
from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.subjects import encode_subject

DECL = {
    "schema": {
        "type": "object",
        "properties": {"status": {"type": "string"}, "n": {"type": "integer"}, "owner": {"type": "string"}},
    },
    "subject_kinds": ["thread", "user"],
    "default_subject_kind": "thread",
}
COHORT = 500  # writes per commit, as `stateflow load` batches a dump without history
RARE: dict[str, object] = {"status": "rare"}
NEEDLE: dict[str, object] = {"tag": "needle"}
NEEDLES = 10


def fill(store: SqlStore, state: str, first: int, last: int) -> float:
    """Seconds to write records ``first`` … ``last - 1``, one in 1,000 with status "rare"."""
    start = time.perf_counter()
    for low in range(first, last, COHORT):
        writes = []
        for i in range(low, min(last, low + COHORT)):
            subject = encode_subject("agent", "a", "user" if i % 3 == 0 else "thread", f"k{i:08d}")
            body: dict[str, object] = {
                "status": "rare" if i % 1000 == 7 else "open",
                "n": i,
                "owner": f"o{i % 50}",
            }
            if i < NEEDLES * 97 and i % 97 == 5:
                body["tag"] = "needle"
            writes.append(Write.between(DocKey(state, subject), None, body, 0))
        store.commit(writes)
    return time.perf_counter() - start


def stats_by_rows(store: SqlStore, state: str) -> tuple[object, object]:
    """The counts ``stats`` reports, counted from the rows in SQL (the way before counters)."""
    with store._read_tx() as tx:
        members = tx.all(
            "SELECT m.name, COUNT(*) FROM members m JOIN documents d ON d.doc_id = m.doc_id "
            "WHERE d.state = ? AND d.present = 1 GROUP BY m.name",
            (state,),
        )
        kinds = tx.all(
            f"SELECT {store._kind_sql()}, COUNT(*) FROM documents WHERE state = ? AND present = 1 GROUP BY 1",
            (state,),
        )
    return members, kinds


def search_by_walking(store: SqlStore, state: str, filters: dict[str, object], limit: int) -> int:
    """The first page of the rare search found by walking the state in subject order, the value
    checked per record in SQL (the way before the value index; SQLite's EXISTS per record,
    PostgreSQL's EXISTS per record, GIN-probed for a scalar value — since schema 31
    the containment index holds scalar members only)."""
    selective = store._selective
    store._selective = lambda tx, filters, probe=0: None  # type: ignore[method-assign]
    try:
        return len(store.search(state, filters, limit=limit))
    finally:
        store._selective = selective  # type: ignore[method-assign]


def ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def searcher(service: StatesService, state: str, filters: dict[str, object]) -> Callable[[int], float]:
    """One round of a first-page search (20 matches at most), in milliseconds."""
    return lambda _r: ms(lambda: service.search(state, filters, limit=20))


def run(label: str, store: SqlStore, sizes: list[int], rounds: int) -> None:
    service = StatesService(store)
    service.declare("big", DECL)
    service.declare("small", DECL)
    fill(store, "small", 0, 1000)
    have = 0
    for records in sizes:
        took = fill(store, "big", have, records)
        print(
            f"{label}: filled {have:,} → {records:,} records in {took:.1f} s "
            f"({(records - have) / took:,.0f} records/s)",
            flush=True,
        )
        have = records
        assert service.stats("big")["records"] == records
        assert len(service.search("big", RARE, limit=20)["matches"]) == min(20, records // 1000)
        assert len(service.search("big", NEEDLE, limit=20)["matches"]) == NEEDLES
        assert search_by_walking(store, "big", NEEDLE, 20) == NEEDLES

        pair = alternate(
            lambda _r: ms(lambda: service.stats("big")),
            lambda _r: ms(lambda: stats_by_rows(store, "big")),
            rounds,
        )
        report(f"{label} stats, {records:,} records vs counting rows", pair, "ms", "<= 50 ms absolute")
        for name, filters in (("needle", NEEDLE), ("rare", RARE)):
            pair = alternate(searcher(service, "big", filters), searcher(service, "small", filters), rounds)
            report(f"{label} {name} search, {records:,} vs 1,000 records", pair, "ms", "<= 3x")
        pair = alternate(
            lambda _r: ms(lambda: service.search("big", NEEDLE, limit=20)),
            lambda _r: ms(lambda: search_by_walking(store, "big", NEEDLE, 20)),
            max(1, rounds // 2),
        )
        report(f"{label} needle search, {records:,}: index vs walk", pair, "ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", default="10000,100000,1000000", help="sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.records.split(","))
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(f"sqlite:///{tmp}/scale.db?synchronous=off")
            run("sqlite", store, sizes, args.rounds)
            store.close()
    if args.postgres:
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute("DROP SCHEMA IF EXISTS bench_scale CASCADE")
            admin.execute("CREATE SCHEMA bench_scale")
        sep = "&" if "?" in args.postgres else "?"
        store = open_store(f"{args.postgres}{sep}options=-csearch_path%3Dbench_scale", auto_migrate=True)
        try:
            run("postgresql", store, sizes, args.rounds)
        finally:
            store.close()
            with psycopg.connect(args.postgres, autocommit=True) as admin:
                admin.execute("DROP SCHEMA bench_scale CASCADE")


if __name__ == "__main__":
    main()
