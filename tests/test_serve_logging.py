"""The access log and CORS of a real `stateflow serve`."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

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
