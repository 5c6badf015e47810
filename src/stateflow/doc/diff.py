"""Net changes between two documents.

A change is a list of :class:`Edit` s, each setting or deleting the value at a path
(string segments are object keys, integer segments array indices). A diff:

- recurses into objects present on both sides;
- recurses into arrays of equal length, so an edit of one element is recorded at its index;
- records an array whose length changed, a kind change or a scalar change as one ``set``;
- reconstructs the new document exactly, ``null`` values, ``1`` vs ``1.0`` and key order of new
  keys included (:func:`apply_edits` ``(old, diff(old, new)) == new``).

:func:`to_patch` renders edits as the model-facing semantic patch: nested objects, ``"[N]"``
keys for indexed array edits, ``null`` for deletions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from stateflow.doc.canonical import JSON, identical
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict, InvalidInput

Segment = str | int
PathT = tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class Edit:
    """Set ``value`` at ``path``, or delete what is there when ``value`` is :data:`MISSING`."""

    path: PathT
    value: JSON = MISSING

    @property
    def is_delete(self) -> bool:
        return self.value is MISSING

    def to_json(self) -> list[Any]:
        return [list(self.path)] if self.is_delete else [list(self.path), self.value]

    @staticmethod
    def from_json(raw: Any) -> Edit:
        if type(raw) is not list or len(raw) not in (1, 2) or type(raw[0]) is not list:
            raise InvalidInput(f"malformed edit {raw!r}: expected [path] or [path, value]")
        path = tuple(raw[0])
        for seg in path:
            if type(seg) is not str and (type(seg) is not int or seg < 0):
                raise InvalidInput(f"malformed edit path {raw[0]!r}")
        return Edit(path) if len(raw) == 1 else Edit(path, raw[1])


def diff(old: JSON, new: JSON, path: PathT = ()) -> list[Edit]:
    """The net change from ``old`` to ``new`` (either may be :data:`MISSING`)."""
    out: list[Edit] = []
    _diff(old, new, path, out)
    return out


def _diff(old: JSON, new: JSON, path: PathT, out: list[Edit]) -> None:
    if new is MISSING:
        if old is not MISSING:
            out.append(Edit(path))
        return
    if old is MISSING:
        out.append(Edit(path, new))
        return
    if old is new:
        return
    to, tn = type(old), type(new)
    if to is dict and tn is dict:
        for key in old:
            if key not in new:
                out.append(Edit((*path, key)))
        for key, value in new.items():
            _diff(old.get(key, MISSING), value, (*path, key), out)
        return
    if to is list and tn is list and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, (*path, i), out)
        return
    if not identical(old, new):
        out.append(Edit(path, new))


def apply_edits(doc: JSON, edits: Iterable[Edit]) -> JSON:
    """Apply edits copy-on-write. ``doc`` may be :data:`MISSING`; so may the result.

    Missing intermediate objects are created for key segments (a change applied to a newer
    head than the one it was computed against); anything else that no longer fits raises
    :class:`Conflict` and nothing is returned.
    """
    for edit in edits:
        doc = _apply_one(doc, edit.path, 0, edit.value)
    return doc


def _apply_one(node: JSON, path: PathT, depth: int, value: JSON) -> JSON:
    if depth == len(path):
        return value
    seg = path[depth]
    if type(seg) is int:
        if type(node) is not list:
            raise Conflict(f"change at {show_path(path)} expects an array at {show_path(path[:depth])}")
        if seg >= len(node):
            if value is MISSING and depth == len(path) - 1:
                return node
            raise Conflict(
                f"change at {show_path(path)}: index {seg} is outside an array of length {len(node)}"
            )
        child = _apply_one(node[seg], path, depth + 1, value)
        if child is MISSING:
            raise Conflict(f"change at {show_path(path)} would delete an array element")
        copy = list(node)
        copy[seg] = child
        return copy
    if node is MISSING:
        if value is MISSING:
            return MISSING
        node = {}
    if type(node) is not dict:
        raise Conflict(f"change at {show_path(path)} expects an object at {show_path(path[:depth])}")
    current = node.get(seg, MISSING)
    if current is MISSING and value is MISSING:
        return node
    child = _apply_one(current, path, depth + 1, value)
    out = dict(node)
    if child is MISSING:
        del out[seg]
    else:
        out[seg] = child
    return out


def to_patch(edits: Sequence[Edit]) -> JSON:
    """Render edits as a semantic patch: ``null`` deletes, ``"[N]"`` addresses array items.

    No edits renders as ``{}`` (no change).
    """
    root: Any = {}
    for edit in edits:
        if not edit.path:
            return None if edit.is_delete else edit.value
        node = root
        for seg in edit.path[:-1]:
            key = f"[{seg}]" if type(seg) is int else seg
            nxt = node.get(key)
            if type(nxt) is not dict:
                nxt = node[key] = {}
            node = nxt
        last = edit.path[-1]
        node[f"[{last}]" if type(last) is int else last] = None if edit.is_delete else edit.value
    return root


def show_path(path: PathT) -> str:
    """A path for messages: ``$.a[2].b``."""
    out = "$"
    for seg in path:
        out += f"[{seg}]" if type(seg) is int else f".{seg}"
    return out
