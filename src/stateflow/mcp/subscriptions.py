"""Resource subscriptions over stdio: a client that subscribes to the context resources is told
(``notifications/resources/updated``) when the context changed — by its own patches, by another
session's write to a shared scope, or by another process altogether.

Both protocol eras are served: a handshake-era client subscribes with ``resources/subscribe``; a
2026-07-28 client opens a ``subscriptions/listen`` stream naming the resources (that era has no
``resources/subscribe``, and a server that does not serve ``listen`` tells such a client it
cannot subscribe at all). The server watches the view's projection id (the scope documents'
revisions, one small read) once per ``POLL_SECONDS`` while anything is subscribed or listening.
Over HTTP the transport is stateless — there is no open stream to notify on — so only stdio
offers subscriptions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

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
        self.bus = InMemorySubscriptionBus()
        self.streams = ListenHandler(self.bus)
        self.listening = 0  # open listen streams that name a known resource

    def _projection(self) -> str:
        return self.host_for(None).view.current_projection()

    def _check(self, uri: str) -> None:
        if uri not in self.known:
            raise NotFound(f"no resource {uri}; available: {', '.join(self.known)}")

    @property
    def watched(self) -> bool:
        return bool(self.uris) or self.listening > 0

    async def _start_watching(self) -> None:
        if not self.watched:  # the first subscriber: changes count from now
            self.last = await anyio.to_thread.run_sync(self._projection)

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        self._check(uri)
        await self._start_watching()
        self.session = ctx.session
        self.uris.add(uri)
        return types.EmptyResult()

    async def listen(
        self, ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """One ``subscriptions/listen`` stream, open until the client closes it. An unknown
        resource is refused before the stream opens, as ``resources/subscribe`` refuses it."""
        uris = params.notifications.resource_subscriptions or ()
        for uri in uris:
            self._check(uri)
        if not uris:  # list-changed kinds only: this server's lists never change
            return await self.streams(ctx, params)
        await self._start_watching()
        self.listening += 1
        try:
            return await self.streams(ctx, params)
        finally:
            self.listening -= 1

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self.uris.discard(str(params.uri))
        return types.EmptyResult()

    async def watch(self) -> None:
        """Notify the subscriber of every context change, forever (cancelled with the server)."""
        while True:
            await anyio.sleep(POLL_SECONDS)
            if not self.watched:
                continue
            now = await anyio.to_thread.run_sync(self._projection)
            if now == self.last:
                continue
            self.last = now
            if self.session is not None:
                for uri in sorted(self.uris):
                    await self.session.send_resource_updated(uri)
            for uri in self.known:  # each listen stream passes on the ones it named
                await self.bus.publish(ResourceUpdated(uri))
