"""``benchmarks/bench_langgraph_long_run.py`` runs each side in a process of its own, in
alternating rounds, and prints every row for both, with their ratio and the rounds' spread: a
short run, through its command line, on SQLite and on PostgreSQL (each side in a schema of its
own, dropped after)."""

from __future__ import annotations

import psycopg
import pytest

from tests.conftest import PG_URL, run_benchmark


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_short_run_prints_each_row_for_both_sides(backend: str) -> None:
    out = run_benchmark(
        "bench_langgraph_long_run", backend, "--puts", "120", "--threads", "4", "--rounds", "2"
    )
    where = backend == "postgres"
    lines = out.splitlines()
    assert lines[0] == (
        f"120 saver puts over 4 threads ({'PostgreSQL' if where else 'SQLite, synchronous=off'}), "
        "2 alternating rounds: medians, ours ÷ LangGraph's (rounds' spread)"
    )
    rows = {line[:32].strip(): line[32:].split() for line in lines[2:]}
    assert list(rows) == [
        "wall a put (µs)",
        "garbage collector a put (µs)",
        "longest collection (ms)",
        "full collections",
        "objects tracked at the end",
        "peak resident memory (MiB)",
    ]
    wall = rows["wall a put (µs)"]
    assert float(wall[0]) > 0 and float(wall[1]) > 0 and wall[2].endswith("×")
    low, high = wall[3].rstrip("×").split("–")  # (the two rounds' ratios)
    assert 0 < float(low) <= float(wall[2].rstrip("×")) <= float(high)
    assert float(rows["peak resident memory (MiB)"][0]) > 10
    if where:  # (each side's schema dropped after its run)
        with psycopg.connect(str(PG_URL)) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench_long_%'"
            ).fetchone()
        assert left == (0,)
