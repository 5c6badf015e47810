"""Semantic references: ``{"$ref": "cwd.lazy.plan"}`` objects and ``$cwd.lazy.plan`` text.

References are ordinary JSON. stateflow gives them exactly three meanings:

- single-owner anchoring: with one wanted scope, flat refs (``lazy.plan``) written by the model
  are stored canonically (``cwd.lazy.plan``) and read back flat;
- intent ownership (:mod:`stateflow.memory.ownership`);
- the reactive dangling-reference hint after one missing ``value`` read (:func:`find_referrers`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from stateflow.doc.canonical import JSON
from stateflow.doc.paths import KEY_PATTERN, ReadPath, is_key, parse
from stateflow.errors import InvalidPath

REF: Final = "$ref"
MAX_REFERRERS: Final = 3
NODE_BUDGET: Final = 10_000
HINT_MESSAGE: Final = (
    "The requested value is unavailable in the selected state. These current values reference "
    "that path, not a verified new location. Use this evidence if relevant to the task."
)
HINT_TRUNCATED: Final = "; additional reference owners may exist beyond the bounded scan."
_BOUNDARY: Final = r"A-Za-z0-9_$.\[\]:-"
_PATH_CHAR: Final = r"A-Za-z0-9_$\[\]-"
OWNERSHIP_REF: Final = re.compile(
    rf"(global|cwd|session)\.(strategy|tactics|lazy)((?:\.{KEY_PATTERN})+)\Z", re.ASCII
)

PROTECTING_REF: Final = re.compile(
    rf"(global|cwd|session)\.(strategy|tactics|lazy)((?:\.{KEY_PATTERN})*)(?:\[[^\]]*\].*)?\Z", re.ASCII
)
"""A same-scope ref that keeps a target its deleted intent owned: the plane's object keys up to
the first array selector (a plane root, or an element of an array under a key, is an ancestor or
a descendant of that key all the same)."""


def map_refs(value: JSON, fn: Any) -> JSON:
    """Copy ``value`` with every structured ``$ref`` string passed through ``fn`` (shares
    untouched subtrees)."""
    if type(value) is dict:
        out = None
        for k, v in value.items():
            nv = fn(v) if k == REF and type(v) is str else map_refs(v, fn)
            if nv is not v:
                if out is None:
                    out = dict(value)
                out[k] = nv
        return value if out is None else out
    if type(value) is list:
        items = [map_refs(v, fn) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def anchor(value: JSON, owner: str, planes: tuple[str, ...]) -> JSON:
    """Single-owner writes: a flat current ref (``lazy.plan``) becomes ``<owner>.lazy.plan``."""

    def fn(ref: str) -> str:
        try:
            path = parse(ref, planes)
        except InvalidPath:
            return ref
        if isinstance(path, ReadPath) and path.implicit:
            return f"{owner}.{ref}"
        return ref

    return map_refs(value, fn)


def relativize(value: JSON, owner: str, planes: tuple[str, ...]) -> JSON:
    """Single-owner reads: ``<owner>.lazy.plan`` (current, same owner) reads back as ``lazy.plan``."""
    prefix = owner + "."

    def fn(ref: str) -> str:
        if not ref.startswith(prefix):
            return ref
        rest = ref[len(prefix) :]
        try:
            path = parse(rest, planes)
        except InvalidPath:
            return ref
        return rest if isinstance(path, ReadPath) and path.implicit else ref

    return map_refs(value, fn)


def structured_refs(value: JSON) -> Iterator[str]:
    """Every structured ``$ref`` string anywhere inside ``value``."""
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            ref = node.get(REF)
            if type(ref) is str:
                yield ref
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)


def ownership_target(ref: str, scope: str) -> tuple[str, tuple[str, ...]] | None:
    """``(plane, keys)`` when ``ref`` can own: same scope, strategy/tactics/lazy, object keys."""
    m = OWNERSHIP_REF.match(ref)
    if m is None or m.group(1) != scope:
        return None
    return m.group(2), tuple(m.group(3)[1:].split("."))


def protected_target(ref: str, scope: str) -> tuple[str, tuple[str, ...]] | None:
    """``(plane, keys)`` a remaining intent's ``ref`` keeps from an ownership cascade: what it
    reads in the same scope's strategy, tactics or lazy, as far as object keys go (a ref too
    broad or too deep to own — the plane root, an array element — still protects)."""
    m = PROTECTING_REF.match(ref)
    if m is None or m.group(1) != scope:
        return None
    keys = m.group(3)
    return m.group(2), tuple(keys[1:].split(".")) if keys else ()


@dataclass(frozen=True, slots=True)
class Unread:
    """A container the scan reads only as far as it goes: its kind ("object" or "array"), its
    size, and ``page(start, limit)``: its children ``start`` to ``start + limit`` as ``(key or
    index, value)``, a child container again :class:`Unread` where it is kept apart."""

    kind: str
    size: int
    page: Callable[[int, int], list[tuple[str | int, Any]]]


PAGE: Final = 256
"""Array elements an :class:`Unread` array is read by, as the scan reaches them."""


_RANGE: Final = re.compile(r"\[([0-9]+)(?::|\.\.)([0-9]+)\]")


def one_spelling(path: str) -> str:
    """``path`` with every range spelled ``[start:end]``: ``[start..end]`` is the same address,
    so a reference in either spelling is one to the path read in either."""
    return _RANGE.sub(r"[\1:\2]", path) if "[" in path else path


def text_ref(candidate: str) -> re.Pattern[str]:
    """A ``$candidate`` mention in text: not inside a longer path-like word on either side. A
    ``.`` or ``:`` right after it ends a sentence or a clause unless a path character follows
    (``$lazy.plan.`` mentions ``lazy.plan``; ``$lazy.plan.x`` and ``$lazy.plan[1]`` do not).
    A range matches in either spelling (``[0:3]``, ``[0..3]``)."""
    spelled, at = "", 0
    for found in _RANGE.finditer(candidate):
        spelled += re.escape(candidate[at : found.start()])
        spelled += rf"\[{found.group(1)}(?::|\.\.){found.group(2)}\]"
        at = found.end()
    spelled += re.escape(candidate[at:])
    return re.compile(rf"(?<![{_BOUNDARY}])\${spelled}(?![{_PATH_CHAR}])(?![.:][{_PATH_CHAR}])")


def find_referrers(
    scopes: list[tuple[str, dict[str, Any]]], candidates: list[str], scan_planes: tuple[str, ...]
) -> tuple[list[str], bool]:
    """Bounded reverse lookup of current references to any of ``candidates``.

    Scans each ``(scope label, state)`` in order, planes in ``scan_planes`` order (never a
    ``response`` plane), object keys sorted, arrays in order. Returns up to 3 owner paths
    (structured matches first, then textual) and whether the scan ended early. Each path is one
    ``read_state`` reads: a value below a key the read grammar cannot spell (an artifact card's
    file path, a key with a space) is named by its nearest readable ancestor, which holds it,
    and a path is listed once. A value may be :class:`Unread`: an object of it is listed when
    the scan visits it, an array a page at a time, so the scan reads no more of a large plane
    than its budget reaches.
    """
    text_res = [text_ref(c) for c in candidates]
    wanted = {one_spelling(c) for c in candidates}
    structured: list[str] = []
    textual: list[str] = []
    visited = 0
    truncated = False

    def full() -> bool:
        return len(structured) + len(textual) >= MAX_REFERRERS

    def found_at(found: list[str], at: str) -> None:
        if at not in structured and at not in textual:
            found.append(at)

    for label, state in scopes:
        for plane in scan_planes:
            if plane not in state or plane == "response":
                continue
            # depth first, children in order: a stack of the children still to visit, each with
            # the path that names it (``exact``: its own, else an ancestor's)
            stack: list[Iterator[tuple[Any, str, bool]]] = [
                iter([(state[plane], f"{label}.{plane}" if label else plane, True)])
            ]
            while stack:
                step = next(stack[-1], None)
                if step is None:
                    stack.pop()
                    continue
                if full() or visited >= NODE_BUDGET:
                    truncated = True
                    break
                node, at, exact = step
                visited += 1
                if isinstance(node, Unread):
                    if node.kind == "object":
                        node = dict(node.page(0, node.size))
                    else:
                        stack.append(_elements(node, at, exact))
                        continue
                if type(node) is dict:
                    ref = node.get(REF)
                    if type(ref) is str and one_spelling(ref) in wanted:
                        found_at(structured, at)
                        continue
                    stack.append(_members(node, at, exact))
                elif type(node) is list:
                    stack.append(_items(node, at, exact))
                elif type(node) is str and "$" in node and any(r.search(node) for r in text_res):
                    found_at(textual, at)
            if truncated:
                break
        if truncated:
            break
    found = (sorted(structured) + sorted(textual))[:MAX_REFERRERS]
    return found, truncated


def _members(node: dict[str, Any], at: str, exact: bool) -> Iterator[tuple[Any, str, bool]]:
    for k in sorted(node):
        if exact and is_key(k):
            yield node[k], f"{at}.{k}", True
        else:
            yield node[k], at, False  # (no read path spells this key: its object names it)


def _items(node: list[Any], at: str, exact: bool) -> Iterator[tuple[Any, str, bool]]:
    for index, value in enumerate(node):
        yield value, f"{at}[{index}]" if exact else at, exact


def _elements(node: Unread, at: str, exact: bool) -> Iterator[tuple[Any, str, bool]]:
    for first in range(0, node.size, PAGE):
        for index, value in node.page(first, PAGE):
            yield value, f"{at}[{index}]" if exact else at, exact
