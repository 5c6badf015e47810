"""The HTTP app on PostgreSQL with its store calls on the event loop against on worker threads, A/B.

One server runs the store on psycopg's async pool opened on its event loop, and the app runs
each store call on that loop (``stateflow.aio.on_edge``: no worker thread, each round trip
awaited there); the other is what ``stateflow serve`` runs — psycopg's connection pool, each
call on a worker thread (``benchmarks/http_async_server.py`` starts either). Same tree, each
on its own fresh schema of the same PostgreSQL server; the clients are those of ``bench_http``
(separate processes, one keep-alive connection each, ``PUT`` then ``GET`` of small records),
with 1 and with 8 clients. The sides alternate round by round; per case the median and spread
of the per-round ratios of throughput, latency and the server process's CPU per request.

    python3 -m benchmarks.bench_http_async [--rounds 5] [--requests 400] [--postgres URL]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.bench_http import CLI, TOKEN, Side, declare, free_port, load, measure, server
from benchmarks.bench_langgraph_adapters import postgres_schemas

PREFIX = "/api/states/bench/records/agent/bench/thread/"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=400, help="requests per round and side")
    parser.add_argument("--postgres", default=os.environ.get("STATEFLOW_TEST_POSTGRES"))
    args = parser.parse_args()
    if not args.postgres:
        sys.exit("a PostgreSQL URL is needed: --postgres or STATEFLOW_TEST_POSTGRES")
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
    with (
        postgres_schemas(args.postgres, "bench_http_loop", "bench_http_thread") as at,
        multiprocessing.get_context("fork").Pool(8) as pool,
    ):
        argv: dict[str, tuple[list[str], int]] = {}
        for mode in ("loop", "thread"):
            url, port = at[f"bench_http_{mode}"], free_port()
            migrate = [sys.executable, "-c", CLI, "--store", url, "migrate"]
            subprocess.run(migrate, env=env, check=True, capture_output=True)
            command = [sys.executable, "-m", "benchmarks.http_async_server", url, "--mode", mode]
            argv[mode] = ([*command, "--port", str(port), "--token", TOKEN], port)
        (loop_argv, loop_port), (thread_argv, thread_port) = argv["loop"], argv["thread"]
        with (
            server(loop_argv, loop_port, env) as loop_pid,
            server(thread_argv, thread_port, env) as thread_pid,
        ):
            ours, theirs = Side(loop_port, loop_pid, PREFIX), Side(thread_port, thread_pid, PREFIX)
            for side in (ours, theirs):  # declare, create every record, warm both servers
                declare(side.port)
                load(pool, side, "PUT", 8, 200)
            print(f"{'case':<58} {'on the loop':>15}    {'on threads':>15}")
            measure(pool, ours, theirs, args.rounds, args.requests, targets=False)


if __name__ == "__main__":
    main()
