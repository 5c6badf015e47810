"""What one PostgreSQL write costs the server, by kind of write: transactions committed, server
and client CPU, and WAL bytes by record type.

    python3 -m benchmarks.profile_pg_writes [--postgres URL] [--calls 400] [--cases WORD ...]

Each case (a LangGraph saver ``put`` and ``put_writes``, a store ``put``, a states ``apply``, a
memory ``patch_state``, a ``patch_state`` merged by the server as under contention, and the bare
durable commit of ``bench_commit_floor``: one autocommit upsert of a small ``jsonb`` row; and
``bench_langgraph_floor``'s least saver ``put`` and store ``put`` by hand, on its own tables) runs in
a store of its own (a new schema, its connections named by ``application_name``), warmed, then
``--calls`` times. Per call it prints:

- transactions committed (``pg_stat_database.xact_commit`` around the calls, the store closed
  before reading it; reads in transactions of their own count too): a write commits once;
- server CPU: the user and system time of the store's server processes (from ``/proc``, so only
  with the server on this machine): everything the server does for a call — bind, the
  statements, triggers, index upkeep, the commit's flush;
- client CPU (``time.process_time``);
- WAL bytes, and by record type when ``pg_waldump`` can read the server's WAL (the server's
  ``data_directory`` on this machine, readable by this user or through ``runuser -u postgres``).
  The WAL position is the cluster's: on a server others write to, these are upper bounds.

It compares nothing: it says where a write's cost goes, as ``profile_apply`` does for the client.
Run it on a quiet server for WAL bytes that are the writes' own.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

APP = "stateflow_profile_pg_writes"
SCHEMA = "profile_pg_writes"
CASES = (
    "saver put",
    "saver put_writes",
    "store put",
    "states apply",
    "patch_state",
    "patch_state (merged by the server)",
    "bare upsert",
    "saver put by hand",
    "store put by hand",
)
"""The last two: ``bench_langgraph_floor``'s least write by hand that keeps history and audit (one
statement per write, on minimal tables in a schema of its own)."""
HAND_SCHEMA = "profile_pg_writes_hand"


def store_url(url: str, schema: str = SCHEMA) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}application_name={APP}&options=-csearch_path%3D{schema}"


@contextmanager
def case_store(url: str, name: str) -> Iterator[Callable[[int], Any]]:
    """The case's call on a store of its own (the store closed on leaving)."""
    from benchmarks.bench_langgraph_adapters import saver_cases, store_cases
    from benchmarks.bench_states_vs_langgraph import DECL, ops_for, subject
    from stateflow.langgraph import StateflowSaver, StateflowStore
    from stateflow.memory import Identity, MemoryView
    from stateflow.states import StatesService
    from stateflow.store import open_store

    if name == "bare upsert":
        with psycopg.connect(store_url(url), autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS bare (k integer PRIMARY KEY, v jsonb NOT NULL)")
            upsert = "INSERT INTO bare VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
            yield lambda i: conn.execute(upsert, (i % 200, f'{{"count": {i}}}'))
        return
    if name.endswith("by hand"):
        from benchmarks.bench_langgraph_adapters import KEYS
        from benchmarks.bench_langgraph_floor import PostgresHand, _Hand

        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {HAND_SCHEMA} CASCADE")
            admin.execute(f"CREATE SCHEMA {HAND_SCHEMA}")
            try:
                with psycopg.connect(store_url(url, HAND_SCHEMA), autocommit=True) as conn:
                    hand = PostgresHand(conn)
                    if name.startswith("saver"):
                        yield saver_cases(_Hand(hand), "h")["saver put"]  # type: ignore[arg-type]
                    else:
                        yield lambda i: hand.store_put(
                            ("bench", "h", f"ns{i % 4}"),
                            f"k{i % KEYS}",
                            {"n": i, "text": "remember this", "tags": ["a", "b"]},
                        )
            finally:
                admin.execute(f"DROP SCHEMA IF EXISTS {HAND_SCHEMA} CASCADE")
        return
    store = open_store(store_url(url))
    service = StatesService(store)
    try:
        if name.startswith("patch_state"):
            if "server" in name:
                store.contended = lambda keys: True  # type: ignore[method-assign]
            view = MemoryView(store, Identity.of("bench", "/bench", "profile"))
            yield lambda i: view.patch_state({"session": {"tactics": {"next": f"step {i}"}}})
            return
        service.declare("bench", DECL)
        if name == "states apply":
            yield lambda i: service.apply("bench", subject(i), ops_for(i))
            return
        cases = {**saver_cases(StateflowSaver(service), "p"), **store_cases(StateflowStore(service), "p")}
        if name == "saver put_writes":
            for i in range(20):  # checkpoints to write to
                cases["saver put"](i)
        yield cases[name]
    finally:
        store.close()


def commits(admin: psycopg.Connection[Any], wait: float) -> int:
    """The database's committed transactions, once the store's backends reported theirs: a
    backend reports when its session ends, else when idle, at most once a second and, when it
    reported less than a second before, 10 s later."""
    time.sleep(wait)
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def server_cpu(pids: list[int]) -> float:
    """Seconds of CPU the given server processes used so far (those that still run)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def backends(admin: psycopg.Connection[Any]) -> list[int]:
    rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (APP,)).fetchall()
    return [int(r[0]) for r in rows]


def lsn(admin: psycopg.Connection[Any]) -> str:
    row = admin.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def wal_bytes(admin: psycopg.Connection[Any], start: str, end: str) -> int:
    row = admin.execute("SELECT %s::pg_lsn - %s::pg_lsn", (end, start)).fetchone()
    assert row is not None
    return int(row[0])


def wal_records(admin: psycopg.Connection[Any], start: str, end: str) -> list[tuple[str, int, int]] | None:
    """(record type, count, bytes) between two WAL positions, by ``pg_waldump --stats=record``;
    None where it cannot run here."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_waldump"))
    tool = shutil.which("pg_waldump") or (found[-1] if found else None)
    row = admin.execute("SHOW data_directory").fetchone()
    if tool is None or row is None:
        return None
    command = [tool, "-p", os.path.join(str(row[0]), "pg_wal"), "-s", start, "-e", end, "--stats=record"]
    if os.geteuid() == 0 and shutil.which("runuser"):
        command = ["runuser", "-u", "postgres", "--", *command]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    records = []
    for line in out.splitlines():
        # "Heap/INSERT   379 ( 19.43)   190586 ( 49.90)   0 ( 0.00)   190586 ( 49.90)": the type,
        # then count, record size, full-page images and combined size, each with its share
        parts = re.sub(r"\([^)]*\)", " ", line).split()
        if len(parts) == 5 and "/" in parts[0] and all(p.isdigit() for p in parts[1:]):
            records.append((parts[0], int(parts[1]), int(parts[4])))
    return records


def profile(admin: psycopg.Connection[Any], url: str, name: str, calls: int, warm: int) -> None:
    with case_store(url, name) as call:
        for i in range(warm):
            call(i)
        before = commits(admin, 11.0)
        pids = backends(admin)
        start, cpu, server = lsn(admin), time.process_time(), server_cpu(pids)
        for i in range(warm, warm + calls):
            call(i)
        cpu, server = time.process_time() - cpu, server_cpu(pids) - server
        end = lsn(admin)
    committed = commits(admin, 1.5) - before
    wal = wal_bytes(admin, start, end)
    print(
        f"== {name}: {committed / calls:.2f} commits, server CPU {server * 1000 / calls:.3f} ms, "
        f"client CPU {cpu * 1000 / calls:.3f} ms, WAL {wal / calls:,.0f} B per call ({calls} calls)"
    )
    records = wal_records(admin, start, end)
    if records is None:
        print("   (pg_waldump cannot read this server's WAL here: no records by type)")
        return
    for kind, count, size in sorted(records, key=lambda r: -r[2]):
        if size / calls >= 10:
            print(f"   {kind:28} {count / calls:5.2f} per call {size / calls:8,.0f} B")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--cases", nargs="*", help="only the cases whose names contain one of these words")
    args = parser.parse_args()
    if not args.postgres:
        parser.error("give --postgres URL or set STATEFLOW_TEST_POSTGRES")
    from stateflow.store import open_store

    with psycopg.connect(args.postgres, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        admin.execute(f"CREATE SCHEMA {SCHEMA}")
        open_store(store_url(args.postgres), auto_migrate=True).close()
        try:
            for name in CASES:
                if not args.cases or any(word in name for word in args.cases):
                    profile(admin, args.postgres, name, args.calls, args.warm)
        finally:
            admin.execute(f"DROP SCHEMA {SCHEMA} CASCADE")


if __name__ == "__main__":
    main()
