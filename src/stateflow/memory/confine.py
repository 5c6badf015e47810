"""Where an artifact's source may live: inside the working directory or a configured knowledge root.

A model names artifact sources as strings. Before the runtime looks at a source on disk it must
prove, without touching anything outside the roots, that the path stays inside one of them:
``..`` is resolved lexically first, and every symbolic link met on the way (looked at with
``lstat`` from inside a root) is followed by reading the link only — its target is checked
against the roots before anything at that target is examined. An escaping path is refused.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import PurePath
from typing import Final

from stateflow.errors import InvalidInput, OutsideRoots

MAX_LINKS: Final = 40  # as the kernel's own symlink-hop limit (ELOOP)
NO_LOCAL_CWD: Final = ""
"""The ``cwd`` of a door whose working directory is not on this machine: no source lies in it."""


def _inside(path: str, roots: Sequence[str]) -> str | None:
    """The root that lexically contains the normalized absolute ``path``, or None."""
    for root in roots:
        if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
            return root
    return None


def _refuse(source: str, roots: Sequence[str], why: str, local: bool) -> OutsideRoots:
    """The refusal, saying this door's rule: a door without a local working directory admits
    sources in the server's knowledge roots only (the client's cwd names a scope, no directory)."""
    if local:
        rule = "sources must stay inside the working directory or a configured knowledge root"
    else:
        rule = (
            "this door's working directory is the client's, not a directory of this machine, so "
            "sources must lie inside one of the server's knowledge roots (STATEFLOW_KNOWLEDGE_ROOTS)"
        )
    return OutsideRoots(f"artifact source {source!r} {why}; {rule} ({', '.join(roots) or 'none configured'})")


def confine(source: str, cwd: str, roots: Sequence[str] = ()) -> str:
    """The absolute, link-free path of ``source`` inside ``cwd`` or ``roots``, or OutsideRoots.

    ``cwd`` is ``NO_LOCAL_CWD`` where the working directory is a remote client's (MCP over HTTP):
    it names a scope there, not a directory of this machine, so only ``roots`` admit sources.
    Only the roots and paths inside them are ever examined (``lstat``/``readlink``).
    """
    allowed = [os.path.normpath(r) for r in ((cwd, *roots) if cwd else roots)]
    if "\0" in source:
        raise _refuse(source, allowed, "contains a NUL byte", bool(cwd))
    if not cwd and not os.path.isabs(source):
        raise _refuse(source, allowed, "is relative", False)
    joined = source if os.path.isabs(source) else os.path.join(cwd, source)
    path = os.path.normpath(joined)
    root = _inside(path, allowed)
    if root is None:
        raise _refuse(source, allowed, "resolves outside them", bool(cwd))
    hops = 0
    done = root
    pending = list(PurePath(path).relative_to(root).parts)
    while pending:
        candidate = os.path.join(done, pending.pop(0))
        try:
            st = os.lstat(candidate)
        except OSError:
            return os.path.join(candidate, *pending)  # not there: nothing further to examine
        if not stat.S_ISLNK(st.st_mode):
            done = candidate
            continue
        hops += 1
        if hops > MAX_LINKS:
            raise _refuse(source, allowed, "follows too many symbolic links", bool(cwd))
        target = os.readlink(candidate)
        resolved = os.path.normpath(os.path.join(os.path.dirname(candidate), target, *pending))
        root = _inside(resolved, allowed)
        if root is None:
            raise _refuse(source, allowed, "follows a symbolic link that leaves them", bool(cwd))
        done = root
        pending = list(PurePath(resolved).relative_to(root).parts)
    return done


def anchored(scope: str, source: str) -> bool:
    """Whether ``source`` names the same file wherever ``scope`` is seen. A relative source is
    resolved against the viewer's working directory, and only the cwd scope is tied to one: the
    global scope is seen from every directory, and a session may be resumed from another."""
    return scope == "cwd" or os.path.isabs(source)


def check_anchored(scope: str, source: str, cwd: str) -> None:
    """Refuse a card in ``scope`` whose source would mean another file from another directory."""
    if not anchored(scope, source):
        where = "every working directory" if scope == "global" else "other working directories"
        raise InvalidInput(
            f"artifact source {source!r} is relative, and the {scope} scope is seen from {where}: "
            f"name it by its absolute path ({os.path.normpath(os.path.join(cwd, source))!r}) "
            "or write the card in the cwd scope"
        )


def inside(path: str, cwd: str, roots: Sequence[str] = ()) -> bool:
    """Whether the absolute ``path`` lies lexically inside ``cwd`` or ``roots`` (nothing is
    examined on disk)."""
    allowed = [os.path.normpath(r) for r in ((cwd, *roots) if cwd else roots)]
    return os.path.isabs(path) and _inside(os.path.normpath(path), allowed) is not None


def confined(source: str, cwd: str, roots: Sequence[str] = ()) -> str | None:
    """``confine`` for stored cards: None (look at nothing) instead of a refusal."""
    try:
        return confine(source, cwd, roots)
    except OutsideRoots:
        return None
