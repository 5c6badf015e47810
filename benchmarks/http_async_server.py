"""The HTTP app as ``stateflow serve`` builds it, on a PostgreSQL store opened one of two ways
(for ``bench_http_async``): ``--mode thread`` on psycopg's connection pool, each store call on
a worker thread (what ``stateflow serve`` does); ``--mode loop`` on psycopg's async pool opened
on the server's event loop, each store call run on that loop (``stateflow.aio.on_edge``).

    python3 -m benchmarks.http_async_server --mode loop|thread --port PORT --token TOKEN STORE_URL
"""

from __future__ import annotations

import argparse
import asyncio

import uvicorn

from stateflow.aio import open_store_async
from stateflow.config import Config
from stateflow.http.server import build_app, service_for
from stateflow.store import open_store
from stateflow.store.async_bridge import spawn


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--mode", choices=("loop", "thread"), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    config = Config()

    async def serve() -> None:
        if args.mode == "loop":
            store = await open_store_async(args.url)
            service = await spawn(service_for, store, config)
        else:
            store = open_store(args.url)
            service = service_for(store, config)
        app = build_app(service, config, [args.token])
        settings = uvicorn.Config(
            app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False
        )
        try:
            await uvicorn.Server(settings).serve()
        finally:
            service.close()
            await (spawn(store.close) if args.mode == "loop" else asyncio.to_thread(store.close))

    asyncio.run(serve())


if __name__ == "__main__":
    main()
