"""Answer the stdio lines the MCP SDK cannot parse, instead of leaving their requests unanswered.

The SDK's stdio transport hands a line it cannot parse (JSON nested deeper than its parser's
limit of about 200 levels, a lone surrogate escape, text that is not JSON) to the server as an
exception, and the server drops it: the client's request is never answered and its call waits
until it times out. This read stream, between the transport and the server, answers such a line
with a JSON-RPC parse error (-32700) for the request's id when the line names one (read by a
more tolerant parser, or from its leading members), ``null`` otherwise, and logs it to stderr.

The transport is given standard input as bytes (:func:`stdin_bytes`): read as text, as the SDK
does by default, a line that is not UTF-8 would have its bytes replaced with U+FFFD and be
served, and stored, as if the client had sent that; as bytes it is refused like any other line
the parser cannot read. So is a line with an object naming a member twice (:class:`CheckedLines`),
which the SDK's parser reads keeping the last value.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import PARSE_ERROR
from pydantic import ValidationError

from stateflow.doc.canonical import repeated_name

_LEADING_ID: Final = re.compile(
    r'\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"(?:[^"\\]|\\.)*"\s*,)*\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")'
)
"""A request's id among its first members, as JSON-RPC clients write them (``jsonrpc``,
``method``, then ``id``): read when the whole line cannot be parsed at all."""


@contextmanager
def stdin_bytes() -> Iterator[anyio.AsyncFile[bytes]]:
    """Standard input's lines as bytes, for the transport (see the module).

    As the SDK does with the stdin it opens itself, the lines are read from a private duplicate
    while fd 0 reads the null device, so no child process ever reads the client's messages.
    """
    wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        # never closed: a worker thread may still be blocked reading it after the transport ends
        yield anyio.wrap_file(os.fdopen(wire, "rb", closefd=False))
    finally:
        os.dup2(wire, 0)


def unparsed_line(exc: Exception) -> tuple[str, str] | None:
    """``(line, reason)`` when ``exc`` is the transport's refusal of a line that is not valid JSON
    (a line that is not UTF-8 is given with its bad bytes replaced, only to look for its id)."""
    if not isinstance(exc, ValidationError):
        return None
    errors = exc.errors()
    if len(errors) != 1 or errors[0].get("type") != "json_invalid":
        return None
    line = errors[0].get("input")
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    return (line, str(errors[0].get("msg"))) if isinstance(line, str) else None


def request_id(line: str) -> int | str | None:
    """The id of the request ``line`` carries, if it can be told (None: a notification, or not
    a request at all)."""
    try:
        message = json.loads(line)  # (deeper nesting and lone surrogates are accepted here)
    except (ValueError, RecursionError):
        match = _LEADING_ID.match(line)
        if match is None:
            return None
        try:
            found = json.loads(match.group(1))
        except ValueError:
            return None
        return found if isinstance(found, int | str) else None
    if not isinstance(message, dict) or "method" not in message:
        return None  # a response or a notification: nothing waits for an answer
    found = message.get("id")
    return found if isinstance(found, int | str) and not isinstance(found, bool) else None


async def refuse_line(write_stream: Any, line: str, reason: str) -> None:
    """Answer ``line`` with a parse error (-32700) for its request's id, and say so on stderr."""
    rid = request_id(line)
    print(f"stateflow mcp: unparsable message (id {rid!r}): {reason}", file=sys.stderr, flush=True)
    error = types.ErrorData(code=PARSE_ERROR, message=f"Parse error: {reason}")
    await write_stream.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=error)))


class CheckedLines:
    """Standard input's lines for the transport, without those naming a member twice in one
    object: the SDK's parser keeps the last value, where every other door refuses such text
    (:func:`~stateflow.doc.canonical.repeated_name`), so they are answered here as a line that
    cannot be parsed is (:meth:`answer_to`: the transport's write stream, given once it exists)."""

    def __init__(self, lines: anyio.AsyncFile[bytes]) -> None:
        self._lines = lines
        self._write: Any = None
        self._opened = anyio.Event()

    def answer_to(self, write_stream: Any) -> None:
        self._write = write_stream
        self._opened.set()

    def __aiter__(self) -> CheckedLines:
        return self

    async def __anext__(self) -> bytes:
        while line := await self._lines.readline():
            reason = repeated_name(line)
            if reason is None:
                return line
            await self._opened.wait()
            await refuse_line(self._write, line.decode("utf-8", errors="replace"), reason)
        raise StopAsyncIteration


class AnsweringUnparsed:
    """The transport's read stream, answering the lines it could not parse (see the module)."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self._inner = inner
        self._write = write_stream

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.receive()
            unparsed = unparsed_line(item) if isinstance(item, Exception) else None
            if unparsed is None:
                return item  # type: ignore[no-any-return]
            await refuse_line(self._write, *unparsed)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> AnsweringUnparsed:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringUnparsed:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
