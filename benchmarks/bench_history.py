"""History pages of a long-lived document vs a young one, each against a baseline in the same run.

A document with a long history (``--changes``, default 50,000) and one with 20 changes, in one
store. Each case reads a page of ``--limit`` changes: the newest page, and a page far back
(``before_seq`` just after the long history's first changes). The baseline is the same read
of the young document; the ratio shows what history length costs a page (target: it doesn't).

    python3 -m benchmarks.bench_history [--changes 50000] [--limit 20] [--iterations 200] [--rounds 10]
        [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from functools import partial

from benchmarks.rounds import Pair, alternate, per_call_ms, report
from stateflow.doc.diff import Edit
from stateflow.store import DocKey, SqlStore, Write, open_store

LONG, YOUNG = DocKey("bench", "long"), DocKey("bench", "young")


def alternating(ours: Callable[[], object], base: Callable[[], object], iterations: int, rounds: int) -> Pair:
    """Both sides in alternating rounds of ``iterations // rounds`` calls each (ms per call)."""
    ours(), base()
    calls = max(1, iterations // rounds)
    return alternate(lambda _r: per_call_ms(ours, calls), lambda _r: per_call_ms(base, calls), rounds)


def fill(store: SqlStore, changes: int) -> tuple[int, int]:
    """Write the two histories; return the seqs just after each one's fifth change."""
    step = max(1, changes // 20)
    seqs: dict[DocKey, list[int]] = {LONG: [], YOUNG: []}
    for i in range(changes):
        keys = [LONG, YOUNG] if i % step == 0 and len(seqs[YOUNG]) < 20 else [LONG]
        commit = store.commit([Write(k, [Edit(("n",), i), Edit(("note",), f"change {i}")]) for k in keys])
        assert commit.seq is not None
        for k in keys:
            seqs[k].append(commit.seq)
        if i and i % 10_000 == 0:
            print(f"  … {i:,} changes written", flush=True)
    return seqs[LONG][5] + 1, seqs[YOUNG][5] + 1


def run(label: str, store: SqlStore, changes: int, limit: int, iterations: int, rounds: int) -> None:
    deep_long, deep_young = fill(store, changes)
    cases: tuple[tuple[str, int | None, int | None], ...] = (
        ("newest page", None, None),
        ("page far back", deep_long, deep_young),
    )
    for case, long_before, young_before in cases:
        pair = alternating(
            partial(store.history, [LONG], limit=limit, before_seq=long_before),
            partial(store.history, [YOUNG], limit=limit, before_seq=young_before),
            iterations,
            rounds,
        )
        report(f"{label} {case}: {changes:,} changes vs 20", pair, "ms", "<= 1.5x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/history.db?synchronous=off")  # filling only: reads measured
        run("sqlite", store, args.changes, args.limit, args.iterations, args.rounds)
        store.close()
    if args.postgres:
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute("DROP SCHEMA IF EXISTS bench_history CASCADE")
            admin.execute("CREATE SCHEMA bench_history")
        sep = "&" if "?" in args.postgres else "?"
        store = open_store(f"{args.postgres}{sep}options=-csearch_path%3Dbench_history", auto_migrate=True)
        try:
            run("postgresql", store, args.changes, args.limit, args.iterations, args.rounds)
        finally:
            store.close()
            with psycopg.connect(args.postgres, autocommit=True) as admin:
                admin.execute("DROP SCHEMA bench_history CASCADE")


if __name__ == "__main__":
    main()
