"""Optional parts of the install: which extra brings which library, and the refusal naming it.

A SQLite-only install (``pip install stateflow``) has the store, agent memory, declared states
and the CLI. PostgreSQL, the HTTP server and the MCP server each need their extra; when one is
missing, the feature that needs it says which extra to install instead of failing on an import.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from stateflow.errors import MissingExtra

EXTRAS: Final = {
    "postgres": ("psycopg", "psycopg_pool"),
    "server": ("fastapi", "starlette", "uvicorn", "jinja2", "markupsafe"),
    "mcp": ("mcp", "mcp_types", "anyio"),  # (``mcp_types``: the SDK's types, a package of their own)
}


@contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Turn a missing library of ``extra``, imported inside the block, into :class:`MissingExtra`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in EXTRAS[extra]:
            raise
        raise MissingExtra(
            f"{feature} needs the '{extra}' extra ({missing} is not installed): "
            f"python3 -m pip install 'stateflow[{extra}]'"
        ) from exc


MCP_OVER_HTTP: Final = "MCP over HTTP (/mcp)"
"""The feature ``stateflow serve`` offers at ``/mcp`` when the ``mcp`` extra is installed."""


def missing_for(extra: str, feature: str, module: str) -> str | None:
    """The refusal naming ``extra`` where ``module`` — which needs it — cannot be imported for
    want of it; None where it imports (any other failure to import is raised)."""
    try:
        with needs_extra(extra, feature):
            importlib.import_module(module)
    except MissingExtra as exc:
        return str(exc)
    return None
