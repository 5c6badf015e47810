"""Run the HTTP app under uvicorn on a socket bound before anything is announced.

Binding first means a port already in use is one clear refusal (no banner, no server log), and a
stop signal runs ``on_stop`` at once — it kills running jq programs, so in-flight requests finish
and the server exits promptly instead of waiting out their time limits.
"""

from __future__ import annotations

import errno
import gc
import multiprocessing
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

import uvicorn

from stateflow.config import Config
from stateflow.errors import StateflowError, StoreNotMigrated

if TYPE_CHECKING:
    from stateflow.states import StatesService
    from stateflow.store import Store

GRACEFUL_SHUTDOWN_SECONDS = 10
"""How long a stopping server lets in-flight requests finish."""


class AddressInUse(StateflowError):
    code = "address-in-use"
    http_status = 500


class AddressUnusable(StateflowError):
    code = "cannot-listen"
    http_status = 500


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a refusal that says why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not left 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # connections whose socket says TCP, and with it on, a response written in two parts waits
    # for the client's delayed ACK — ~40 ms per request on one keep-alive connection
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(
                f"{host}:{port} is already in use (another stateflow serve?); choose another --port"
            ) from None
        raise AddressUnusable(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def settle_heap() -> None:
    """Take what the server holds at this point (modules, the app, its caches) out of the
    cyclic garbage collector's reach: it lives as long as the process. Otherwise every full
    collection walks those ~120,000 objects under the GIL — 50–90 ms, every request in
    flight waiting — for garbage that is never among them. Called once started and once the
    MCP SDK has loaded (in the background, just after start): a frozen object is never
    freed as part of a cycle, so this runs before the requests come (at worst the first few
    are in flight then, and a cycle of theirs is kept).

    (The young generation keeps Python's threshold: whatever cycles requests still leave are
    freed as soon as before. A refused write no longer leaves one: see ``offload``.)"""
    gc.collect()
    gc.freeze()


_serving = False
"""This process serves (:func:`run`): its heap is the server's to settle. An app built in a
process that does not (a test's, an embedding program's) leaves the collector alone."""


def _settle_when_serving() -> None:
    if _serving:
        settle_heap()


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_stop = on_stop
        self._stopping = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        settle_heap()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if not self._stopping:
            self._stopping = True
            # off the event loop's thread: stopping workers waits for their processes to go
            threading.Thread(target=self._on_stop, name="stop", daemon=True).start()


CORS_ALLOW_HEADERS: Final = [
    "Authorization",
    "Content-Type",
    "X-Request-ID",
    "If-Match",
    "If-None-Match",
    *(
        f"X-Stateflow-{h}"
        for h in ("Consumer", "Run-Id", "Meta", "Agent", "Cwd", "Session", "Scopes", "States")
    ),
    "Mcp-Session-Id",
    "MCP-Protocol-Version",
    "Last-Event-ID",
]
"""Every request header the API and ``/mcp`` document: an allowed origin may send them all."""


def wrap(app: Any, *, access_log: bool, json_lines: bool, cors_origins: list[str]) -> Any:
    """The app as served: CORS (only when origins are configured) inside the access log (only
    at log level debug or info), inside the request id (always)."""
    if cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app = CORSMiddleware(
            app,
            allow_origins=cors_origins,
            allow_methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=CORS_ALLOW_HEADERS,
            expose_headers=["X-Request-ID", "Retry-After", "ETag", "Mcp-Session-Id"],
            max_age=600,
        )
    if access_log:
        from stateflow.http.access import AccessLog

        app = AccessLog(app, json_lines=json_lines)
    from stateflow.http.access import RequestId

    return RequestId(app)


def run(
    app: Any,
    sock: socket.socket,
    *,
    on_stop: Callable[[], None],
    log_level: str = "warning",
    **config: Any,
) -> None:
    """Serve ``app`` on ``sock`` until a stop signal (SIGINT/SIGTERM)."""
    global _serving
    _serving = True
    # SIGTERM is a server's normal stop: uvicorn catches it, shuts down gracefully, then passes
    # it on to the handler it found — the default's, so the process ends as SIGTERM ends it,
    # not the CLI's, which reports a command stopped midway ("terminated")
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    settings = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        **config,
    )
    _Server(settings, on_stop).run(sockets=[sock])


def service_for(store: Store, config: Config) -> StatesService:
    """The states service a server runs, its jq pool sized and limited by ``config``."""
    from stateflow.api import states_service
    from stateflow.jq import JqRunner

    def warn(exc: StoreNotMigrated) -> None:  # serve anyway: /api/ready says 503 until migrated
        print(f"warning: {exc.message}", file=sys.stderr)

    runner = JqRunner(
        workers=config.jq.workers,
        timeout=config.jq.timeout_seconds,
        memory=config.jq.memory_mb * 1024 * 1024,
        queue=config.jq.queue,
    )
    return states_service(store, config, jq=runner, unmigrated=warn)


def build_app(service: StatesService, config: Config, token_specs: list[str]) -> Any:
    """The ASGI app as served: the API, CORS when configured, the access log."""
    from stateflow.http.app import create_app
    from stateflow.http.auth import TokenSet, parse_token

    return wrap(
        create_app(
            service, TokenSet([parse_token(s) for s in token_specs]), config.http, loaded=_settle_when_serving
        ),
        access_log=config.server.log_level in ("debug", "info"),
        json_lines=config.server.log_format == "json",
        cors_origins=list(config.server.cors_origins),
    )


def _worker(sock: socket.socket, config: Config, store_location: str | None, token_specs: list[str]) -> None:
    """One server process of several: its own store connections, jq pool and event loop."""
    from stateflow.http import access
    from stateflow.store import open_store
    from stateflow.workers import die_with_parent

    die_with_parent(0, signal.SIGTERM)
    access.configure(config.server.log_level, json_lines=config.server.log_format == "json")
    store = open_store(store_location, **config.store.open_options())
    service = service_for(store, config)
    try:
        run(build_app(service, config, token_specs), sock, on_stop=service.close)
    finally:
        service.close()
        store.close()


def run_workers(
    sock: socket.socket, config: Config, store_location: str | None, token_specs: list[str]
) -> None:
    """``config.server.workers`` processes accepting on one socket; a process that dies is
    replaced; SIGTERM/SIGINT stop them all (each stops as a single server does)."""
    spawn = multiprocessing.get_context("spawn")
    stopping = threading.Event()

    def start() -> multiprocessing.process.BaseProcess:
        process = spawn.Process(target=_worker, args=(sock, config, store_location, token_specs))
        process.start()
        return process

    caught: list[int] = []

    def stop(sig: int, frame: FrameType | None) -> None:
        caught.append(sig)
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    processes = [start() for _ in range(config.server.workers)]
    try:
        while not stopping.is_set():
            for i, process in enumerate(processes):
                if not process.is_alive() and not stopping.is_set():
                    print(
                        f"warning: server process {process.pid} exited ({process.exitcode}); starting another",
                        file=sys.stderr,
                    )
                    processes[i] = start()
            stopping.wait(0.5)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: each stops like a single server
        deadline = time.monotonic() + GRACEFUL_SHUTDOWN_SECONDS + 5
        for process in processes:
            process.join(max(0.1, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:
        # passed on once all have stopped, as a single server's uvicorn does: a Ctrl-C ends the
        # command as any other's ("interrupted", 130), a SIGTERM as that signal ends a process
        if caught[0] == signal.SIGTERM and signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(caught[0])
