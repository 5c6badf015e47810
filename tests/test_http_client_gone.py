"""A request whose client goes away while its store call waits in PostgreSQL: the statement is
cancelled in the server at once (not left to the statement timeout, here none), its transaction
rolled back, its connection closed rather than lent to a later call, and the request logged as
the client's going away (499) — against a real `stateflow serve`, its statements watched in
``pg_stat_activity``; and the app on a store opened with the async API, served in this process."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import uvicorn

from stateflow.aio import open_store_async
from stateflow.config import Config
from stateflow.http.server import build_app, service_for
from stateflow.store import open_store
from stateflow.store.async_bridge import spawn

from . import servers

STATE = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
RECORD = "/api/states/tickets/records/agent/alice/thread/t1"
DELTAS = b'{"ops": [{"op": "set", "path": ["status"], "value": "closed"}]}'
WAIT = 60.0
"""How long the test waits for what must happen (a deadline for a loaded machine, not a
measure: the server has no statement timeout, so without the cancel it would wait for ever)."""


@contextmanager
def logged_server(tmp_path: Path, store: str) -> Iterator[tuple[servers.Server, Path]]:
    """A server at log level info with no statement timeout, on ``store`` migrated; a record
    written."""
    open_store(store, auto_migrate=True).close()
    env = servers.base_env(tmp_path, store, STATEFLOW_STORE_STATEMENT_TIMEOUT_SECONDS="0")
    log = tmp_path / "server.log"
    server = servers.start(env, "--log-level", "info", log=log)
    try:
        assert server.call("PUT", "/api/states/tickets", STATE)[0] == 200
        assert server.call("PUT", RECORD, {"status": "open"})[0] == 200
        yield server, log
    finally:
        server.stop()


def _send(server: servers.Server, method: str, path: str, body: bytes = b"") -> socket.socket:
    """A request sent on a connection of its own, left open (its answer not read)."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {servers.TOKEN}\r\n".encode()
        + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock


def _blocked_by(watcher: psycopg.Connection, locker: int) -> list[int]:
    """The server processes whose statement waits for a lock ``locker`` holds."""
    rows = watcher.execute(
        "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (locker,)
    ).fetchall()
    return [pid for (pid,) in rows]


def _closed(watcher: psycopg.Connection, pid: int) -> bool:
    """Whether the server process ``pid`` (a connection's backend) has ended."""
    return watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is None


def _until(what: str, check: Callable[[], object], log: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"{what}\n{log.read_text()}"
        time.sleep(0.05)


def _gone_while_blocked(
    server: servers.Server, log: Path, url: str, lock: str, method: str, path: str, body: bytes = b""
) -> None:
    """Send the request while another session holds ``lock``; once its statement waits for the
    lock, go away; its statement must be cancelled and its server process's connection closed
    while the lock is still held."""
    with (
        psycopg.connect(url, autocommit=True) as watcher,
        psycopg.connect(url) as locker,
    ):
        locker.execute(lock)
        holder = locker.info.backend_pid
        sock = _send(server, method, path, body)
        try:
            _until(
                "the request's statement never waited for the lock", lambda: _blocked_by(watcher, holder), log
            )
            (blocked,) = _blocked_by(watcher, holder)
        finally:
            sock.close()  # the client goes away
        _until(
            "the statement went on after its client went away", lambda: not _blocked_by(watcher, holder), log
        )
        # its connection closed, not lent again: no cancel can reach another call's statement
        _until(
            "the cancelled call's connection went back to the pool",
            lambda: _closed(watcher, blocked),
            log,
        )
        locker.rollback()


def test_a_write_whose_client_goes_away_is_cancelled_in_the_database_and_leaves_nothing(
    pg_schema_url: str, tmp_path: Path
) -> None:
    with logged_server(tmp_path, pg_schema_url) as (server, log):
        _gone_while_blocked(
            server,
            log,
            pg_schema_url,
            "SELECT doc_id FROM documents FOR UPDATE",  # the record's row, as a long transaction holds it
            "POST",
            RECORD + "/deltas",
            DELTAS,
        )
        _until("no line said the call was cancelled", lambda: " 499 " in log.read_text(), log)
        text = log.read_text()
        assert "went away while its call ran; the call was cancelled" in text, text
        assert "Traceback" not in text and "ERROR" not in text and " 500 " not in text, text
        # nothing of it written: the record and its audit as before
        status, body, headers = server.call("GET", RECORD)
        assert (status, body["data"]["data"], headers["etag"]) == (200, {"status": "open"}, '"1"'), body
        status, body, _ = server.call("GET", RECORD + "/writes")
        assert status == 200 and len(body["data"]["items"]) == 1, body
        # the pool serves the next calls, the same write among them
        for _ in range(3):
            status, body, _ = server.call("POST", RECORD + "/deltas", {"ops": []})
            assert status == 200, body
        status, body, headers = server.call(
            "POST", RECORD + "/deltas", {"ops": [{"op": "set", "path": ["status"], "value": "closed"}]}
        )
        assert (status, body["data"]["data"], headers["etag"]) == (200, {"status": "closed"}, '"2"'), body
        status, body, _ = server.call("GET", RECORD + "/writes")
        assert status == 200 and len(body["data"]["items"]) == 2, body


def test_a_read_whose_client_goes_away_is_cancelled_and_the_pool_serves_on(
    pg_schema_url: str, tmp_path: Path
) -> None:
    with logged_server(tmp_path, pg_schema_url) as (server, log):
        # a record route's read, then the search route's (the app's general stack), each on a
        # connection the pool opened in place of the one closed before
        for method, path, body in (
            ("GET", RECORD + "/writes", b""),
            ("POST", "/api/states/tickets/records/search", b'{"filters": {"status": "open"}}'),
        ):
            _gone_while_blocked(
                server,
                log,
                pg_schema_url,
                "LOCK TABLE documents, transitions IN ACCESS EXCLUSIVE MODE",
                method,
                path,
                body,
            )
            status, answer, _ = server.call("GET", RECORD + "/writes")
            assert status == 200 and len(answer["data"]["items"]) == 1, answer
            status, answer, _ = server.call(
                "POST", "/api/states/tickets/records/search", {"filters": {"status": "open"}}
            )
            assert status == 200 and len(answer["data"]["matches"]) == 1, answer
        _until("no line said the call was cancelled", lambda: log.read_text().count(" 499 ") == 2, log)
        text = log.read_text()
        assert text.count("went away while its call ran; the call was cancelled") == 2, text
        assert "Traceback" not in text and "ERROR" not in text and " 500 " not in text, text


@asynccontextmanager
async def served_async(url: str) -> AsyncIterator[str]:
    """The app as ``stateflow serve`` builds it, on an async PostgreSQL store (its calls run on
    the event loop) with no statement timeout, under uvicorn in this process; a record written."""
    store: Any = await open_store_async(url, auto_migrate=True, statement_timeout=0)
    service = await spawn(service_for, store, Config())
    port = servers.free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(service, Config(), [servers.TOKEN]), host="127.0.0.1", port=port, log_level="error"
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "the server stopped"
            await asyncio.sleep(0.02)
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {servers.TOKEN}"}
        ) as api:
            assert (await api.put("/api/states/tickets", json=STATE)).status_code == 200
            assert (await api.put(RECORD, json={"status": "open"})).status_code == 200
        yield base
    finally:
        server.should_exit = True
        await task
        service.close()
        await spawn(store.close)


def test_on_the_async_store_a_write_whose_client_goes_away_is_cancelled(pg_schema_url: str) -> None:
    async def main() -> None:
        async with (
            served_async(pg_schema_url) as base,
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {servers.TOKEN}"}) as api,
        ):
            with (
                psycopg.connect(pg_schema_url, autocommit=True) as watcher,
                psycopg.connect(pg_schema_url) as locker,
            ):
                locker.execute("SELECT doc_id FROM documents FOR UPDATE")
                holder = locker.info.backend_pid

                async def blocked() -> list[int]:
                    return await asyncio.to_thread(_blocked_by, watcher, holder)

                host, port = base.removeprefix("http://").split(":")
                _reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(
                    f"POST {RECORD}/deltas HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {servers.TOKEN}\r\n".encode()
                    + f"Content-Type: application/json\r\nContent-Length: {len(DELTAS)}\r\n\r\n".encode()
                    + DELTAS
                )
                deadline = time.monotonic() + WAIT
                while not await blocked():
                    assert time.monotonic() < deadline, "the request's statement never waited for the lock"
                    await asyncio.sleep(0.05)
                (pid,) = await blocked()
                writer.close()  # the client goes away
                await writer.wait_closed()
                while await blocked():
                    assert time.monotonic() < deadline, "the statement went on after its client went away"
                    await asyncio.sleep(0.05)
                gone = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
                while await asyncio.to_thread(lambda: watcher.execute(gone, (pid,)).fetchone()) is not None:
                    assert time.monotonic() < deadline, (
                        "the cancelled call's connection went back to the pool"
                    )
                    await asyncio.sleep(0.05)
                locker.rollback()
            read = await api.get(RECORD)
            assert (read.status_code, read.json()["data"]["data"], read.headers["etag"]) == (
                200,
                {"status": "open"},
                '"1"',
            )
            written = await api.post(RECORD + "/deltas", content=DELTAS)
            assert written.status_code == 200 and written.headers["etag"] == '"2"', written.text

    asyncio.run(main())
