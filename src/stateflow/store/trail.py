"""What one path meets in a document, without reading the rest of it (pure: no I/O).

A :class:`Trail` records, along a path (document-relative: its first segment names a member),
the kind of the value at each prefix — and an array's length — down to where the path stops,
and the value at the end when the path exists. That is all an overlay of several documents
or a selection needs to answer a read of that path, with the errors a whole-value read gives.

Trails are made from stored values — decoded JSON (:func:`probe`) or a tree walked node by
node (``tree.probe``) — and moved forward by a revision's edits (:func:`advance`), so an as-of
read of a path replays only what touches it and reads only the nodes on the way. An edit's
value held as a tree arrives as a :class:`TreeRef`: it is walked along the path, not loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from stateflow.doc.canonical import JSON, kind
from stateflow.doc.diff import Edit, apply_edits, show_path
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict

Segment = str | int
PathT = tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class TreeRef:
    """An edit's value kept as a tree (its root id), not yet read."""

    root: bytes


@dataclass(frozen=True, slots=True)
class Step:
    """The value at one prefix of a path: its JSON kind (``"missing"`` when absent) and, for
    an array, its length."""

    kind: str
    length: int = 0


MISSING_STEP: Final = Step("missing")
OBJECT_STEP: Final = Step("object")


@dataclass(frozen=True, slots=True)
class Trail:
    """``steps[d]`` describes the value at ``path[:d]``; the steps stop at the first prefix
    that is absent or cannot take the next segment (not an object for a key, not an array or
    too short for an index). ``value`` is the value at the whole path when it exists
    (``len(steps) == len(path) + 1``), else :data:`MISSING`."""

    path: PathT
    steps: tuple[Step, ...]
    value: JSON = MISSING

    @property
    def reached(self) -> bool:
        return len(self.steps) == len(self.path) + 1 and self.steps[-1].kind != "missing"


Probe = Callable[[Any, PathT], tuple[list[Step], JSON]]
"""Walks a value (JSON or :class:`TreeRef`) along a path: its steps and the value at the end."""
Load = Callable[[Any], JSON]
"""A value as JSON (a :class:`TreeRef` read whole)."""


def step_of(value: JSON) -> Step:
    if value is MISSING:
        return MISSING_STEP
    t = type(value)
    if t is dict:
        return OBJECT_STEP
    if t is list:
        return Step("array", len(value))
    return Step(kind(value))


def probe(value: JSON, path: PathT) -> tuple[list[Step], JSON]:
    """The steps of ``path`` in a decoded value, and the value at its end (or MISSING)."""
    steps = []
    node = value
    for seg in path:
        steps.append(step_of(node))
        if node is MISSING:
            return steps, MISSING
        if isinstance(seg, str):
            if type(node) is not dict:
                return steps, MISSING
            node = node.get(seg, MISSING)
        elif type(node) is not list or seg >= len(node):
            return steps, MISSING
        else:
            node = node[seg]
    steps.append(step_of(node))
    return steps, node


def start(path: PathT, steps: Sequence[Step], value: JSON) -> Trail:
    return Trail(path, tuple(steps), value if len(steps) == len(path) + 1 else MISSING)


def advance(trail: Trail, edit: Edit, probe_any: Probe, load: Load) -> Trail:
    """The trail after one stored edit (set or delete at a document-relative path), as
    ``apply_edits`` of the whole document would leave it. ``Conflict`` when the edit does not
    fit what the trail shows (the change does not replay)."""
    path, steps = trail.path, trail.steps
    target = edit.path
    delete = edit.is_delete
    common = 0
    while common < len(target) and common < len(path) and target[common] == path[common]:
        common += 1
    new = list(steps[: common + 1])
    created = False  # an absent object on the way is created by a set below it
    for d in range(min(common + 1, len(target))):
        seg = target[d]
        step = OBJECT_STEP if created else (new[d] if d < len(new) else MISSING_STEP)
        if step.kind == "missing":
            if delete:
                return trail  # deleting below an absent value changes nothing
            if type(seg) is int:
                raise Conflict(f"change at {show_path(target)} expects an array at {show_path(target[:d])}")
            created = True
            step = OBJECT_STEP
        elif type(seg) is int:
            if step.kind != "array":
                raise Conflict(f"change at {show_path(target)} expects an array at {show_path(target[:d])}")
            if seg >= step.length:
                if d == len(target) - 1 and delete:
                    return trail
                if d == len(target) - 1 and seg == step.length:
                    step = Step("array", step.length + 1)  # an append
                else:
                    raise Conflict(
                        f"change at {show_path(target)}: index {seg} is outside an array of length {step.length}"
                    )
            elif d == len(target) - 1 and delete:
                raise Conflict(f"change at {show_path(target)} would delete an array element")
        elif step.kind != "object":
            raise Conflict(f"change at {show_path(target)} expects an object at {show_path(target[:d])}")
        if d < len(new):
            new[d] = step
        else:
            new.append(step)
    if common == len(target):  # the edit replaces the value at a prefix of the path (or at it)
        if delete:
            return start(path, [*new[: len(target)], MISSING_STEP], MISSING)
        below, value = probe_any(edit.value, path[len(target) :])
        return start(path, [*new[: len(target)], *below], value)
    if common == len(path):  # the edit is inside the value at the path
        before = MISSING if created else trail.value
        value = apply_edits(before, [Edit(target[len(path) :], load(edit.value))])
        return start(path, [*new[: len(path)], step_of(value)], value)
    if created:  # the path's own branch is absent from the object the edit created
        return start(path, [*new[: common + 1], MISSING_STEP], MISSING)
    if len(new) > len(steps) or any(a != b for a, b in zip(new, steps, strict=False)):
        return Trail(path, (*new, *steps[len(new) :]), trail.value)  # an array on the way grew
    return trail
