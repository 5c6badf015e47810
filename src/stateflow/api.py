"""The Python entry point and composition root: ``stateflow.connect(store, config)`` opens the
store once and gives the services on it (``.memory(...)``, ``.states()``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stateflow.config import Config
from stateflow.memory import SCOPES, Identity, MemoryConfig, MemoryView
from stateflow.store import Store, open_store

if TYPE_CHECKING:
    from stateflow.states import StatesService


class Stateflow:
    """A store plus the services that use it. Close it (or use ``with``) when done."""

    def __init__(self, store: Store, config: Config | None = None) -> None:
        self.store = store
        self.config = config or Config()
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
        return MemoryView(self.store, Identity.of(agent, cwd, session), scopes, MemoryConfig(**config))

    def states(self) -> StatesService:
        """The declared-states service on this store (one per connection; the built-in ``memory``
        state is installed on first use)."""
        if self._states is None:
            from stateflow.states import StatesService

            service = StatesService(self.store, self.config)
            service.install_builtins()
            self._states = service
        return self._states

    def close(self) -> None:
        if self._states is not None:
            self._states.close()
        self.store.close()

    def __enter__(self) -> Stateflow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(store: str | None = None, config: Config | None = None) -> Stateflow:
    """Open the store at ``store`` (path or URL), else ``config.store.url``, else
    ``$STATEFLOW_STORE``, else the default file. ``config`` defaults to the built-in defaults
    (``Config.from_env()`` reads the ``STATEFLOW_*`` variables once, if you want them)."""
    config = config or Config()
    return Stateflow(open_store(store or config.store.url), config)
