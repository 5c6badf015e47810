"""``benchmarks/bench_langgraph_busy.py``: a short run through its command line, on SQLite and
on PostgreSQL (each side in a schema of its own, dropped after) — its one line, with a rate per
side and their ratio, and its check that both sides hold the same checkpoints and writes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.conftest import PG_URL

REPO = Path(__file__).resolve().parent.parent
LINE = re.compile(
    r"(sqlite|postgres): a step \(put, 2 put_writes\) of 12 threads in turn +([\d.]+) steps/s vs +([\d.]+) "
    r"steps/s +ratio +([\d.]+)× \(rounds ([\d.]+)–([\d.]+)×, n=2\)"
)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_short_run_prints_both_rates_and_checks_the_sides_agree(backend: str) -> None:
    if backend == "postgres" and not PG_URL:
        pytest.skip("PostgreSQL not configured (set STATEFLOW_TEST_POSTGRES or run .ci/postgres.sh)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    where = ("--backend", "postgres", "--postgres", str(PG_URL)) if backend == "postgres" else ()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_langgraph_busy", "--threads", "12", "--rounds", "2", *where],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    found = LINE.fullmatch(done.stdout.strip())
    assert found is not None, done.stdout
    assert found.group(1) == backend
    ours, theirs, ratio, low, high = map(float, found.groups()[1:])
    assert ours > 0 and theirs > 0 and low <= ratio <= high
    if where:  # (each side's schema dropped after the run)
        with psycopg.connect(str(PG_URL)) as conn:
            left = conn.execute(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'bench_busy_%'"
            ).fetchone()
        assert left == (0,)
