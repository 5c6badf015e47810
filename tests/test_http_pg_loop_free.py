"""A lone record call on a PostgreSQL store served by `stateflow serve` never runs on the event
loop's own thread: stuck behind a row lock another session holds, it leaves the server
answering other requests (``/api/health`` among them), and its client's going away cancels its
statement. Against a real server whose edge takes the machine to have CPU to spare (where a lone
call on SQLite runs on the loop), with no statement timeout; its statements watched in
``pg_stat_activity``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg

from stateflow.store import open_store

from . import servers
from .test_http_client_gone import RECORD, STATE, _blocked_by, _closed, _send, _until

QUIET = (
    "import math, sys; from stateflow import aio; "
    # CPU to spare at every ask, no call counted as holding the loop long: the edge's
    # thresholds for a lone call, as on a quiet machine, are not this test's subject
    "aio.SAMPLE_SECONDS = 0.0; aio.CONTENDED_SHARE = math.inf; aio.LONG_SECONDS = math.inf; "
    "from stateflow.cli.main import main; sys.argv[0] = 'stateflow'; sys.exit(main())"
)


def test_a_lone_record_write_stuck_behind_a_lock_leaves_the_server_answering_and_is_cancelled(
    pg_schema_url: str, tmp_path: Path
) -> None:
    open_store(pg_schema_url, auto_migrate=True).close()
    env = servers.base_env(tmp_path, pg_schema_url, STATEFLOW_STORE_STATEMENT_TIMEOUT_SECONDS="0")
    log = tmp_path / "server.log"
    port = servers.free_port()
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                QUIET,
                "serve",
                "--port",
                str(port),
                "--token",
                servers.TOKEN,
                "--log-level",
                "info",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    server = servers.Server(f"http://127.0.0.1:{port}", proc)
    try:
        servers.wait_ready(server)
        assert server.call("PUT", "/api/states/tickets", STATE)[0] == 200
        for _ in range(3):  # lone record calls, sampled with CPU to spare: the loop's turn is theirs
            assert server.call("PUT", RECORD, {"status": "open"}, timeout=60)[0] == 200
        with (
            psycopg.connect(pg_schema_url, autocommit=True) as watcher,
            psycopg.connect(pg_schema_url) as locker,
        ):
            locker.execute("SELECT doc_id FROM documents FOR UPDATE")  # as a long transaction holds it
            holder = locker.info.backend_pid
            sock = _send(server, "PUT", RECORD, b'{"status": "closed"}')  # a record call
            try:
                _until("the write never waited for the lock", lambda: _blocked_by(watcher, holder), log)
                (blocked,) = _blocked_by(watcher, holder)
                # the server answers meanwhile: the write waits off the loop's thread (with no
                # statement timeout, a write on it would hold every request for as long as the lock)
                for path in ("/api/health", "/api/states/tickets"):
                    try:
                        status, body, _ = server.call("GET", path, timeout=30)
                    except TimeoutError:
                        raise AssertionError(f"GET {path} was not answered while the write waited") from None
                    assert status == 200, body
            finally:
                sock.close()  # the client goes away
            # its statement cancelled while the lock is still held, its connection closed
            _until(
                "the write went on after its client went away", lambda: not _blocked_by(watcher, holder), log
            )
            _until(
                "the cancelled write's connection went back to the pool",
                lambda: _closed(watcher, blocked),
                log,
            )
            locker.rollback()
        _until("no line said the write was cancelled", lambda: " 499 " in log.read_text(), log)
        text = log.read_text()
        assert "went away while its call ran; the call was cancelled" in text, text
        assert "Traceback" not in text and "ERROR" not in text and " 500 " not in text, text
        status, body, headers = server.call("GET", RECORD)  # nothing of it written
        assert (status, body["data"]["data"], headers["etag"]) == (200, {"status": "open"}, '"1"'), body
    finally:
        server.stop()
