"""Resource subscriptions over stdio: a client that subscribes to the context resources is told
(``notifications/resources/updated``) when the context changed — by its own patches, by another
session's write to a shared scope, or by another process altogether.

The server watches the view's projection id (the scope documents' revisions, one small read)
once per ``POLL_SECONDS`` while anything is subscribed. Over HTTP the transport is stateless —
there is no open stream to notify on — so only stdio offers subscriptions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import anyio
import mcp_types as types

from stateflow.errors import NotFound
from stateflow.tools import ToolHost

POLL_SECONDS: Final = 1.0


class Subscriptions:
    def __init__(self, host_for: Callable[[Any], ToolHost], uris: tuple[str, ...]) -> None:
        self.host_for = host_for
        self.known = uris
        self.uris: set[str] = set()
        self.session: Any = None
        self.last: str | None = None

    def _projection(self) -> str:
        return self.host_for(None).view.current_projection()

    def _check(self, uri: str) -> None:
        if uri not in self.known:
            raise NotFound(f"no resource {uri}; available: {', '.join(self.known)}")

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        self._check(uri)
        if not self.uris:
            self.last = await anyio.to_thread.run_sync(self._projection)
        self.session = ctx.session
        self.uris.add(uri)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self.uris.discard(str(params.uri))
        return types.EmptyResult()

    async def watch(self) -> None:
        """Notify the subscriber of every context change, forever (cancelled with the server)."""
        while True:
            await anyio.sleep(POLL_SECONDS)
            if not self.uris or self.session is None:
                continue
            now = await anyio.to_thread.run_sync(self._projection)
            if now == self.last:
                continue
            self.last = now
            for uri in sorted(self.uris):
                await self.session.send_resource_updated(uri)
