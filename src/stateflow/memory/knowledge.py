"""Knowledge sources: Markdown files under configured roots, and what memory knows of them.

Discovery walks each knowledge root for regular files named ``*.md`` (lowercase suffix),
skipping symbolic links (to files and to directories alike), and hashes a source's bytes when
its card is written (see ``artifacts``) — so a card turns stale only when the bytes change.

A root that does not exist or is not a readable directory is *unavailable*: the freshness of
its cards is unknown, and nothing under it is ever pruned (an unmounted disk is not a deletion).
Inside an available root, a card whose Markdown source is confirmed missing (the path itself
answers "no such file") is pruned by ``prune``; cards of other files, of paths outside the
roots and of sources that cannot be examined are kept.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from stateflow.doc.canonical import utf8_text
from stateflow.memory.confine import anchored, confined
from stateflow.memory.planes import RUNTIME
from stateflow.memory.scopes import path_text
from stateflow.store import DocKey, Document, Write

if TYPE_CHECKING:
    from stateflow.memory.view import MemoryView

SUFFIX: Final = ".md"
CONTEXT_LISTED: Final = 20
"""Uncompiled sources a context names per root (the rest are counted)."""


def is_markdown(path: str) -> bool:
    return os.path.basename(path).endswith(SUFFIX)


def available(root: str) -> bool:
    try:
        st = os.stat(root)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and os.access(root, os.R_OK | os.X_OK)


def _root_of(path: str, roots: Sequence[str]) -> str | None:
    for root in roots:
        top = os.path.normpath(root)
        if path == top or path.startswith(top.rstrip(os.sep) + os.sep):
            return root
    return None


def discover(root: str) -> list[str] | None:
    """Every regular ``*.md`` file beneath ``root`` (absolute, sorted; symbolic links skipped),
    or None when the root is unavailable."""
    if not available(root):
        return None
    found: list[str] = []
    pending = [os.path.normpath(root)]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:
            continue  # an unreadable directory: its files are neither found nor missing
        for entry in listed:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif entry.is_file(follow_symlinks=False) and entry.name.endswith(SUFFIX):
                found.append(entry.path)
    return sorted(found)


def _sha256(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            return None
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_digest(source: str, cwd: str, roots: Sequence[str]) -> str | None:
    """sha256 of a Markdown source inside a knowledge root, else None (other sources keep the
    size-and-time fingerprint only)."""
    path = confined(source, cwd, roots)
    if path is None or not is_markdown(path) or _root_of(path, roots) is None:
        return None
    return _sha256(path)


def root_unavailable(source: str, cwd: str, roots: Sequence[str]) -> bool:
    """Whether ``source`` lies under a knowledge root that is unavailable (freshness unknown)."""
    if not os.path.isabs(source) and not cwd:
        return False  # no local working directory: a relative source lies under no root here
    path = os.path.normpath(source if os.path.isabs(source) else os.path.join(cwd, source))
    root = _root_of(path, roots)
    return root is not None and not available(root)


def confirmed_missing(source: str, cwd: str, roots: Sequence[str]) -> bool:
    """A Markdown source inside an available knowledge root whose path is proven absent."""
    path = confined(source, cwd, roots)
    if path is None or not is_markdown(path):
        return False
    root = _root_of(path, roots)
    if root is None or not available(root):
        return False
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False  # cannot tell (permissions, I/O): keep the card
    return False


def _cards(view: MemoryView, states: dict[str, Any]) -> dict[str, str]:
    """Every card's source (as an absolute path) → the narrowest scope that holds it."""
    out: dict[str, str] = {}
    for scope in view.scopes:
        for source in (states.get(scope) or {}).get("artifacts") or {}:
            path = confined(source, view.source_cwd, view.config.knowledge_roots)
            if path is not None and anchored(scope, source):
                out[path] = scope
    return out


def status(
    view: MemoryView,
    states: dict[str, Any],
    *,
    listed: int | None = None,
    stale: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Per knowledge root: whether it is available, its Markdown sources, and which of them
    have no card yet (``listed`` bounds how many are named). With ``stale`` (card hints by
    source) it also names the cards whose source changed and those whose source is missing.
    ``states``: the view's scope documents with their artifacts and provenance."""
    cards = _cards(view, states)
    cwd, roots = view.source_cwd, view.config.knowledge_roots
    out: list[dict[str, Any]] = []
    for root in view.config.knowledge_roots:
        found = discover(root)
        if found is None:
            out.append({"root": path_text(root), "available": False, "freshness": "unknown"})
            continue
        # a name whose bytes are not UTF-8 (Linux allows any) can be no card's source, nor text
        # in an answer: such files are named apart, escaped, and the rest still answered
        unnamed = [path_text(p) for p in found if not utf8_text(p)]
        found = [p for p in found if utf8_text(p)] if unnamed else found
        uncompiled = [p for p in found if p not in cards]
        entry: dict[str, Any] = {"root": path_text(root), "available": True, "sources": len(found)}
        entry["uncompiled"] = uncompiled if listed is None else uncompiled[:listed]
        if listed is not None and len(uncompiled) > listed:
            entry["uncompiled_more"] = len(uncompiled) - listed
        if unnamed:
            entry["not_utf8"] = unnamed if listed is None else unnamed[:listed]
        if stale is not None:
            mine = {
                source: path
                for scope in view.scopes
                for source in (states.get(scope) or {}).get("artifacts") or {}
                if anchored(scope, source)
                and (path := confined(source, cwd, roots)) is not None
                and _root_of(path, [root]) is not None
            }
            entry["missing"] = sorted(s for s in mine if confirmed_missing(s, cwd, roots))
            entry["stale"] = sorted(s for s in mine if s in stale and s not in entry["missing"])
        out.append(entry)
    return out


def prune(view: MemoryView) -> list[dict[str, str]]:
    """Delete, as one transition, every card of the view whose Markdown source inside an
    available knowledge root is confirmed missing; returns ``[{scope, source}]``."""
    cwd, roots = view.source_cwd, view.config.knowledge_roots
    keys = list(view.keys.values())

    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], list[dict[str, str]]]:
        writes: list[Write] = []
        pruned: list[dict[str, str]] = []
        for scope, key in view.keys.items():
            body = docs[key].body or {}
            cards = body.get("artifacts") or {}
            gone = [s for s in cards if anchored(scope, s) and confirmed_missing(s, cwd, roots)]
            if not gone:
                continue
            new = dict(body)
            kept = {k: v for k, v in cards.items() if k not in gone}
            if kept:
                new["artifacts"] = kept
            else:
                new.pop("artifacts", None)
            runtime = dict(body.get(RUNTIME) or {})
            known = {k: v for k, v in (runtime.get("artifacts") or {}).items() if k not in gone}
            if known:
                runtime["artifacts"] = known
            else:
                runtime.pop("artifacts", None)
            if runtime:
                new[RUNTIME] = runtime
            else:
                new.pop(RUNTIME, None)
            writes.append(Write.between(key, body, new, docs[key].revision))
            pruned.extend({"scope": scope, "source": source} for source in gone)
        return writes, pruned

    members = ["artifacts", RUNTIME]
    # look first without a write: with nothing to prune (the common case, before every hook
    # context) no write is begun, so a read-only store answers too
    if not compute(view.store.read(keys, members))[0]:
        return []
    _, pruned = view.store.update(
        keys, compute, {"door": "runtime", "action": "knowledge-prune"}, members=members
    )
    return pruned or []
