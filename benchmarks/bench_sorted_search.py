"""Sorted search pages: the first and a deep page of a search with ``sort``, at scale.

One state of each size in ``--records`` (default 20,000 and 100,000; filled in commits of 500
through the store's ``commit``, as ``bench_states_scale`` fills; synchronous=off on SQLite: only
reads are measured), one record in 10 with status "open" (the matches), each with a number ``n``
(a permutation of the record numbers) and a text ``owner``. Timed, per size, median of
``--rounds``:

- ``n desc``: ``{"status": "open"}`` sorted by ``n`` descending, a page of 50 — the first page
  and page ``--deep`` (default 40; its cursor found by paging there first);
- ``owner, n``: the same filter sorted by ``owner`` then ``n``;
- ``checked``: ``{"status": "open", "n": {"$gte": records // 2}}``, a range checked on each
  candidate (half the matches pass), sorted by ``n`` ascending.

The stores are kept between runs (``--dir`` for SQLite, schema ``bench_sorted`` on PostgreSQL),
so two versions of the code can be measured against the same data (run one, then the other with
its ``src`` first on ``PYTHONPATH``); ``--fresh`` drops them first.

    python3 -m benchmarks.bench_sorted_search [--records 20000,100000] [--rounds 3]
        [--postgres URL] [--no-sqlite] [--no-postgres] [--dir DIR] [--fresh] [--deep 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

from stateflow.states import StatesService
from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.subjects import encode_subject

DECL = {
    "schema": {
        "type": "object",
        "properties": {"status": {"type": "string"}, "n": {"type": "integer"}, "owner": {"type": "string"}},
    },
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
COHORT = 500
PAGE = 50


def fill(store: SqlStore, state: str, records: int) -> None:
    for low in range(0, records, COHORT):
        writes = []
        for i in range(low, min(records, low + COHORT)):
            subject = encode_subject("agent", "a", "thread", f"k{i:08d}")
            body = {
                "status": "open" if i % 10 == 3 else "closed",
                "n": (i * 7919) % records,
                "owner": f"o{(i * 31) % 97}",
            }
            writes.append(Write.between(DocKey(state, subject), None, body, 0))
        store.commit(writes)


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def run(label: str, store: SqlStore, sizes: list[int], rounds: int, deep: int) -> None:
    service = StatesService(store)
    for records in sizes:
        state = f"big{records}"
        if state not in {d["name"] for d in service.list_declarations()}:
            service.declare(state, DECL)
        if service.stats(state)["records"] != records:
            took, _ = timed(lambda state=state, records=records: fill(store, state, records))
            print(f"{label}: filled {records:,} records in {took / 1000:.1f} s", flush=True)
        cases: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [
            ("n desc", {"status": "open"}, [{"path": ["n"], "order": "desc"}]),
            ("owner, n", {"status": "open"}, [{"path": ["owner"]}, {"path": ["n"]}]),
            ("checked", {"status": "open", "n": {"$gte": records // 2}}, [{"path": ["n"]}]),
        ]
        for name, filters, sort in cases:

            def page(
                cursor: str | None, filters: dict[str, Any] = filters, sort: Any = sort, state: str = state
            ) -> Any:
                return service.search(state, filters, sort=sort, limit=PAGE, cursor=cursor)

            cursor = None
            for _ in range(deep - 1):
                cursor = page(cursor)["next_cursor"]
            assert cursor is not None or deep == 1
            first = statistics.median(timed(lambda: page(None))[0] for _ in range(rounds))
            deep_ms = statistics.median(timed(lambda c=cursor: page(c))[0] for _ in range(rounds))
            print(
                f"{label} {records:,} records, {name}: first page {first:,.1f} ms, page {deep} {deep_ms:,.1f} ms",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", default="20000,100000", help="sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "bench_sorted_search"))
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--deep", type=int, default=40, help="the deep page measured")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.records.split(","))
    if not args.no_sqlite:
        os.makedirs(args.dir, exist_ok=True)
        path = os.path.join(args.dir, "sorted.db")
        if args.fresh and os.path.exists(path):
            os.remove(path)
        store = open_store(f"sqlite:///{path}?synchronous=off")
        try:
            run("sqlite", store, sizes, args.rounds, args.deep)
        finally:
            store.close()
    if args.postgres and not args.no_postgres:
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as admin:
            if args.fresh:
                admin.execute("DROP SCHEMA IF EXISTS bench_sorted CASCADE")
            admin.execute("CREATE SCHEMA IF NOT EXISTS bench_sorted")
        sep = "&" if "?" in args.postgres else "?"
        store = open_store(f"{args.postgres}{sep}options=-csearch_path%3Dbench_sorted", auto_migrate=True)
        try:
            run("postgresql", store, sizes, args.rounds, args.deep)
        finally:
            store.close()


if __name__ == "__main__":
    main()
