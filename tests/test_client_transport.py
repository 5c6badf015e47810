"""The HTTP client (``stateflow states --url``, ``StatesClient``) when the server is reached and
then gives no whole answer — it dies mid-request (the connection closed, or reset), cuts its
answer short, or never answers: a ``store-unavailable`` refusal that says a write's outcome is
unknown, never a traceback."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stateflow.client import ClientError, StatesClient
from stateflow.errors import InvalidInput, StoreUnavailable

from . import servers

SUBJECT = ["--target-name", "bot", "--kind", "c", "--key", "k1"]


@contextmanager
def peer(respond: Callable[[socket.socket], None]) -> Iterator[str]:
    """A listener on a free loopback port that reads one whole request, then ``respond``s on the
    connection, as a server that died or hangs would; its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            received = b""
            while b"\r\n\r\n" not in received or len(received) < _request_length(received):
                chunk = conn.recv(65536)
                if not chunk:
                    return
                received += chunk
            respond(conn)
            done.wait(60)  # (held open until the client is done: a hung server's connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join(10)
        listener.close()


def _request_length(received: bytes) -> int:
    """The length of a request whose head is in ``received``: the head and its body."""
    head, _, _ = received.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return len(head) + 4


def closed(conn: socket.socket) -> None:
    conn.shutdown(socket.SHUT_RDWR)


def reset(conn: socket.socket) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def cut_short(conn: socket.socket) -> None:
    conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"da')
    conn.shutdown(socket.SHUT_RDWR)


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STATEFLOW_URL": "", "STATEFLOW_TOKEN": ""}
    return subprocess.run(
        ["stateflow", "states", "--url", url, "--token", "t" * 24, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize("respond", [closed, reset, cut_short], ids=["closed", "reset", "cut-short"])
def test_a_write_the_server_leaves_unanswered_is_refused_with_its_outcome_unknown(
    respond: Callable[[socket.socket], None],
) -> None:
    with peer(respond) as url:
        done = cli(url, "apply", "ctr", *SUBJECT, "--data", '[{"op": "set", "path": ["n"], "value": 1}]')
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error[store-unavailable]: {url} closed the connection without a whole answer"), (
        line
    )
    assert line.endswith("the write may or may not have been applied: read it back before sending it again")


def test_a_read_the_server_leaves_unanswered_is_refused_as_such() -> None:
    with peer(closed) as url:
        done = cli(url, "read", "ctr", *SUBJECT)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error[store-unavailable]: {url} closed the connection"), line
    assert "write" not in line


def test_a_server_that_never_answers_is_refused_after_the_clients_timeout() -> None:
    with peer(lambda conn: None) as url:
        client = StatesClient(url, "t" * 24, timeout=0.5)
        with pytest.raises(StoreUnavailable) as refused:
            client.merge(
                "ctr", {"target_kind": "agent", "target_name": "bot", "kind": "c", "key": "k1"}, {"n": 1}
            )
    assert refused.value.message == (
        f"{url} did not answer within 0.5 s; the write may or may not have been applied: read it back "
        "before sending it again"
    )


def test_a_server_url_that_is_not_http_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    # urllib took any URL: file:// read the local disk, ftp:// waited out the timeout, and one
    # without a scheme or with an unbalanced bracket ended in a traceback
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "states").write_text('[{"name": "from-the-local-disk"}]')
    example = "give the server's base URL, e.g. http://127.0.0.1:8765"
    for url, why in (
        ("127.0.0.1:8765", f"has no scheme; {example} (add http://)"),
        ("notaurl", f"has no scheme; {example} (add http://)"),
        ("http://[bad", f"is not a valid URL (Invalid IPv6 URL); {example}"),
        ("http://127.0.0.1:99999", f"is not a valid URL (Port out of range 0-65535); {example}"),
        (f"file://{tmp_path}", f"is not an http:// or https:// URL with a host; {example}"),
        ("ftp://127.0.0.1:9", f"is not an http:// or https:// URL with a host; {example}"),
        ("http://", f"is not an http:// or https:// URL with a host; {example}"),
    ):
        done = cli(url, "list")
        assert (done.returncode, done.stdout, done.stderr) == (
            1,
            "",
            f"error[invalid-input]: server URL {url!r} {why}\n",
        ), url
    with pytest.raises(InvalidInput, match="has no scheme"):
        StatesClient("localhost:8765")


def test_a_body_over_the_servers_limit_is_its_413_not_an_unreachable_server(tmp_path: Path) -> None:
    """A body far larger than the socket's buffers: the server refuses it before reading it, and
    the client — still sending — must read that refusal, not a reset connection it would call
    an unreachable server."""
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"), STATEFLOW_MAX_BODY_BYTES="65536")
    server = servers.start(env)
    try:
        client = StatesClient(server.url, servers.TOKEN)
        client.declare(
            "notes",
            {
                "schema": {"type": "object", "properties": {"s": {"type": "string"}}},
                "subject_kinds": ["c"],
                "default_subject_kind": "c",
            },
        )
        subject = {"target_kind": "agent", "target_name": "bot", "kind": "c", "key": "k1"}
        with pytest.raises(ClientError) as refused:
            client.replace("notes", subject, {"s": "x" * (8 * 1024 * 1024)})
        assert (refused.value.code, refused.value.http_status) == ("payload-too-large", 413)
        assert "limit of 65536 bytes" in str(refused.value)
    finally:
        server.stop()
