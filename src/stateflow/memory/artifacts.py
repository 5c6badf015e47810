"""Runtime-owned provenance of artifact cards, kept outside the model's planes.

When a model writes a card for a source path, the runtime records the source's fingerprint
(size and modification time) in the scope's ``_runtime`` member. When the source later changes
or disappears, the card is shown with a ``hint`` so the model re-reads it and updates the card.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from stateflow.memory.planes import RUNTIME


def fingerprint(source: str, cwd: str) -> dict[str, int] | None:
    """``{size, mtime_ns}`` of the source file, or None when it is not a readable file."""
    path = Path(source)
    if not path.is_absolute():
        path = Path(cwd) / path
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def record(state: dict[str, Any], artifacts_patch: dict[str, Any], cwd: str) -> dict[str, Any]:
    """Update the provenance of every card the patch touched (dropping it for deleted cards)."""
    runtime = dict(state.get(RUNTIME) or {})
    known = dict(runtime.get("artifacts") or {})
    cards = state.get("artifacts") or {}
    for source in artifacts_patch:
        if source in cards:
            fp = fingerprint(source, cwd)
            if fp is None:
                known.pop(source, None)
            else:
                known[source] = fp
        else:
            known.pop(source, None)
    if known:
        runtime["artifacts"] = known
    else:
        runtime.pop("artifacts", None)
    out = dict(state)
    if runtime:
        out[RUNTIME] = runtime
    else:
        out.pop(RUNTIME, None)
    return out


def stale_hints(states: dict[str, Any], scopes: tuple[str, ...], cwd: str) -> dict[str, str]:
    """Hints for cards whose recorded source changed or vanished (narrowest owner wins)."""
    hints: dict[str, str] = {}
    for scope in scopes:
        state = states.get(scope) or {}
        cards = state.get("artifacts") or {}
        known = (state.get(RUNTIME) or {}).get("artifacts") or {}
        for source in cards:
            if source not in known:
                hints.pop(source, None)
                continue
            now = fingerprint(source, cwd)
            if now is None:
                hints[source] = "the source no longer exists; re-check it and update or delete this card"
            elif now != known[source]:
                hints[source] = (
                    "the source changed since this card was written; re-read it and update the card"
                )
            else:
                hints.pop(source, None)
    return hints
