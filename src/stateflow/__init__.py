"""stateflow: durable, versioned, schema-aware JSON state for LLM agents."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from stateflow.api import Stateflow, connect

__all__ = ["Stateflow", "__version__", "connect"]


def __getattr__(name: str) -> Any:
    # The entry points import on first use, so `import stateflow` (and every CLI command, which
    # imports a submodule of this package) pays only for what it touches.
    if name in ("Stateflow", "connect"):
        from stateflow import api

        return getattr(api, name)
    raise AttributeError(f"module 'stateflow' has no attribute {name!r}")
