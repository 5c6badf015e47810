"""Runtime-owned provenance of artifact cards, kept outside the model's planes.

When a model writes a card for a source path, the runtime records the source's fingerprint
(size and modification time) in the scope's ``_runtime`` member. When the source later changes
or disappears, the card is shown with a ``hint`` so the model re-reads it and updates the card.
Sources are confined (see ``confine``): a path outside the working directory and the knowledge
roots is never examined.

A Markdown source inside a knowledge root (see ``knowledge``) is also hashed when its card is
written, so only changed bytes make the card stale (a touched file is not); a source under a
knowledge root that is unavailable has unknown freshness and gets no hint.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Any, Final

from stateflow.memory import knowledge
from stateflow.memory.confine import anchored, check_anchored, confine, confined, inside
from stateflow.memory.planes import RUNTIME

LEFT_THE_ROOTS: Final = (
    "the source now leads outside the working directory and knowledge roots, so it is not "
    "examined; re-check it and update or delete this card"
)


def fingerprint(source: str, cwd: str, roots: Sequence[str] = ()) -> dict[str, Any] | None:
    """``{size, mtime_ns, path}`` of the confined source file (``path``: where it was found, links
    followed), or None when it is not a regular file (or lies outside the roots, which is then
    never examined)."""
    path = confined(source, cwd, roots)
    if path is None:
        return None
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "path": path}


def check_sources(scope: str, artifacts_patch: dict[str, Any], cwd: str, roots: Sequence[str] = ()) -> None:
    """Refuse a written card whose source leaves the roots, or is relative outside the cwd scope
    (deleting such a card stays possible)."""
    for source, card in artifacts_patch.items():
        if card is not None:
            confine(source, cwd, roots)
            check_anchored(scope, source, cwd)


def record(
    state: dict[str, Any], artifacts_patch: dict[str, Any], cwd: str, roots: Sequence[str] = ()
) -> dict[str, Any]:
    """Update the provenance of every card the patch touched (dropping it for deleted cards)."""
    runtime = dict(state.get(RUNTIME) or {})
    known = dict(runtime.get("artifacts") or {})
    cards = state.get("artifacts") or {}
    for source in artifacts_patch:
        if source in cards:
            fp = fingerprint(source, cwd, roots)
            if fp is None:
                known.pop(source, None)
            else:
                digest = knowledge.source_digest(source, cwd, roots)
                known[source] = fp if digest is None else {**fp, "sha256": digest}
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


def stale_hints(
    states: dict[str, Any], scopes: tuple[str, ...], cwd: str, roots: Sequence[str] = ()
) -> dict[str, str]:
    """Hints for cards whose recorded source changed or vanished (narrowest owner wins)."""
    hints: dict[str, str] = {}
    for scope in scopes:
        state = states.get(scope) or {}
        cards = state.get("artifacts") or {}
        known = (state.get(RUNTIME) or {}).get("artifacts") or {}
        for source in cards:
            if source not in known or not anchored(scope, source):
                # (a relative source outside the cwd scope, recorded before such cards were
                # refused, may name another directory's file: its freshness is unknown here)
                hints.pop(source, None)
                continue
            if confined(source, cwd, roots) is None:
                if _was_inside(source, known[source], cwd, roots):
                    # the file was found inside the roots these views examine, and the path now
                    # leads out of them (a link swapped in): the card no longer describes it
                    hints[source] = LEFT_THE_ROOTS
                else:
                    # recorded before sources were confined, or through a view with other roots:
                    # never examined here, its freshness is unknown
                    hints.pop(source, None)
                continue
            if knowledge.root_unavailable(source, cwd, roots):
                hints.pop(source, None)  # freshness unknown: the root may only be unmounted
                continue
            now = fingerprint(source, cwd, roots)
            if now is None:
                hints[source] = "the source no longer exists; re-check it and update or delete this card"
            elif _changed(source, known[source], now, cwd, roots):
                hints[source] = (
                    "the source changed since this card was written; re-read it and update the card"
                )
            else:
                hints.pop(source, None)
    return hints


def _was_inside(source: str, recorded: Any, cwd: str, roots: Sequence[str]) -> bool:
    """Whether ``source`` is named inside ``cwd`` or ``roots`` and was found inside them when its
    card was written: lexical tests of the name and the recorded path, examining nothing."""
    path = recorded.get("path") if isinstance(recorded, dict) else None
    named = source if os.path.isabs(source) or not cwd else os.path.join(cwd, source)
    return isinstance(path, str) and inside(path, cwd, roots) and inside(named, cwd, roots)


def _changed(source: str, recorded: Any, now: dict[str, int], cwd: str, roots: Sequence[str]) -> bool:
    """Whether the source differs from when its card was written: same size and time mean the
    same; otherwise a hashed source is compared by its bytes."""
    if not isinstance(recorded, dict):
        return True
    if recorded.get("size") == now["size"] and recorded.get("mtime_ns") == now["mtime_ns"]:
        return False
    if "sha256" in recorded and recorded.get("size") == now["size"]:
        return bool(knowledge.source_digest(source, cwd, roots) != recorded["sha256"])
    return True
