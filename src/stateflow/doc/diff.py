"""Net changes between two documents.

A change is a list of :class:`Edit` s, each setting or deleting the value at a path
(string segments are object keys, integer segments array indices; setting the index equal to an
array's length appends to it). A diff:

- recurses into objects present on both sides;
- recurses into arrays of equal length, so an edit of one element is recorded at its index;
- records an array whose length changed, a kind change or a scalar change as one ``set``;
- reconstructs the new document exactly, ``null`` values, ``1`` vs ``1.0`` and key order of new
  keys included (:func:`apply_edits` ``(old, diff(old, new)) == new``).

:func:`to_patch` renders edits as the model-facing semantic patch: nested objects, ``"[N]"``
keys for indexed array edits, ``null`` for deletions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from stateflow.doc.canonical import JSON, ascii_digits, identical, kind
from stateflow.doc.select import MISSING
from stateflow.doc.sparse import NotHeld, Sparse
from stateflow.errors import Conflict, InvalidInput

Segment = str | int
PathT = tuple[Segment, ...]
APPEND = "-"
"""A path segment naming the elements appended to an array (in :func:`within` paths)."""


@dataclass(frozen=True, slots=True)
class Edit:
    """Set ``value`` at ``path``, or delete what is there when ``value`` is :data:`MISSING`."""

    path: PathT
    value: JSON = MISSING

    def __init__(self, path: PathT, value: JSON = MISSING) -> None:
        # the slots set straight through their descriptors: the frozen dataclass's own
        # ``__init__`` goes through ``object.__setattr__`` per field, about 1.5 times the cost,
        # and every diff (each write's, each receipt's) builds one per edit
        _SET_PATH(self, path)
        _SET_VALUE(self, value)

    @property
    def is_delete(self) -> bool:
        return self.value is MISSING

    def to_json(self) -> list[Any]:
        return [list(self.path)] if self.value is MISSING else [list(self.path), self.value]

    @staticmethod
    def from_json(raw: Any) -> Edit:
        if type(raw) is not list or len(raw) not in (1, 2) or type(raw[0]) is not list:
            raise InvalidInput(f"malformed edit {raw!r}: expected [path] or [path, value]")
        path = tuple(raw[0])
        for seg in path:
            if type(seg) is not str and (type(seg) is not int or seg < 0):
                raise InvalidInput(f"malformed edit path {raw[0]!r}")
        return Edit(path) if len(raw) == 1 else Edit(path, raw[1])


_SET_PATH: Callable[[Edit, PathT], None]
_SET_VALUE: Callable[[Edit, JSON], None]
_SET_PATH, _SET_VALUE = (getattr(Edit, name).__set__ for name in ("path", "value"))


def diff(old: JSON, new: JSON, path: PathT = ()) -> list[Edit]:
    """The net change from ``old`` to ``new`` (either may be :data:`MISSING`)."""
    out: list[Edit] = []
    _diff(old, new, path, out)
    return out


Within = dict[Segment, "Within | None"]
"""Where two documents may differ: a trie of path segments; ``None`` marks a subtree that may
differ anywhere (see :func:`within`)."""


def within(paths: Iterable[Sequence[Segment]]) -> Within:
    """The trie of ``paths``: everything at or below any of them may differ, nothing else.

    A string segment ``"[N]"`` also names index ``N`` of an array (the form a semantic patch
    addresses array items in); :data:`APPEND` names what was appended to one (an array only
    appended to is diffed as appends, not as a whole new array)."""
    root: Within = {}
    for path in paths:
        if not path:
            return {}  # the whole document: no narrowing (an empty trie means "anywhere")
        node: Within | None = root
        for seg in path[:-1]:
            assert node is not None
            node = node.setdefault(seg, {})
            if node is None:
                break  # an ancestor may already differ anywhere
        else:
            assert node is not None
            node[path[-1]] = None
    return root


def diff_within(old: JSON, new: JSON, where: Within) -> list[Edit]:
    """:func:`diff` of two documents that differ only at or below the paths of ``where``
    (anything else must be the same on both sides): only those subtrees are compared, so the
    cost follows the change, not the documents. An empty ``where`` compares everything."""
    out: list[Edit] = []
    if where:
        _diff_along(old, new, (), where, out)
    else:
        _diff(old, new, (), out)
    return out


def _diff_along(old: JSON, new: JSON, path: PathT, where: Within, out: list[Edit]) -> None:
    if old is new:
        return
    to, tn = type(old), type(new)
    if to is dict and tn is dict:
        # deletions first, as the whole diff gives them (loops, not comprehensions: most
        # levels name one key)
        for key in where:
            if key not in new and key in old:
                out.append(Edit((*path, key)))
        for key, below in where.items():
            if key not in new:
                continue
            if below is None:
                _diff(old.get(key, MISSING), new[key], (*path, key), out)
            else:
                _diff_along(old.get(key, MISSING), new[key], (*path, key), below, out)
        return
    if (
        (to is list or to is Sparse)
        and tn is to
        and len(new) > len(old)
        and all(seg == APPEND for seg in where)
    ):
        # appended, nothing else changed: one edit per new element, at the index it takes
        out.extend(Edit((*path, i), new[i]) for i in range(len(old), len(new)))
        return
    if (to is list or to is Sparse) and tn is to and len(old) == len(new):
        for index, below in _indices(where, len(new)):
            if index is None:  # a segment that names no element: compare the whole array
                _diff(old, new, path, out)
                return
            if below is None:
                _diff(old[index], new[index], (*path, index), out)
            else:
                _diff_along(old[index], new[index], (*path, index), below, out)
        return
    _diff(old, new, path, out)


def _indices(where: Within, length: int) -> list[tuple[int | None, Within | None]]:
    """The array elements ``where`` names, in index order (``None`` first: a segment naming no
    element); an element named twice is compared whole."""
    found: dict[int | None, Within | None] = {}
    for seg, below in where.items():
        index = seg if type(seg) is int else _index_key(seg)
        key = index if index is not None and 0 <= index < length else None
        found[key] = None if key in found else below
    return sorted(found.items(), key=lambda pair: -1 if pair[0] is None else pair[0])


def _index_key(seg: Segment) -> int | None:
    if type(seg) is str and len(seg) > 2 and seg[0] == "[" and seg[-1] == "]" and ascii_digits(seg[1:-1]):
        return int(seg[1:-1])
    return None


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
            was = old.get(key, MISSING)
            # the steps below for a value kept or a scalar of one type, without the call
            # (most of a document's members): no edit, or one of the new value
            if was is value:
                continue
            tv = type(value)
            if tv is type(was) and tv is not dict and tv is not list:
                if was != value:
                    out.append(Edit((*path, key), value))
                continue
            _diff(was, value, (*path, key), out)
        return
    if to is list and tn is list and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            if a is b:
                continue
            tb = type(b)
            if tb is type(a) and tb is not dict and tb is not list:
                if a != b:
                    out.append(Edit((*path, i), b))
                continue
            _diff(a, b, (*path, i), out)
        return
    if to is Sparse or tn is Sparse:  # (arrays held along paths: their held elements)
        _diff_sparse(old, new, path, out)
        return
    if to is tn and to is not dict and to is not list:
        # two scalars of one type: what ``identical`` decides, without its call (most of a
        # document's leaves)
        if old != new:
            out.append(Edit(path, new))
        return
    if not identical(old, new):
        out.append(Edit(path, new))


def _diff_sparse(old: JSON, new: JSON, path: PathT, out: list[Edit]) -> None:
    """:func:`_diff` where a side is a :class:`Sparse`: two of one length made from one
    another differ only at elements held (each held by both); an array replaced by a value of
    another kind is one ``set``. Anything else would need elements not in hand."""
    if type(old) is Sparse and type(new) is Sparse and len(old) == len(new):
        for i in sorted(old.held.keys() | new.held.keys()):
            _diff(old[i], new[i], (*path, i), out)
        return
    if type(new) is not Sparse and kind(new) != "array":
        out.append(Edit(path, new))
        return
    raise NotHeld(f"the change at {show_path(path)} needs an array's elements not in hand")


diff_into: Final = _diff
"""``diff_into(old, new, path, out)``: :func:`diff` of the values at ``path``, added to ``out``."""


def diff_paths(old: JSON, new: JSON) -> list[PathT]:
    """The paths of :func:`diff` ``(old, new)``'s edits, in its order, without the edits (a
    receipt lists where the view changed and reads the values itself): no object per edit."""
    out: list[PathT] = []
    _diff_paths(old, new, (), out)
    return out


def _diff_paths(old: JSON, new: JSON, path: PathT, out: list[PathT]) -> None:
    # :func:`_diff` step for step, keeping the path where it keeps an edit
    if new is MISSING:
        if old is not MISSING:
            out.append(path)
        return
    if old is MISSING:
        out.append(path)
        return
    if old is new:
        return
    to, tn = type(old), type(new)
    if to is dict and tn is dict:
        for key in old:
            if key not in new:
                out.append((*path, key))
        for key, value in new.items():
            was = old.get(key, MISSING)
            if was is value:  # (as in ``_diff``: kept values and scalars without the call)
                continue
            tv = type(value)
            if tv is type(was) and tv is not dict and tv is not list:
                if was != value:
                    out.append((*path, key))
                continue
            _diff_paths(was, value, (*path, key), out)
        return
    if to is list and tn is list and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            if a is b:
                continue
            tb = type(b)
            if tb is type(a) and tb is not dict and tb is not list:
                if a != b:
                    out.append((*path, i))
                continue
            _diff_paths(a, b, (*path, i), out)
        return
    if to is tn and to is not dict and to is not list:
        if old != new:
            out.append(path)
        return
    if not identical(old, new):
        out.append(path)


def apply_edits(doc: JSON, edits: Iterable[Edit]) -> JSON:
    """Apply edits copy-on-write. ``doc`` may be :data:`MISSING`; so may the result.

    Missing intermediate objects are created for key segments (a change applied to a newer
    head than the one it was computed against); anything else that no longer fits raises
    :class:`Conflict` and nothing is returned.
    """
    for edit in edits:
        doc = _apply_one(doc, edit.path, 0, edit.value)
    return doc


def apply_below(node: JSON, path: PathT, depth: int, value: JSON) -> JSON:
    """``node`` — the value at ``path[:depth]``, or :data:`MISSING` — with one edit at ``path``
    applied below it, as :func:`apply_edits` of the whole document applies it. Its
    :class:`Conflict` names the places from the document's root (``$.outer.z[5]``), not from
    ``node``: a store holding a document's members apart applies an edit to its member alone."""
    return _apply_one(node, path, depth, value)


def _apply_one(node: JSON, path: PathT, depth: int, value: JSON) -> JSON:
    if depth == len(path):
        return value
    seg = path[depth]
    if type(seg) is int:
        if type(node) is not list:
            if type(node) is Sparse:  # (an array held along the paths only: the same steps)
                return _apply_sparse(node, path, depth, value)
            raise Conflict(f"change at {show_path(path)} expects an array at {show_path(path[:depth])}")
        if seg >= len(node):
            if depth == len(path) - 1:
                if value is MISSING:
                    return node
                if seg == len(node):  # set at the length: an append
                    return [*node, value]
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


def _apply_sparse(node: Sparse, path: PathT, depth: int, value: JSON) -> JSON:
    """:func:`_apply_one`'s step into an array, on one held along the paths only."""
    seg = path[depth]
    assert type(seg) is int
    if seg >= len(node):
        if depth == len(path) - 1:
            if value is MISSING:
                return node
            if seg == len(node):
                return node.replaced(seg, value)
        raise Conflict(f"change at {show_path(path)}: index {seg} is outside an array of length {len(node)}")
    child = _apply_one(node[seg], path, depth + 1, value)
    if child is MISSING:
        raise Conflict(f"change at {show_path(path)} would delete an array element")
    return node.replaced(seg, child)


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
