"""PostgreSQL failure behaviour against the real server: an unreachable URL fails fast naming its
cause; during an outage writers fail after a bounded wait with `store-unavailable`; when the
server is back, the same store (and server process) works again without a restart."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from stateflow.errors import StoreUnavailable
from stateflow.store import DocKey, Write, open_store

from . import servers
from .conftest import PG_URL
from .tcp_proxy import Proxy


def sf(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["stateflow", *args], capture_output=True, text=True, timeout=120, env=dict(os.environ, **env)
    )


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("postgresql://postgres@127.0.0.1:{closed}/postgres", "Connection refused"),
        ("postgresql://postgres@no-such-host.invalid/postgres", "no-such-host.invalid"),
        ("{pg}/no_such_database_here", 'database "no_such_database_here" does not exist'),
        ("{pg_no_user}", 'role "no_such_role_here" does not exist'),
    ],
)
def test_an_unreachable_url_fails_at_once_naming_the_cause(url: str, cause: str) -> None:
    if not PG_URL:
        pytest.skip("PostgreSQL not configured")
    parts = urlsplit(PG_URL)
    url = url.format(
        closed=servers.free_port(),
        pg=urlunsplit(parts._replace(path="")),
        pg_no_user=urlunsplit(parts._replace(netloc="no_such_role_here@" + parts.netloc.split("@")[-1])),
    )
    began = time.monotonic()
    out = sf("--store", url, "doc", "get", "a", "b")
    assert time.monotonic() - began < 20  # was 31 s
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr  # no pool log lines
    assert lines[0].startswith("error[store-unavailable]: cannot connect to ") and cause in lines[0]


def test_a_urls_own_connect_timeout_wins_over_the_configured_one() -> None:
    """A server that takes the connection and never answers: the URL's ``connect_timeout=2``
    bounds the attempt though the setting says an hour (the setting, always passed, overrode it,
    and the command hung past this test's subprocess timeout)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nothing ever answers
        url = f"postgresql://postgres@127.0.0.1:{silent.getsockname()[1]}/postgres?connect_timeout=2"
        out = sf("--store", url, "doc", "get", "a", "b", STATEFLOW_STORE_CONNECT_TIMEOUT_SECONDS="3600")
    assert out.returncode == 1
    assert out.stderr.startswith("error[store-unavailable]: cannot connect to "), out.stderr
    assert "timeout" in out.stderr, out.stderr


@pytest.fixture
def proxied(pg_schema_url: str) -> Iterator[tuple[Proxy, str]]:
    """The test schema reached through a proxy that can cut the database off."""
    parts = urlsplit(pg_schema_url)
    assert parts.hostname and parts.port
    proxy = Proxy(parts.hostname, parts.port)
    proxy.start()
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    url = urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))
    yield proxy, url
    proxy.stop()


def _bump(store: object, key: DocKey) -> int:
    from stateflow.store import SqlStore

    assert isinstance(store, SqlStore)
    doc = store.get(key)
    n = (doc.body or {}).get("n", 0) + 1
    store.commit([Write.between(key, doc.value, {"n": n}, doc.revision)], {"door": "test"})
    return int(n)


def test_writers_fail_after_a_bounded_wait_during_an_outage_and_recover(proxied: tuple[Proxy, str]) -> None:
    proxy, url = proxied
    store = open_store(url, auto_migrate=True, wait_seconds=2)
    key = DocKey("counters", "c")
    try:
        assert _bump(store, key) == 1
        proxy.stop()
        for _ in range(3):  # a broken pooled connection, then no connection within the wait
            began = time.monotonic()
            with pytest.raises(StoreUnavailable):
                _bump(store, key)
            assert time.monotonic() - began < 8  # the 2 s wait (the default is 10 s)
        proxy.start()
        deadline = time.monotonic() + 30
        while True:  # the pool reconnects by itself
            try:
                assert _bump(store, key) == 2
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "the store did not recover"
                time.sleep(0.5)
        assert store.get(key).body == {"n": 2}
    finally:
        store.close()
    with psycopg.connect(url) as conn:  # nothing half-written during the outage
        assert conn.execute("SELECT max(revision) FROM documents").fetchone() == (2,)


def test_a_server_answers_503_during_an_outage_and_recovers_without_restart(
    proxied: tuple[Proxy, str], tmp_path: Path
) -> None:
    proxy, url = proxied
    env = servers.base_env(tmp_path, url, STATEFLOW_STORE_WAIT_SECONDS="2")
    assert sf("--store", url, "migrate").returncode == 0
    log = tmp_path / "server.log"
    server = servers.start(env, log=log)
    try:
        state = {
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "subject_kinds": ["thread"],
            "default_subject_kind": "thread",
        }
        assert server.call("PUT", "/api/states/c", state)[0] == 200
        record = "/api/states/c/records/agent/a/thread/x"
        assert server.call("PUT", record, {"n": 1})[0] == 200
        proxy.stop()
        for _ in range(3):
            began = time.monotonic()
            status, body, _ = server.call("PUT", record, {"n": 2})
            assert (status, body["code"]) == (503, "store-unavailable")
            assert time.monotonic() - began < 12
        assert server.call("GET", "/api/ready")[0] == 503
        assert server.call("GET", "/api/health")[0] == 200
        proxy.start()
        deadline = time.monotonic() + 30
        while server.call("PUT", record, {"n": 3})[0] != 200:
            assert time.monotonic() < deadline, "the server did not recover"
            time.sleep(0.5)
        # a write recovering does not promise the next read a connection at once: psycopg's
        # pool grows one connection at a time, and an attempt that failed during the outage
        # waits out its backoff (1, 2, 4… s) before trying again, no other growth meanwhile (a
        # read once waited past the store's 2 s for one, 503): each recovers within the deadline
        while (got := server.call("GET", record))[0] != 200:
            assert got[1]["code"] == "store-unavailable", got
            assert time.monotonic() < deadline, "reads did not recover"
            time.sleep(0.5)
        assert got[1]["data"]["data"] == {"n": 3}
        while server.call("GET", "/api/ready")[0] != 200:
            assert time.monotonic() < deadline, "the server did not report ready again"
            time.sleep(0.5)
    finally:
        server.stop()
    lines = [line for line in log.read_text().splitlines() if line.strip() and "stateflow.access" not in line]
    banner = next(i for i, line in enumerate(lines) if line.startswith("studio on ")) + 1
    assert lines[banner:] == [], lines  # the banner's lines, up to the studio's; no pool log lines
