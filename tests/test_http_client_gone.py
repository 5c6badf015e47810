"""A request whose client goes away while its store call waits in PostgreSQL: the statement is
cancelled in the server at once (not left to the statement timeout, here none), its transaction
rolled back, its connection closed rather than lent to a later call, and the request logged as
the client's going away (499) — against a real `stateflow serve`, its statements watched in
``pg_stat_activity``."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from stateflow.store import open_store

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
    port = servers.free_port()
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            ["stateflow", "serve", "--port", str(port), "--token", servers.TOKEN, "--log-level", "info"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    server = servers.Server(f"http://127.0.0.1:{port}", proc)
    try:
        servers.wait_ready(server)
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
            lambda: (
                watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (blocked,)).fetchone()
                is None
            ),
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
        for _ in range(2):  # (twice: the pool's replacement connection serves as well)
            _gone_while_blocked(
                server,
                log,
                pg_schema_url,
                "LOCK TABLE documents, transitions IN ACCESS EXCLUSIVE MODE",
                "GET",
                RECORD + "/writes",
            )
            status, body, _ = server.call("GET", RECORD + "/writes")
            assert status == 200 and len(body["data"]["items"]) == 1, body
            status, body, _ = server.call("GET", RECORD)
            assert status == 200 and body["data"]["data"] == {"status": "open"}, body
        _until("no line said the call was cancelled", lambda: log.read_text().count(" 499 ") == 2, log)
