"""LangGraph adapters: thread state (``StateflowSaver``) and long-term memory
(``StateflowStore``) kept as stateflow records — every revision readable, every write audited.

Needs the ``langgraph`` extra (``pip install 'stateflow[langgraph]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stateflow.langgraph.saver import StateflowSaver
    from stateflow.langgraph.store import StateflowStore

__all__ = ["StateflowSaver", "StateflowStore"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the states door imports this package's record rule
    # (``stateflow.langgraph.items``) in processes without LangGraph installed.
    if name == "StateflowSaver":
        from stateflow.langgraph.saver import StateflowSaver

        return StateflowSaver
    if name == "StateflowStore":
        from stateflow.langgraph.store import StateflowStore

        return StateflowStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
