"""What one PostgreSQL write costs, this tree against another: server time, WAL bytes, client CPU.

Wall-clock rounds on a shared machine move by factors of 2–10; what a write costs the server
and the client moves far less. Two worker processes — one importing ``stateflow`` from this
tree, one from ``--baseline-src`` (e.g. the schema-3 release) — each fill a store of their own
(a schema each, as ``bench_ab`` does) and run the same calls, alternating round by round. Per
round and side it takes:

- wall-clock ms per call, and the worker's CPU (``time.process_time``) per call;
- server time per call: the top-level statements' execution and planning time from
  ``pg_stat_statements`` (each side connects as a role of its own, so the two are told apart;
  the server needs ``shared_preload_libraries=pg_stat_statements``, with
  ``pg_stat_statements.track_planning=on`` for planning time — without the extension this
  column is left out);
- server CPU per call: the user and system time of the side's server processes (its role's
  backends, read from ``/proc``, so only with the server on this machine) — everything the
  server does for a call, parsing, binding and committing included, which statement
  statistics leave out;
- WAL bytes per call: the server's WAL position before and after the round. Every writer of the
  cluster moves it, so this is only a write's own WAL on a server nobody else writes to (the
  benchmark's own private server; on a shared one it is an upper bound).

    python3 -m benchmarks.bench_pg_write_cost --baseline-src /path/to/other/src --postgres URL
        [--rounds 10] [--iterations 100] [--records 2000] [--cases WORD ...] [--statements]

``--statements`` (with ``pg_stat_statements.track=all``; it resets the server's statement
statistics before each case) also prints, per side, the statements a call ran — nested ones
inside the write functions and triggers included — with calls, execution and planning time and
WAL bytes per call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from benchmarks.rounds import Pair, alternate, report

WORKER = r"""
import json, sys, time
from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.store import open_store

location, records = sys.argv[1], int(sys.argv[2])
DECL = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}, "n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}

def subject(i):
    return {"target_kind": "agent", "target_name": "bench", "kind": "thread", "key": f"t{i:07d}"}

def record(i):  # as bench_ab writes them
    return {"status": "open", "n": i, "owner": f"owner-{i % 50:02d}", "title": f"thread {i:06d} about the release"}

store = open_store(location, auto_migrate=True)
states = StatesService(store)
states.declare("records", DECL)
for i in range(records):
    states.replace("records", subject(i), record(i))
view = MemoryView(store, Identity.of("bench", "/", "cost"))
view.patch_state({"session": {"tactics": {"next": "start"}, "strategy": {"style": "terse"}}})
n = 0

def step(case):
    global n
    n += 1
    if case == "record apply (set op)":
        states.apply("records", subject(1), [{"op": "set", "path": ["status"], "value": f"s{n}"}])
    elif case == "record replace (new subject)":
        states.replace("records", subject(5_000_000 + n), record(n))
    elif case == "patch_state (hot key)":
        view.patch_state({"session": {"tactics": {"next": f"step {n}"}}})
    else:
        raise SystemExit(f"unknown case {case}")

print("ready", flush=True)
for line in sys.stdin:
    case, iterations = json.loads(line)
    if iterations == 0:  # warm-up, unmeasured
        for _ in range(20):
            step(case)
        print(json.dumps([0, 0]), flush=True)
        continue
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(iterations):
        step(case)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps([wall * 1000 / iterations, cpu * 1000 / iterations]), flush=True)
"""

CASES = ("record apply (set op)", "record replace (new subject)", "patch_state (hot key)")
ROLES = {"ours": "stateflow_cost_ours", "base": "stateflow_cost_base"}


def as_role(url: str, role: str, schema: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    sep = "&" if parts.query else ""
    query = f"{parts.query}{sep}options=-csearch_path%3D{schema}"
    return urlunsplit((parts.scheme, f"{role}@{host}", parts.path, query, ""))


class Side:
    def __init__(self, admin: Any, name: str, src: str, url: str, records: int, stats: bool) -> None:
        self.admin, self.role, self.stats = admin, ROLES[name], stats
        schema = f"bench_cost_{name}_{os.getpid()}"
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.execute(f"DROP ROLE IF EXISTS {self.role}")
        # superuser: the store's migration creates functions and reads the server's settings
        admin.execute(f"CREATE ROLE {self.role} LOGIN SUPERUSER")
        admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {self.role}")
        self.schema = schema
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, as_role(url, self.role, schema), str(records)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": src},
        )
        self.rounds: dict[str, list[tuple[float, float, float, float, float]]] = {}

    def ready(self) -> None:
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("worker failed to start")

    def _call(self, case: str, iterations: int) -> tuple[float, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([case, iterations]) + "\n")
        self.proc.stdin.flush()
        wall, cpu = json.loads(self.proc.stdout.readline())
        return float(wall), float(cpu)

    def _server_ms(self) -> float:
        if not self.stats:
            return 0.0
        row = self.admin.execute(
            "SELECT coalesce(sum(total_exec_time + total_plan_time), 0) FROM pg_stat_statements s "
            "JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = %s AND s.toplevel",
            (self.role,),
        ).fetchone()
        return float(row[0])

    def _backend_cpu_ms(self) -> float:
        pids = self.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE usename = %s", (self.role,)
        ).fetchall()
        ticks = 0
        for (pid,) in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # not on this machine, or gone
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks * 1000 / os.sysconf("SC_CLK_TCK")

    def round(self, case: str, iterations: int) -> None:
        server = self._server_ms()
        backend = self._backend_cpu_ms()
        lsn = self.admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        wall, cpu = self._call(case, iterations)
        wal = self.admin.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn,)).fetchone()[0]
        server = (self._server_ms() - server) / iterations
        backend = (self._backend_cpu_ms() - backend) / iterations
        self.rounds.setdefault(case, []).append((wall, cpu, server, backend, float(wal) / iterations))

    def statements(self, calls: int) -> None:
        rows = self.admin.execute(
            "SELECT s.toplevel, s.calls, s.total_exec_time, s.total_plan_time, s.wal_bytes, "
            "left(regexp_replace(s.query, '\\s+', ' ', 'g'), 100) FROM pg_stat_statements s "
            "JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = %s "
            "ORDER BY s.toplevel DESC, s.total_exec_time DESC",
            (self.role,),
        ).fetchall()
        for top, n, exec_ms, plan_ms, wal, query in rows:
            if n * 20 < calls:
                continue  # rarer than every 20th call (a snapshot now and then)
            print(
                f"    {'top ' if top else '    '}{n / calls:5.2f}/call {exec_ms * 1000 / calls:7.1f} µs "
                f"+ plan {plan_ms * 1000 / calls:6.1f} µs  WAL {float(wal) / calls:6.0f} B  {query}"
            )

    def warm(self, case: str) -> None:
        self._call(case, 0)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        self.admin.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        self.admin.execute(f"DROP ROLE IF EXISTS {self.role}")


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-src", required=True, help="the other tree's src directory")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--cases", nargs="*", help="only the cases whose names contain one of these words")
    parser.add_argument("--statements", action="store_true", help="print each side's statements per call")
    args = parser.parse_args()
    if not args.postgres:
        raise SystemExit("pass --postgres URL or set STATEFLOW_TEST_POSTGRES")
    ours_src = str(Path(__file__).resolve().parent.parent / "src")
    admin = psycopg.connect(args.postgres, autocommit=True)
    stats = (
        admin.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'").fetchone()
        is not None
    )
    print(f"this tree vs {args.baseline_src}: {args.records:,} records; server time: {stats}", flush=True)
    ours = Side(admin, "ours", ours_src, args.postgres, args.records, stats)
    base = Side(admin, "base", args.baseline_src, args.postgres, args.records, stats)
    try:
        ours.ready()
        base.ready()
        for case in [c for c in CASES if not args.cases or any(w in c for w in args.cases)]:
            ours.warm(case)
            base.warm(case)
            if args.statements:
                admin.execute("SELECT pg_stat_statements_reset()")

            def side(s: Side, c: str = case) -> float:
                s.round(c, args.iterations)
                return 0.0

            alternate(lambda _: side(ours), lambda _: side(base), args.rounds)
            for i, (what, unit) in enumerate(
                (
                    ("wall", "ms"),
                    ("client CPU", "ms"),
                    ("server time", "ms"),
                    ("server CPU", "ms"),
                    ("WAL", "B"),
                )
            ):
                if what == "server time" and not stats:
                    continue
                pair = Pair([r[i] for r in ours.rounds[case]], [r[i] for r in base.rounds[case]])
                report(f"  {case}: {what}", pair, unit)
            if args.statements:
                for s in (ours, base):
                    print(f"  {case}, {'this tree' if s is ours else 'baseline'}'s statements:")
                    s.statements(args.rounds * args.iterations)
    finally:
        ours.close()
        base.close()


if __name__ == "__main__":
    main()
