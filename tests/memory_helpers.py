"""Helpers for the memory tests: a view factory over the backend-parametrized store."""

from __future__ import annotations

from typing import Any

from stateflow.memory import Identity, MemoryConfig, MemoryView
from stateflow.store import SqlStore


def view(
    store: SqlStore,
    scopes: tuple[str, ...] = ("global", "cwd", "session"),
    session: str = "s1",
    cwd: str = "/tmp",
    **config: Any,
) -> MemoryView:
    return MemoryView(store, Identity.of("agent-a", cwd, session), scopes, MemoryConfig(**config))


def transitions(store: SqlStore) -> int:
    return len(store.transitions(limit=10_000))
