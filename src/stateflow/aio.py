"""The async Python API: the store, the states service and memory views, awaitable.

Every method of the synchronous object is offered as a coroutine of the same name and
arguments, run on a worker thread (``asyncio.to_thread``), so an event loop never blocks on
SQLite's fsync or on a PostgreSQL round trip. Both backends offload: the store's write path
(an optimistic read, the Python compute, a one-statement commit) is synchronous code shared by
both backends, and a second, natively async copy of it for PostgreSQL is not offered.

    async with await stateflow.aio.connect("./agent.db") as sf:
        await sf.states.declare(...)
        record = await sf.states.read("tickets", subject)
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from stateflow.memory import SCOPES, Identity, MemoryConfig, MemoryView
from stateflow.memory.scopes import SESSION_ENV
from stateflow.states import StatesService
from stateflow.store import Store, open_store
from stateflow.store.open import ENV_VAR as STORE_ENV

T = TypeVar("T")


class Offloaded(Generic[T]):
    """``obj``'s public methods as coroutines run on a worker thread; ``sync`` is ``obj``."""

    def __init__(self, obj: T) -> None:
        self.sync = obj

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self.sync, name)
        if not callable(method):
            raise AttributeError(f"{type(self.sync).__name__}.{name} is not a method")

        @functools.wraps(method)
        async def offloaded(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return offloaded


class AsyncStore(Offloaded[Store]):
    """The store (``read``, ``get``, ``read_at``, ``history``, ``scan``, ``search``, …)."""


class AsyncStatesService(Offloaded[StatesService]):
    """The declared-states service (``declare``, ``read``, ``replace``, ``merge``, ``apply``,
    ``apply_batch``, ``writes``, ``search``, ``template_jq_update``, …)."""


class AsyncMemoryView(Offloaded[MemoryView]):
    """A memory view (``read_state``, ``patch_state``, ``context``, ``record_response``,
    ``as_of``, ``transitions``, ``restore``); ``fork`` answers another async view."""

    async def fork(self, new_session: str, offset: int = 0) -> AsyncMemoryView:
        return AsyncMemoryView(await asyncio.to_thread(self.sync.fork, new_session, offset))


class AsyncStateflow:
    """A store and its services, awaitable. ``async with`` closes it."""

    def __init__(self, store: Store, *, session: str | None = None) -> None:
        self.store = AsyncStore(store)
        self.states = AsyncStatesService(StatesService(store))
        self.session = session
        """the default session of memory views (None: ``default``)"""

    def memory(
        self,
        agent: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        session: str | None = None,
        scopes: Sequence[str] = SCOPES,
        **config: Any,
    ) -> AsyncMemoryView:
        identity = Identity.of(agent, cwd, session or self.session)
        view = MemoryView(self.store.sync, identity, scopes, MemoryConfig(**config))
        return AsyncMemoryView(view)

    async def close(self) -> None:
        self.states.sync.close()
        await asyncio.to_thread(self.store.sync.close)

    async def __aenter__(self) -> AsyncStateflow:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def connect(store: str | None = None, *, session: str | None = None) -> AsyncStateflow:
    """Open the store at ``store`` (path or URL), ``$STATEFLOW_STORE``, or the default file;
    ``session`` (else ``$STATEFLOW_SESSION``) is the memory views' default session. The
    environment is read here, once."""
    location = store or os.environ.get(STORE_ENV) or None
    opened = await asyncio.to_thread(open_store, location)
    return AsyncStateflow(opened, session=session or os.environ.get(SESSION_ENV) or None)
