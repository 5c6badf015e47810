"""Plane rules of a memory scope document.

A scope document holds planes as top-level members: ``intents, strategy, tactics, artifacts``
(hot objects), ``response`` (a string, written by the runtime only), ``lazy`` (an object whose
children are ordinary JSON, never in the baseline), declared extra roots, and ``_runtime``
(runtime-owned provenance, never shown to a model). Planes are sparse: absent stays absent.
Memory never stores ``null``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from stateflow.doc.canonical import JSON, MAX_DEPTH, check, kind, plain_number, utf8_text
from stateflow.doc.merge import INDEX_FORM, INDEX_KEY, overlay, stored_index_key, stored_null
from stateflow.doc.paths import is_key
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput, PatchError
from stateflow.validators import UNEXPLAINED, compiled, first_error

HOT_PLANES: Final = ("intents", "strategy", "tactics", "artifacts")
PLANES: Final = ("intents", "strategy", "tactics", "artifacts", "response", "lazy")
MODEL_PATCHABLE: Final = ("intents", "strategy", "tactics", "artifacts", "lazy")
RUNTIME: Final = "_runtime"
OWNABLE_PLANES: Final = ("strategy", "tactics", "lazy")

ARTIFACT_RUNTIME_FIELDS: Final = frozenset(
    {
        "hash",
        "compiler",
        "compiled_at",
        "sourceHash",
        "sourceFingerprint",
        "compilerRevision",
        "compiledAt",
        "source_hash_verified",
        "hint",
    }
)


@dataclass(frozen=True, slots=True)
class ExtraRoot:
    """A module-declared top-level root: validated by a JSON Schema, hot or lazy. Like every
    plane it holds a JSON object, so a schema whose ``type`` excludes objects is refused here,
    where the root is built, not at each write it would refuse."""

    name: str
    schema: Mapping[str, Any]
    lazy: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.schema, Mapping):
            raise InvalidInput(f"extra root {self.name!r}: its schema must be a JSON Schema object")
        declared = self.schema.get("type", "object")
        types = declared if isinstance(declared, list) else [declared]
        if "object" not in types:
            raise InvalidInput(
                f"extra root {self.name!r} declares type {declared!r}: an extra root is a plane, "
                'always a JSON object — put the value under a key, e.g. {"type": "object", '
                f'"properties": {{"items": {{"type": {json.dumps(declared)}}}}}}}'
            )


@dataclass(frozen=True)
class PlaneSet:
    """The planes a deployment knows: the built-ins plus declared extra roots. (The name
    tuples are computed once: a ``patch_state`` asks for them a few dozen times.)"""

    extra: tuple[ExtraRoot, ...] = ()
    _by_name: dict[str, ExtraRoot] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for root in self.extra:
            if not is_key(root.name) or root.name in PLANES or root.name in ("patches", RUNTIME):
                raise InvalidInput(
                    f"extra root {root.name!r} must be a read_state key that is not a built-in plane"
                )
            self._by_name[root.name] = root
        if len(self._by_name) != len(self.extra):
            raise InvalidInput("extra roots must have unique names")

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        """Every documented top-level name, in presentation order (intent-first)."""
        return PLANES + tuple(r.name for r in self.extra)

    @functools.cached_property
    def patchable(self) -> tuple[str, ...]:
        return MODEL_PATCHABLE + tuple(r.name for r in self.extra)

    @functools.cached_property
    def hot(self) -> tuple[str, ...]:
        """Members a baseline context reads (never lazy bodies)."""
        return (*HOT_PLANES, "response", *tuple(r.name for r in self.extra if not r.lazy))

    @functools.cached_property
    def lazy(self) -> tuple[str, ...]:
        return ("lazy", *tuple(r.name for r in self.extra if r.lazy))

    def root(self, name: str) -> ExtraRoot | None:
        return self._by_name.get(name)


class Authored(list[tuple[str | int, ...]]):
    """The paths a scope patch authored, as ``receipts.authored_paths`` lists them (lazy planes
    skipped, an artifact card whole), listed by :func:`check_scope_patch` in the walk that
    checks the patch. ``known`` is False when they depend on the view last shown — an object of
    ``"[N]"`` keys names an array's elements when that view holds an array there — and the
    receipt lists them with ``authored_paths`` then."""

    known: bool = True  # (a class default: no ``__init__`` of our own to call per patch)


def check_scope_patch(
    scope: str, patch: object, planes: PlaneSet, authored: Authored | None = None
) -> dict[str, Any]:
    """Validate one scope's patch object before anything is staged; ``authored`` (when given)
    gets the paths the patch authors, found by the same walk."""
    if not isinstance(patch, dict):
        raise InvalidInput(f"patch_state {scope} must be a semantic patch object")
    if not patch:
        raise InvalidInput(f"patch_state {scope} cannot be empty; omit it when unchanged")
    for name, value in patch.items():
        if name == "response":
            raise InvalidInput(
                "response is written by the runtime, never by patch_state; "
                f"expected one of: {', '.join(planes.patchable)}"
            )
        if name not in planes.patchable:
            raise InvalidInput(
                f'unknown patch key "{name}" in {scope}; expected one of: {", ".join(planes.patchable)}'
            )
        if value is not None and not isinstance(value, dict):
            raise InvalidInput(
                f"{scope}.{name} must be a JSON object, or null to delete the plane (a plane cannot "
                "be replaced by another value)"
            )
    # (one walk for the checks and the authored paths; the errors come from each check)
    if not _storable_patch(patch, planes.lazy, authored):
        check(patch, scope)
        _no_materialized_null(patch, scope)
        _no_stored_index_key(patch, scope)
    if patch.get("artifacts") is not None:
        _check_artifact_patch(scope, patch["artifacts"])
    return patch


def _storable(node: JSON, depth: int) -> bool:
    """Whether ``node``, a value stored as written (one a patch sets, not one of the patch's own
    objects), is plain JSON (``doc.canonical.check``) holding no ``null`` and no key of index
    form (``doc.merge.stored_null``, ``stored_index_key``): the checks in one walk, building no
    path text. (A patch's own objects: :func:`_listed`.)"""
    t = type(node)
    if t is dict:
        if depth >= MAX_DEPTH:
            return False
        for k, v in node.items():
            if type(k) is not str or not utf8_text(k):
                return False
            if "[" in k and INDEX_FORM.match(k):
                return False
            tv = type(v)
            if tv is str:
                if utf8_text(v):
                    continue
                return False
            if tv is bool:
                continue
            if v is None or not _storable(v, depth + 1):
                return False
        return True
    if t is list:
        if depth >= MAX_DEPTH:
            return False
        for v in node:
            tv = type(v)
            if tv is str:
                if utf8_text(v):
                    continue
                return False
            if tv is bool:
                continue
            if v is None or not _storable(v, depth + 1):
                return False
        return True
    if t is str:
        return utf8_text(node)
    if t is bool:
        return True
    if t is int or t is float:
        return plain_number(node)
    return False


def _storable_patch(patch: dict[str, Any], lazy: tuple[str, ...], out: Authored | None) -> bool:
    """Whether a scope patch whose planes are objects or null is plain JSON storing no ``null``
    (one is a deletion in the patch's own objects) and no key of index form inside a value it
    sets — the walk of :func:`_listed` — adding the paths it authors to ``out`` on the way
    (``receipts.authored_paths``'s, ``lazy`` skipped; None: only the checks)."""
    if type(patch) is not dict:
        return False  # (a dict subclass: refused as not plain JSON)
    for plane, value in patch.items():
        if type(plane) is not str:  # (a plane's name is one the caller checked it against)
            return False
        listing = None if out is None or plane in lazy else out
        if value is None:  # the plane deleted
            if listing is not None:
                listing.append((plane,))
            continue
        if type(value) is not dict:
            return False  # (a dict subclass: a plane is a plain object)
        if value:
            if not _listed(value, 1, (plane,), listing):
                return False
        elif listing is not None:
            listing.append((plane,))
    return True


def _listed(node: dict[str, Any], depth: int, path: tuple[str | int, ...], out: Authored | None) -> bool:
    """Whether a non-empty object of a patch (its keys merged into the record: a ``null`` value
    deletes one, a key of index form patches an array element) at ``path`` is storable, the
    values it sets checked by :func:`_storable` — adding the paths it authors to ``out`` (None:
    nothing to list here, as inside a card, or only the checks) as ``receipts.authored_paths``
    walks them."""
    if depth >= MAX_DEPTH:
        return False
    if out is not None:
        first = next(iter(node))
        # (``is_index_patch``, for keys not checked yet: a key that is no string is refused below)
        if (
            type(first) is str
            and first[:1] == "["
            and all(type(k) is str and INDEX_KEY.match(k) for k in node)
        ):
            out.known = False  # its elements or the whole: the view last shown decides
            out = None
        elif len(path) == 2 and path[0] == "artifacts":
            out.append(path)  # a card, whole
            out = None
    for k, v in node.items():
        # a key deleted (``null``) is never encoded: a lone surrogate in it is refused here
        if type(k) is not str or not utf8_text(k):
            return False
        tv = type(v)
        if tv is dict:
            if v:
                # (no path to build where nothing is listed: only the checks)
                if not _listed(v, depth + 1, path if out is None else (*path, k), out):
                    return False
                continue
            if depth + 1 >= MAX_DEPTH:
                return False
        elif not ((tv is str and utf8_text(v)) or tv is bool or v is None or _storable(v, depth + 1)):
            return False
        if out is not None:
            out.append((*path, k))  # a leaf: a value set, a deletion or an empty object
    return True


def _no_materialized_null(patch: JSON, where: str) -> None:
    """``null`` is allowed only as an object-key deletion marker, never inside stored values."""
    at = stored_null(patch, True)
    if at is not None:
        raise PatchError(f"memory cannot store null (at {where}{at}); use null only to delete a key")


def _no_stored_index_key(patch: JSON, where: str) -> None:
    """A key of index form is reserved (seed 000): an object inside an array value, which is
    stored as written rather than merged, may not hold one either (``doc.merge`` refuses it in
    the patch's own objects)."""
    at = stored_index_key(patch, True)
    if at is not None:
        raise PatchError(
            f"memory cannot store an index key as an object key (at {where}{at}); index keys "
            "address existing array elements only"
        )


def _check_artifact_patch(scope: str, artifacts: dict[str, Any]) -> None:
    for source, card in artifacts.items():
        where = f"{scope}.artifacts[{source!r}]"
        if not source.strip():
            raise PatchError(f"{where}: an artifact is keyed by its source path, which cannot be empty")
        if card is None:
            continue
        if not isinstance(card, dict):
            raise PatchError(f"{where} must be an artifact card object with a description")
        if not card:  # pruning would otherwise make it vanish before the description check
            raise PatchError(
                f'{where}: an empty card has no description; write {{"description": …}} '
                "(or null to delete the card)"
            )
        forbidden = sorted(set(card) & ARTIFACT_RUNTIME_FIELDS)
        if forbidden:
            raise PatchError(
                f"{where}: {forbidden} are runtime-owned provenance fields and cannot be written"
            )
        if "description" in card and (
            not isinstance(card["description"], str) or not card["description"].strip()
        ):
            raise PatchError(f"{where}.description must be a non-empty string")
        tags = card.get("tags")
        if tags is not None:
            if not isinstance(tags, list) or not all(
                isinstance(t, str) and t.strip() == t and t for t in tags
            ):
                raise PatchError(f"{where}.tags must be a list of trimmed, non-empty strings")
            if len(set(tags)) != len(tags):
                raise PatchError(f"{where}.tags must be unique")


def check_artifacts(scope: str, artifacts: JSON, touched: dict[str, Any]) -> None:
    """Every card a patch touched must end up an object with a non-empty description."""
    if type(artifacts) is not dict:
        return
    for source in touched:
        card = artifacts.get(source)
        if card is None:
            continue
        if (
            type(card) is not dict
            or not isinstance(card.get("description"), str)
            or not card["description"].strip()
        ):
            raise PatchError(
                f"{scope}.artifacts[{source!r}] needs a non-empty description (an artifact card routes "
                "a future reader to its source)"
            )


def check_extra_roots(
    scope: str, state: Mapping[str, Any], touched: Mapping[str, Any], planes: PlaneSet
) -> None:
    for name in touched:
        root = planes.root(name)
        if root is None or name not in state:
            continue
        validator = compiled(root.schema)  # the process-wide cache the states service uses too
        if validator.is_valid(state[name]):
            continue
        first = first_error(root.schema, state[name])
        if first is None:
            raise PatchError(f"{scope}.{name} does not match its declared schema ({UNEXPLAINED})")
        raise PatchError(f"{scope}.{name}{first.at()} does not match its declared schema: {first.message}")


# ------------------------------------------------------------------------------ projection


def model_view(
    state: Mapping[str, Any] | None, planes: PlaneSet, *, with_lazy: bool = False
) -> dict[str, Any]:
    """What a model may see of one scope: documented planes in intent-first order; no
    ``_runtime``; no empty response; lazy roots only when asked for."""
    if not state:
        return {}
    lazy = planes.lazy
    out = {}
    for name in planes.names:
        if name not in state or (name in lazy and not with_lazy):
            continue
        value = state[name]
        if name == "response" and value == "":
            continue
        out[name] = value
    return out


def effective_view(
    states: Sequence[Mapping[str, Any] | None], planes: PlaneSet, *, with_lazy: bool = False
) -> dict[str, Any]:
    """The overlay of the scopes' ``model_view`` s (broadest first), its planes in intent-first
    order: each plane's values overlaid in turn, as the overlay of the whole views overlays
    them (a plane one scope holds is its value), without building each scope's view first
    (every receipt builds one of these)."""
    lazy = planes.lazy
    out: dict[str, Any] = {}
    for name in planes.names:
        if not with_lazy and name in lazy:
            continue
        found: Any = MISSING
        for state in states:
            if not state or name not in state:
                continue
            value = state[name]
            if name == "response" and value == "":
                continue
            found = value if found is MISSING else overlay(found, value)
        if found is not MISSING:
            out[name] = found
    return out


def child_kinds(value: Mapping[str, Any]) -> dict[str, str]:
    return {k: kind(v) for k, v in value.items()}
