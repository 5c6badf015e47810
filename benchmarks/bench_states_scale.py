"""Declared states at scale: ``stats`` and a selective search on a state of many records.

One state holds ``--records`` records (default 1,000,000; filled in cohorts of 400 through the
store's ``commit``, synchronous=off on SQLite: only reads are measured) and a second state 1,000
records of the same shape. Measured, each against a baseline in the same run, alternating rounds:

- ``stats`` on the big state against the way it was computed before (every subject decoded in
  Python for the per-kind counts): the ratio is the speed-up;
- a selective search (``{"status": "rare"}``, one record in 1,000) on the big state against the
  same search on the 1k state (target ≤ 3×), and against a baseline that filters the big state
  in Python (scan, read, ``json_contains``: what SQLite did before it checked scalar members in
  SQL);
- absolute medians are printed too (target for ``stats``: ≤ 50 ms).

    python3 -m benchmarks.bench_states_scale [--records 1000000] [--rounds 5] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

from benchmarks.rounds import alternate, report
from stateflow.doc.canonical import json_contains
from stateflow.states import StatesService, StateSubject
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
COHORT = 400  # writes per commit (SQLite bounds the size of one statement's expression tree)


def fill(store: SqlStore, state: str, records: int) -> float:
    """Seconds to write ``records`` records, one in 1,000 with status "rare"."""
    start = time.perf_counter()
    for first in range(0, records, COHORT):
        writes = []
        for i in range(first, min(records, first + COHORT)):
            subject = encode_subject("agent", "a", "user" if i % 3 == 0 else "thread", f"k{i:08d}")
            body = {"status": "rare" if i % 1000 == 7 else "open", "n": i, "owner": f"o{i % 50}"}
            writes.append(Write.between(DocKey(state, subject), None, body, 0))
        store.commit(writes)
    return time.perf_counter() - start


def stats_before(service: StatesService, state: str) -> dict[str, object]:
    """``stats`` as computed before: per-kind counts by decoding every subject in Python."""
    counts: dict[str, int] = {}
    after = None
    while page := service.store.scan(state, after=after, limit=500):
        for item in page:
            kind = StateSubject.decode(item.key.subject).kind
            counts[kind] = counts.get(kind, 0) + 1
        after = page[-1].key.subject
    return {
        "records": sum(counts.values()),
        "per_field": service.store.member_counts(state),
        "per_kind": counts,
    }


def search_in_python(store: SqlStore, state: str, filters: dict[str, object]) -> int:
    """The matches found by scanning every record and checking containment in Python."""
    found, after = 0, None
    while page := store.scan(state, after=after, limit=500):
        docs = store.read([x.key for x in page])
        found += sum(1 for x in page if json_contains(docs[x.key].body, filters))
        after = page[-1].key.subject
    return found


def ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def run(label: str, store: SqlStore, records: int, rounds: int) -> None:
    service = StatesService(store)
    service.declare("big", DECL)
    service.declare("small", DECL)
    took = fill(store, "big", records)
    fill(store, "small", 1000)
    print(
        f"{label}: filled {records:,} records in {took:.1f} s ({records / took:,.0f} records/s)", flush=True
    )
    rare: dict[str, object] = {"status": "rare"}
    assert service.stats("big")["records"] == records
    assert len(service.search("big", rare, limit=500)["matches"]) == min(500, records // 1000)

    pair = alternate(
        lambda _r: ms(lambda: service.stats("big")),
        lambda _r: ms(lambda: stats_before(service, "big")),
        rounds,
    )
    report(f"{label} stats, {records:,} records vs before", pair, "ms", "<= 50 ms absolute")
    pair = alternate(
        lambda _r: ms(lambda: service.search("big", rare, limit=500)),
        lambda _r: ms(lambda: service.search("small", rare, limit=500)),
        rounds,
    )
    report(f"{label} selective search, {records:,} vs 1,000 records", pair, "ms", "<= 3x")
    pair = alternate(
        lambda _r: ms(lambda: service.search("big", rare, limit=500)),
        lambda _r: ms(lambda: search_in_python(store, "big", rare)),
        max(1, rounds // 2),
    )
    report(f"{label} selective search vs filtering in Python", pair, "ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(f"sqlite:///{tmp}/scale.db?synchronous=off")
            run("sqlite", store, args.records, args.rounds)
            store.close()
    if args.postgres:
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute("DROP SCHEMA IF EXISTS bench_scale CASCADE")
            admin.execute("CREATE SCHEMA bench_scale")
        sep = "&" if "?" in args.postgres else "?"
        store = open_store(f"{args.postgres}{sep}options=-csearch_path%3Dbench_scale", auto_migrate=True)
        try:
            run("postgresql", store, args.records, args.rounds)
        finally:
            store.close()
            with psycopg.connect(args.postgres, autocommit=True) as admin:
                admin.execute("DROP SCHEMA bench_scale CASCADE")


if __name__ == "__main__":
    main()
