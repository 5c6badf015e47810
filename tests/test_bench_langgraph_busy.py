"""``benchmarks/bench_langgraph_busy.py``: a short run through its command line, on SQLite and
on PostgreSQL (each side in a schema of its own, dropped after) — its one line, with a rate per
side and their ratio, and its check that both sides hold the same checkpoints and writes."""

from __future__ import annotations

import re

import psycopg
import pytest

from tests.conftest import PG_URL, run_benchmark

LINE = re.compile(
    r"(sqlite|postgres): a step \(put, 2 put_writes\) of 12 threads in turn +([\d.]+) steps/s vs +([\d.]+) "
    r"steps/s +ratio +([\d.]+)× \(rounds ([\d.]+)–([\d.]+)×, n=2\)"
)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_short_run_prints_both_rates_and_checks_the_sides_agree(backend: str) -> None:
    out = run_benchmark("bench_langgraph_busy", backend, "--threads", "12", "--rounds", "2")
    found = LINE.fullmatch(out.strip())
    assert found is not None, out
    assert found.group(1) == backend
    ours, theirs, ratio, low, high = map(float, found.groups()[1:])
    assert ours > 0 and theirs > 0 and low <= ratio <= high
    if backend == "postgres":  # (each side's schema dropped after the run)
        with psycopg.connect(str(PG_URL)) as conn:
            left = conn.execute(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'bench_busy_%'"
            ).fetchone()
        assert left == (0,)
