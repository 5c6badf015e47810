"""The Python entry point and composition root: ``stateflow.connect(store, config)`` opens the
store once and gives the services on it (``.memory(...)``, ``.states()``).

This is where a Python program's configuration is settled: :func:`connect` reads the
environment once (``STATEFLOW_STORE`` when neither ``store`` nor ``config`` names a store,
``STATEFLOW_SESSION`` as the memory views' default session); nothing below reads it later.
:func:`states_service` is the one place a declared-states service is put together (its
configuration, the built-in ``memory`` state and registered template seeds installed) — the
CLI, the API server and :class:`Stateflow` all use it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from stateflow.config import Config
from stateflow.errors import StoreNotMigrated
from stateflow.memory import SCOPES, Identity, MemoryConfig, MemoryView
from stateflow.memory.scopes import SESSION_ENV
from stateflow.store import Store, open_store
from stateflow.store.open import ENV_VAR as STORE_ENV
from stateflow.store.open import StoreLocation

if TYPE_CHECKING:
    from stateflow.jq import JqRunner
    from stateflow.states import StatesService


def states_service(
    store: Store,
    config: Config | None = None,
    *,
    jq: JqRunner | None = None,
    unmigrated: Callable[[StoreNotMigrated], None] | None = None,
) -> StatesService:
    """A declared-states service on ``store`` with its built-ins installed — the one place
    they are (the HTTP app, the studio and the CLI take a service made here). ``jq``: the
    worker pool to run template jq on (else one sized from ``config`` on first use). A store
    that is not migrated yet raises ``StoreNotMigrated`` — or, given ``unmigrated``, is
    reported to it and the service returned anyway: a server answers 503 until ``stateflow
    migrate`` has run, and the built-ins are installed when the store is first found
    migrated (``Store.when_migrated``). On a store opened at its first use (one with
    ``when_opened``) they are installed then, by the first call that uses it."""
    from stateflow.states import StatesService

    service = StatesService(store, config)
    if jq is not None:
        service.use_jq(jq)
    when_opened = getattr(store, "when_opened", None)
    if when_opened is not None:
        # a store opened at its first use (the CLI's, for a call that may be refused for its
        # arguments): installing now would create it; the call that first uses it installs them
        when_opened(service.install_builtins)
        return service
    try:
        service.install_builtins()
    except StoreNotMigrated as exc:
        if unmigrated is None:
            raise
        unmigrated(exc)
        store.when_migrated(service.install_builtins)
    return service


class Stateflow:
    """A store plus the services that use it. Close it (or use ``with``) when done."""

    def __init__(self, store: Store, config: Config | None = None, *, session: str | None = None) -> None:
        self.store = store
        self.config = config or Config()
        self.session = session
        """the default session of memory views (None: ``default``)"""
        self._states: StatesService | None = None

    def memory(
        self,
        agent: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        session: str | None = None,
        scopes: Sequence[str] = SCOPES,
        **config: Any,
    ) -> MemoryView:
        """A memory view: ``read_state``, ``patch_state``, ``context()``, ``record_response()``."""
        identity = Identity.of(agent, cwd, self.session if session is None else session)
        return MemoryView(self.store, identity, scopes, MemoryConfig(**config))

    def states(self) -> StatesService:
        """The declared-states service on this store (one per connection; the built-in ``memory``
        state is installed on first use)."""
        if self._states is None:
            self._states = states_service(self.store, self.config)
        return self._states

    def close(self) -> None:
        if self._states is not None:
            self._states.close()
        self.store.close()

    def __enter__(self) -> Stateflow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    store: StoreLocation | None = None, config: Config | None = None, *, session: str | None = None
) -> Stateflow:
    """Open the store at ``store`` (path or URL), else ``config.store.url``, else
    ``$STATEFLOW_STORE``, else the default file. ``config`` defaults to the built-in defaults
    (``Config.from_env()`` reads the ``STATEFLOW_*`` variables once, if you want them).
    ``session``: the memory views' default session, else ``$STATEFLOW_SESSION``, else
    ``default``. The environment is read here, once."""
    config = config or Config()
    location = store or config.store.url or os.environ.get(STORE_ENV) or None
    return Stateflow(
        open_store(location, **config.store.open_options()),  # ([store] waits as at every door)
        config,
        session=session if session is not None else os.environ.get(SESSION_ENV) or None,
    )
