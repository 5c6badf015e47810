"""Request body limits: size (413) and time (408), counted as the route reads the body.

A declared ``Content-Length`` over the size limit is refused when the route first asks for the
body, before any of it is counted. Otherwise nothing is read ahead: the bytes are counted as the route asks for them, so a request the route refuses first — a
missing or wrong token above all — is answered before any of its body is read, and a body sent
without a length (chunked) is refused as soon as it passes the limit. The whole body must arrive
within ``timeout`` seconds of the route's first read: a body trickled in, or never sent, does not
hold a connection (and a route waiting on it) for ever; uvicorn has no such limit of its own.

A body refused for its size is read to its end and dropped (within the same ``timeout``) before the
refusal is sent: a connection closed with part of the body unread is reset, and the client —
still sending, or reading afterwards, as the MCP SDK's client does — saw a broken connection
instead of the 413. (Not for a client waiting for ``100 Continue``: it has sent nothing.)

On a JSON-RPC route (``/mcp``) a refusal is a JSON-RPC error (``id`` null: the body was not
read), whose message keeps the code (``error[payload-too-large]: …``), so an MCP client shows it
where it would show any other refused request; elsewhere it is the API's ``{error, code}``.

A client that goes away before its body is read has nothing to answer: the request is dropped
with one info line, not logged as a server error. So is one whose client went away while its
store call ran, and the call was cancelled (``http.gone``, which this layer tells how to wait for
the client's going away: it alone knows whether the body was read).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any, Final

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateflow.doc.canonical import encode
from stateflow.errors import StateflowError
from stateflow.http.access import printable
from stateflow.http.gone import CLIENT, CallAbandoned

logger = logging.getLogger("stateflow.http")

_DISCONNECT: Message = {"type": "http.disconnect"}


class PayloadTooLarge(StateflowError):
    code = "payload-too-large"
    http_status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the request body is larger than the limit of {limit} bytes (the server's STATEFLOW_MAX_BODY_BYTES)"
        )


class BodyTimeout(StateflowError):
    code = "request-timeout"
    http_status = 408

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body did not arrive within {seconds:g} seconds")


INVALID_REQUEST: Final = -32600
"""JSON-RPC 2.0's code for a request that is not a valid one (here: one not read whole)."""


class BodyLimit:
    def __init__(
        self, app: ASGIApp, max_body_bytes: int, timeout: float = 60.0, jsonrpc_paths: Collection[str] = ()
    ) -> None:
        self.app = app
        self.limit = max_body_bytes
        self.timeout = timeout
        self.jsonrpc_paths = frozenset(jsonrpc_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        jsonrpc = scope["path"] in self.jsonrpc_paths
        counted = True
        oversized = False  # a declared length over the limit: refused at the route's first read
        sent = False  # a body comes: chunked, or a declared length above 0
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                counted = False  # the server delivers at most what it declared
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                oversized = declared > self.limit
                sent = declared != 0
            elif name == b"transfer-encoding":
                sent = True
        seen = 0
        deadline: float | None = None
        arrived = False  # the whole body is in: later reads (a wait for a disconnect) are not timed
        refused = False  # answered here: the route's own answer goes nowhere
        answering = False  # the route has started its answer: too late for one of ours

        async def receiving() -> Message:
            nonlocal seen, deadline, refused, arrived
            if refused:
                return _DISCONNECT
            if arrived:
                return await receive()
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + self.timeout
            if oversized:
                # (a client waiting for "100 Continue" has sent nothing: nothing to drop)
                return await refuse(
                    PayloadTooLarge(self.limit), (b"expect", b"100-continue") not in scope["headers"]
                )
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                return await refuse(BodyTimeout(self.timeout))
            if message["type"] != "http.request":
                arrived = True
            else:
                if counted:
                    seen += len(message.get("body", b""))
                    if seen > self.limit:
                        return await refuse(PayloadTooLarge(self.limit), True)
                arrived = not message.get("more_body", False)
            return message

        async def gone() -> bool:
            if sent and not arrived:  # (waiting would read the body, which the route has not)
                return False
            while (await receiving())["type"] != "http.disconnect":
                pass  # (a body that was never asked for: none comes, or it is not read)
            return True

        watching = CLIENT.set(gone)  # (seen by this request's calls, see ``http.gone``)

        async def refuse(exc: StateflowError, drop: bool = False) -> Message:
            nonlocal refused
            if not answering:
                refused = True
                if drop and deadline is not None:  # (the rest of a body refused for its size)
                    await _drop(receive, deadline)
                await _refuse(send, exc, jsonrpc)
            return _DISCONNECT  # what the route sees: the body ends here

        async def sending(message: Message) -> None:
            nonlocal answering
            if refused:
                return
            if not answering and sent and not arrived:
                # answered without reading the body (a refused token, an unknown route): close
                # the connection after the answer, so the client cannot keep trickling it in
                message["headers"] = [*message.get("headers", ()), (b"connection", b"close")]
            answering = True
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        except CallAbandoned as exc:
            logger.info(
                "%s %s: the client went away while its call ran; %s",
                scope["method"],
                printable(scope["path"]),
                "the call had committed its write, which stands"
                if exc.committed
                else "the call was cancelled, its transaction rolled back: nothing of it was written",
            )
        except ClientDisconnect:
            if not refused:
                logger.info(
                    "%s %s: the client went away before its request body was read",
                    scope["method"],
                    printable(scope["path"]),
                )
        finally:
            CLIENT.reset(watching)


async def _drop(receive: Receive, deadline: float) -> None:
    """Read the rest of a refused body and drop it, until it ends or ``deadline`` passes."""
    try:
        async with asyncio.timeout_at(deadline):
            while (message := await receive())["type"] == "http.request" and message.get("more_body", False):
                pass
    except TimeoutError:
        pass  # (answered all the same: the client may not read it)


async def _refuse(send: Send, exc: StateflowError, jsonrpc: bool) -> None:
    if jsonrpc:
        error = {"code": INVALID_REQUEST, "message": f"error[{exc.code}]: {exc.message}"}
        body = encode({"jsonrpc": "2.0", "id": None, "error": error})
    else:
        body = encode({"error": exc.message, "code": exc.code})
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),  # the rest of the body is never read
    ]
    await send({"type": "http.response.start", "status": exc.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
