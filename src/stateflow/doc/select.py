"""Selection of a value, an item or a range, and the ``keys`` projection."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from stateflow.doc.canonical import JSON, kind
from stateflow.doc.paths import Index, Key, Range, Selector
from stateflow.errors import SelectionError

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING", "__slots__": ()})()
"""Marks an absent value (distinct from JSON ``null``)."""


_LAST_SEGMENT = re.compile(r"(?:\.[^.\[\]]*|\[[^\]]*\])\Z")


def outside(what: str, path: str, after: int, length: int) -> SelectionError:
    """The refusal of an index or a range (``what``) an array of ``length`` does not hold: it
    names the array — ``path`` without its last ``after`` selectors, the failing one among them
    — not the path through it (``index 12 is outside cwd.lazy.m (length 10)``)."""
    for _ in range(after):
        found = _LAST_SEGMENT.search(path)
        if found is None or found.start() == 0:
            break
        path = path[: found.start()]
    return SelectionError(f"{what} is outside {path} (length {length})")


def select(value: JSON, selectors: Iterable[Selector], path: str, tail: int = 0) -> JSON:
    """Follow ``selectors`` from ``value``. ``path`` is the full requested path, used in errors;
    ``tail``: how many of its selectors follow ``selectors`` (an error names the array in it).

    A range must fit the array exactly (``start <= end <= len``); a successful range is always
    exactly the requested items, never shorter.
    """
    node = value
    listed = tuple(selectors)
    for at, sel in enumerate(listed):
        if isinstance(sel, Key):
            if type(node) is not dict or sel.name not in node:
                raise SelectionError(f"read path does not exist: {path}")
            node = node[sel.name]
        elif isinstance(sel, Index):
            if type(node) is not list:
                raise SelectionError(f"array selector requires an array: {path} ({kind(node)} found)")
            if sel.index >= len(node):
                raise outside(f"index {sel.index}", path, len(listed) - at + tail, len(node))
            node = node[sel.index]
        else:
            if type(node) is not list:
                raise SelectionError(f"array selector requires an array: {path} ({kind(node)} found)")
            if sel.end > len(node):
                raise outside(f"range [{sel.start}:{sel.end}]", path, len(listed) - at + tail, len(node))
            node = node[sel.start : sel.end]
    return node


def meta(value: JSON) -> dict[str, Any]:
    """The closed structural ``meta`` of the ``keys`` projection.

    ``type`` always; ``size`` (immediate key count) for objects; ``length`` for arrays and
    strings (strings count Unicode code points).
    """
    k = kind(value)
    if k == "object":
        return {"type": k, "size": len(value)}
    if k in ("array", "string"):
        return {"type": k, "length": len(value)}
    return {"type": k}


def keys(value: JSON) -> dict[str, Any]:
    """``{"meta": …, "keys": …}``: immediate named keys with their child kinds, ``keys`` last."""
    child_kinds: dict[str, str] | list[str] = (
        {k: kind(v) for k, v in value.items()} if type(value) is dict else []
    )
    return {"meta": meta(value), "keys": child_kinds}


__all__ = ["MISSING", "Index", "Key", "Range", "keys", "meta", "select"]
