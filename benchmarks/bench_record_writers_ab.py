"""Declared-record writes from several processes on PostgreSQL: this tree against another, A/B.

Each side runs ``--writers`` processes, each with its own store (as separate servers or CLI
calls are), applying a ``set`` op to records picked at random among ``--records`` of one state.
A record another process wrote last is not cached as it is in this one, so its write cannot
commit from the cache: it either reads the record in a snapshot and commits in one statement
checking nothing moved, or takes the row lock for two round trips. The sides alternate round by
round (the side that goes first swapping every round), each in its own schema; the script
prints writes per second per side and the median and spread of the per-round ratios.

    python3 -m benchmarks.bench_record_writers_ab --baseline-src /path/to/other/src
        [--postgres URL] [--rounds 8] [--calls 300] [--writers 2] [--records 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import psycopg

from benchmarks.rounds import alternate, report

WORKER = r"""
import json, random, sys, time
from stateflow.states import StatesService
from stateflow.store import open_store

url, index, calls, records, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
service = StatesService(open_store(url))
rng = random.Random(index)
subjects = [{"target_kind": "agent", "target_name": "bench", "kind": "thread", "key": f"r{k}"} for k in range(records)]
service.read("records", subjects[0])  # connect before the clock starts
while time.time() < start:
    time.sleep(0.001)
began = time.perf_counter()
for i in range(calls):
    service.apply("records", rng.choice(subjects), [{"op": "set", "path": ["status"], "value": f"w{index}-{i}"}])
print(json.dumps(time.perf_counter() - began), flush=True)
"""

DECL = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def side(src: str, url: str, writers: int, calls: int, records: int) -> float:
    """One round of one side: writes per second of ``writers`` processes together."""
    env = {**os.environ, "PYTHONPATH": src}
    start = time.time() + 1.5  # every process connected and waiting
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, str(i), str(calls), str(records), str(start)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(writers)
    ]
    spent = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"a writer failed (exit {proc.returncode})"
        spent.append(float(json.loads(out)))
    return writers * calls / max(spent)


def prepare(src: str, base_url: str, records: int) -> tuple[str, str]:
    """A fresh migrated schema with the state declared and its records written once."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base_url else "?"
    url = f"{base_url}{sep}options={quote(f'-csearch_path={schema}')}"
    setup = (
        "import json, sys\n"
        "from stateflow.states import StatesService\n"
        "from stateflow.store import open_store\n"
        "s = StatesService(open_store(sys.argv[1], auto_migrate=True))\n"
        "s.declare('records', json.loads(sys.argv[2]))\n"
        "for k in range(int(sys.argv[3])):\n"
        "    s.replace('records', {'target_kind': 'agent', 'target_name': 'bench', 'kind': 'thread',"
        " 'key': f'r{k}'}, {'status': 'new'})\n"
    )
    env = {**os.environ, "PYTHONPATH": src}
    subprocess.run([sys.executable, "-c", setup, url, json.dumps(DECL), str(records)], check=True, env=env)
    return url, schema


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-src", required=True, help="the other tree's src directory")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--records", type=int, default=8)
    args = parser.parse_args()
    if not args.postgres:
        raise SystemExit("set --postgres or STATEFLOW_TEST_POSTGRES")
    ours_src = str(Path(__file__).resolve().parent.parent / "src")
    ours_url, ours_schema = prepare(ours_src, args.postgres, args.records)
    base_url, base_schema = prepare(args.baseline_src, args.postgres, args.records)
    try:
        pair = alternate(
            lambda _: side(ours_src, ours_url, args.writers, args.calls, args.records),
            lambda _: side(args.baseline_src, base_url, args.writers, args.calls, args.records),
            args.rounds,
            higher_better=True,
        )
        report(
            f"  {args.writers} writer processes, {args.records} records (this tree vs baseline)",
            pair,
            "writes/s",
            "",
        )
    finally:
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            for schema in (ours_schema, base_schema):
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
