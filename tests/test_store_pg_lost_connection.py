"""PostgreSQL: a connection that ends while a call is using it fails that call with
``store-unavailable`` (HTTP 503) and a one-line message — whether the server ended it
(``pg_terminate_backend``) or it failed without a word from the server (the network dropped it)
— and ``stateflow check`` answers it as an unreachable store, never as damage."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from stateflow.errors import StateflowError, StoreUnavailable
from stateflow.store import DocKey, Write
from stateflow.store.async_bridge import spawn
from stateflow.store.check import check_store
from stateflow.store.postgres import PostgresStore
from stateflow.store.postgres_async import AsyncPostgresStore
from tests.http_api import tenant_api
from tests.pg_helpers import backends_of, set_n

KEY = DocKey("k", "doc")


@pytest.fixture
def app() -> str:
    return f"lost-{uuid.uuid4().hex[:8]}"


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "PostgreSQL did not get there within 60 s"
        time.sleep(0.02)  # (polling what the server shows, not waiting for time to pass)


def _waiting_on_a_lock(url: str, app: str) -> bool:
    with psycopg.connect(url, autocommit=True) as admin:
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'"
        )
        return bool(admin.execute(query, (app,)).fetchone()[0])  # type: ignore[index]


def _end_connections(url: str, app: str) -> None:
    pids = backends_of(url, app)
    with psycopg.connect(url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    _until(lambda: not set(pids) & set(backends_of(url, app)))


@contextmanager
def _row_locked(url: str, key: DocKey) -> Iterator[None]:
    """``key``'s document row locked by another session, so a write of it waits on the server."""
    with psycopg.connect(url) as holder:
        holder.execute(
            "SELECT 1 FROM documents WHERE state = %s AND subject = %s FOR UPDATE", (key.state, key.subject)
        )
        yield
        holder.rollback()


def _opened(url: str) -> PostgresStore:
    store = PostgresStore(url, auto_migrate=True)
    store.commit([Write.between(KEY, None, {"n": 0})])
    for n in (1, 2):  # (known here: the next writes are optimistic, each one statement sent alone)
        store.update([KEY], set_n(n), optimistic=True)
    return store


@contextmanager
def _table_locked(url: str) -> Iterator[None]:
    """The documents table locked by another session, so any statement reading it waits."""
    with psycopg.connect(url) as holder:
        holder.execute("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")
        yield
        holder.rollback()


def _failure(
    call: Callable[[], Any], url: str, app: str, cut: Callable[[], None], *, table: bool = False
) -> BaseException:
    """What ``call`` raises when ``cut`` ends its connection while it waits for ``KEY``'s row lock
    (the documents table's, with ``table``): a deterministic point, the statement is on the
    server, not yet answered; ``url`` is the store's, without its ``application_name``: the
    other sessions' here."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            failed.append(exc)

    with _table_locked(url) if table else _row_locked(url, KEY):
        thread = threading.Thread(target=run)
        thread.start()
        _until(lambda: _waiting_on_a_lock(url, app))
        cut()
        thread.join(60)
    assert not thread.is_alive() and failed, "the call did not fail"
    return failed[0]


class _Proxy:
    """A TCP relay to the PostgreSQL server whose connections can be dropped at once, as a network
    failure or a failover drops them: the client's libpq reads the end of its socket with no
    message from the server (unlike ``pg_terminate_backend``, whose backend says why it ends)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):  # (dropped)
            while data := source.recv(65536):
                sink.sendall(data)

    def drop(self) -> None:
        """Every relayed connection shut down both ways at once."""
        with self.lock:
            for sock in self.sockets:
                with closing(sock), suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.sockets.clear()

    def close(self) -> None:
        self.listener.close()
        self.drop()

    def url(self, url: str) -> str:
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)
        at = f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{at}" if len(netloc) == 2 else at))


@pytest.fixture
def proxy(pg_schema_url: str) -> Iterator[_Proxy]:
    parts = urlsplit(pg_schema_url)
    relay = _Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        yield relay
    finally:
        relay.close()


def _one_line_unavailable(exc: BaseException) -> StoreUnavailable:
    assert isinstance(exc, StoreUnavailable), repr(exc)
    assert exc.code == "store-unavailable" and exc.http_status == 503
    assert "\n" not in exc.message and "\t" not in exc.message, exc.message
    assert "CONTEXT" not in exc.message and "PL/pgSQL" not in exc.message, exc.message
    return exc


@pytest.mark.parametrize("optimistic", [True, False], ids=["sent-alone", "locked"])
def test_a_write_whose_connection_the_server_ends_is_unavailable_in_one_line(
    pg_schema_url: str, app: str, optimistic: bool
) -> None:
    """Sent alone, libpq's blocking call answers with a result of its own, without a SQLSTATE
    (once a ``store-error``, HTTP 500); in a transaction, psycopg's ``OperationalError`` (once
    passed on over three lines)."""
    url = f"{pg_schema_url}&application_name={app}"
    store = _opened(url)
    try:
        failure = _failure(
            lambda: store.update([KEY], set_n(3), optimistic=optimistic),
            pg_schema_url,
            app,
            lambda: _end_connections(pg_schema_url, app),
        )
        _one_line_unavailable(failure)
        # the server ended the write before it ran: nothing was written, and the next write goes
        # through on a fresh connection
        assert store.get(KEY).body == {"n": 2}
        store.update([KEY], set_n(3), optimistic=True)
        assert store.get(KEY).body == {"n": 3} and store.get(KEY).revision == 4
    finally:
        store.close()


def test_a_read_whose_connection_the_server_ends_is_unavailable_in_one_line(
    pg_schema_url: str, app: str
) -> None:
    """The server's message only: not the statement's text it points into (``LINE 1: …``)."""
    url = f"{pg_schema_url}&application_name={app}"
    store = _opened(url)
    try:
        failure = _failure(
            lambda: store.get(KEY),
            pg_schema_url,
            app,
            lambda: _end_connections(pg_schema_url, app),
            table=True,
        )
        message = _one_line_unavailable(failure).message
        assert "LINE" not in message and "documents" not in message, message
        assert store.get(KEY).body == {"n": 2}
    finally:
        store.close()


def test_a_write_whose_connection_drops_without_a_word_is_unavailable(
    pg_schema_url: str, app: str, proxy: _Proxy
) -> None:
    url = f"{pg_schema_url}&application_name={app}"
    store = _opened(proxy.url(url))
    try:
        failure = _failure(
            lambda: store.update([KEY], set_n(3), optimistic=True), pg_schema_url, app, proxy.drop
        )
        assert "server closed the connection unexpectedly" in _one_line_unavailable(failure).message
        # (the server, unaware its client is gone, may have committed the write once the lock was
        # free: the call cannot know; the store goes on, through the relay, on a new connection)
        store.update([KEY], set_n(4), optimistic=True)
        assert store.get(KEY).body == {"n": 4}
    finally:
        store.close()


def test_http_answers_a_write_whose_connection_drops_503(pg_schema_url: str, app: str, proxy: _Proxy) -> None:
    url = f"{pg_schema_url}&application_name={app}"
    store = PostgresStore(proxy.url(url), auto_migrate=True)
    try:
        with tenant_api(store) as api:
            schema = {
                "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "subject_kinds": ["thing"],
                "default_subject_kind": "thing",
            }
            assert api("PUT", "/api/states/k", schema)[0] == 200
            path = "/api/states/k/records/agent/a/thing/doc/deltas"
            assert api("POST", path, {"ops": [{"op": "set", "path": ["n"], "value": 0}]})[0] == 200
            answers: list[tuple[int, Any]] = []
            with _row_locked(pg_schema_url, _only_document(pg_schema_url, "k")):
                thread = threading.Thread(
                    target=lambda: answers.append(
                        api("POST", path, {"ops": [{"op": "set", "path": ["n"], "value": 1}]})
                    )
                )
                thread.start()
                _until(lambda: _waiting_on_a_lock(pg_schema_url, app))
                proxy.drop()
                thread.join(60)
            assert not thread.is_alive() and answers
            status, body = answers[0]
            assert (status, body["code"]) == (503, "store-unavailable"), body
            assert "\n" not in body["error"], body
    finally:
        store.close()


def _only_document(url: str, state: str) -> DocKey:
    with psycopg.connect(url, autocommit=True) as admin:
        ((subject,),) = admin.execute("SELECT subject FROM documents WHERE state = %s", (state,)).fetchall()
    return DocKey(state, subject)


def test_check_answers_a_connection_lost_part_way_as_unavailable_not_damage(
    pg_schema_url: str, app: str
) -> None:
    url = f"{pg_schema_url}&application_name={app}"
    store = _opened(url)
    ended: list[bool] = []

    def progress(what: str, n: int) -> None:
        # the first revision is told while its replay's read transaction is open: the check's
        # next statement runs on a connection the server ended
        if what == "revisions" and not ended:
            ended.append(True)
            _end_connections(pg_schema_url, app)

    try:
        with pytest.raises(StateflowError) as caught:
            check_store(store, progress=progress)
        assert ended
        _one_line_unavailable(caught.value)
        assert check_store(store).ok  # the store was whole all along
    finally:
        store.close()


def test_the_async_store_answers_a_lost_connection_the_same(pg_schema_url: str, app: str) -> None:
    url = f"{pg_schema_url}&application_name={app}"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        store = await AsyncPostgresStore.connect(url, auto_migrate=True)
        try:
            await spawn(store.commit, [Write.between(KEY, None, {"n": 0})])
            for n in (1, 2):
                await spawn(store.update, [KEY], set_n(n))

            def update() -> Any:
                return asyncio.run_coroutine_threadsafe(spawn(store.update, [KEY], set_n(3)), loop).result()

            failure = await asyncio.to_thread(
                _failure, update, pg_schema_url, app, lambda: _end_connections(pg_schema_url, app)
            )
            _one_line_unavailable(failure)
            assert (await spawn(store.get, KEY)).body == {"n": 2}
        finally:
            await spawn(store.close)

    asyncio.run(main())
