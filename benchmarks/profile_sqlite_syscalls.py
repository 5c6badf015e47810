"""System calls per SQLite write, by kind and by file: ours against LangGraph's, the same rows
written by hand and the least durable commit (issue 16's system-time half).

Each side runs in a process of its own under ``strace -f``: its writes are warmed up (every
key written once, as ``bench_langgraph_floor`` does), then ``--ops`` writes are made between two
markers (a ``stat`` of a path that does not exist), and only the calls between the markers are
counted. Counts are deterministic under load, unlike times; they are printed per write, by
call and by the file it went to (the database, its ``-wal``, its ``-shm``, our ``-writer``
queue), with each side's ratio to LangGraph's and to the hand's. ``frames`` is the WAL frames a
write wrote (SQLite writes a frame as two ``pwrite64``: its header and its page); ``db pages``
the pages checkpoints copied into the database file (a ``pwrite64`` each, after a ``pread64``
of the frame); ``faults`` the minor page faults a write cost the process (``getrusage``: kernel
time that no call shows).

Sides, each on a file of its own, WAL and ``synchronous=FULL`` everywhere:

- ``stateflow``: ``StateflowSaver`` / ``StateflowStore`` / a declared state's ``apply`` / a
  three-scope ``patch_state`` on ``open_store``'s SQLite store.
- ``langgraph``: ``SqliteSaver`` / ``SqliteStore``.
- ``by hand``: ``bench_langgraph_floor.SqliteHand`` — the same rows as ours (transition,
  document, members, change), one statement each, in ``BEGIN IMMEDIATE`` … ``COMMIT``.
- ``one row``: ``BEGIN IMMEDIATE``, one small row inserted, ``COMMIT``: what any durable
  SQLite commit costs at least.

Cases: ``saver put`` (a new checkpoint, four threads in turn), ``saver put_writes`` (two
writes of a new task onto the checkpoints of 200 puts), ``store put`` (an item rewritten),
``apply`` (``bench_commit_floor``'s three-op batch on 200 records), ``patch_state``
(``bench_memory``'s three scopes). LangGraph and the hand have no ``apply`` or ``patch_state``.

``--autocheckpoint N`` sets ``PRAGMA wal_autocheckpoint`` on every side's connections (default:
each side's own), to see what the checkpoint policy costs per write over a long run.

    python3 -m benchmarks.profile_sqlite_syscalls [--cases "saver put" ...] [--sides ...]
        [--ops 1000] [--autocheckpoint N]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import resource
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks import strace

MODULE = "benchmarks.profile_sqlite_syscalls"
CASES = ("saver put", "saver put_writes", "store put", "apply", "patch_state")
SIDES = ("stateflow", "langgraph", "by hand", "one row")
_ADAPTER_CASES = ("saver put", "saver put_writes", "store put")
BEGIN, END = "/profile-sqlite-syscalls-begin", "/profile-sqlite-syscalls-end"
"""paths the worker ``stat``s around its counted writes (they do not exist)"""
WARM = 300
"""writes before the counted ones (every store key, record and scope written at least once)"""

Write = Callable[[int], object]


def _wal_full(conn: sqlite3.Connection, autocheckpoint: int | None) -> sqlite3.Connection:
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    if autocheckpoint is not None:
        conn.execute(f"PRAGMA wal_autocheckpoint = {autocheckpoint}")
    return conn


def _stateflow(case: str, tmp: Path, autocheckpoint: int | None) -> Write:
    from benchmarks.bench_langgraph_adapters import saver_cases, store_cases
    from stateflow.states import StatesService
    from stateflow.store import open_store
    from stateflow.store.sqlite import SqliteStore

    store = open_store(f"sqlite:///{tmp}/stateflow.db?synchronous=full")
    if autocheckpoint is not None:  # (on the writer connection: the one that commits)
        assert isinstance(store, SqliteStore)
        store._writer().execute(f"PRAGMA wal_autocheckpoint = {autocheckpoint}")
    service = StatesService(store)
    if case in ("saver put", "saver put_writes"):
        from stateflow.langgraph import StateflowSaver

        return _saver(saver_cases(StateflowSaver(service), "s"), case)
    if case == "store put":
        from stateflow.langgraph import StateflowStore

        return store_cases(StateflowStore(service), "s")["store put"]
    if case == "apply":
        from benchmarks.bench_states_vs_langgraph import DECL, ops_for, subject

        service.declare("bench", DECL)
        return lambda i: service.apply("bench", subject(i), ops_for(i))
    from stateflow.memory import Identity, MemoryView

    view = MemoryView(service.store, Identity.of("bench", str(tmp), "s"))
    return lambda i: view.patch_state(
        {
            "global": {"strategy": {"style": f"v{i}"}},
            "cwd": {"tactics": {"build": f"ok {i}"}},
            "session": {"tactics": {"next": f"step {i}"}, "intents": {"ship": {"goal": f"release {i}"}}},
        }
    )


def _saver(cases: dict[str, Write], case: str) -> Write:
    """``case`` of the saver's cases; ``put_writes`` onto the checkpoints of 200 puts."""
    if case == "saver put_writes":
        for i in range(200):
            cases["saver put"](i)
    return cases[case]


def _langgraph(case: str, tmp: Path, autocheckpoint: int | None) -> Write:
    from benchmarks.bench_langgraph_adapters import saver_cases, store_cases

    if case == "store put":
        from langgraph.store.sqlite import SqliteStore

        conn = sqlite3.connect(tmp / "lg-store.db", isolation_level=None, check_same_thread=False)
        store = SqliteStore(_wal_full(conn, autocheckpoint))
        store.setup()
        return store_cases(store, "l")["store put"]
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(tmp / "lg-saver.db", check_same_thread=False)
    conn.execute("PRAGMA synchronous = FULL")  # (its setup switches to WAL)
    if autocheckpoint is not None:
        conn.execute(f"PRAGMA wal_autocheckpoint = {autocheckpoint}")
    saver = SqliteSaver(conn)
    saver.setup()
    return _saver(saver_cases(saver, "l"), case)


def _by_hand(case: str, tmp: Path, autocheckpoint: int | None) -> Write:
    from benchmarks.bench_langgraph_adapters import KEYS, saver_cases
    from benchmarks.bench_langgraph_floor import SqliteHand, _Hand

    conn = sqlite3.connect(tmp / "hand.db", isolation_level=None, check_same_thread=False)
    hand = SqliteHand(_wal_full(conn, autocheckpoint))
    if case == "store put":
        return lambda i: hand.store_put(
            ("bench", "h", f"ns{i % 4}"),
            f"k{i % KEYS}",
            {"n": i, "text": "remember this", "tags": ["a", "b"]},
        )
    return _saver(saver_cases(_Hand(hand), "h"), case)  # type: ignore[arg-type]


def _one_row(case: str, tmp: Path, autocheckpoint: int | None) -> Write:
    conn = _wal_full(sqlite3.connect(tmp / "one-row.db", isolation_level=None), autocheckpoint)
    conn.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, body BLOB NOT NULL)")

    def write(i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO log (at, body) VALUES (?, ?)", (i, b'{"n": %d}' % i))
        conn.execute("COMMIT")

    return write


MAKERS: dict[str, Callable[[str, Path, int | None], Write]] = {
    "stateflow": _stateflow,
    "langgraph": _langgraph,
    "by hand": _by_hand,
    "one row": _one_row,
}


def _work(side: str, case: str, ops: int, autocheckpoint: int | None, faults_to: str, warm: int) -> None:
    """The traced process: ``warm`` writes, then ``ops`` between the markers."""
    with tempfile.TemporaryDirectory() as tmp:
        write = MAKERS[side](case, Path(tmp), autocheckpoint)
        for i in range(warm):
            write(i)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        _mark(BEGIN)
        for i in range(1000, 1000 + ops):
            write(i)
        _mark(END)
        Path(faults_to).write_text(str(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))


def _mark(path: str) -> None:
    with contextlib.suppress(OSError):
        os.stat(path)


_CALL = re.compile(r"^(\d+) +(?:<\.\.\. )?([a-z_0-9]+)[( ]")
_FD = re.compile(r"^\d+ +[a-z_0-9]+\((\d+)[,)]")
_OPENED = re.compile(r'^\d+ +openat\([^,]+, "([^"]+)".*\) = (\d+)$')
_CLOSED = re.compile(r"^\d+ +close\((\d+)\)")


def _file_kind(path: str) -> str:
    for end, kind in (("-wal", "wal"), ("-shm", "shm"), ("-writer", "queue"), ("-journal", "journal")):
        if path.endswith(end):
            return kind
    return "db" if path.endswith(".db") else "other"


def counted(trace: str) -> collections.Counter[str]:
    """Calls between the markers of an ``strace -f`` output, as ``call`` and ``call file``
    (the kind of file its descriptor was opened on), and ``frames``/``db pages`` written."""
    kinds: dict[str, str] = {}
    calls: collections.Counter[str] = collections.Counter()
    inside = False
    for line in trace.splitlines():
        if BEGIN in line:
            inside = True
            continue
        if END in line:
            break
        opened = _OPENED.match(line)
        if opened:
            kinds[opened.group(2)] = _file_kind(opened.group(1))
        closed = _CLOSED.match(line)
        if closed:
            kinds.pop(closed.group(1), None)
        if not inside or "resumed>" in line:
            continue
        call = _CALL.match(line)
        if call is None:
            continue
        name = call.group(2)
        fd = _FD.match(line)
        kind = kinds.get(fd.group(1), "other") if fd else ""
        calls[name] += 1
        if kind:
            calls[f"{name} {kind}"] += 1
        if name == "pwrite64" and kind == "wal" and ", 4096, " in line:
            calls["frames"] += 1
        if name == "pwrite64" and kind == "db":
            calls["db pages"] += 1
    return calls


def trace(
    side: str, case: str, ops: int, autocheckpoint: int | None, warm: int = WARM
) -> collections.Counter[str]:
    """Calls of ``ops`` writes of ``side``'s ``case`` after ``warm`` (``counted``), with ``faults``."""
    with tempfile.TemporaryDirectory() as tmp:
        faults = Path(tmp) / "faults"
        check = "" if autocheckpoint is None else str(autocheckpoint)
        work = ["--work", side, case, str(ops), check, str(faults), str(warm)]
        calls = counted(strace.traced(MODULE, work))
        calls["faults"] = int(faults.read_text())
    return calls


ROWS = (
    "pwrite64",
    "frames",
    "db pages",
    "fcntl",
    "fcntl shm",
    "fcntl queue",
    "fcntl db",
    "pread64",
    "fdatasync",
    "fsync",
    "all calls",
    "faults",
)


def _per_write(calls: collections.Counter[str], ops: int) -> dict[str, float]:
    every = sum(n for name, n in calls.items() if " " not in name and name not in ("frames", "faults"))
    row = {name: calls[name] / ops for name in ROWS}
    row["all calls"] = every / ops
    others = {name: n / ops for name, n in calls.items() if " " not in name and name not in ROWS}
    row.update({f"({name})": n for name, n in others.items() if n >= 0.005})
    return row


def _ratio(mine: float, theirs: float | None) -> str:
    if theirs is None:
        return ""
    if theirs == 0:
        return "   —  " if mine == 0 else "   ∞  "
    return f"{mine / theirs:5.2f}×"


def main() -> None:
    if len(sys.argv) == 8 and sys.argv[1] == "--work":
        autocheckpoint = int(sys.argv[5]) if sys.argv[5] else None
        _work(sys.argv[2], sys.argv[3], int(sys.argv[4]), autocheckpoint, sys.argv[6], int(sys.argv[7]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES, metavar="CASE")
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES, metavar="SIDE")
    parser.add_argument("--ops", type=int, default=1000, help="writes counted")
    parser.add_argument("--autocheckpoint", type=int, help="PRAGMA wal_autocheckpoint on every side")
    args = parser.parse_args()
    for case in args.cases:
        sides = [s for s in args.sides if s in ("stateflow", "one row") or case in _ADAPTER_CASES]
        rows = {
            side: _per_write(trace(side, case, args.ops, args.autocheckpoint), args.ops) for side in sides
        }
        names = list(dict.fromkeys(name for row in rows.values() for name in row))
        print(f"\n{case} ({args.ops} writes; per write; ratio to langgraph / by hand)")
        print(f"  {'':14s}" + "".join(f"{side:>24s}" for side in sides))
        for name in names:
            line = f"  {name:14s}"
            for side in sides:
                n = rows[side].get(name, 0.0)
                lg = rows["langgraph"].get(name, 0.0) if "langgraph" in rows and side != "langgraph" else None
                hand = rows["by hand"].get(name, 0.0) if "by hand" in rows and side == "stateflow" else None
                extra = " ".join(r for r in (_ratio(n, lg), _ratio(n, hand)) if r)
                line += f"{n:9.2f} {extra:>14s}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
