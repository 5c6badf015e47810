"""``select(overlay(layers), selectors)`` answered from the layers' trails along the path.

A read of ``effective.lazy.big[5]`` needs, of each scope, only what lies on that path: the
store answers it as a :class:`~stateflow.store.trail.Trail` (the kind of the value at every
prefix, and the value at the end), reading only the nodes on the way. Overlay merges objects
and lets anything else replace what is below it, so walking the layers' trails prefix by prefix
gives the same value — and the same errors — as selecting from the merged whole. A ``keys``
read or a range at the end gets each layer's value in that form (keys and their kinds; the
elements of the range and the array's length), merged the way overlay merges the values.
"""

from __future__ import annotations

from collections.abc import Sequence

from stateflow.doc.canonical import JSON
from stateflow.doc.merge import overlay
from stateflow.doc.paths import Index, Key, Selector
from stateflow.doc.select import MISSING, outside
from stateflow.errors import SelectionError
from stateflow.store.trail import MISSING_STEP, OBJECT_STEP, KeysForm, SliceForm, Step, Trail


def select_layers(trails: Sequence[Trail], selectors: Sequence[Selector], text: str, tail: int = 0) -> JSON:
    """The value at ``selectors`` in the overlay of the layers (broadest first) whose trails
    along that path (a member first, then the selectors below it) are ``trails``; every
    selector is a :class:`Key` or an :class:`Index`. :data:`MISSING` when the member itself
    is absent from every layer; :class:`SelectionError` as ``select`` raises it otherwise
    (``tail``: as for ``select``)."""
    contributing = [t for t in trails if t.steps[0].kind == "object"]
    for depth in range(1, len(selectors) + 1):
        sel = selectors[depth - 1]
        if not isinstance(sel, Key):
            raise SelectionError(f"array selector requires an array: {text} (object found)")
        present = [t for t in contributing if _kind(t, depth) != "missing"]
        if not present:
            if depth == 1:
                return MISSING  # the plane itself is absent
            raise SelectionError(f"read path does not exist: {text}")
        if _kind(present[-1], depth) != "object":  # a value that is not an object wins alone
            return _single(present[-1], selectors, depth, text, tail)
        others = [i for i, t in enumerate(present) if _kind(t, depth) != "object"]
        contributing = present[others[-1] + 1 :] if others else present
    if len(contributing) == 1:
        return contributing[0].value
    values = [t.value for t in contributing]
    if isinstance(values[-1], SliceForm):
        return values[-1]  # objects all: a range of them fails on the kind alone
    if isinstance(values[-1], KeysForm):
        return merge_keys(values)
    return overlay(*values)


def merge_keys(forms: Sequence[KeysForm]) -> KeysForm:
    """The keys projection of the overlay of objects, from theirs: every key in overlay order,
    of the kind the narrowest layer holding it gives (objects merge into an object; anything
    else replaces)."""
    keys: dict[str, str] = {}
    for form in forms:
        keys.update(form.keys)
    return KeysForm("object", 0, keys)


def overlay_steps(trails: Sequence[Trail], length: int) -> list[Step]:
    """The step (kind, and an array's length) of the overlay of the layers at each prefix
    ``path[:d]`` of their trails' path (``d`` from 0 to ``length``): objects merge, anything
    else wins alone (and what lies below it is that layer's alone); "missing" where no layer
    has a value. A key below a merged object, or an index below an array, follows the trails;
    an index below an object meets nothing ("missing")."""
    steps = [OBJECT_STEP]
    contributing = [t for t in trails if t.steps[0].kind == "object"]
    for depth in range(1, length + 1):
        present = [t for t in contributing if _kind(t, depth) != "missing"]
        if not present:
            return steps + [MISSING_STEP] * (length + 1 - depth)
        last = present[-1].steps[depth]
        steps.append(last)
        if last.kind != "object":
            contributing = present[-1:]
            continue
        others = [i for i, t in enumerate(present) if _kind(t, depth) != "object"]
        contributing = present[others[-1] + 1 :] if others else present
    return steps


def overlay_kinds(trails: Sequence[Trail], length: int) -> list[str]:
    """The kinds of :func:`overlay_steps`."""
    return [step.kind for step in overlay_steps(trails, length)]


def _kind(trail: Trail, depth: int) -> str:
    return trail.steps[depth].kind if depth < len(trail.steps) else "missing"


def _single(trail: Trail, selectors: Sequence[Selector], depth: int, text: str, tail: int) -> JSON:
    """The rest of the path inside one layer's value (found at ``depth``)."""
    if trail.reached:
        return trail.value
    for at in range(depth, len(selectors)):
        step = trail.steps[at] if at < len(trail.steps) else None
        if step is None or step.kind == "missing":
            raise SelectionError(f"read path does not exist: {text}")
        sel = selectors[at]
        if isinstance(sel, Key):
            if step.kind != "object":
                raise SelectionError(f"read path does not exist: {text}")
        elif isinstance(sel, Index):
            if step.kind != "array":
                raise SelectionError(f"array selector requires an array: {text} ({step.kind} found)")
            if sel.index >= step.length:
                raise outside(f"index {sel.index}", text, len(selectors) - at + tail, step.length)
    raise SelectionError(f"read path does not exist: {text}")  # not reached: the trail stops above
