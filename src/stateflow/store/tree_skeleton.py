"""A large member's skeleton along a write's paths, read from its tree (pure: no I/O).

A write by path to a member held as a tree needs only what its edits reach: the containers on
their paths and the values at their ends. The skeleton holds those and nothing else — an array
as a :class:`~stateflow.doc.sparse.Sparse` (its real length and the elements the paths reach,
so that building and copying it cost the path, not the array), an object as a dict of the keys
the paths name that exist (in their order) — so that the document algebra
applies the edits to it exactly as to the whole value (the same results, the same refusals:
lengths, kinds and keys on the paths are the real ones), and the tree update takes every
position it needs from the tree instead (``Skeleton.shapes``: each skeleton container's real
size, and an object's keys' positions). A value at a path's end is read whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stateflow.doc.diff import Within
from stateflow.doc.merge import INDEX_KEY
from stateflow.doc.sparse import Sparse
from stateflow.errors import CorruptData
from stateflow.store.tree import Scan, find_key, shape

Get = Callable[[bytes], dict[str, Any]]
Load = Callable[[bytes], Any]
"""The whole value under a node id."""


class NeedsWhole(Exception):
    """The update needs more of the member than its skeleton holds: stage it whole."""


@dataclass(slots=True)
class Skeleton:
    value: Any
    shapes: dict[int, tuple[int, dict[str, int]]] = field(default_factory=dict)
    """by ``id()`` of each skeleton container: its real element or key count, and (an object)
    the position of each key it holds"""
    nodes: int = 0
    """nodes read to build it (a whole value's at a path's end not counted)"""


def skeleton(root: bytes, where: Within, get: Get, load: Load, scan: Scan | None = None) -> Skeleton:
    """The skeleton of the value under ``root`` along ``where`` (a trie of the paths, not
    empty). ``scan``: the database's test of which leaves hold a key (``tree.Scan``): a key of
    a large object is then found among the leaves that hold its bytes, not in every leaf."""
    out = Skeleton(None)
    out.value = _container(root, where, get, load, out, _counted(scan, out))
    return out


def _counted(scan: Scan | None, out: Skeleton) -> Scan | None:
    """``scan``, the nodes it sends counted in ``out.nodes``."""
    if scan is None:
        return None

    def counting(ids: Sequence[bytes], needle: bytes) -> Mapping[bytes, dict[str, Any] | None]:
        found = scan(ids, needle)
        out.nodes += sum(1 for node in found.values() if node is not None)
        return found

    return counting


def _container(ident: bytes, where: Within, get: Get, load: Load, out: Skeleton, scan: Scan | None) -> Any:
    data = _get(ident, get, out)
    try:
        kind, count = shape(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptData(f"stored node {ident.hex()} is corrupt: {exc!r}") from exc
    if kind == "array":
        held: dict[int, Any] = {}
        for seg, below in where.items():
            index = _index(seg)
            if index is not None and 0 <= index < count:
                held[index] = _element(ident, data, index, below, get, load, out, scan)
        elements = Sparse(count, held)
        out.shapes[id(elements)] = (count, {})
        return elements
    wanted = {seg: below for seg, below in where.items() if type(seg) is str}
    found = _keys(ident, data, set(wanted), get, out, scan) if wanted else {}
    obj: dict[str, Any] = {}
    positions: dict[str, int] = {}
    for key, (at, value, is_ref) in sorted(found.items(), key=lambda kv: kv[1][0]):
        obj[key] = _value(value, is_ref, wanted[key], get, load, out, scan)
        positions[key] = at
    out.shapes[id(obj)] = (count, positions)
    return obj


def _value(
    value: Any, is_ref: bool, below: Within | None, get: Get, load: Load, out: Skeleton, scan: Scan | None
) -> Any:
    """An entry of a leaf as the skeleton holds it: an inline value whole, a subtree whole at a
    path's end or as a skeleton along the paths below."""
    if not is_ref:
        return value
    ident = _ref(value)
    if not below:
        return load(ident)
    return _container(ident, below, get, load, out, scan)


def _element(
    ident: bytes,
    data: dict[str, Any],
    index: int,
    below: Within | None,
    get: Get,
    load: Load,
    out: Skeleton,
    scan: Scan | None,
) -> Any:
    """Element ``index`` of the array rooted at ``ident``, descending by the interior counts."""
    while "c" in data:
        for count, child in data["c"]:
            if index < count:
                ident = _ref(child)
                break
            index -= count
        else:
            raise CorruptData(f"stored node {ident.hex()} is corrupt: its counts miss an element")
        data = _get(ident, get, out)
    values = data.get("a")
    if type(values) is not list or index >= len(values):
        raise CorruptData(f"stored node {ident.hex()} is corrupt: not the leaf its counts say")
    return _value(values[index], index in data.get("r", ()), below, get, load, out, scan)


def _keys(
    ident: bytes, data: dict[str, Any], wanted: set[str], get: Get, out: Skeleton, scan: Scan | None
) -> dict[str, tuple[int, Any, bool]]:
    """Each of ``wanted`` the object rooted at ``ident`` holds: its position, its entry and
    whether that is a ref — with ``scan``, each key among the leaves whose bytes hold it
    (``tree.find_key``); else its leaves read in order until all are found (a key it does not
    hold then costs them all)."""
    found: dict[str, tuple[int, Any, bool]] = {}
    if scan is not None and "c" in data:
        for key in wanted:
            try:
                hit = find_key(ident, data, key, scan)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise CorruptData(f"stored node {ident.hex()} is corrupt: {exc!r}") from exc
            if hit is None:
                continue
            leaf, body, index, at = hit
            values = body.get("v")
            if type(values) is not list or index >= len(values):
                raise CorruptData(f"stored node {leaf.hex()} is corrupt: not an object's leaf")
            found[key] = (at, values[index], index in body.get("r", ()))
        return found
    offset = 0

    def walk(ident: bytes, data: dict[str, Any]) -> None:
        nonlocal offset
        if "c" in data:
            for _, child in data["c"]:
                if len(found) == len(wanted):
                    return
                child_id = _ref(child)
                walk(child_id, _get(child_id, get, out))
            return
        keys, values = data.get("k"), data.get("v")
        if type(keys) is not list or type(values) is not list or len(keys) != len(values):
            raise CorruptData(f"stored node {ident.hex()} is corrupt: not an object's leaf")
        refs = set(data.get("r", ()))
        for i, key in enumerate(keys):
            if key in wanted:
                found[key] = (offset + i, values[i], i in refs)
        offset += len(keys)

    walk(ident, data)
    return found


def _index(seg: str | int) -> int | None:
    """The array index a path segment names: an index, or a patch's ``"[N]"`` (as
    ``doc.diff.within`` reads it); None for any other key."""
    if type(seg) is int:
        return seg
    if type(seg) is str and INDEX_KEY.match(seg):
        return int(seg[1:-1])
    return None


def _get(ident: bytes, get: Get, out: Skeleton) -> dict[str, Any]:
    out.nodes += 1
    return get(ident)


def _ref(text: Any) -> bytes:
    try:
        return bytes.fromhex(text)
    except (TypeError, ValueError) as exc:
        raise CorruptData(f"stored node ref {text!r} is corrupt") from exc
