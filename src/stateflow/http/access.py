"""The request id and the access log: one line per request — method, path, status, duration,
token fingerprint, request id — as text or JSON, on the ``stateflow.access`` logger.

Pure ASGI wrappers (no per-request objects beyond the line). The request id is the caller's
``X-Request-ID`` when it is a short printable string, else a new one; either way the response
carries it back, whatever the log level (:class:`RequestId`, always installed: a client matches
its calls to the server's by it). The access log reads the ``Authorization`` header only to
print the fingerprint the audit trail uses (``token:<12 hex>``), never the secret.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

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


def printable(text: str) -> str:
    """``text`` for a line of a text log: each character that is not printable (a line break,
    an escape sequence's ESC, a bidi control) as its Python escape. A request's path is the
    client's, percent-decoded: as is, ``%0a`` would end the line and let any caller, without a
    token, write lines that read as the server's own."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _request_id(given: bytes | None) -> str:
    if given and len(given) <= 128 and given.isascii() and given.decode().isprintable() and b" " not in given:
        return given.decode()
    return os.urandom(8).hex()  # 16 hex digits, as a uuid4's first 16 (without building one)


REQUEST_ID: Final = "stateflow.request_id"
"""The scope key :class:`RequestId` keeps a request's id under (for the access log)."""


class RequestId:
    """Gives every request its id and answers it in ``X-Request-ID``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = None
        for name, value in scope.get("headers") or ():
            if name == b"x-request-id":
                given = value
                break
        request_id = scope[REQUEST_ID] = _request_id(given)
        header = (b"x-request-id", request_id.encode())

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        await self.app(scope, receive, sending)


CLIENT_CLOSED: Final = 499


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
        request_id = scope.get(REQUEST_ID) or _request_id(headers.get(b"x-request-id"))
        status = 0  # no answer yet
        gone = False  # the client went away

        async def receiving() -> Message:
            nonlocal gone
            message = await receive()
            gone = message["type"] == "http.disconnect"
            return message

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        finally:
            # unanswered: dropped as the client went away (``BodyLimit``), not a server error,
            # logged as nginx logs it (499, client closed request); else the app failed before
            # answering, and the client sees 500
            status = status or (CLIENT_CLOSED if gone else 500)
            if logger.isEnabledFor(logging.INFO):
                self._log(scope, status, time.perf_counter() - started, headers, request_id)

    def _log(self, scope: Scope, status: int, seconds: float, headers: dict[bytes, bytes], rid: str) -> None:
        method, path, token = scope["method"], scope["path"], fingerprint(headers.get(b"authorization"))
        duration_ms = round(seconds * 1000, 2)
        lines = _straight()
        msg: str
        args: tuple[Any, ...]
        extra: dict[str, Any] | None
        if self.json_lines:
            fields = {
                "method": method,
                "path": path,
                "status": status,
                "duration_ms": duration_ms,
                "token": token,
                "request_id": rid,
            }
            msg, args, extra = "%s %s %s", (method, path, status), {"fields": fields}
        else:
            msg, args, extra = _TEXT, (method, printable(path), status, duration_ms, token, rid), None
        if lines is not None and lines.write_access(msg, args, extra):
            return
        # the record made and handled as ``logger.info`` would, but for where it was called from:
        # ``findCaller`` walks the stack on every line to find what is always this method
        logger.handle(
            logger.makeRecord(logger.name, logging.INFO, _FILE, _LINE, msg, args, None, "_log", extra)
        )


_TEXT: Final = "%s %s %s %.1fms %s %s"


_FILE = __file__
_LINE = AccessLog._log.__code__.co_firstlineno


def configure(level: str, *, json_lines: bool) -> None:
    """Send stateflow's log lines (the access log included) to stderr at ``level``."""
    root = logging.getLogger("stateflow")
    root.handlers[:] = [_Lines(_JsonFormatter() if json_lines else _Formatter(_LAYOUT))]
    root.setLevel(level.upper())
    root.propagate = False


_LAYOUT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"


def _straight() -> _Lines | None:
    """The handler an access line goes to when it alone would see the line's record: the
    access logger without handlers or filters of its own, handing its records on to the
    ``stateflow`` logger as :func:`configure` left it (our one handler, not propagating), and
    records made by ``logging.LogRecord``. Anything else (a handler or filter added, a record
    factory) is handed the record, as ``logger.info`` would."""
    if logger.handlers or logger.filters or logger.disabled or not logger.propagate:
        return None
    parent = logger.parent
    if parent is None or parent.propagate or len(parent.handlers) != 1:
        return None
    handler = parent.handlers[0]
    if type(handler) is not _Lines or logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    return handler


class _Lines(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr with the formatter :func:`configure` gives it; it writes an access line itself,
    without the ``logging`` record (made, filtered and formatted on every request, the larger
    part of the access log's cost), when it can tell that the line would read the same."""

    def __init__(self, formatter: _Formatter) -> None:
        super().__init__()
        self.setFormatter(formatter)
        self._ours = formatter

    def write_access(self, msg: str, args: tuple[Any, ...], extra: dict[str, Any] | None) -> bool:
        """Write the line the access log's record (``msg % args``, ``extra`` its attributes)
        would come to here; False, writing nothing, where this handler's filters, level or
        formatter are no longer those it was made with."""
        formatter = self._ours
        if self.formatter is not formatter or self.filters or self.level > logging.INFO:
            return False
        now = time.time_ns()  # (as ``logging.LogRecord`` takes its time)
        when = formatter.time_text(now / 1e9, (now % 1_000_000_000) // 1_000_000 + 0.0)
        if when is None:
            return False
        level = logging.getLevelName(logging.INFO)
        if type(formatter) is _JsonFormatter:
            line = formatter.line(
                when, level, logger.name, (extra or {}).get("fields") or {"message": msg % args}
            )
        else:
            line = _LAYOUT % {"asctime": when, "levelname": level, "name": logger.name, "message": msg % args}
        self.acquire()  # (as ``Handler.handle`` and ``StreamHandler.emit``)
        try:
            stream = self.stream
            stream.write(line + self.terminator)
            if stream and hasattr(stream, "flush"):  # ``flush``'s own steps: the lock is held
                stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(
                logger.makeRecord(logger.name, logging.INFO, _FILE, _LINE, msg, args, None, "_log", extra)
            )
        finally:
            self.release()
        return True


class _Formatter(logging.Formatter):
    """``logging.Formatter`` with the time's text kept for the second it names: formatting it
    (``localtime`` and ``strftime``) cost a few µs on every line of the access log."""

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is None:
            kept = self.time_text(record.created, record.msecs)
            if kept is not None:
                return kept
        return super().formatTime(record, datefmt)

    def time_text(self, created: float, msecs: float) -> str | None:
        """``formatTime``'s text for a record made at ``created`` (``msecs`` its milliseconds)
        without a ``datefmt``; None where ``logging.Formatter``'s settings were changed."""
        msec_format = self.default_msec_format
        if msec_format is None or self.converter is not time.localtime or self.datefmt is not None:
            return None
        second = int(created)
        if self._second[0] != second:
            self._second = (second, time.strftime(self.default_time_format, time.localtime(second)))
        return msec_format % (self._second[1], msecs)


class _JsonFormatter(_Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body = getattr(record, "fields", None) or {"message": record.getMessage()}
        return self.line(self.formatTime(record), record.levelname, record.name, body)

    @staticmethod
    def line(when: str, level: str, name: str, body: dict[str, Any]) -> str:
        return json.dumps({"time": when, "level": level.lower(), "logger": name, **body}, ensure_ascii=False)
