"""``stateflow serve`` against a minimal FastAPI app doing the same SQLite write by hand.

Both servers run as their users run them (``stateflow serve``; ``uvicorn`` on the app in
``benchmarks/http_baseline.py``), single process, on loopback, SQLite in WAL mode at
``synchronous=FULL``. Clients are separate processes with keep-alive connections, each writing
its own records: ``PUT`` of a small record (stateflow: a declared state's record replace —
schema validation, revision, history, audit; the baseline: one upsert), then ``GET`` of it.
With 1 and with 8 clients, in alternating rounds; per round the throughput of all clients
together, the median, mean and p99 latency, and the CPU time the server process spent per request
(read from /proc: on a machine shared with other work, the wall-clock figures measure the
scheduler as much as the server; CPU per request is what the server itself costs), split into
the event loop's thread — the HTTP layer — and the worker threads — the call behind it. Then
the writes again against the floor for our contract: the same minimal app doing the least
durable, versioned and audited write by hand (schema check, audit row, head revision, change
row; ``PUT /floor/records/…``). ``--fair`` instead: that floor with the writers served in
arrival order and a group commit by hand (``PUT /fair/records/…``) against the minimal app's
upsert, then ours against it — whether a fair order can reach the minimal app's p50 at all.
``--baseline-src DIR`` instead: this tree's ``stateflow serve`` against another tree's (``DIR``,
its ``src/``), writes and reads at 1 and 8 clients — a change measured against the tree before it;
with ``--store-url URL`` both on that PostgreSQL database, each in a schema of its own (made and
dropped here), and with ``--as-if-quiet`` both servers' edges told the machine has CPU to spare
(where a lone record call may run on the loop's thread however loaded this machine is).

    python3 -m benchmarks.bench_http [--rounds 5] [--requests 400]
        [--floor-only | --fair | --baseline-src DIR [--store-url URL] [--as-if-quiet]]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import http.client
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from benchmarks.rounds import Pair, alternate, report

TOKEN = "bench-http-token"
DECLARATION = {
    "schema": {
        "type": "object",
        "properties": {"count": {"type": "integer"}, "text": {"type": "string"}},
    },
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
CLI = "import sys; from stateflow.cli.main import main; sys.argv[0] = 'stateflow'; sys.exit(main())"
QUIET = (
    "import math; from stateflow import aio; "
    "aio.SAMPLE_SECONDS = 0.0; aio.CONTENDED_SHARE = math.inf; aio.LONG_SECONDS = math.inf; "
)
"""Put before :data:`CLI` (``--as-if-quiet``): the served edge takes the machine to have CPU to
spare at every call, and no call to have held its loop long (``stateflow.aio.EdgeCalls``)."""


def _die_with_parent() -> None:
    # A server must not outlive the benchmark, even when it is killed.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time a process (or one of its threads) has used so far."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def server(argv: list[str], port: int, env: dict[str, str]) -> Iterator[int]:
    proc = subprocess.Popen(argv, env=env, preexec_fn=_die_with_parent, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server {argv} did not start") from None
                time.sleep(0.1)
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class Side:
    """One server: how to address a client's record ``i``."""

    def __init__(self, port: int, pid: int, prefix: str) -> None:
        self.port = port
        self.pid = pid
        self.prefix = prefix

    def path(self, client: int, i: int) -> str:
        return f"{self.prefix}c{client}-{i % 25}"


def client_run(args: tuple[int, str, str, int, int]) -> tuple[float, float, list[float]]:
    """One client: ``count`` requests on one keep-alive connection; (start, end, latencies)."""
    port, prefix, method, client, count = args
    side = Side(port, 0, prefix)
    conn = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    latencies = []
    start = time.perf_counter()
    for i in range(count):
        body = orjson.dumps({"count": i, "text": f"client {client} write {i}"}) if method == "PUT" else None
        t = time.perf_counter()
        conn.request(method, side.path(client, i), body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        latencies.append(time.perf_counter() - t)
        if response.status != 200:
            raise RuntimeError(f"{method} {side.path(client, i)}: {response.status} {data[:200]!r}")
    end = time.perf_counter()
    conn.close()
    return start, end, latencies


def load(
    pool: multiprocessing.pool.Pool, side: Side, method: str, clients: int, requests: int
) -> tuple[float, float, float, float, float, float]:
    """All clients at once: (requests per second, median latency in ms, server CPU ms per
    request, of which on the event loop's thread, mean latency in ms, p99 latency in ms). The
    loop's thread (the process's main thread, under uvicorn) runs the HTTP layer — parsing,
    middleware, routing, the handler, encoding and sending the answer; the worker threads run
    the call behind it (the service and the store, or the baseline's upsert). The mean and p99
    beside the median: with closed-loop clients the mean is clients / throughput on either
    side, so two servers at the same throughput differ in p50 only by the shape of their
    latencies (a writer served out of turn lowers the median and raises the tail)."""
    per_client = max(1, requests // clients)
    jobs = [(side.port, side.prefix, method, c, per_client) for c in range(clients)]
    cpu, loop = cpu_seconds(side.pid), cpu_seconds(side.pid, side.pid)
    results = pool.map(client_run, jobs)
    cpu, loop = cpu_seconds(side.pid) - cpu, cpu_seconds(side.pid, side.pid) - loop
    start = min(r[0] for r in results)
    end = max(r[1] for r in results)
    latencies = sorted(x for r in results for x in r[2])
    total = per_client * clients
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return (
        total / (end - start),
        statistics.median(latencies) * 1000,
        cpu / total * 1000,
        loop / total * 1000,
        statistics.fmean(latencies) * 1000,
        p99 * 1000,
    )


Measured = list[tuple[float, float, float, float, float, float]]
"""Per round: what :func:`load` measures."""


def rounds_of(
    pool: multiprocessing.pool.Pool,
    sides: tuple[Side, Side],
    method: str,
    clients: int,
    rounds: int,
    requests: int,
) -> tuple[Measured, Measured]:
    """One case on both servers, alternating which goes first round by round."""
    measured: tuple[Measured, Measured] = ([], [])

    def side(index: int) -> Callable[[int], float]:
        def one(_round: int) -> float:
            measured[index].append(load(pool, sides[index], method, clients, requests))
            return measured[index][-1][0]

        return one

    alternate(side(0), side(1), rounds)
    return measured


def measure(
    pool: multiprocessing.pool.Pool, ours: Side, base: Side, rounds: int, requests: int, *, targets: bool
) -> None:
    """The cases every HTTP benchmark runs: ``PUT`` then ``GET`` with 1 and with 8 clients; per
    case throughput, p50 latency and server CPU per request, each as both sides' medians, the
    median ratio and its spread (with the targets of ``stateflow serve`` against the minimal
    app when ``targets``)."""
    for clients in (1, 8):
        for method in ("PUT", "GET"):
            mine, theirs = rounds_of(pool, (ours, base), method, clients, rounds, requests)
            what = "write" if method == "PUT" else "read"
            rate = Pair([m[0] for m in mine], [m[0] for m in theirs], higher_better=True)
            report(
                f"{what} throughput, {clients} client(s) (req/s)", rate, "/s", ">= 0.9x" if targets else None
            )
            p50 = Pair([m[1] for m in mine], [m[1] for m in theirs])
            p50_target = "<= 1.3x" if targets and method == "PUT" else None
            report(f"{what} p50 latency, {clients} client(s)", p50, "ms", p50_target)
            report(
                f"{what} mean latency, {clients} client(s)",
                Pair([m[4] for m in mine], [m[4] for m in theirs]),
                "ms",
            )
            report(
                f"{what} p99 latency, {clients} client(s)",
                Pair([m[5] for m in mine], [m[5] for m in theirs]),
                "ms",
            )
            cpu = Pair([m[2] for m in mine], [m[2] for m in theirs])
            report(f"{what}: server CPU per request, {clients} client(s)", cpu, "ms")
            loop = Pair([m[3] for m in mine], [m[3] for m in theirs])
            report(f"{what}:   of which the HTTP layer (event loop)", loop, "ms")
            behind = Pair([m[2] - m[3] for m in mine], [m[2] - m[3] for m in theirs])
            report(f"{what}:   of which the call behind it (worker threads)", behind, "ms")


def writes_against(
    pool: multiprocessing.pool.Pool, ours: Side, other: Side, versus: str, rounds: int, requests: int
) -> None:
    """Writes of ``ours`` against ``other`` at 1 and 8 clients: throughput, p50, mean and p99
    latency, server CPU per write. Against the floor (``PUT /floor/records/…`` in
    ``http_baseline.py``): what our contract costs at the least, with the same HTTP stack as the
    baseline; the fair floor against the minimal app: what the fair order costs at the least."""
    for clients in (1, 8):
        mine, theirs = rounds_of(pool, (ours, other), "PUT", clients, rounds, requests)
        report(
            f"write throughput vs {versus}, {clients} client(s) (req/s)",
            Pair([m[0] for m in mine], [m[0] for m in theirs], higher_better=True),
            "/s",
        )
        for name, at in (("p50", 1), ("mean", 4), ("p99", 5)):
            report(
                f"write {name} latency vs {versus}, {clients} client(s)",
                Pair([m[at] for m in mine], [m[at] for m in theirs]),
                "ms",
            )
        report(
            f"write: server CPU per request vs {versus}, {clients} client(s)",
            Pair([m[2] for m in mine], [m[2] for m in theirs]),
            "ms",
        )
        behind = Pair([m[2] - m[3] for m in mine], [m[2] - m[3] for m in theirs])
        report("write:   of which the call behind it (worker threads)", behind, "ms")


PROBE_ENV = "BENCH_HTTP_PROBE"


def probe() -> None:
    """In ``stateflow serve``'s process (``--cycle``), before it starts: stamp every record write's
    way through the server — its arrival and its answer on the loop, the call on its worker, the
    SQLite turn asked for, held and let go, each group's commit — with the monotonic clock and
    the thread's CPU clock, written as JSON to ``$BENCH_HTTP_PROBE`` when the server stops.
    Benchmark-only: the wrappers are put on the classes here, not on the path."""
    import contextvars
    import threading as _threading

    from stateflow.http import server as _server
    from stateflow.states.service import StatesService
    from stateflow.store import sqlite as _sqlite

    events: list[tuple[str, int, int, int, int]] = []
    now, cpu, ident = time.perf_counter_ns, time.thread_time_ns, _threading.get_ident
    request = contextvars.ContextVar("request", default=-1)  # (the worker runs in a copy of it)
    arrived = iter(range(1 << 62))

    def stamp(what: str) -> None:
        events.append((what, now(), cpu(), ident(), request.get()))

    def around(cls: type, name: str, before: str, after: str) -> None:
        inner = getattr(cls, name)

        def wrapped(*args: object, **kwargs: object) -> object:
            stamp(before)
            try:
                return inner(*args, **kwargs)
            finally:
                stamp(after)

        setattr(cls, name, wrapped)

    around(StatesService, "replace", "call", "called")
    around(_sqlite._Member, "__enter__", "ask", "turn")
    around(_sqlite._Member, "__exit__", "done", "answered")
    settle = _sqlite._GroupCommit._settle

    def settled(self: _sqlite._GroupCommit, group: object, ok: bool) -> bool:
        commits, start, start_cpu = self.commits, now(), cpu()
        try:
            return settle(self, group, ok)  # type: ignore[arg-type]
        finally:
            if self.commits != commits:  # this writer committed the group
                events.append(("flush", start, start_cpu, ident(), request.get()))
                stamp("flushed")

    _sqlite._GroupCommit._settle = settled  # type: ignore[method-assign]
    wrap = _server.wrap

    def stamped(app: object, **kwargs: object) -> object:
        served = wrap(app, **kwargs)  # type: ignore[arg-type]

        async def edge(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["method"] != "PUT":
                return await served(scope, receive, send)  # type: ignore[no-any-return]
            request.set(next(arrived))
            stamp("arrive")

            async def sending(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.body":
                    stamp("answer")
                await send(message)

            await served(scope, receive, sending)

        return edge

    _server.wrap = stamped

    stop = _server._Server.handle_exit

    def dump(self: _server._Server, sig: int, frame: object) -> None:
        # (on the stop signal: uvicorn ends the process by raising it again, past ``atexit``)
        Path(os.environ[PROBE_ENV]).write_bytes(orjson.dumps(events))
        stop(self, sig, frame)  # type: ignore[arg-type]

    _server._Server.handle_exit = dump  # type: ignore[method-assign]


def cycle_report(path: Path, skip: int) -> None:
    """Where the wall time of ``stateflow serve``'s write pipeline goes, from ``probe``'s stamps:
    per write, each stage's median; over the whole run, the share of time the SQLite write turn
    was flushing, held by a writer, handed on (free with a writer waiting for it) or idle (free,
    nobody waiting: the writers elsewhere — on the loop, in the hop, computing before their
    turn); per commit, the writers it answered."""
    events = orjson.loads(path.read_bytes())
    stages: dict[str, list[float]] = {}
    cpu_stages: dict[str, list[float]] = {}

    def add(name: str, wall: int, clock: int | None = None) -> None:
        stages.setdefault(name, []).append(wall / 1e6)
        if clock is not None:
            cpu_stages.setdefault(name, []).append(clock / 1e6)

    held: list[tuple[int, int]] = []  # (turn, let go) of every writer's turn
    waits: list[tuple[int, int, int, int]] = []  # (asked, turn, arrived, called)
    flushes: list[tuple[int, int]] = []
    by_request: dict[int, dict[str, tuple[int, int]]] = {}
    for what, at, clock, _thread, rid in events:
        marks = by_request.setdefault(rid, {})
        if what == "flushed" and rid >= skip:
            flushes.append((marks["flush"][0], at))
        elif what in ("ask", "turn", "done", "answered") and what in marks:
            continue  # (a second turn of one call: its first counts)
        marks[what] = (at, clock)
    for rid, marks in by_request.items():
        names = ("arrive", "call", "ask", "turn", "done", "answered", "called", "answer")
        if rid < skip or any(name not in marks for name in names):
            continue
        arrive, call, ask, turn, done, answered, called, answer = (marks[name] for name in names)
        add("loop: arrival to the call on its worker", call[0] - arrive[0])
        add("worker: before asking for the turn", ask[0] - call[0], ask[1] - call[1])
        add("worker: waiting for the turn", turn[0] - ask[0], turn[1] - ask[1])
        add("worker: in the turn (statements)", done[0] - turn[0], done[1] - turn[1])
        add("worker: turn let go until answered", answered[0] - done[0], answered[1] - done[1])
        add("worker: after the answer", called[0] - answered[0], called[1] - answered[1])
        add("loop: call returned to the answer sent", answer[0] - called[0])
        add("server: arrival to answer", answer[0] - arrive[0])
        held.append((turn[0], done[0]))
        waits.append((ask[0], turn[0], arrive[0], call[0]))
    for name, values in stages.items():
        clock = cpu_stages.get(name)
        extra = f"   CPU {statistics.median(clock):7.3f} ms" if clock else ""
        print(
            f"{name:<48} median {statistics.median(values):7.3f} ms   mean {statistics.fmean(values):7.3f} ms{extra}"
        )
    # the turn's timeline: flushing, held by a writer, handed on, or idle
    start = min(t for t, _ in held)
    marks_on: list[tuple[int, int, str]] = []
    for a, b in flushes:
        marks_on.append((a, b, "flush"))
    for a, b in held:
        marks_on.append((a, b, "held"))
    marks_on.sort()
    idle = (
        "idle: the next writer not arrived yet",
        "idle: the next writer on the loop",
        "idle: the next writer computing",
    )
    after_flush, in_group = "handed on to a new group (after a commit)", "handed on within a group"
    busy: dict[str, int] = {"flush": 0, "held": 0, after_flush: 0, in_group: 0} | dict.fromkeys(idle, 0)
    handoffs: dict[str, list[int]] = {after_flush: [], in_group: []}
    cursor, last = start, "held"
    waits.sort()
    for a, b, kind in marks_on:
        if a > cursor and kind == "flush":  # (the committing writer's own way from its statements)
            busy["held"] += a - cursor
        elif a > cursor:  # the turn free from cursor to a: who asked for it first, and when?
            asked, _, came, hopped = min(w for w in waits if w[0] < a and w[1] >= a)
            first = max(asked, cursor)
            # until it asked: where that writer was (its times clipped to the free span)
            bounds = [cursor, min(max(came, cursor), first), min(max(hopped, cursor), first), first]
            for name, lo, hi in zip(idle, bounds, bounds[1:], strict=False):
                busy[name] += hi - lo
            handed = after_flush if last == "flush" else in_group
            busy[handed] += a - first
            handoffs[handed].append(a - first)
        busy[kind] += max(0, b - max(a, cursor))
        cursor, last = max(cursor, b), kind
    total = sum(busy.values())
    for handed, spans in handoffs.items():
        if spans:
            print(
                f"{handed:<48} median {statistics.median(spans) / 1e6:7.3f} ms ({len(spans)} with a writer waiting)"
            )
    for kind, spent in busy.items():
        print(f"the turn: {kind:<44} {spent / total:6.1%} of {total / 1e9:.3f} s")
    print(
        f"writes {len(held)}, commits {len(flushes)} ({len(held) / max(1, len(flushes)):.2f} writes a commit), "
        f"flush median {statistics.median((b - a) / 1e6 for a, b in flushes):.3f} ms"
    )


def declare(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request(
        "PUT",
        "/api/states/bench",
        body=orjson.dumps(DECLARATION),
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"declare: {response.status}")


def cycle(env: dict[str, str], requests: int) -> None:
    """``--cycle``: ``stateflow serve`` with ``probe``'s stamps, one server per client count
    (warmed, then ``requests`` writes counted), and ``cycle_report`` on each."""
    pool_context = multiprocessing.get_context("fork")
    for clients in (1, 8):
        with tempfile.TemporaryDirectory() as tmp, pool_context.Pool(8) as pool:
            port = free_port()
            stamps = Path(tmp) / "stamps.json"
            env = {**env, PROBE_ENV: str(stamps)}
            code = "from benchmarks.bench_http import probe; probe(); " + CLI
            argv = [sys.executable, "-c", code, "--store", str(Path(tmp) / "stateflow.db")]
            argv += ["serve", "--port", str(port), "--token", TOKEN]
            with server(argv, port, env) as pid:
                declare(port)
                side = Side(port, pid, "/api/states/bench/records/agent/bench/thread/")
                load(pool, side, "PUT", 8, 400)  # create every record, warm the server
                rate, p50, per_write, on_loop, mean, p99 = load(pool, side, "PUT", clients, requests)
            print(
                f"{clients} client(s): {rate:.0f} writes/s, p50 {p50:.3f} ms, mean {mean:.3f} ms, "
                f"p99 {p99:.3f} ms, server CPU {per_write:.3f} ms a write, {on_loop:.3f} on the loop's "
                "thread (stamps on)"
            )
            cycle_report(stamps, skip=401)  # (the declaration and the 400 warming writes)


@contextmanager
def pg_schemas(url: str, names: tuple[str, ...]) -> Iterator[list[str]]:
    """``url`` once per name, its search_path a fresh schema of that name (migrated by this tree;
    dropped afterwards)."""
    import psycopg

    from stateflow.store import open_store

    schemas = [f"bench_http_{name}_{os.getpid()}" for name in names]
    with psycopg.connect(url, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f"CREATE SCHEMA {schema}")
    try:
        sep = "&" if "?" in url else "?"
        urls = [f"{url}{sep}options=-csearch_path%3D{schema}" for schema in schemas]
        for each in urls:
            open_store(each, auto_migrate=True).close()
        yield urls
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


def against_tree(
    env: dict[str, str],
    baseline_src: Path,
    root: str,
    rounds: int,
    requests: int,
    store_url: str | None = None,
    quiet: bool = False,
) -> None:
    """``--baseline-src``: this tree's ``stateflow serve`` against another tree's, both as
    served (their own store files, or schemas of ``store_url``'s PostgreSQL database), writes
    then reads at 1 and 8 clients in alternating rounds — a change's gain in the same minutes,
    where a ratio against the minimal app moves with the phase (reads too: a change to where the
    record calls run moves their latency). ``quiet``: both edges as on a machine with CPU to
    spare (:data:`QUIET`)."""
    theirs_env = {**env, "PYTHONPATH": os.pathsep.join((str(baseline_src), root))}
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        pool = stack.enter_context(multiprocessing.get_context("fork").Pool(8))
        names = ("ours", "theirs")
        stores = (
            [str(Path(tmp) / f"{side}.db") for side in names]
            if store_url is None
            else stack.enter_context(pg_schemas(store_url, names))
        )
        ports = free_port(), free_port()
        argv = [
            [
                sys.executable,
                "-c",
                (QUIET if quiet else "") + CLI,
                "--store",
                store,
                "serve",
                "--port",
                str(port),
            ]
            for store, port in zip(stores, ports, strict=True)
        ]
        for args in argv:
            args += ["--token", TOKEN]
        with server(argv[0], ports[0], env) as ours_pid, server(argv[1], ports[1], theirs_env) as theirs_pid:
            prefix = "/api/states/bench/records/agent/bench/thread/"
            sides = [Side(port, pid, prefix) for port, pid in zip(ports, (ours_pid, theirs_pid), strict=True)]
            for side in sides:  # create every record, warm both servers
                declare(side.port)
                load(pool, side, "PUT", 8, 200)
            print(f"{'case':<58} {'this tree':>15}    {'baseline tree':>15}")
            measure(pool, sides[0], sides[1], rounds, requests, targets=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=400, help="requests per round and side")
    parser.add_argument("--floor-only", action="store_true", help="only the writes against the floor")
    parser.add_argument(
        "--cycle",
        action="store_true",
        help="only where a write's wall time goes in stateflow serve (a probe's stamps), 1 and 8 clients",
    )
    parser.add_argument(
        "--fair",
        action="store_true",
        help="only the fair floor by hand: against the minimal app's upsert, then ours against it",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="only this tree's stateflow serve against another tree's (its src/), alternating rounds",
    )
    parser.add_argument(
        "--store-url",
        default=None,
        help="with --baseline-src: both servers on this PostgreSQL database, a schema each",
    )
    parser.add_argument(
        "--as-if-quiet",
        action="store_true",
        help="with --baseline-src: both edges take the machine to have CPU to spare",
    )
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
    if args.cycle:
        cycle(env, args.requests)
        return
    if args.baseline_src is not None:
        against_tree(
            env,
            args.baseline_src.resolve(),
            root,
            args.rounds,
            args.requests,
            args.store_url,
            args.as_if_quiet,
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        ours_port, base_port = free_port(), free_port()
        env["BENCH_HTTP_DB"] = str(Path(tmp) / "baseline.db")
        env["BENCH_HTTP_TOKEN"] = TOKEN
        ours_argv = [sys.executable, "-c", CLI, "--store", str(Path(tmp) / "stateflow.db")]
        ours_argv += ["serve", "--port", str(ours_port), "--token", TOKEN]
        base_argv = [sys.executable, "-m", "uvicorn", "benchmarks.http_baseline:app"]
        base_argv += ["--host", "127.0.0.1", "--port", str(base_port), "--log-level", "warning"]
        with (
            server(ours_argv, ours_port, env) as ours_pid,
            server(base_argv, base_port, env) as base_pid,
            multiprocessing.get_context("fork").Pool(8) as pool,
        ):
            declare(ours_port)
            ours = Side(ours_port, ours_pid, "/api/states/bench/records/agent/bench/thread/")
            base = Side(base_port, base_pid, "/records/")
            for side in (ours, base):  # create every record, warm both servers
                load(pool, side, "PUT", 8, 200)
            if args.fair:
                fair = Side(base_port, base_pid, "/fair/records/")
                load(pool, fair, "PUT", 8, 200)
                print(f"{'case':<58} {'fair floor':>15}    {'baseline':>15}")
                writes_against(pool, fair, base, "baseline", args.rounds, args.requests)
                print(f"{'case':<58} {'stateflow':>15}    {'fair floor':>15}")
                writes_against(pool, ours, fair, "fair floor", args.rounds, args.requests)
                return
            if not args.floor_only:
                print(f"{'case':<58} {'stateflow':>15}    {'baseline':>15}")
                measure(pool, ours, base, args.rounds, args.requests, targets=True)
            floor = Side(base_port, base_pid, "/floor/records/")
            load(pool, floor, "PUT", 8, 200)
            print(f"{'case':<58} {'stateflow':>15}    {'floor':>15}")
            writes_against(pool, ours, floor, "floor", args.rounds, args.requests)


if __name__ == "__main__":
    main()
