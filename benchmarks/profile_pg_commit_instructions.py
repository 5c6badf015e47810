"""The server's instructions per commit statement, by kind of write, counted by callgrind.

    python3 -m benchmarks.profile_pg_commit_instructions [--calls 240] [--cases WORD ...] [--setup FILE] [--fresh]

Wall clock and CPU time on a shared machine move with its load; instructions do not. For each
case of ``profile_pg_writes`` (a LangGraph saver ``put``, ``put_writes``, a store ``put``, a
states ``apply``, a ``patch_state`` committed alone and one merged by the server as under contention), on a private PostgreSQL cluster of its own (same binaries, started here in a
temporary directory, stopped after):

1. a store of its own is migrated by this tree and warmed;
2. the database is dumped, and the next ``--calls`` calls run while every commit statement the
   store sends (``stateflow_commit`` and its parameters, or a fast statement of
   ``store.pg_fast`` and its parameters — the statement prepared in the replay as the store
   prepares it, on a session planning with ``enable_seqscan`` off as the kept connection does;
   a commit creating rows, the pair of statements as one line: one transaction, as its Sync)
   is recorded;
3. the dump is restored into a fresh database (analyzed, as autovacuum leaves a live one; with
   ``--fresh`` not, as a new store is before autovacuum's first analyze: a plan the session makes
   then is kept as its tables grow), and the recorded statements are replayed there
   (prepared once, then executed, as the store sends them) by a single-user backend
   (``postgres --single``: each statement its own transaction) under
   ``valgrind --tool=callgrind``, twice — the first third of them, then all; the difference per
   call is printed, so the backend's start and the first calls' planning are not counted.

It compares nothing by itself: run it with each tree's ``src`` on ``PYTHONPATH`` (the store
migrates the schema its tree has) and compare the numbers. ``--setup FILE`` runs an SQL file in
the restored database before the replay (a variant of a server function, counted on the same
statements); a replay in which a statement failed is refused, not counted.

Every parameter is replayed as a literal, which the backend's SQL scanner reads and then
evaluates — work a client's bind does not do. The binary ``bytea[]`` parameters of schema 29 (the
bodies and edits a commit writes) become ``ARRAY['\\x…'::bytea, …]`` literals, twice their bytes
in hex: a tree that sends them is charged tens of thousands of instructions per statement that
the live server, which copies them, does not spend. Compare such trees by the statement's
execution (``--keep``, then ``ExecuteQuery``'s inclusive count less its parameters' evaluation,
plus the payload's ``json_in``), as the journal's section on schema 29 does.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import struct
import subprocess
import tempfile
from typing import Any

import psycopg

from benchmarks.profile_pg_writes import SCHEMA, case_store, store_url

CASES = (
    "saver put",
    "saver put_writes",
    "store put",
    "states apply",
    "patch_state",
    "patch_state merged by the server",
    "saver put by hand",
    "store put by hand",
)
"""``patch_state merged by the server``'s statement is the server merge (``stateflow_patch_commit``,
as under contention); the one before commits a patch computed by the client (as a lone writer
does). The two ``by hand`` cases replay ``bench_langgraph_floor``'s least write by hand (one
statement a write on minimal tables) for the same writes: the floor the commit statements of
``saver put`` and ``store put`` compare with."""
PORT = 55491


def _bin() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not found:
        raise SystemExit("no PostgreSQL server binaries found")
    return os.path.dirname(found[-1])


def _as_pg(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run(prefix + args, check=True, **kwargs)


def _literal(value: Any) -> str:
    # a binary bytea[] (schema 29: the bytes a commit writes), by name: an older tree has none
    if type(value).__name__ == "_ByteaArray":
        return _literal(_elements(value)) + "::bytea[]"
    if type(value) is list:
        return (
            "ARRAY[" + ", ".join(_literal(v) + ("::bytea" if type(v) is bytes else "") for v in value) + "]"
        )
    if value is None:
        return "NULL"
    if type(value) is int:
        return str(value)
    if type(value) is bytes:
        return "'\\x" + value.hex() + "'"
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError("a parameter with a line break cannot be replayed line by line")
    return "'" + text.replace("'", "''") + "'"


def _wire_literal(value: bytes | None, fmt: int) -> str:
    """A fast statement's parameter as sent (text, or binary ``bytea``) as a literal."""
    if value is None:
        return "NULL"
    if fmt:
        return "'\\x" + value.hex() + "'"
    return _literal(value.decode())


def _elements(data: bytes) -> list[bytes | None]:
    """A one-dimensional binary ``bytea[]``'s elements."""
    (n,) = struct.unpack_from("!i", data, 12)
    out: list[bytes | None] = []
    at = 20
    for _ in range(n):
        (size,) = struct.unpack_from("!i", data, at)
        at += 4
        out.append(None if size < 0 else data[at : at + size])
        at += max(size, 0)
    return out


def capture(url: str, name: str, warm: int, calls: int, dump: str, port: int) -> list[str]:
    """The commit statements of ``calls`` calls of the case, after ``warm`` calls and a dump."""
    import stateflow.store.postgres as pg

    executed: list[str] = []
    real = pg._commit_alone
    served = "server" in name
    execute = psycopg.Connection.execute

    fast: dict[str, str] = {}  # the fast statements seen: name → text

    def recording(conn: Any, params: Any) -> Any:
        if type(params).__name__ == "FastCommit":  # (a tree with fast statements: ``pg_fast``)
            import stateflow.store.pg_fast as pg_fast

            if hasattr(pg_fast, "statements"):  # (an older tree: a statement's tuple, two where it made rows)
                sent = getattr(pg_fast, "statements")(params.shape)  # noqa: B009
                split = getattr(params, "split", 0) or len(params.values)
                parts = [params.values[:split], params.values[split:]]
            else:
                sent, parts = (pg_fast.statement(params.shape),), [params.values]
            # two statements on one line: one implicit transaction, as the pipeline's one Sync
            calls = []
            for (name, sql, formats), values in zip(sent, parts, strict=False):
                fast[name.decode()] = sql.decode()
                literals = [_wire_literal(v, f) for v, f in zip(values, formats, strict=True)]
                calls.append(f"EXECUTE {name.decode()}({', '.join(literals)})")
            executed.append("; ".join(calls))
        else:
            executed.append(f"EXECUTE {'p' if served else 'c'}({', '.join(_literal(v) for v in params)})")
        return real(conn, params)

    def recording_merge(conn: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if query == pg._PATCH_COMMIT:
            executed.append(f"EXECUTE p({', '.join(_literal(v) for v in params)})")
        return execute(conn, query, params, **kwargs)

    with case_store(url, name) as call:
        for i in range(warm):
            call(i)
        _dump(url, dump, port)
        pg._commit_alone = recording
        if served:
            psycopg.Connection.execute = recording_merge  # type: ignore[method-assign,assignment]
        try:
            for i in range(warm, warm + calls):
                call(i)
        finally:
            pg._commit_alone = real
            psycopg.Connection.execute = execute  # type: ignore[method-assign]
    # the fast statements prepared first, planning as the connection sending them does
    head = ["SET enable_seqscan = off", *(f"PREPARE {name} AS {sql}" for name, sql in fast.items())]
    return (head if fast else []) + executed


def _dump(url: str, dump: str, port: int) -> None:
    """The warmed database of ``url`` into ``dump`` (``pg_dump``'s custom format), for the replay."""
    dbname = url.rsplit("/", 1)[1].split("?")[0]
    _as_pg(
        [f"{_bin()}/pg_dump", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-Fc", "-f", dump, dbname]
    )


def _named(sql: str) -> tuple[str, list[str]]:
    """psycopg's ``%(name)s`` placeholders as ``$n`` (one number per name) and the names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return re.sub(r"%\((\w+)\)s", number, sql), names


def _hand_prepare() -> str:
    from benchmarks.bench_langgraph_floor import _PG_NEW, _PG_REWRITE
    from benchmarks.profile_pg_writes import HAND_SCHEMA

    return (
        f"SET search_path = {HAND_SCHEMA}\nPREPARE hn AS {_named(_PG_NEW)[0]}\n"
        f"PREPARE hr AS {_named(_PG_REWRITE)[0]}"
    )


def capture_hand(url: str, name: str, warm: int, calls: int, dump: str, port: int) -> list[str]:
    """``capture`` for a ``by hand`` case: the hand's statements (``PREPARE``d by ``_hand_prepare``)."""
    from benchmarks.bench_langgraph_floor import _PG_NEW, _PG_REWRITE

    recorded: list[str] = []
    execute = psycopg.Connection.execute

    def recording(conn: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        for prepared, sql in (("hn", _PG_NEW), ("hr", _PG_REWRITE)):
            if query == sql:
                values = [params[n] for n in _named(sql)[1]]
                recorded.append(f"EXECUTE {prepared}({', '.join(_literal(v) for v in values)})")
        return execute(conn, query, params, **kwargs)

    with case_store(url, name) as call:
        for i in range(warm):
            call(i)
        _dump(url, dump, port)
        psycopg.Connection.execute = recording  # type: ignore[method-assign,assignment]
        try:
            for i in range(warm, warm + calls):
                call(i)
        finally:
            psycopg.Connection.execute = execute  # type: ignore[method-assign]
    return recorded


def instructions(data: str, db: str, prepare: str, statements: list[str], out: str) -> int:
    with open(f"{out}.sql", "w") as f:
        f.write(prepare + "\n")
        for s in statements:
            f.write(s + "\n")
    os.chmod(f"{out}.sql", 0o644)
    with open(f"{out}.sql") as stdin:
        done = _as_pg(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}.cg",
                f"{_bin()}/postgres",
                "--single",
                "-D",
                data,
                "-c",
                f"search_path={SCHEMA}",
                db,
            ],
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    # a statement that failed did less work than the one counted: a count of nothing
    failed = [line for line in done.stderr.decode(errors="replace").splitlines() if "ERROR:" in line]
    if failed:
        raise RuntimeError(f"{len(failed)} replayed statements failed, the first: {failed[0]}")
    with open(f"{out}.cg") as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("no totals in the callgrind output")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--calls", type=int, default=240)
    parser.add_argument("--warm", type=int, default=30)
    parser.add_argument("--cases", nargs="*", help="only the cases whose names contain one of these words")
    parser.add_argument("--port", type=int, default=PORT, help="the private cluster's port")
    parser.add_argument(
        "--keep", help="copy callgrind's outputs and the replayed statements into this directory"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="replay into a database not analyzed (as a new store before autovacuum's first analyze)",
    )
    parser.add_argument(
        "--setup",
        help="an SQL file run in each replay database before the replay (a variant of a function to count)",
    )
    args = parser.parse_args()
    from stateflow.store import open_store
    from stateflow.store.postgres import _COMMIT_RAW, _PATCH_COMMIT

    root = tempfile.mkdtemp(prefix="sf-pg-instr-")
    os.chmod(root, 0o777)
    data = f"{root}/data"
    bindir = _bin()
    _as_pg(
        [f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"],
        stdout=subprocess.DEVNULL,
    )
    _as_pg(
        [
            f"{bindir}/pg_ctl",
            "-D",
            data,
            "-l",
            f"{root}/server.log",
            "-w",
            "-o",
            f"-h 127.0.0.1 -p {args.port} -k {root}",
            "start",
        ],
        stdout=subprocess.DEVNULL,
    )
    base = f"postgresql://postgres@127.0.0.1:{args.port}"
    merge = _PATCH_COMMIT.split("%s")
    prepare = (
        "PREPARE c AS "
        + re.sub(r"\s+", " ", _COMMIT_RAW)
        + "\nPREPARE p AS "
        + merge[0]
        + "".join(f"${n}{part}" for n, part in enumerate(merge[1:], 1))
    )
    replays: list[tuple[str, str, list[str], str]] = []
    try:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            for n, name in enumerate(CASES):
                if args.cases and not any(word in name for word in args.cases):
                    continue
                db, replay = f"case{n}", f"replay{n}"
                admin.execute(f"CREATE DATABASE {db}")
                with psycopg.connect(f"{base}/{db}", autocommit=True) as conn:
                    conn.execute(f"CREATE SCHEMA {SCHEMA}")
                dump = f"{root}/{db}.dump"
                hand = name.endswith("by hand")
                if not hand:
                    open_store(store_url(f"{base}/{db}"), auto_migrate=True).close()
                statements = (capture_hand if hand else capture)(
                    f"{base}/{db}", name, args.warm, args.calls, dump, args.port
                )
                admin.execute(f"CREATE DATABASE {replay}")
                _as_pg(
                    [
                        f"{bindir}/pg_restore",
                        "-h",
                        "127.0.0.1",
                        "-p",
                        str(args.port),
                        "-U",
                        "postgres",
                        "-d",
                        replay,
                        dump,
                    ]
                )
                with psycopg.connect(f"{base}/{replay}", autocommit=True) as conn:
                    if not args.fresh:
                        conn.execute("ANALYZE")  # as autovacuum leaves a live store: plans by its statistics
                    if args.setup:
                        conn.execute(f"SET search_path = {SCHEMA}")
                        with open(args.setup) as f:
                            conn.execute(f.read().encode())
                replays.append((name, replay, statements, _hand_prepare() if hand else prepare))
    finally:
        _as_pg([f"{bindir}/pg_ctl", "-D", data, "-w", "-m", "fast", "stop"], stdout=subprocess.DEVNULL)
    try:
        for name, replay, statements, prepared in replays:
            # (a fast statement's PREPARE lines go with the prepared statements, not the calls)
            head = [s for s in statements if not s.startswith("EXECUTE")]
            calls = statements[len(head) :]
            # plpgsql loaded before the counted calls: a replay whose first third calls no PL/pgSQL
            # function loaded it in the rest (~2.8 M instructions once, not a call's work)
            prepared = "\n".join(["LOAD 'plpgsql'", prepared, *head])
            first = len(calls) // 3
            # each run replays into the restored database as it was: copied afresh per run
            counts = []
            for k in (first, len(calls)):
                copy = f"{root}/data_{k}"
                _as_pg(["cp", "-a", data, copy])
                counts.append(instructions(copy, replay, prepared, calls[:k], f"{root}/{replay}_{k}"))
                _as_pg(["rm", "-rf", copy])
            per = (counts[1] - counts[0]) / (len(calls) - first)
            fast = sum(1 for c in calls[first:] if c.startswith("EXECUTE stateflow_fast_"))
            print(
                f"== {name}: {per:,.0f} server instructions per commit statement ({len(calls) - first} calls, "
                f"{fast} of them fast statements)"
            )
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                for k in (first, len(calls)):
                    shutil.copy(f"{root}/{replay}_{k}.cg", f"{args.keep}/{replay}_{k}.cg")
                    shutil.copy(f"{root}/{replay}_{k}.sql", f"{args.keep}/{replay}_{k}.sql")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
