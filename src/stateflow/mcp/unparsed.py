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
which the SDK's parser reads keeping the last value. A line that is JSON but not a JSON-RPC
message (``[1]``, ``null``, ``{"jsonrpc": "2.0", "id": 8}``), which the transport hands on as an
exception the server drops as well, is answered with ``-32600`` (Invalid Request) for the id it
names, saying what is missing; the HTTP door refuses such a body the same way
(:func:`read_message`), where the SDK answered its validator's raw report without the id. A
tool call whose arguments hold a number literal past a double's range (``1e400``), which the
SDK's parser reads as Infinity, reaches the tool as written (:data:`sent_arguments`), on both
doors: its refusal names the literal, as every other door's does.
"""

from __future__ import annotations

import contextvars
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
import orjson
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import INVALID_REQUEST, PARSE_ERROR
from pydantic import ValidationError

from stateflow.doc.canonical import BeyondDouble, kind, read_as_sent, repeated_name_in
from stateflow.errors import NotJSON

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


_A_KIND: Final = {
    "array": "an array",
    "string": "a string",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


def message_problem(value: Any) -> str:
    """What keeps the parsed JSON ``value``, which the SDK's message model refused, from being a
    JSON-RPC 2.0 message (the model's own report is a page of union branches)."""
    if type(value) is not dict:
        return f"a JSON-RPC message is an object, not {_A_KIND[kind(value)]}"
    if value.get("jsonrpc") != "2.0":
        return 'a JSON-RPC message names "jsonrpc": "2.0"'
    if "method" in value:
        if type(value["method"]) is not str:
            return '"method" is a string'
        if "id" in value and named_id(value) is None:
            return 'a request\'s "id" is an integer or a string'
        return "its members do not have the types a JSON-RPC request's have"
    if "result" not in value and "error" not in value:
        return 'a JSON-RPC message is a request (with "method" and "id"), a notification (with "method") or a response (with "result" or "error")'
    return "its members do not have the types a JSON-RPC response's have"


def named_id(value: Any) -> int | str | None:
    """The id the parsed message ``value`` names, when it is one a request may have."""
    found = value.get("id") if type(value) is dict else None
    return found if isinstance(found, int | str) and not isinstance(found, bool) else None


Refusal = tuple[int, str, int | str | None]
"""``(code, reason, id)``: how a door answers a message the SDK is not given."""

Sent = tuple[int | str, Any]
"""A ``tools/call`` request's id and its ``arguments`` as sent (:data:`sent_arguments`)."""

sent_arguments: contextvars.ContextVar[Sent | None] = contextvars.ContextVar("sent_arguments", default=None)
"""The arguments of the ``tools/call`` a door hands the SDK, as sent, where its parser reads them
otherwise: a number literal past a double's range (``1e400``), which it reads as Infinity, is
held as written, so the tool's refusal names the literal the caller wrote, as every other door
does (:func:`stateflow.doc.canonical.read_as_sent`). Each door sets it for the message it hands
on — the SDK runs a request in the context its transport sent it from — and the tool takes it
for the request of that id."""


def read_message(data: bytes) -> tuple[Refusal | None, Sent | None]:
    """What a door makes of the JSON text ``data`` before the SDK reads it: its refusal when it
    names a member twice (``-32700``, as text the parser refuses) or is not a JSON-RPC message
    (``-32600``, for the id it names) — text that is not JSON is the transport's to refuse —;
    else, for a ``tools/call`` whose arguments hold a number the SDK's parser would not read as
    written, those arguments as sent (:data:`sent_arguments`)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        # (orjson refuses what the SDK's parser takes: NaN and Infinity tokens, numbers past a
        # double's range — read here as sent, member names given twice refused alike)
        try:
            value = read_as_sent(data)
        except NotJSON as exc:
            return (PARSE_ERROR, exc.message, request_id(data.decode("utf-8", errors="replace"))), None
        if value is None:
            return None, None
        sent = _tool_arguments(value)
    else:
        reason = repeated_name_in(data, value)
        if reason is not None:
            return (PARSE_ERROR, reason, request_id(data.decode("utf-8", errors="replace"))), None
        sent = None
    try:
        types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError:
        return (INVALID_REQUEST, message_problem(value), named_id(value)), None
    return None, sent


def _tool_arguments(message: Any) -> Sent | None:
    """The id and arguments of the ``tools/call`` request ``message`` when they hold a number
    literal past a double's range (else the SDK reads them as sent)."""
    if type(message) is not dict or message.get("method") != "tools/call":
        return None
    rid, params = named_id(message), message.get("params")
    arguments = params.get("arguments") if type(params) is dict else None
    return (rid, arguments) if rid is not None and _holds_beyond_double(arguments) else None


def _holds_beyond_double(value: Any) -> bool:
    if type(value) is BeyondDouble:
        return True
    if type(value) is dict:
        return any(_holds_beyond_double(v) for v in value.values())
    if type(value) is list:
        return any(_holds_beyond_double(v) for v in value)
    return False


async def refuse_line(write_stream: Any, line: str, reason: str) -> None:
    """Answer ``line`` with a parse error (-32700) for its request's id, and say so on stderr."""
    await answer_refused(write_stream, PARSE_ERROR, reason, request_id(line))


def error_message(code: int, reason: str) -> str:
    """A refusal's JSON-RPC error message: the code's name, then why."""
    return f"{'Parse error' if code == PARSE_ERROR else 'Invalid Request'}: {reason}"


async def answer_refused(write_stream: Any, code: int, reason: str, rid: int | str | None) -> None:
    """Answer a refused line with the error ``code`` for the id ``rid``, and say so on stderr."""
    what = "unparsable" if code == PARSE_ERROR else "invalid"
    print(f"stateflow mcp: {what} message (id {rid!r}): {reason}", file=sys.stderr, flush=True)
    error = types.ErrorData(code=code, message=error_message(code, reason))
    await write_stream.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=error)))


class CheckedLines:
    """Standard input's lines for the transport, without those naming a member twice in one
    object (the SDK's parser keeps the last value, where every other door refuses such text:
    answered as a line that cannot be parsed is) or that are not a JSON-RPC message (which the
    server drops): :func:`read_message` (:meth:`answer_to`: the transport's write stream,
    given once it exists)."""

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
            refused, sent = read_message(line)
            if refused is None:
                # (in the reading task's context, which the transport sends the message from)
                sent_arguments.set(sent)
                return line
            await self._opened.wait()
            await answer_refused(self._write, *refused)
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
