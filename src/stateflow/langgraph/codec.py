"""Values LangGraph hands over, as JSON a stateflow record can hold.

Plain JSON (objects with string keys, lists, strings, booleans, null, finite floats and
integers within ±2^53) is stored as is, under ``{"json": value}``, so a record reads as
the data it holds through every door. Anything else (messages, tuples, bytes, …) goes through
the saver's serializer and is stored as ``{"type": serializer type, "b64": bytes}``. A
serializer other than LangGraph's default (an encrypting one, say) gets every value, plain or
not.
"""

from __future__ import annotations

import base64
import math
from typing import Any, Final

import orjson
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from stateflow.doc.canonical import identical
from stateflow.doc.select import MISSING

_MAX_INT = 2**53
_MIN_INT = -_MAX_INT


class _NotPlain:
    """What :func:`plain` answers for a value that is not plain JSON."""


NOT_PLAIN: Final = _NotPlain()


def plain(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` if it is plain JSON (its objects and lists new, its leaves shared:
    they are immutable), else :data:`NOT_PLAIN`. The copy is what decoding its JSON would
    give (exact types, the same keys in the same order): the adapters hand it to the store,
    whose caches keep it, so no caller's object ends up there — one walk that checks and
    copies costs less than the check's walk and a copy through JSON."""
    if depth > 64:
        return NOT_PLAIN
    kind = type(value)
    # (objects and lists first: the loops below check text, integer and null leaves inline,
    # so most calls here are for a container)
    if kind is dict:
        # copied whole in C, the containers below replaced by their copies: the leaves are
        # immutable, so the copy may share them
        copied: dict[str, Any] = value.copy()
        for k, v in value.items():
            # (text, integers and null inline: most values are leaves — a checkpoint's channel
            # versions, steps and counters are integers — and a call each would double the
            # walk's cost)
            if type(k) is not str:
                return NOT_PLAIN
            leaf = type(v)
            if leaf is int and depth < 64:  # (deeper: the call's depth limit refuses it)
                if not _MIN_INT <= v <= _MAX_INT:
                    return NOT_PLAIN
            elif not (leaf is str or v is None):
                v = plain(v, depth + 1)
                if v is NOT_PLAIN:
                    return NOT_PLAIN
                copied[k] = v
        return copied
    if kind is list:
        items: list[Any] = value.copy()
        for n, v in enumerate(value):
            leaf = type(v)
            if leaf is int and depth < 64:
                if not _MIN_INT <= v <= _MAX_INT:
                    return NOT_PLAIN
            elif not (leaf is str or v is None):
                v = plain(v, depth + 1)
                if v is NOT_PLAIN:
                    return NOT_PLAIN
                items[n] = v
        return items
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if _MIN_INT <= value <= _MAX_INT else NOT_PLAIN
    if kind is float:
        return value if math.isfinite(value) else NOT_PLAIN
    return NOT_PLAIN


STRICT: Final = orjson.OPT_STRICT_INTEGER | orjson.OPT_PASSTHROUGH_SUBCLASS
"""orjson's options under which encoding a copy :func:`shaped` made refuses what :func:`plain`
refuses beyond it: a key that is not an exact ``str`` (``Dict key must be str``), an integer
past ±(2^53 − 1). (±2^53 itself, which ``plain`` keeps, too: the caller's exact retry keeps
it.)"""


def shaped(value: Any, depth: int = 0) -> Any:
    """:func:`plain` without the checks of keys and of integers' range, for a caller that
    encodes the copy with :data:`STRICT` (which refuses them, in C) and, where that raises,
    encodes the value again through :func:`plain`: accepted by both, the copy is ``plain``'s
    (a value ``plain`` refuses either is refused here or makes that encoding raise)."""
    if depth >= 64:  # (near the depth limit, ``plain`` itself: its limit is per kind of leaf)
        return plain(value, depth)
    kind = type(value)
    if kind is dict:
        copied: dict[str, Any] = value.copy()
        for k, v in value.items():
            if type(v) in _LEAVES:
                continue
            v = shaped(v, depth + 1)
            if v is NOT_PLAIN:
                return NOT_PLAIN
            copied[k] = v
        return copied
    if kind is list:
        items: list[Any] = value.copy()
        n = -1  # (an index counted by hand: no ``enumerate`` object and its pairs per list)
        for v in value:
            n += 1
            if type(v) in _LEAVES:
                continue
            v = shaped(v, depth + 1)
            if v is NOT_PLAIN:
                return NOT_PLAIN
            items[n] = v
        return items
    if kind is str or kind is bool or kind is int or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else NOT_PLAIN
    return NOT_PLAIN


def shaped_members(value: dict[str, Any]) -> bool:
    """:func:`shaped` for an object made for this write (shared with nobody): its members that
    are objects or lists replaced in place by their copies, the object itself not copied
    again; False where :func:`shaped` refuses (then some members may be copies already, equal
    and of the same types: the caller's fallback encodes the object as it is)."""
    for k, v in value.items():
        kind = type(v)
        if kind in _LEAVES:
            continue
        # (the members' own objects and lists copied here, ``shaped(v, 1)`` written out: a
        # checkpoint's members are mostly objects of leaves, and a call each costs more than
        # the loop it runs)
        if kind is dict:
            copied: dict[str, Any] = v.copy()
            for name, item in v.items():
                if type(item) in _LEAVES:
                    continue
                item = shaped(item, 2)
                if item is NOT_PLAIN:
                    return False
                copied[name] = item
            value[k] = copied  # (the dict's size never changes while iterating)
        elif kind is list:
            items: list[Any] = v.copy()
            n = -1
            for item in v:
                n += 1
                if type(item) in _LEAVES:
                    continue
                item = shaped(item, 2)
                if item is NOT_PLAIN:
                    return False
                items[n] = item
            value[k] = items
        else:
            v = shaped(v, 1)
            if v is NOT_PLAIN:
                return False
            value[k] = v
    return True


_LEAVES: Final = frozenset((str, int, bool, type(None)))
"""The leaves :func:`shaped` takes as they are, without a call (an integer's range is the
encoding's to check)."""
_TEXTS: Final = frozenset((str, type(None)))
"""The leaves equal only to themselves in exact type (``1 == 1.0 == True``; a stored text is a
``str``): a list of them equal to another is identical to it."""


def strict_bytes(value: Any) -> bytes | None:
    """``value`` (holding copies :func:`shaped` made) encoded under :data:`STRICT`; None where
    that refuses it (the caller encodes its values again through :func:`plain`)."""
    try:
        return orjson.dumps(value, option=STRICT)
    except TypeError:
        return None


def plain_edits(
    new: dict[str, Any], old: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, list[Any]]] | None:
    """:func:`plain` ``(new)`` and the edits ``diff(old, that copy)`` gives, in one walk: the
    copy, and the edits grouped by top-level member in first-touched order (each as its JSON,
    ``[path]`` or ``[path, value]``, a value the copy's own) — what ``Store.write_whole`` plans
    a body replaced whole from (``Whole.edits``). None where :func:`plain` refuses.

    The diff is :func:`stateflow.doc.diff.diff`'s, exactly (a changed number type or key set
    is an edit: ``1``, ``1.0`` and ``True`` are three values): it follows ``new`` and ``old``
    down where both are objects, or lists of one length, and wherever they part, the edit is
    the copy made by :func:`plain`. A value of ``new`` that is ``old``'s own object (a stored
    value: taken as plain, as the store holds it) is kept by identity, unwalked, as the diff
    passes it.

    ``new`` is a dict made for this write (the caller's record; its values may be anybody's):
    it becomes the copy, each member walked replaced in place by its own copy — the record is
    not copied again. Where :func:`plain` refuses, some members may be copies already (equal,
    of the same types)."""
    groups: dict[str, list[Any]] = {}
    added = 0  # (members ``old`` lacks: with them, whether ``old`` has any ``new`` lacks)
    copied = new  # (a member replaced while iterating: the dict's size never changes)
    for key, v in new.items():
        was = old.get(key, MISSING)
        if v is was:  # (``old``'s own: stored, so plain, and no edit)
            continue
        if was is MISSING:
            added += 1
        if type(key) is not str:
            return None
        leaf = type(v)
        # (text, null and integers inline, as in ``plain``: most members are leaves)
        if leaf is str or v is None:
            if type(was) is not leaf or was != v:
                groups[key] = [[[key], v]]
        elif leaf is int:
            if not _MIN_INT <= v <= _MAX_INT:
                return None
            if type(was) is not int or was != v:
                groups[key] = [[[key], v]]
        else:
            out: list[Any] = []
            v = walk(v, was, (key,), 1, out)
            if v is NOT_PLAIN:
                return None
            copied[key] = v
            if out:
                groups[key] = out
    if len(old) > len(new) - added:  # (deletions first, as the diff lists them)
        # (loops, not comprehensions: one would make ``new`` a cell on every call)
        deleted: dict[str, list[Any]] = {}
        for key in old:
            if key not in new:
                deleted[key] = [[[key]]]
        deleted.update(groups)
        groups = deleted
    return copied, groups


def walk(new: Any, old: Any, path: tuple[str | int, ...], depth: int, out: list[Any]) -> Any:
    """:func:`plain` ``(new, depth)``, adding to ``out`` the edits that take ``old`` (at
    ``path``; :data:`MISSING`: none) to the copy, as the diff lists them."""
    if depth > 64:
        return NOT_PLAIN
    kind = type(new)
    if kind is dict and type(old) is dict:
        copied: dict[str, Any] = new.copy()
        # (the key sets compared by what the loop finds, not as views: ``old`` lacks ``added``
        # of ``new``'s keys, so it has keys ``new`` lacks where it is longer than the rest)
        start, added = len(out), 0
        for k, v in new.items():
            was = old.get(k, MISSING)
            if v is was and depth < 64:  # (deeper: ``plain``'s depth limit may refuse it)
                continue
            if was is MISSING:
                added += 1
            if type(k) is not str:
                return NOT_PLAIN
            leaf = type(v)
            if leaf is str or v is None:
                if type(was) is not leaf or was != v:
                    out.append([[*path, k], v])
            elif leaf is int and depth < 64:
                if not _MIN_INT <= v <= _MAX_INT:
                    return NOT_PLAIN
                if type(was) is not int or was != v:
                    out.append([[*path, k], v])
            elif (
                leaf is list
                and type(was) is list
                and depth < 64
                and v == was
                and _TEXTS.issuperset(map(type, v))
            ):
                # (a list of texts and nulls equal to the one before — a text equals only a
                # text, a null only a null —: no edit, copied here without a call)
                copied[k] = v.copy()
            else:
                v = walk(v, was, (*path, k), depth + 1, out)
                if v is NOT_PLAIN:
                    return NOT_PLAIN
                copied[k] = v
        if len(old) > len(new) - added:  # (deletions before this object's other edits)
            gone = []
            for k in old:
                if k not in new:
                    gone.append([[*path, k]])
            out[start:start] = gone
        return copied
    if kind is list and type(old) is list and len(old) == len(new):
        items: list[Any] = new.copy()
        n = -1  # (an index counted by hand: no ``enumerate`` object and its pairs per list)
        for v in new:
            n += 1
            was = old[n]
            if v is was and depth < 64:
                continue
            leaf = type(v)
            if leaf is str or v is None:
                if type(was) is not leaf or was != v:
                    out.append([[*path, n], v])
            elif leaf is int and depth < 64:
                if not _MIN_INT <= v <= _MAX_INT:
                    return NOT_PLAIN
                if type(was) is not int or was != v:
                    out.append([[*path, n], v])
            else:
                v = walk(v, was, (*path, n), depth + 1, out)
                if v is NOT_PLAIN:
                    return NOT_PLAIN
                items[n] = v
        return items
    # nothing to follow both down (absent before, another kind, a list of another length, a
    # scalar): the copy, an edit unless it is exactly the value before
    copied_value = plain(new, depth)
    if copied_value is not NOT_PLAIN and (old is MISSING or not identical(old, copied_value)):
        out.append([list(path), copied_value])
    return copied_value


def is_plain(value: Any) -> bool:
    """Whether ``value`` is plain JSON (kept readable under ``{"json": value}``)."""
    return plain(value) is not NOT_PLAIN


class Codec:
    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde
        self.readable = type(serde) is JsonPlusSerializer

    def encode(self, value: Any) -> dict[str, Any]:
        """``value`` as record JSON that shares no object but immutable leaves with it."""
        if self.readable:
            kind = type(value)
            # (no call for the common leaves: text, null, a boolean, an integer within range)
            if (
                kind is str
                or value is None
                or kind is bool
                or (kind is int and _MIN_INT <= value <= _MAX_INT)
            ):
                return {"json": value}
            copied = plain(value)
            if copied is not NOT_PLAIN:
                return {"json": copied}
        kind_name, data = self.serde.dumps_typed(value)
        return {"type": kind_name, "b64": base64.b64encode(data).decode()}

    def encode_shaped(self, value: Any) -> dict[str, Any]:
        """:meth:`encode` through :func:`shaped`: valid only once the record holding it encodes
        under :data:`STRICT` (:func:`strict_bytes`), else its values are encoded again by
        :meth:`encode`."""
        if self.readable:
            kind = type(value)
            if kind in _LEAVES:  # (no call for the common leaves, nor for a list of them)
                return {"json": value}
            if kind is list and _LEAVES.issuperset(map(type, value)):  # (its leaves' types in C)
                return {"json": value.copy()}
            copied = shaped(value)
            if copied is not NOT_PLAIN:
                return {"json": copied}
        kind_name, data = self.serde.dumps_typed(value)
        return {"type": kind_name, "b64": base64.b64encode(data).decode()}

    def encode_made(self, value: dict[str, Any]) -> dict[str, Any]:
        """:meth:`encode_shaped` of an object made for this write (a ``dict``, shared with
        nobody): :func:`shaped_members` copies only its members, in place, and the record
        holds the object itself. Valid on the same terms as :meth:`encode_shaped`."""
        if self.readable and shaped_members(value):
            return {"json": value}
        kind_name, data = self.serde.dumps_typed(value)
        return {"type": kind_name, "b64": base64.b64encode(data).decode()}

    def decode(self, stored: dict[str, Any]) -> Any:
        """The value ``stored`` holds, as objects the caller owns. A stored value is part of
        the store's cached body, and LangGraph changes what a saver hands it (``get_state``
        applies pending writes to the checkpoint's ``versions_seen``; a reducer may extend a
        list in place): shared, the next read would hand out that change. Plain JSON is
        decoded afresh from its bytes (in C: less than a copy walked in Python; cheaper per
        value than per record, whose names and base64 text are immutable); leaves are
        immutable, so scalars are handed out as they are."""
        if "json" in stored:
            value = stored["json"]
            kind = type(value)
            return orjson.loads(orjson.dumps(value)) if kind is dict or kind is list else value
        return self.serde.loads_typed((stored["type"], base64.b64decode(stored["b64"])))
