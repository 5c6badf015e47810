"""The access log: one line per request — method, path, status, duration, token fingerprint,
request id — as text or JSON, on the ``stateflow.access`` logger.

A pure ASGI wrapper (no per-request objects beyond the line): it reads the ``Authorization``
header only to print the fingerprint the audit trail uses (``token:<12 hex>``), never the
secret. The request id is the caller's ``X-Request-ID`` when it is a short printable string,
else a new one; either way the response carries it back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("stateflow.access")

_FINGERPRINTS_MAX = 256
_fingerprints: dict[bytes, str] = {}
"""fingerprints of the ``Authorization`` headers seen lately: a server sees a few tokens, each
on every request (bounded: a client sending new ones only empties it)"""


def fingerprint(authorization: bytes | None) -> str:
    if not authorization or authorization[:7].lower() != b"bearer ":
        return "-"
    known = _fingerprints.get(authorization)
    if known is None:
        if len(_fingerprints) >= _FINGERPRINTS_MAX:
            _fingerprints.clear()
        known = "token:" + hashlib.sha256(authorization[7:].strip()).hexdigest()[:12]
        _fingerprints[authorization] = known
    return known


def _request_id(given: bytes | None) -> str:
    if given and len(given) <= 128 and given.isascii() and given.decode().isprintable() and b" " not in given:
        return given.decode()
    return os.urandom(8).hex()  # 16 hex digits, as a uuid4's first 16 (without building one)


class AccessLog:
    def __init__(self, app: ASGIApp, *, json_lines: bool = False) -> None:
        self.app = app
        self.json_lines = json_lines

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope.get("headers") or [])
        request_id = _request_id(headers.get(b"x-request-id"))
        status = 500  # what the client sees when the app fails before answering

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if logger.isEnabledFor(logging.INFO):
                self._log(scope, status, time.perf_counter() - started, headers, request_id)

    def _log(self, scope: Scope, status: int, seconds: float, headers: dict[bytes, bytes], rid: str) -> None:
        fields = {
            "method": scope["method"],
            "path": scope["path"],
            "status": status,
            "duration_ms": round(seconds * 1000, 2),
            "token": fingerprint(headers.get(b"authorization")),
            "request_id": rid,
        }
        # the record made and handled as ``logger.info`` would, but for where it was called from:
        # ``findCaller`` walks the stack on every line to find what is always this method
        if self.json_lines:
            record = logger.makeRecord(
                logger.name,
                logging.INFO,
                _FILE,
                _LINE,
                "%s %s %s",
                (fields["method"], fields["path"], status),
                None,
                "_log",
                {"fields": fields},
            )
        else:
            args = (fields["method"], fields["path"], status, fields["duration_ms"], fields["token"], rid)
            record = logger.makeRecord(
                logger.name, logging.INFO, _FILE, _LINE, "%s %s %s %.1fms %s %s", args, None, "_log"
            )
        logger.handle(record)


_FILE = __file__
_LINE = AccessLog._log.__code__.co_firstlineno


def configure(level: str, *, json_lines: bool) -> None:
    """Send stateflow's log lines (the access log included) to stderr at ``level``."""
    handler = logging.StreamHandler()
    if json_lines:
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("stateflow")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


class _Formatter(logging.Formatter):
    """``logging.Formatter`` with the time's text kept for the second it names: formatting it
    (``localtime`` and ``strftime``) cost a few µs on every line of the access log."""

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        msec_format = self.default_msec_format
        if datefmt is not None or msec_format is None or self.converter is not time.localtime:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if self._second[0] != second:
            self._second = (second, time.strftime(self.default_time_format, time.localtime(second)))
        return msec_format % (self._second[1], record.msecs)


class _JsonFormatter(_Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body = getattr(record, "fields", None) or {"message": record.getMessage()}
        return json.dumps(
            {
                "time": self.formatTime(record),
                "level": record.levelname.lower(),
                "logger": record.name,
                **body,
            },
            ensure_ascii=False,
        )
