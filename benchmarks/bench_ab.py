"""The main cases of ``docs/benchmarks.md`` on this source tree against another one, A/B.

A change to storage must leave everything else no worse. Two worker processes per backend —
one importing ``stateflow`` from this tree, one from ``--baseline-src`` (e.g. the release before
the change) — each open their own store (SQLite: a file each; PostgreSQL: a schema each), fill
it the same way, and run the same calls; the sides alternate round by round, the side going
first swapping every round (``rounds.alternate``), and each case prints both medians, the
median of the per-round ratios (this tree / baseline) and their spread.

The fill: ``--records`` small declared records (``bench_record_bytes.record``), one ``replace``
each; ``--changes`` writes to the first of them (its audit trail); an agent memory scope with
a few hot keys. Durability as shipped (SQLite ``synchronous=FULL``, PostgreSQL fsync on).

Cases: ``patch_state`` of a hot key; ``read_state`` of it now and 3 transitions back; a
declared record's ``apply`` (a ``set`` op), ``replace`` of a new subject, ``read``; the audit
trail's newest page of the record with the long history; a page of subjects; a search for a
rare and for a common value (50 a page); ``stats``; a page of 50 transitions of the store-wide
audit (``transitions``), from a point that moves through the history.

    python3 -m benchmarks.bench_ab --baseline-src /path/to/other/src [--backend sqlite|postgres|both]
        [--rounds 10] [--iterations 40] [--records 2000] [--changes 500] [--postgres URL]
        [--cases WORD ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.rounds import alternate, report

WORKER = r"""
import json, sys
import time
from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.store import open_store

location, records, changes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
DECL = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}, "n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}

def subject(i):
    return {"target_kind": "agent", "target_name": "bench", "kind": "thread", "key": f"t{i:07d}"}

def record(i):  # as bench_record_bytes writes them (not imported: the baseline may lack it)
    return {"status": "open", "n": i, "owner": f"owner-{i % 50:02d}", "title": f"thread {i:06d} about the release"}

store = open_store(location, auto_migrate=True)
states = StatesService(store)
states.declare("records", DECL)
for i in range(records):
    states.replace("records", subject(i), record(i))
for i in range(changes):
    states.apply("records", subject(0), [{"op": "set", "path": ["n"], "value": i}])
view = MemoryView(store, Identity.of("bench", "/", "ab"))
view.patch_state({"session": {"tactics": {"next": "start"}, "strategy": {"style": "terse"}}})
for i in range(5):
    view.patch_state({"session": {"tactics": {"next": f"warm {i}"}}})
n = 0

def step(case):
    global n
    n += 1
    if case == "patch_state (hot key)":
        view.patch_state({"session": {"tactics": {"next": f"step {n}"}}})
    elif case == "read_state (hot key)":
        view.read_state({"path": "session.tactics"})
    elif case == "read_state 3 transitions back":
        view.read_state({"path": "session[3].tactics"})
    elif case == "record apply (set op)":
        states.apply("records", subject(1), [{"op": "set", "path": ["status"], "value": f"s{n}"}])
    elif case == "record replace (new subject)":
        states.replace("records", subject(5_000_000 + n), record(n))
    elif case == "record read":
        states.read("records", subject(2 + n % (records - 2)))
    elif case == "audit trail page (long history)":
        states.writes("records", subject(0), limit=20)
    elif case == "transitions page (store-wide audit, 50)":
        store.transitions(after_seq=n * 50 % (records + changes), limit=50)
    elif case == "subjects page (50)":
        states.subjects("records", limit=50)
    elif case == "search, rare value":
        states.search("records", {"title": "thread 000007 about the release"}, limit=50)
    elif case == "search, common value (page of 50)":
        states.search("records", {"status": "open"}, limit=50)
    elif case == "stats":
        states.stats("records")
    else:
        raise SystemExit(f"unknown case {case}")

print("ready", flush=True)
for line in sys.stdin:
    case, iterations = json.loads(line)
    step(case)  # warm
    start = time.perf_counter()
    for _ in range(iterations):
        step(case)
    print(json.dumps((time.perf_counter() - start) * 1000 / iterations), flush=True)
"""

FAST = ("read_state (hot key)", "record read", "search, rare value", "stats")
"""Cases of well under a millisecond: ten times the iterations, so a round is not one time slice."""

CASES = (
    "patch_state (hot key)",
    "read_state (hot key)",
    "read_state 3 transitions back",
    "record apply (set op)",
    "record replace (new subject)",
    "record read",
    "audit trail page (long history)",
    "transitions page (store-wide audit, 50)",
    "subjects page (50)",
    "search, rare value",
    "search, common value (page of 50)",
    "stats",
)


class Worker:
    def __init__(self, src: str, location: str, records: int, changes: int) -> None:
        env = {**os.environ, "PYTHONPATH": src}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, location, str(records), str(changes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"worker failed to start: {line!r}")

    def ms(self, case: str, iterations: int) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([case, iterations]) + "\n")
        self.proc.stdin.flush()
        return float(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


@contextmanager
def locations(backend: str, url: str | None) -> Iterator[tuple[str, str]]:
    """Two empty stores of ``backend``: this tree's and the baseline's."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/ours.db", f"sqlite:///{tmp}/base.db"
        return
    assert url is not None
    import psycopg

    schemas = [f"bench_ab_{side}_{os.getpid()}" for side in ("ours", "base")]
    with psycopg.connect(url, autocommit=True) as admin:
        for schema in schemas:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in url else "?"
    try:
        yield tuple(f"{url}{sep}options=-csearch_path%3D{s}" for s in schemas)  # type: ignore[misc]
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            for schema in schemas:
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def run(backend: str, args: argparse.Namespace, ours_src: str) -> None:
    with locations(backend, args.postgres) as (ours_at, base_at):
        ours = Worker(ours_src, ours_at, args.records, args.changes)
        base = Worker(args.baseline_src, base_at, args.records, args.changes)
        try:
            ours.ready()
            base.ready()
            for case in [c for c in CASES if not args.cases or any(w in c for w in args.cases)]:
                calls = args.iterations * (10 if case in FAST else 1)
                pair = alternate(
                    lambda _, c=case, k=calls: ours.ms(c, k),  # type: ignore[misc]
                    lambda _, c=case, k=calls: base.ms(c, k),  # type: ignore[misc]
                    args.rounds,
                )
                report(f"  {backend}: {case}", pair, "ms", "")
        finally:
            ours.close()
            base.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-src", required=True, help="the other tree's src directory")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--cases", nargs="*", help="only the cases whose names contain one of these words")
    args = parser.parse_args()
    ours_src = str(Path(__file__).resolve().parent.parent / "src")
    print(
        f"this tree vs {args.baseline_src}: {args.records:,} records, {args.changes} writes to one",
        flush=True,
    )
    if args.backend in ("sqlite", "both"):
        run("sqlite", args, ours_src)
    if args.backend in ("postgres", "both"):
        if not args.postgres:
            print("postgres: skipped (pass --postgres URL or set STATEFLOW_TEST_POSTGRES)")
            return
        run("postgres", args, ours_src)


if __name__ == "__main__":
    main()
