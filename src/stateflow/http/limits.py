"""Request body size limit: a larger body is refused with 413 before the route reads it.

A declared ``Content-Length`` over the limit is refused at once; a body sent without one
(chunked) is buffered up to the limit and refused as soon as it passes it.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateflow.doc.canonical import encode
from stateflow.errors import StateflowError


class PayloadTooLarge(StateflowError):
    code = "payload-too-large"
    http_status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than the limit of {limit} bytes")


class BodyLimit:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = False
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                length = True
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.limit:
                    await self._refuse(send)
                    return
        if length:
            await self.app(scope, receive, send)  # the server delivers at most what it declared
            return
        # no declared length (chunked): buffer up to the limit before the route runs, so a
        # refused body never reaches it
        messages: list[Message] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > self.limit:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        exc = PayloadTooLarge(self.limit)
        body = encode({"error": exc.message, "code": exc.code})
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
