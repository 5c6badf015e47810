"""The access log and CORS of a real `stateflow serve`."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from stateflow.http.auth import parse_token

from . import servers


def serve_logged(tmp_path: Path, *args: str) -> tuple[servers.Server, Path]:
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"))
    log = tmp_path / "server.log"
    port = servers.free_port()
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            ["stateflow", "serve", "--port", str(port), "--token", servers.TOKEN, *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    server = servers.Server(f"http://127.0.0.1:{port}", proc)
    servers.wait_ready(server)
    return server, log


def test_json_access_log_one_line_per_request(tmp_path: Path) -> None:
    server, log = serve_logged(tmp_path, "--log-format", "json")
    try:
        request = urllib.request.Request(
            server.url + "/api/states",
            headers={"Authorization": f"Bearer {servers.TOKEN}", "X-Request-ID": "req-42"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["X-Request-ID"] == "req-42"
        assert server.call("GET", "/api/states", token="wrong-token-0123456789")[0] == 401
        status, _, headers = server.call("GET", "/api/nope")
        assert status == 404
    finally:
        server.stop()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    access = [
        line for line in lines if line["logger"] == "stateflow.access" and line["path"] != "/api/health"
    ]
    assert [(a["method"], a["path"], a["status"]) for a in access] == [
        ("GET", "/api/states", 200),
        ("GET", "/api/states", 401),
        ("GET", "/api/nope", 404),
    ]
    assert access[0]["token"] == parse_token(servers.TOKEN).principal  # the audit trail's fingerprint
    assert access[0]["request_id"] == "req-42"
    assert access[2]["request_id"] == headers["x-request-id"] and len(access[2]["request_id"]) == 16
    assert all(isinstance(a["duration_ms"], float) for a in access)
    assert servers.TOKEN not in log.read_text()


def test_log_level_warning_silences_the_access_log(tmp_path: Path) -> None:
    server, log = serve_logged(tmp_path, "--log-level", "warning")
    try:
        assert server.call("GET", "/api/states")[0] == 200
    finally:
        server.stop()
    assert "stateflow.access" not in log.read_text()


def test_a_path_cannot_write_lines_into_the_text_log(tmp_path: Path) -> None:
    """A request's path is the client's, percent-decoded: a line break, an ESC or a bidi control
    in it is written escaped, so a caller (without a token) cannot forge the server's lines."""
    server, log = serve_logged(tmp_path)
    forged = "2026-01-01 00:00:00,000 INFO stateflow.access DELETE /api/states/prod 200 1.0ms"
    try:
        path = "/api/x%0A" + urllib.parse.quote(forged) + "%1B%5B2J%E2%80%AE"
        assert server.call("GET", path, token="wrong-token-0123456789")[0] == 401
    finally:
        server.stop()
    text = log.read_text()
    assert not any(line.startswith(forged) for line in text.splitlines())
    (line,) = [line for line in text.splitlines() if "/api/x" in line]
    assert f" INFO stateflow.access GET /api/x\\n{forged}\\x1b[2J\\u202e 401 " in line


def _preflight(server: servers.Server, origin: str) -> dict[str, str]:
    request = urllib.request.Request(
        server.url + "/api/states/x",
        method="OPTIONS",
        headers={"Origin": origin, "Access-Control-Request-Method": "PUT"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as exc:
        return {k.lower(): v for k, v in exc.headers.items()}


def test_cors_is_off_by_default_and_allows_only_configured_origins(tmp_path: Path) -> None:
    server, _ = serve_logged(tmp_path)
    try:
        assert "access-control-allow-origin" not in _preflight(server, "https://app.example.com")
    finally:
        server.stop()
    server, _ = serve_logged(tmp_path, "--cors-origin", "https://app.example.com")
    try:
        allowed = _preflight(server, "https://app.example.com")
        assert allowed["access-control-allow-origin"] == "https://app.example.com"
        assert "PUT" in allowed["access-control-allow-methods"]
        assert "access-control-allow-origin" not in _preflight(server, "https://evil.example.com")
    finally:
        server.stop()


def test_text_access_lines_carry_the_time_and_fingerprint_as_logging_formats_them() -> None:
    """The access log keeps the time's text per second and a fingerprint per header: each line
    reads as ``logging.Formatter`` and a fresh hash would make it, across seconds and tokens."""
    import hashlib
    import logging

    from stateflow.http import access

    layout = "%(asctime)s %(levelname)s %(name)s %(message)s"
    ours, plain = access._Formatter(layout), logging.Formatter(layout)
    for created in (1_700_000_000.004, 1_700_000_000.999, 1_700_000_001.5, 1_700_000_000.25):
        record = logging.LogRecord("stateflow.access", logging.INFO, __file__, 1, "GET %s", ("/x",), None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert ours.format(record) == plain.format(record)
    for secret in (b"one", b"two", b"one"):
        expected = "token:" + hashlib.sha256(secret).hexdigest()[:12]
        assert access.fingerprint(b"Bearer " + secret) == expected
    assert access.fingerprint(b"Basic abc") == "-"


@contextmanager
def _configured(json_lines: bool) -> Iterator[tuple[io.StringIO, logging.StreamHandler[Any]]]:
    """The log set up as ``stateflow serve`` sets it up, its lines into a string; the
    ``stateflow`` logger's setup put back after."""
    from stateflow.http import access

    root = logging.getLogger("stateflow")
    saved = (root.handlers[:], root.level, root.propagate)
    try:
        access.configure("info", json_lines=json_lines)
        handler = root.handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        stream = io.StringIO()
        handler.setStream(stream)
        yield stream, handler
    finally:
        root.handlers[:], root.level, root.propagate = saved


CALLS: list[tuple[dict[str, Any], int, float, dict[bytes, bytes], str]] = [
    (
        {"method": "PUT", "path": "/api/states/s/records/a/b/c/k"},
        200,
        0.0012345,
        {b"authorization": b"Bearer t-1"},
        "r1",
    ),
    ({"method": "GET", "path": "/api/states/s/records/a/b/c/ü %"}, 404, 0.25, {}, "0123456789abcdef"),
    ({"method": "DELETE", "path": "/x"}, 500, 12.0, {b"authorization": b"Basic abc"}, "r-3"),
]


@pytest.mark.parametrize("json_lines", [False, True])
def test_access_lines_written_straight_read_as_the_logging_record_makes_them(
    monkeypatch: pytest.MonkeyPatch, json_lines: bool
) -> None:
    """An access line is written without a ``logging`` record while nothing but the handler
    ``configure`` installs would see the record; it reads as the record's line does. Anything
    added to the setup (a filter, a handler, a record factory, a level) gets the record, as
    before."""
    from stateflow.http import access

    # one instant for both paths (``logging.LogRecord`` reads the clock as the access log does)
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_123_456_789)
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.123456789)
    log = access.AccessLog(lambda *_: None, json_lines=json_lines)  # type: ignore[arg-type]

    def admit(record: logging.LogRecord) -> bool:
        return True

    for call in CALLS:
        with _configured(json_lines) as (stream, _):
            assert access._straight() is not None
            log._log(*call)
            access.logger.addFilter(admit)  # the record path from here
            try:
                assert access._straight() is None
                log._log(*call)
            finally:
                access.logger.removeFilter(admit)
            straight, recorded = stream.getvalue().splitlines()
            assert straight == recorded
    with _configured(json_lines) as (stream, _):
        log._log(*CALLS[0])
        line = stream.getvalue()
    if json_lines:
        assert json.loads(line) == {
            "time": json.loads(line)["time"],
            "level": "info",
            "logger": "stateflow.access",
            "method": "PUT",
            "path": "/api/states/s/records/a/b/c/k",
            "status": 200,
            "duration_ms": 1.23,
            "token": access.fingerprint(b"Bearer t-1"),
            "request_id": "r1",
        }
    else:
        assert line.endswith(
            f" INFO stateflow.access PUT /api/states/s/records/a/b/c/k 200 1.2ms {access.fingerprint(b'Bearer t-1')} r1\n"
        )

    # a handler of the access logger's own gets the record, and the line is written too
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    extra = Keep()
    with _configured(json_lines) as (stream, handler):
        access.logger.addHandler(extra)
        try:
            log._log(*CALLS[1])
        finally:
            access.logger.removeHandler(extra)
        assert [r.getMessage().split()[:3] for r in seen] == [["GET", "/api/states/s/records/a/b/c/ü", "%"]]
        assert len(stream.getvalue().splitlines()) == 1
        # a filter or a level on the handler leaves the line out, as it leaves the record out
        handler.addFilter(lambda record: False)
        log._log(*CALLS[0])
        handler.filters.clear()
        handler.setLevel(logging.WARNING)
        log._log(*CALLS[0])
        assert len(stream.getvalue().splitlines()) == 1
    # a record factory sees every access record
    made: list[str] = []
    factory = logging.getLogRecordFactory()

    def recording(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        made.append(record.name)
        return record

    with _configured(json_lines) as (stream, _):
        logging.setLogRecordFactory(recording)
        try:
            log._log(*CALLS[2])
        finally:
            logging.setLogRecordFactory(factory)
        assert made == ["stateflow.access"] and len(stream.getvalue().splitlines()) == 1
