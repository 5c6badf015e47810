"""What a receipt tells the model: effective changes relative to what it was last shown.

The runtime remembers, per session view, the hot effective state it last showed the model (its
context or its previous receipt). A receipt lists every path where the accepted effective state
differs from that view — so a write another session made to a shared scope since then appears —
plus every path the patch authored, with its accepted effective value (a write hidden by a
narrower scope reports the value that hides it). Nothing is elided as "predictable": the model
gets the accepted value of everything it wrote, which costs little because values above
``ECHO_LIMIT`` bytes are never repeated (see ``bounded``).

The last-shown view is kept by ``shown``: in the serving process, and on disk when a runtime
directory is configured (as the CLI does), so one ``stateflow tool`` call in a new process
compares against what ``stateflow context`` showed in another.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Any, Final

from stateflow.doc.canonical import JSON, encode_trusted
from stateflow.doc.diff import Edit, diff_paths
from stateflow.doc.merge import is_index_patch
from stateflow.doc.paths import is_key
from stateflow.doc.select import MISSING

ECHO_LIMIT: Final = 2048
"""Largest value (canonical JSON bytes) a receipt or a recent transition repeats in full."""


def authored_paths(
    patch: dict[str, Any], skip: Iterable[str], shown: dict[str, Any] | None = None
) -> list[tuple[str | int, ...]]:
    """The paths a scope patch wrote (lazy planes skipped; artifact cards as whole entries).

    An ``{"[N]": …}`` patch names its elements (numeric path segments) when ``shown`` — the view
    the model was shown — holds an array there with every N in bounds; otherwise the array as a
    whole, since the model has no element basis to apply an element entry to."""
    skipped = skip if isinstance(skip, (tuple, frozenset, set)) else tuple(skip)
    out: list[tuple[str | int, ...]] = []
    for plane, value in patch.items():
        if plane not in skipped:
            _walk(value, (plane,), shown, out)
    return out


def _walk(node: Any, path: tuple[str | int, ...], shown: dict[str, Any] | None, out: list[Any]) -> None:
    # (a module function, not a closure made per call: this runs on every patch_state)
    if type(node) is dict and node:
        # an index patch's keys all read "[N]": one look at the first key spares the pattern
        if next(iter(node))[:1] == "[" and is_index_patch(node):
            basis = MISSING if shown is None else _at(shown, path)
            indexes = [int(k[1:-1]) for k in node]
            if type(basis) is list and all(i < len(basis) for i in indexes):
                for i, value in zip(indexes, node.values(), strict=True):
                    _walk(value, (*path, i), shown, out)
            else:
                out.append(path)
            return
        if not (len(path) == 2 and path[0] == "artifacts"):
            for k, v in node.items():
                if type(v) is dict and v:
                    _walk(v, (*path, k), shown, out)
                else:  # (what the call makes of a leaf, without the call)
                    out.append((*path, k))
            return
    out.append(path)  # a leaf, a deletion or a card


def _at(value: Any, path: tuple[str | int, ...]) -> Any:
    node = value
    for seg in path:
        t = type(node)
        if t is dict:
            if not (isinstance(seg, str) and seg in node):
                return MISSING
        elif t is not list or not (isinstance(seg, int) and 0 <= seg < len(node)):
            return MISSING
        node = node[seg]
    return node


def authored_entries(
    edited: Iterable[Iterable[Edit]],
    authored: list[tuple[str | int, ...]],
    hot: Container[str],
    accepted: dict[str, Any],
) -> list[tuple[tuple[str | int, ...], Any]] | None:
    """:func:`effective_entries` without the diff of the views, or None where that cannot be
    told: when some edit of a plane in ``hot`` lies neither at nor under an authored path.

    ``edited`` must be all the edits of every scope (each the diff of its scope before and
    after) and the view shown the basis's own. The hot views before and after then differ only
    at or under the edits' paths: an edit at ``e`` changes its scope at ``e`` and below only,
    and each ancestor of ``e`` stays an object (or an array of one length) on both sides, which
    the overlay of the scopes keeps too. With every edit at or under an authored path, each
    path of the views' diff is an authored path or lies under one: it adds no entry, and moves
    none (an entry is kept at its path's last place, and the authored come last)."""
    marks = set(authored)
    for edits in edited:
        for edit in edits:
            path = edit.path
            if path in marks:
                continue  # (most edits: a leaf of the patch set)
            if path and path[0] not in hot:
                continue  # a plane the hot view does not show (lazy, the runtime's)
            for n in range(1, len(path)):
                if path[:n] in marks:
                    break
            else:
                return None
    if len(marks) != len(authored):  # a path authored twice (by two scopes): at its last place
        authored = list(dict.fromkeys(reversed(authored)))[::-1]
    out: list[tuple[tuple[str | int, ...], Any]] = []
    for p in authored:
        for n in range(1, len(p)):
            if p[:n] in marks:
                break  # under another authored path, which is listed
        else:
            if p:
                out.append((p, _at(accepted, p)))
    return out


def effective_entries(
    shown: dict[str, Any], accepted: dict[str, Any], authored: list[tuple[str | int, ...]]
) -> list[tuple[tuple[str | int, ...], Any]]:
    """``(path, value or MISSING)`` for every changed or authored path, none under another."""
    paths = diff_paths(shown, accepted)
    paths += [p for p in authored if p]
    # each path at its last place in ``paths``; kept unless one of its ancestors is listed too
    # (a loop, not a sort by depth and a scan of the kept: this runs on every patch_state)
    order = {p: i for i, p in enumerate(paths)}
    kept: list[tuple[int, tuple[str | int, ...]]] = []
    for p, i in order.items():
        for n in range(len(p)):
            if p[:n] in order:
                break
        else:
            kept.append((i, p))
    kept.sort()  # by place: places are distinct, paths are never compared
    return [(p, _at(accepted, p)) for _, p in kept]


def read_path(root: str | None, path: tuple[str | int, ...]) -> str | None:
    """The read_state path of ``path`` under ``root`` (None: no readable root). Below a key the
    read grammar cannot spell (``"bad key"``, a file path) it is the nearest readable ancestor,
    which holds the value — as the dangling-reference hint names such a place — so every value
    left out is one call away."""
    if root is None:
        return None
    text = root
    for seg in path:
        if isinstance(seg, int):
            text += f"[{seg}]"
        elif is_key(seg):
            text += f".{seg}"
        else:
            break
    return text


def omitted(value: JSON, read: str | None) -> dict[str, Any] | None:
    """A stand-in for a value above ``ECHO_LIMIT``: its size and the exact call that reads it.
    (Values here are stored state, checked on their way in: they are measured, not checked.)"""
    size = len(encode_trusted(value))
    return None if size <= ECHO_LIMIT else _stand_in(size, read)


def _stand_in(size: int, read: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"omitted_bytes": size}
    if read is not None:
        out["read_state"] = {"path": read}
    return out


def echoed(path: tuple[str | int, ...], value: JSON, root: str | None) -> list[tuple[Any, ...]]:
    """A receipt's entries for ``value`` at ``path``: ``(path, value, stand-in or None)``, a
    large object as one entry per member (so only the large members are omitted, with their
    read path under ``root``), each value encoded once at most: a scalar that cannot reach
    ``ECHO_LIMIT`` never is (a string encodes to at most 6 bytes a character, escapes included,
    plus its quotes; other scalars to a few bytes)."""
    t = type(value)
    if t is str:
        if len(value) * 6 + 2 <= ECHO_LIMIT:
            return [(path, value, None)]
    elif t is not dict and t is not list:
        return [(path, value, None)]
    size = len(encode_trusted(value))
    if size <= ECHO_LIMIT:
        return [(path, value, None)]
    if t is dict and value:
        return [entry for k, v in value.items() for entry in echoed((*path, k), v, root)]
    return [(path, value, _stand_in(size, read_path(root, path)))]


def bounded(value: JSON, root: str | None, path: tuple[str | int, ...] = ()) -> JSON:
    """``value`` with every sub-value above ``ECHO_LIMIT`` replaced by ``{"$omitted": …}``."""
    stand_in = omitted(value, read_path(root, path))
    if stand_in is None:
        return value
    if type(value) is dict and value:
        return {k: bounded(v, root, (*path, k)) for k, v in value.items()}
    return {"$omitted": stand_in}
