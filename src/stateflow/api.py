"""The Python entry point: ``stateflow.connect()`` gives a store and the services on it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from stateflow.memory import SCOPES, Identity, MemoryConfig, MemoryView
from stateflow.store import Store, open_store


class Stateflow:
    """A store plus the services that use it. Close it (or use ``with``) when done."""

    def __init__(self, store: Store) -> None:
        self.store = store

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

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Stateflow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(store: str | None = None) -> Stateflow:
    """Open the store at ``store`` (path or URL), ``$STATEFLOW_STORE``, or the default file."""
    return Stateflow(open_store(store))
