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
from dataclasses import dataclass, field
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


@dataclass(frozen=True, slots=True)
class KeysEnd:
    """Read the ``keys`` projection of the value at a path's end, not the value."""


@dataclass(frozen=True, slots=True)
class SliceEnd:
    """Read elements ``start`` to ``end`` of the array at a path's end, and its length."""

    start: int
    end: int


End = KeysEnd | SliceEnd
"""What a path read answers at the path's end instead of the whole value."""


@dataclass(slots=True)
class KeysForm:
    """The ``keys`` projection of one value: its kind, its length (an array or a string), and
    an object's keys with their children's kinds, in the object's order."""

    kind: str
    length: int = 0
    keys: dict[str, str] = field(default_factory=dict)

    def projection(self) -> dict[str, Any]:
        """``{"meta": …, "keys": …}`` as ``doc.select.keys`` gives it for the whole value."""
        if self.kind == "object":
            return {"meta": {"type": "object", "size": len(self.keys)}, "keys": dict(self.keys)}
        if self.kind in ("array", "string"):
            return {"meta": {"type": self.kind, "length": self.length}, "keys": []}
        return {"meta": {"type": self.kind}, "keys": []}


@dataclass(slots=True)
class SliceForm:
    """Elements ``start`` to ``min(end, length)`` of an array (``kind`` "array") and its
    length; of any other value only its kind (a range of it fails)."""

    kind: str
    length: int = 0
    items: list[Any] = field(default_factory=list)


def keys_form(value: JSON) -> KeysForm:
    """The :class:`KeysForm` of a decoded value."""
    t = type(value)
    if t is dict:
        return KeysForm("object", 0, {k: kind(v) for k, v in value.items()})
    if t is list or t is str:
        return KeysForm(kind(value), len(value))
    return KeysForm(kind(value))


def slice_form(value: JSON, end: SliceEnd) -> SliceForm:
    """The :class:`SliceForm` of a decoded value."""
    if type(value) is list:
        return SliceForm("array", len(value), value[end.start : end.end])
    return SliceForm(kind(value))


def inside_keys(form: KeysForm, rest: PathT, value: JSON, value_kind: str) -> KeysForm:
    """``form`` after an edit at ``rest`` inside its value (``value``: MISSING for a delete;
    ``value_kind``: the kind of the value set), as ``apply_edits`` of the value would leave
    it — ``Conflict`` where that would fail on what the form shows."""
    seg, deeper = rest[0], len(rest) > 1
    delete = value is MISSING
    if form.kind == "object" and type(seg) is str:
        out = KeysForm("object", 0, dict(form.keys))
        child = out.keys.get(seg)
        if not deeper:
            if delete:
                out.keys.pop(seg, None)
            else:
                out.keys[seg] = value_kind
        elif child is None:
            if not delete:
                if type(rest[1]) is int:
                    raise Conflict(f"change at {show_path(rest)} expects an array at {show_path(rest[:1])}")
                out.keys[seg] = "object"  # a set below an absent key creates objects on the way
        elif child not in ("object", "array"):
            raise Conflict(f"change at {show_path(rest)} expects a container at {show_path(rest[:1])}")
        return out
    if form.kind == "array" and type(seg) is int:
        if seg < form.length:
            if delete and not deeper:
                raise Conflict(f"change at {show_path(rest)} would delete an array element")
            return form
        if not deeper and delete:
            return form
        if not deeper and seg == form.length:
            return KeysForm("array", form.length + 1)
        raise Conflict(
            f"change at {show_path(rest)}: index {seg} is outside an array of length {form.length}"
        )
    raise Conflict(f"change at {show_path(rest)} does not fit a value of kind {form.kind}")


def inside_slice(form: SliceForm, rest: PathT, end: SliceEnd, value: JSON) -> SliceForm:
    """``form`` after an edit at ``rest`` inside its array (``value``: MISSING for a delete),
    as ``apply_edits`` of the whole array would leave it."""
    seg, deeper = rest[0], len(rest) > 1
    delete = value is MISSING
    if form.kind == "object" and type(seg) is str:
        return form  # still an object (what a range of it reports)
    if form.kind != "array" or type(seg) is not int:
        raise Conflict(f"change at {show_path(rest)} does not fit a value of kind {form.kind}")
    held = end.start <= seg < end.end
    if seg >= form.length:
        if not deeper and delete:
            return form
        if not deeper and seg == form.length:
            items = [*form.items, value] if held else form.items
            return SliceForm("array", form.length + 1, items)
        raise Conflict(
            f"change at {show_path(rest)}: index {seg} is outside an array of length {form.length}"
        )
    if delete and not deeper:
        raise Conflict(f"change at {show_path(rest)} would delete an array element")
    if not held:
        return form
    items = list(form.items)
    items[seg - end.start] = apply_edits(items[seg - end.start], [Edit(rest[1:], value)])
    return SliceForm("array", form.length, items)


Probe = Callable[[Any, PathT], tuple[list[Step], JSON]]
"""Walks a value (JSON or :class:`TreeRef`) along a path: its steps and the value at the end."""
Load = Callable[[Any], JSON]
"""A value as JSON (a :class:`TreeRef` read whole)."""
Inside = Callable[[JSON, PathT, Edit], tuple[Step, JSON]]
"""The step and value at a path after an edit inside the value there (the edit's path below
it), for a trail whose value is held in a read form (keys, a slice) rather than whole."""


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
        elif type(node) is not list or not 0 <= seg < len(node):  # as the tree form: no index from the end
            return steps, MISSING
        else:
            node = node[seg]
    steps.append(step_of(node))
    return steps, node


def start(path: PathT, steps: Sequence[Step], value: JSON) -> Trail:
    return Trail(path, tuple(steps), value if len(steps) == len(path) + 1 else MISSING)


def advance(trail: Trail, edit: Edit, probe_any: Probe, load: Load, inside: Inside | None = None) -> Trail:
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
        if inside is not None:
            last, value = inside(before, target[len(path) :], edit)
            return start(path, [*new[: len(path)], last], value)
        value = apply_edits(before, [Edit(target[len(path) :], load(edit.value))])
        return start(path, [*new[: len(path)], step_of(value)], value)
    if created:  # the path's own branch is absent from the object the edit created
        return start(path, [*new[: common + 1], MISSING_STEP], MISSING)
    if len(new) > len(steps) or any(a != b for a, b in zip(new, steps, strict=False)):
        return Trail(path, (*new, *steps[len(new) :]), trail.value)  # an array on the way grew
    return trail
