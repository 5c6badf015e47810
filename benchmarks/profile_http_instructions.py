"""Instructions per HTTP record write on the server's side, by thread, and of the calls behind
it (issue 17): counted by callgrind, which the machine's load does not move.

The write is ``bench_http``'s: ``PUT`` of a small record (``{"count", "text"}``) of a declared
state, through the app as ``stateflow serve`` builds it (``build_app``: the access log on at
``info``, its lines to ``/dev/null``), driven in process by ASGI messages (no sockets, no
uvicorn), SQLite at ``synchronous=off``. Cases:

- ``put, loop thread``: the event loop's thread only (the HTTP layer: parsing of the path and
  headers, the token, the access log, the answer; callgrind's toggle counts per thread);
- ``put, server``: both threads, the worker's call behind the edge included (the difference
  between a run of ``--ops`` writes and one of none, over ``--ops``);
- ``replace``: the record ``replace`` the route calls, alone, as the worker runs it;
- ``apply``: ``bench_commit_floor``'s op batch, one caller.

Each count is a process of its own under ``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``):
``--warm`` ops, then ``--ops`` counted, only inside the loop that makes them
(``--toggle-collect`` on ``itertools.starmap``'s iterator). ``--baseline-src DIR`` counts
another source tree's ``stateflow`` beside this one's. ``--bytecodes`` prints instead, with no
callgrind, the Python bytecodes each function executes per op on the loop's thread (its own
and with what it calls): where the instructions go, deterministically.

    python3 -m benchmarks.profile_http_instructions [--ops 60] [--warm 200]
        [--cases "put, loop thread" ...] [--baseline-src DIR] [--jobs 2] [--bytecodes CASE]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from benchmarks import callgrind, record_workloads
from benchmarks.bytecodes import print_bytecodes

MODULE = "benchmarks.profile_http_instructions"
CASES = ("put, loop thread", "put, server", "replace", "apply")
PREFIX = "/api/states/bench/records/agent/bench/thread/"


@contextmanager
def operation(case: str) -> Iterator[Callable[[range], None]]:
    """``run(indexes)``: the case's ops, one per index, on a store of their own."""
    from benchmarks.bench_http import DECLARATION, TOKEN
    from stateflow.config import Config
    from stateflow.http import access
    from stateflow.http.server import build_app, service_for
    from stateflow.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/counted.db?synchronous=off", auto_migrate=True)
        config = Config()
        service = service_for(store, config)
        try:
            if case.startswith("put"):
                access.configure("info", json_lines=False)
                handler = logging.getLogger("stateflow").handlers[0]
                assert isinstance(handler, logging.StreamHandler)
                handler.setStream(open(os.devnull, "w"))  # noqa: SIM115 (for the process's life)
                app = build_app(service, config, [TOKEN])
                loop = asyncio.new_event_loop()
                authorization = (b"authorization", f"Bearer {TOKEN}".encode())

                async def request(method: str, path: str, body: bytes) -> None:
                    sent: list[dict[str, Any]] = []
                    given = False

                    async def receive() -> dict[str, Any]:
                        nonlocal given
                        if given:  # (the app reads one body message; a second means a disconnect)
                            await asyncio.sleep(3600)
                        given = True
                        return {"type": "http.request", "body": body, "more_body": False}

                    async def send(message: dict[str, Any]) -> None:
                        sent.append(message)

                    headers = [(b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode())]
                    scope = {
                        "type": "http",
                        "asgi": {"version": "3.0", "spec_version": "2.3"},
                        "http_version": "1.1",
                        "server": ("127.0.0.1", 8000),
                        "client": ("127.0.0.1", 50000),
                        "scheme": "http",
                        "method": method,
                        "root_path": "",
                        "path": path,
                        "raw_path": path.encode(),
                        "query_string": b"",
                        "headers": [*headers, authorization],
                        "state": {},
                    }
                    await app(scope, receive, send)
                    if sent[0]["status"] != 200:
                        raise RuntimeError(f"{method} {path}: {sent}")

                async def puts(indexes: range) -> None:
                    for i in indexes:
                        body = orjson.dumps({"count": i, "text": f"client 0 write {i}"})
                        await request("PUT", f"{PREFIX}c0-{i % 200}", body)

                loop.run_until_complete(request("PUT", "/api/states/bench", orjson.dumps(DECLARATION)))
                yield lambda indexes: loop.run_until_complete(puts(indexes))
                loop.close()
            else:
                yield (record_workloads.replaces if case == "replace" else record_workloads.applies)(service)
        finally:
            service.close()
            store.close()


def _work(case: str, ops: int, warm: int) -> None:
    """The counted process: ``warm`` ops, then ``ops`` inside ``starmap`` (the toggle)."""
    with operation(case) as run:
        run(range(warm))
        for _ in itertools.starmap(run, [(range(10_000, 10_000 + ops),)]):
            pass


def _callgrind(src: Path, case: str, ops: int, warm: int, *, toggled: bool) -> int:
    args = ["--work", case, str(ops), str(warm)]
    return callgrind.count(MODULE, args, src=src, toggle=callgrind.STARMAP if toggled else None)


def _count(src: Path, case: str, ops: int, warm: int) -> float:
    if case != "put, server":
        return _callgrind(src, case, ops, warm, toggled=True) / ops
    # every thread: the process with the ops, less the same process without them
    return (
        _callgrind(src, case, ops, warm, toggled=False) - _callgrind(src, case, 0, warm, toggled=False)
    ) / ops


def bytecodes(case: str, ops: int, warm: int, top: int) -> None:
    """Bytecodes per op by function on the calling thread (the loop's, for a ``put``)."""
    with operation(case) as run:
        print_bytecodes(case, run, ops, warm, top, ("profile_http_instructions", "asyncio/"))


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--work":
        _work(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=60)
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--baseline-src", type=Path, default=None, help="another tree's src/, counted beside")
    parser.add_argument("--jobs", type=int, default=2, help="counts run at once")
    parser.add_argument("--bytecodes", choices=CASES, default=None, help="bytecodes by function instead")
    parser.add_argument("--top", type=int, default=40, help="functions --bytecodes prints")
    args = parser.parse_args()
    if args.bytecodes is not None:
        bytecodes(args.bytecodes, args.ops, args.warm, args.top)
        return
    callgrind.print_against_baseline(
        f"instructions per op ({args.ops} counted after {args.warm} warm)",
        args.cases,
        lambda src, case: _count(src, case, args.ops, args.warm),
        baseline_src=args.baseline_src,
        jobs=args.jobs,
        width=20,
    )


if __name__ == "__main__":
    main()
