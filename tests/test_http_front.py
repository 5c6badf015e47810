"""The record routes' requests go from the server straight to the body limit, the token check and
the record handler, past FastAPI's own layers, where those layers would only hand them on: every
answer the same as through them — an unexpected error's 500, a refusal, a middleware added
later, a path the route's pattern does or does not match."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.store import SqlStore

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
    """A client gone before its body arrived: not a refusal of ours — answered with the
    server-error layer's 500 and raised to the server, which logs it; nothing written."""
    app = create_app(service, TokenSet([parse_token(ADMIN)]))
    scope = _scope("PUT", f"{REC}/t1", [(b"content-length", b"20")])
    sent, raised = _asgi(app, scope, [{"type": "http.disconnect"}])
    assert isinstance(raised, ClientDisconnect)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 500
    assert sent[1]["body"] == b'{"error":"internal error","code":"internal"}'
    assert service.read("tickets", SUBJECT) is None
    # a refusal of ours is answered, not raised
    scope = _scope("PUT", f"{REC}/t1", [(b"content-length", b"6")])
    sent, raised = _asgi(app, scope, [{"type": "http.request", "body": b"[1, 2]"}])
    assert raised is None and sent[0]["status"] == 400
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
    r = client.get("/api/states/tickets/records/")
    assert r.status_code == 400 and r.json()["code"] == "bad-request"
    # a percent-encoded line break inside the rest: the route's `.*` stops at it, so its
    # pattern does not match (the router's 404); at the very end `$` lets it through
    r = client.put(f"{REC}/a%0Ab", json={"status": "x"})
    assert r.status_code == 404 and r.json()["code"] == "not-found"
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
