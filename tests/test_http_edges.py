"""The HTTP server at its edges: bodies not read before the token is checked, bodies that never
arrive, clients that go away, and the request id — against a real `stateflow serve`."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import servers

PUT = b"PUT /api/states/tickets/records/agent/alice/thread/t1 HTTP/1.1\r\nHost: x\r\n"


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[tuple[servers.Server, Path]]:
    """A server at log level info, on SQLite, its stderr kept; one state declared."""
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"), STATEFLOW_BODY_TIMEOUT_SECONDS="1")
    log = tmp_path / "server.log"
    server = servers.start(env, "--log-level", "info", log=log)
    try:
        status, said, _ = server.call(
            "PUT",
            "/api/states/tickets",
            {
                "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
                "subject_kinds": ["thread"],
                "default_subject_kind": "thread",
            },
        )
        assert status == 200, said
        yield server, log
    finally:
        server.stop()


def _exchange(server: servers.Server, raw: bytes) -> tuple[bytes, bool]:
    """Send ``raw`` and read what comes back until the server closes the connection (True), or
    until a minute passes without it (False: the server still holds it)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.settimeout(60)
        sock.sendall(raw)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            return answer, False
        return answer, True


def test_a_request_without_a_token_is_refused_before_its_body_is_read(
    logged: tuple[servers.Server, Path],
) -> None:
    server, _ = logged
    # a chunked body announced but never sent: the 401 comes at once, and the connection is
    # closed after it (the client cannot go on sending the body)
    answer, closed = _exchange(server, PUT + b"Transfer-Encoding: chunked\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 401 ") and closed, answer
    answer, closed = _exchange(server, PUT + b"Content-Length: 5000000\r\n\r\n" + b"x" * 1000)
    assert answer.startswith(b"HTTP/1.1 401 ") and closed, answer
    # a declared length over the body limit too: the token first, none of the body read
    answer, closed = _exchange(server, PUT + b"Content-Length: 20000000\r\n\r\n" + b"x" * 1000)
    assert answer.startswith(b"HTTP/1.1 401 ") and closed, answer


def test_a_body_that_does_not_arrive_in_time_is_408_and_the_connection_closed(
    logged: tuple[servers.Server, Path],
) -> None:
    server, _ = logged
    auth = f"Authorization: Bearer {servers.TOKEN}\r\n".encode()
    answer, closed = _exchange(server, PUT + auth + b"Content-Length: 100\r\n\r\n{")
    assert answer.startswith(b"HTTP/1.1 408 ") and closed, answer
    assert b'"code":"request-timeout"' in answer
    answer, closed = _exchange(server, PUT + auth + b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n")
    assert answer.startswith(b"HTTP/1.1 408 ") and closed, answer
    status, body, _ = server.call("GET", "/api/states/tickets/records/agent/alice/thread/t1")
    assert status == 200 and body["data"] is None  # nothing written


def test_a_client_going_away_mid_body_is_one_info_line_not_a_traceback(
    logged: tuple[servers.Server, Path],
) -> None:
    server, log = logged
    auth = f"Authorization: Bearer {servers.TOKEN}\r\n".encode()
    host, port = server.url.removeprefix("http://").split(":")
    for request in (PUT, b"PUT /api/states/other HTTP/1.1\r\nHost: x\r\n"):  # a record route, and another
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(request + auth + b"Content-Length: 100\r\n\r\n{")
    deadline = time.monotonic() + 60
    while log.read_text().count("went away before its request body was read") < 2:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    while (
        log.read_text().count(" 499 ") < 2
    ):  # logged as the client's going away (the access line comes last)
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text and "ClientDisconnect" not in text, text
    assert " 500 " not in text, text
    status, body, _ = server.call("GET", "/api/states/tickets/records/agent/alice/thread/t1")
    assert status == 200 and body["data"] is None


def test_a_client_going_away_mid_mcp_request_is_one_info_line_not_a_500(
    logged: tuple[servers.Server, Path],
) -> None:
    # the MCP SDK reads its own bodies and answers a client gone mid-body as a server failure
    server, log = logged
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\n"
            + f"Authorization: Bearer {servers.TOKEN}\r\n".encode()
            + b'Content-Length: 1000\r\n\r\n{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {'
        )
    deadline = time.monotonic() + 120  # (the first /mcp request waits for the MCP SDK to load)
    while "POST /mcp 499 " not in log.read_text():  # (the access line comes last)
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    text = log.read_text()
    assert "POST /mcp: the client went away before its request body was read" in text, text
    assert "Traceback" not in text and "ERROR" not in text and "ClientDisconnect" not in text, text
    assert " 500 " not in text, text


@pytest.mark.parametrize("level", ["warning", "error"])
def test_the_request_id_is_answered_whatever_the_log_level(tmp_path: Path, level: str) -> None:
    server = servers.start(servers.base_env(tmp_path, str(tmp_path / "s.db")), "--log-level", level)
    try:
        request = urllib.request.Request(
            server.url + "/api/states",
            headers={"Authorization": f"Bearer {servers.TOKEN}", "X-Request-ID": "req-42"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["X-Request-ID"] == "req-42"
        _, _, headers = server.call("GET", "/api/states/nothing")  # (a refusal, an id of its own)
        assert len(headers["x-request-id"]) == 16
    finally:
        server.stop()
