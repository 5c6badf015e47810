"""The record routes' requests go from the server straight to the body limit, the token check and
the record handler, past FastAPI's own layers, where those layers would only hand them on: every
answer the same as through them — an unexpected error's 500, a refusal, a middleware added
later, a path the route's pattern does or does not match. A record call on SQLite runs on the
event loop's thread when it is the only call in flight, else on a worker thread (on PostgreSQL
always on a worker thread): writes acknowledged durable
and in order, and a read answered, either way — on a real server, with real clients."""

from __future__ import annotations

import asyncio
import contextvars
import http.client
import json
import math
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateflow import aio
from stateflow.aio import EdgeCalls
from stateflow.errors import Conflict
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.store import SqlStore, open_store
from stateflow.store.postgres import PostgresStore

from . import servers
from .conftest import StoreFactory

ADMIN = "admin-secret-0123456789"
DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SUBJECT = {"target_kind": "agent", "target_name": "alice", "kind": "thread", "key": "t1"}
REC = "/api/states/tickets/records/agent/alice/thread"


@pytest.fixture
def service(store: SqlStore) -> StatesService:
    service = StatesService(store)
    service.install_builtins()
    service.declare("tickets", DECL)
    return service


@pytest.fixture
def sqlite_service(tmp_path: Path) -> Iterator[StatesService]:
    """``service`` on SQLite, where a lone record call may run on the loop's thread (on
    PostgreSQL none does: see the last of the edge's tests)."""
    store = open_store(str(tmp_path / "edge.db"), auto_migrate=True)
    service = StatesService(store)
    service.install_builtins()
    service.declare("tickets", DECL)
    yield service
    store.close()


@pytest.fixture
def client(service: StatesService) -> Iterator[TestClient]:
    app = create_app(service, TokenSet([parse_token(ADMIN)]))
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        yield client


def _asgi(app: ASGIApp, scope: Scope, messages: list[Message]) -> tuple[list[Message], BaseException | None]:
    """``app`` driven by hand: ``messages`` received in turn; what it sent and what it raised."""
    sent: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    async def run() -> BaseException | None:
        try:
            await app(scope, receive, send)
        except Exception as exc:
            return exc
        return None

    return sent, asyncio.run(run())


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {ADMIN}".encode()), *headers],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }


def test_an_unexpected_error_is_the_internal_500_and_raised_for_the_server(service: StatesService) -> None:
    """An error that is not a refusal of ours (here the server's receive failing): answered
    with the server-error layer's 500 and raised to the server, which logs it; nothing written."""
    app = create_app(service, TokenSet([parse_token(ADMIN)]))
    scope = _scope("PUT", f"{REC}/t1", [(b"content-length", b"20")])
    sent, raised = _asgi(app, scope, [])  # (receive raises IndexError)
    assert isinstance(raised, IndexError)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 500
    assert sent[1]["body"] == b'{"error":"internal error","code":"internal"}'
    assert service.read("tickets", SUBJECT) is None
    # a refusal of ours is answered, not raised
    scope = _scope("PUT", f"{REC}/t1", [(b"content-length", b"6")])
    sent, raised = _asgi(app, scope, [{"type": "http.request", "body": b"[1, 2]"}])
    assert raised is None and sent[0]["status"] == 422
    assert service.read("tickets", SUBJECT) is None


@pytest.mark.parametrize("path", [f"{REC}/t1", "/api/states/other"])
def test_a_client_gone_before_its_body_arrived_is_dropped_quietly(service: StatesService, path: str) -> None:
    """Nobody to answer and nothing gone wrong: no answer, nothing raised for the server to log
    as an error (on the record routes' front and through FastAPI's stack alike)."""
    app = create_app(service, TokenSet([parse_token(ADMIN)]))
    sent, raised = _asgi(
        app, _scope("PUT", path, [(b"content-length", b"20")]), [{"type": "http.disconnect"}]
    )
    assert raised is None and sent == []
    assert service.read("tickets", SUBJECT) is None


def test_a_middleware_added_after_the_app_was_made_sees_record_requests(service: StatesService) -> None:
    app = create_app(service, TokenSet([parse_token(ADMIN)]))
    seen: list[str] = []

    class Stamp:
        def __init__(self, app: ASGIApp) -> None:
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                seen.append(scope["path"])
            await self.app(scope, receive, send)

    app.add_middleware(Stamp)
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        assert client.put(f"{REC}/t1", json={"status": "open"}).status_code == 200
        assert client.get(f"{REC}/t1").json()["data"]["data"] == {"status": "open"}
    assert seen == [f"{REC}/t1", f"{REC}/t1"]


def test_record_paths_answer_as_the_route_pattern_matches(client: TestClient, service: StatesService) -> None:
    r = client.put(f"{REC}/t1", json={"status": "open"})
    assert r.status_code == 200 and r.headers["etag"] == '"1"'
    assert r.json()["data"]["data"] == {"status": "open"}
    # the search route's path is a record path whose rest is "search"
    r = client.post("/api/states/tickets/records/search", json={"filters": {"status": "open"}})
    assert r.status_code == 200 and [m["subject"]["key"] for m in r.json()["data"]["matches"]] == ["t1"]
    # a state name cannot hold a slash: no record route (the router's 404)
    r = client.get("/api/states/tick/ets/records/agent/alice/thread/t1")
    assert r.status_code == 404 and r.json()["code"] == "not-found"
    # "records" not right after the name, and no rest at all
    assert client.get("/api/states/tickets/record/agent/alice/thread/t1").status_code == 404
    r = client.get("/api/states/tickets/records/a/b")
    assert r.status_code == 400 and r.json()["code"] == "bad-request"
    r = client.get("/api/states/tickets/records/")  # (a trailing slash: 404, as on every path)
    assert r.status_code == 404 and r.json()["code"] == "not-found"
    # a percent-encoded line break inside the rest or at its end: one of the key's characters
    r = client.put(f"{REC}/a%0Ab", json={"status": "x"})
    assert r.status_code == 200 and r.json()["data"]["subject"]["key"] == "a\nb"
    r = client.put(f"{REC}/ab%0A", json={"status": "x"})
    assert r.status_code == 200 and r.json()["data"]["revision"] == 1
    # a missing or unknown token is refused before the handler
    assert client.put(f"{REC}/t2", json={"status": "x"}, headers={"Authorization": ""}).status_code == 401
    assert service.read("tickets", {**SUBJECT, "key": "t2"}) is None


def test_a_request_under_a_root_path_reaches_the_record_route(service: StatesService) -> None:
    app = create_app(service, TokenSet([parse_token(ADMIN)]))
    with TestClient(app, root_path="/base", headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        r = client.put(f"{REC}/t1", json={"status": "open"})
        assert r.status_code == 200 and r.json()["data"]["revision"] == 1
    assert service.read("tickets", SUBJECT)["data"] == {"status": "open"}  # type: ignore[index]


WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_a_lone_record_call_runs_on_the_loop_and_calls_in_flight_together_take_worker_threads(
    sqlite_service: StatesService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = sqlite_service
    calls = EdgeCalls(service.store)

    def replace(key: str, n: int, expect: int | None = None) -> tuple[int, int, str]:
        seen = WHO.get()
        WHO.set("changed in the call")  # a copy: the caller's context keeps its value
        subject = {**SUBJECT, "key": key}
        record = service.replace("tickets", subject, {"status": str(n)}, expect_revision=expect)
        assert record is not None
        return threading.get_ident(), record["revision"], seen

    def where() -> int:
        return threading.get_ident()

    async def main() -> None:
        loop_thread = threading.get_ident()
        WHO.set("caller")
        # the loop's thread asked at every call how long it waited for a CPU, and told it has
        # CPU to spare whatever it waited; the first ask has nothing to compare: a worker thread
        monkeypatch.setattr(aio, "SAMPLE_SECONDS", 0.0)
        monkeypatch.setattr(aio, "CONTENDED_SHARE", math.inf)
        # no call counts as holding the loop long: on a loaded machine a write there can take
        # over LONG_SECONDS, and the hold it starts is the next test's subject
        monkeypatch.setattr(aio, "LONG_SECONDS", math.inf)
        assert await calls.short(where) != loop_thread
        assert await calls.short(replace, "t1", 1) == (loop_thread, 1, "caller")
        assert WHO.get() == "caller"
        with pytest.raises(Conflict):  # an error comes back as from a worker thread
            await calls.short(replace, "t1", 9, 7)
        # eight at once, as requests read in one loop pass: none runs on the loop
        together = await asyncio.gather(*(calls.short(replace, f"t{i}", i) for i in range(2, 10)))
        assert [(revision, seen) for _, revision, seen in together] == [(1, "caller")] * 8
        assert loop_thread not in {ident for ident, _, _ in together}
        # beside a call in flight (counted by run), a lone record call takes a worker thread too
        release = threading.Event()
        running = asyncio.ensure_future(calls.run(asyncio.to_thread(release.wait, 20)))
        await asyncio.sleep(0)
        beside = asyncio.ensure_future(calls.short(replace, "t1", 2))
        await asyncio.sleep(0.05)
        release.set()
        ident, revision, _ = await beside
        assert ident != loop_thread and revision == 2
        await running
        # having seen calls together, the edge keeps the hop for a while; then a lone call is
        # back on the loop
        monkeypatch.setattr(aio, "SHARED_SECONDS", 60.0)
        await asyncio.gather(calls.short(replace, "t2", 2), calls.short(replace, "t3", 2))
        ident, revision, _ = await calls.short(replace, "t1", 3)
        assert ident != loop_thread and revision == 3
        monkeypatch.setattr(aio, "SHARED_SECONDS", 0.0)
        await asyncio.gather(calls.short(replace, "t2", 3), calls.short(replace, "t3", 3))
        assert (await calls.short(replace, "t1", 4))[:2] == (loop_thread, 4)
        # a machine without CPU to spare (any wait for a CPU is too much): a worker thread
        monkeypatch.setattr(aio, "CONTENDED_SHARE", -1.0)
        assert await calls.short(where) != loop_thread
        monkeypatch.setattr(aio, "CONTENDED_SHARE", math.inf)
        assert await calls.short(where) == loop_thread

    asyncio.run(main())
    reopened = open_store(str(tmp_path / "edge.db"))
    try:
        fresh = StatesService(reopened)  # durable: read afresh
        assert fresh.read("tickets", SUBJECT)["revision"] == 4  # type: ignore[index]
        for i in range(2, 10):
            record = fresh.read("tickets", {**SUBJECT, "key": f"t{i}"})
            assert record is not None and record["data"] == {"status": str(3 if i in (2, 3) else i)}
    finally:
        reopened.close()


def test_without_schedstat_calls_take_worker_threads_and_the_file_is_asked_once_a_sample_time(
    sqlite_service: StatesService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = EdgeCalls(sqlite_service.store)
    stat = tmp_path / "schedstat"  # absent: the system does not say
    monkeypatch.setattr(aio, "SCHEDSTAT", str(stat))
    monkeypatch.setattr(aio, "CONTENDED_SHARE", math.inf)

    def where() -> int:
        return threading.get_ident()

    async def main() -> None:
        loop_thread = threading.get_ident()
        monkeypatch.setattr(aio, "SAMPLE_SECONDS", 60.0)
        assert await calls.short(where) != loop_thread
        stat.write_text("1000 0 1\n")  # now it says, but the unknown answer is kept a sample time
        assert await calls.short(where) != loop_thread
        monkeypatch.setattr(aio, "SAMPLE_SECONDS", 0.0)
        assert await calls.short(where) != loop_thread  # asked again: the first of a series
        assert await calls.short(where) == loop_thread  # compared with it: CPU to spare

    asyncio.run(main())


def test_a_call_that_held_the_loop_long_sends_the_calls_after_it_to_worker_threads_for_a_while(
    sqlite_service: StatesService, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = EdgeCalls(sqlite_service.store)
    monkeypatch.setattr(aio, "SAMPLE_SECONDS", 0.0)
    monkeypatch.setattr(aio, "CONTENDED_SHARE", math.inf)

    def where() -> int:
        return threading.get_ident()

    def slow() -> int:
        time.sleep(0.03)  # as a large record's write, or a wait for another process's turn
        return threading.get_ident()

    async def main() -> None:
        loop_thread = threading.get_ident()
        assert await calls.short(where) != loop_thread  # the first sample: nothing to compare
        monkeypatch.setattr(aio, "LONG_HOLD_SECONDS", 60.0)
        monkeypatch.setattr(aio, "LONG_SECONDS", 60.0)  # not long by this measure
        assert await calls.short(slow) == loop_thread
        assert await calls.short(where) == loop_thread
        monkeypatch.setattr(aio, "LONG_SECONDS", 0.01)  # long by this one: the hop for a while
        assert await calls.short(slow) == loop_thread
        assert await calls.short(where) != loop_thread
        assert await calls.short(slow) != loop_thread
        # calls seen together meanwhile, with no window of their own, do not shorten the hold
        monkeypatch.setattr(aio, "SHARED_SECONDS", 0.0)
        await asyncio.gather(calls.short(where), calls.short(where))
        assert await calls.short(where) != loop_thread

    asyncio.run(main())


def test_a_lone_record_call_runs_on_the_loop_only_on_sqlite_never_on_postgresql(
    service: StatesService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL call waits on the network and on other sessions' locks: on the loop's thread
    it would hold every request (and the loop that watches for its client's going away), so it
    takes a worker thread even alone, with CPU to spare; a SQLite call then runs on the loop."""
    calls = EdgeCalls(service.store)
    monkeypatch.setattr(aio, "SAMPLE_SECONDS", 0.0)
    monkeypatch.setattr(aio, "CONTENDED_SHARE", math.inf)
    monkeypatch.setattr(aio, "LONG_SECONDS", math.inf)
    on_loop = not isinstance(service.store, PostgresStore)

    def replace(n: int) -> int:
        service.replace("tickets", SUBJECT, {"status": str(n)})
        return threading.get_ident()

    async def main() -> None:
        loop_thread = threading.get_ident()
        await calls.short(replace, 0)  # the first sample: nothing to compare
        for n in range(1, 4):
            assert (await calls.short(replace, n) == loop_thread) is on_loop

    asyncio.run(main())
    assert service.read("tickets", SUBJECT)["data"] == {"status": "3"}  # type: ignore[index]


SERVING = "serving-edge"
"""The name of the thread that runs the served app's event loop."""


@contextmanager
def _serving(service: StatesService) -> Iterator[int]:
    """The app under uvicorn on its own thread and event loop; its port."""
    port = servers.free_port()
    app = create_app(service, TokenSet([parse_token(ADMIN)]))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True, name=SERVING)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield port
    finally:
        server.should_exit = True
        thread.join(30)


def _request(
    port: int, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(
            method,
            path,
            body=None if body is None else json.dumps(body),
            headers={
                "Authorization": f"Bearer {ADMIN}",
                "Content-Type": "application/json",
                **(headers or {}),
            },
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_a_write_behind_another_connections_lock_waits_off_the_loop_and_keeps_its_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone write that finds the file's write lock held by another connection waits for it on
    a worker thread, not on the loop: a read arriving meanwhile is answered at once, and a
    second write (expecting the first's revision) arriving meanwhile is answered after the
    first, in its order; all durable."""
    # A lone write would run on the loop however loaded the machine (its CPU, a slow write
    # before): the edge's speed thresholds are not this test's subject; the lock is.
    monkeypatch.setattr(aio, "SAMPLE_SECONDS", 0.0)
    monkeypatch.setattr(aio, "CONTENDED_SHARE", math.inf)
    monkeypatch.setattr(aio, "LONG_SECONDS", math.inf)
    path = tmp_path / "store.db"
    store = open_store(str(path), auto_migrate=True, wait_seconds=60)
    service = StatesService(store)
    try:
        service.install_builtins()
        service.declare("tickets", DECL)
        answers: dict[str, tuple[int, Any]] = {}

        def send(
            name: str, port: int, method: str, body: Any = None, revision: int | None = None
        ) -> threading.Thread:
            headers = {} if revision is None else {"If-Match": f'"{revision}"'}
            thread = threading.Thread(
                target=lambda: answers.__setitem__(name, _request(port, method, f"{REC}/t1", body, headers))
            )
            thread.start()
            return thread

        with _serving(service) as port:
            for n in range(3):  # (the edge's first load sample, then writes on the loop)
                assert _request(port, "PUT", f"{REC}/t1", {"status": f"new {n}"})[0] == 200
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # the file's write lock, held by another connection
            try:
                turns = store._group.queue  # type: ignore[attr-defined]
                first = send("first", port, "PUT", {"status": "first"}, revision=3)
                deadline = time.monotonic() + 60  # (not a fixed sleep a loaded machine outlasts)
                while not turns.held:  # the first write's turn: held by the lock
                    assert time.monotonic() < deadline and first.is_alive(), answers
                    time.sleep(0.005)
                second = send("second", port, "PUT", {"status": "second"}, revision=4)
                read = send("read", port, "GET")
                read.join(60)
                assert answers["read"][0] == 200 and answers["read"][1]["data"]["revision"] == 3
                assert "first" not in answers and "second" not in answers
            finally:
                holder.execute("COMMIT")
                holder.close()
            for thread in (first, second):
                thread.join(60)
        assert answers["first"][0] == 200 and answers["first"][1]["data"]["revision"] == 4
        assert answers["second"][0] == 200, answers["second"]
        assert answers["second"][1]["data"]["revision"] == 5
    finally:
        service.close()
        store.close()
    fresh = open_store(str(path))
    try:
        record = StatesService(fresh).read("tickets", SUBJECT)
        assert record is not None and (record["revision"], record["data"]) == (5, {"status": "second"})
    finally:
        fresh.close()


def test_one_writer_then_many_writers_and_readers_over_http_all_acknowledged_durable(
    service: StatesService, open_migrated: StoreFactory
) -> None:
    """Requests alone (on the loop) and side by side (on worker threads), and the turns between:
    every write acknowledged in its order (each expects the revision before it), every read
    answered with a revision acknowledged, every write read back from a store opened afresh."""
    writes = 12
    with _serving(service) as port:
        for n in range(1, writes + 1):  # one writer alone
            status, body = _request(
                port, "PUT", f"{REC}/solo", {"status": str(n)}, {"If-Match": f'"{n - 1}"'} if n > 1 else None
            )
            assert status == 200 and body["data"]["revision"] == n
        failures: list[str] = []

        def writer(key: str) -> None:
            for n in range(1, writes + 1):
                headers = {"If-Match": f'"{n - 1}"'} if n > 1 else None
                status, body = _request(port, "PUT", f"{REC}/{key}", {"status": str(n)}, headers)
                if status != 200 or body["data"]["revision"] != n:
                    failures.append(f"{key} write {n}: {status} {body}")

        def reader() -> None:
            for _ in range(writes):
                status, body = _request(port, "GET", f"{REC}/solo")
                if status != 200 or body["data"]["revision"] != writes:
                    failures.append(f"read: {status} {body}")

        threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(6)]
        threads += [threading.Thread(target=reader) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert failures == []
    fresh = StatesService(open_migrated())
    for key in ("solo", *(f"w{i}" for i in range(6))):
        record = fresh.read("tickets", {**SUBJECT, "key": key})
        assert record is not None and (record["revision"], record["data"]) == (
            writes,
            {"status": str(writes)},
        )
