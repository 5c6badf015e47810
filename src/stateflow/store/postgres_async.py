"""PostgreSQL on psycopg's ``AsyncConnectionPool``: the store's own code, natively async.

:class:`AsyncPostgresStore` is the PostgreSQL store — the same reads, caches, optimistic
one-statement commits and locked path — whose connections are async ones
(:mod:`stateflow.store.async_bridge`): called through :func:`stateflow.store.async_bridge.spawn`
(what :mod:`stateflow.aio` and the LangGraph adapters' async methods do), every round trip is
awaited on the event loop. Open it with ``await AsyncPostgresStore.connect(url)``.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import psycopg

from stateflow.store.async_bridge import Pool, spawn, wait_for
from stateflow.store.postgres import PostgresStore


class AsyncPostgresStore(PostgresStore):
    """The PostgreSQL store over an async connection pool, bound to the event loop that opened
    it. Its methods run inside :func:`~stateflow.store.async_bridge.spawn` on that loop, or
    from other threads while the loop runs."""

    runs_on_loop: ClassVar[bool] = True

    def __init__(self, url: str, **options: Any) -> None:
        self.loop = asyncio.get_running_loop()  # constructed inside spawn(), on the loop's thread
        super().__init__(url, **options)

    @classmethod
    async def connect(cls, url: str, **options: Any) -> AsyncPostgresStore:
        """Open (and with ``auto_migrate=True`` migrate) the store; the options are
        :class:`~stateflow.store.postgres.PostgresStore`'s."""
        return await spawn(cls, url, **options)

    def _probe(self, url: str, kwargs: dict[str, Any]) -> None:
        async def probe() -> None:
            conn = await psycopg.AsyncConnection.connect(url, **kwargs)
            await conn.close()

        wait_for(probe(), self.loop)

    def _open_pool(self, url: str, **options: Any) -> Pool:
        return Pool(self.loop, url, **options)
