"""Recursive semantic merge patch (``patch_state``) and the effective-view overlay.

Merge rules:

- an object patches an object recursively; unmentioned keys persist;
- a scalar or an array replaces the target whole;
- ``null`` deletes an object key (a no-op when absent, reported through ``missing_deletions``);
- an object whose keys are all ``"[N]"`` patches the *existing* elements of an array target:
  the index must exist, an element cannot be deleted, object values patch the element
  recursively (nesting allowed). Index syntax is reserved: a key of index form (bracketed
  digits, ``"[1]"``, ``"[-1]"``, ``"[01]"``, ``"[ 1]"``) is never a literal key — one that is
  not a canonical ``"[N]"``, one beside ordinary keys, or one against anything but an array is
  a :class:`PatchError` (an object of ordinary keys onto an array replaces it, as below);
- an object onto a non-object starts from ``{}``; a patch that only deletes through absent
  ancestors creates no empty parents. With ``prune`` (memory), an object that sets nothing —
  ``{}``, or deletions only — leaves an existing scalar or array as it is: an empty patch is a
  no-op, never a deletion (``null`` alone deletes).

Inputs are never mutated: changed containers are copied (through ``copies`` when given), untouched
subtrees are shared.
"""

from __future__ import annotations

import re
from typing import Any, Final, NoReturn

from stateflow.doc.canonical import JSON, identical, kind
from stateflow.doc.copies import DELETE, Copies, Step, list_copy, made
from stateflow.doc.diff import Edit, Within, diff_into, to_patch
from stateflow.doc.select import MISSING
from stateflow.doc.sparse import Sparse
from stateflow.errors import PatchError

INDEX_KEY: Final = re.compile(r"\[(0|[1-9][0-9]*)\]\Z")
INDEX_FORM: Final = re.compile(r"\[\s*[+-]?\s*[0-9]+\s*\]\Z")
"""A key written as an array index, canonical or not: reserved, never stored as a key."""

PathT = tuple[str | int, ...]


def is_index_patch(patch: JSON) -> bool:
    """True for a non-empty object whose keys are all canonical ``"[N]"`` selectors."""
    return type(patch) is dict and bool(patch) and all(INDEX_KEY.match(k) for k in patch)


class Emitted(list[Edit]):
    """The edits a pruning merge made (``merge_patch(edits=...)``), in the order
    ``doc.diff.diff_within`` lists them along the patch's trie; ``exact`` is False when the
    merge cannot tell that order (it deleted something: a diff lists a level's deletions first;
    it patched array elements: a diff lists them by index) and the diff must be taken."""

    exact: bool = True  # (a class default: no ``__init__`` of our own to call per merge)


def merge_patch(
    target: JSON,
    patch: JSON,
    *,
    missing_deletions: list[PathT] | None = None,
    copies: Copies | None = None,
    prune: bool = False,
    edits: Emitted | None = None,
    root: str = "$",
    _path: PathT = (),
) -> JSON:
    """Apply a semantic merge patch to ``target`` (which may be :data:`MISSING`).

    Returns the new value, or :data:`MISSING` when the patch deletes the target itself.
    ``copies``: where changed containers are copied from (see :mod:`stateflow.doc.copies`).
    ``prune``: no empty object is kept along the patch (an object member the patch leaves
    empty goes; a value the patch sets is kept as :func:`prune_value` makes it; an array keeps
    its slots): memory never stores an empty object.
    ``edits`` (with ``prune``): gets the edits from ``target`` to the result, as
    :class:`Emitted` says; the merge visits every changed place already, so the diff need not.
    ``root``: how a refusal names the place ``target`` is at (``$``; memory names its scope).
    """
    if patch is None:
        return MISSING
    if type(patch) is not dict:
        return prune_value(patch) if prune else patch
    if (type(target) is list or type(target) is Sparse) and is_index_patch(patch):
        if edits is not None:
            edits.exact = False
        return _patch_indices(target, patch, missing_deletions, copies, _path, prune, root)
    base: dict[str, Any] = target if type(target) is dict else {}
    result: dict[str, Any] | None = None  # copied lazily: no change, no copy
    # (decided once: most containers are small, copied plainly and reported to no one)
    spare = copies if copies is not None and len(base) >= copies.min_elements else None
    steps: list[Step] | None = None if spare is None else []  # (only a copier is told them)
    for key, sub in patch.items():
        if "[" in key and INDEX_FORM.match(key):  # (a substring test: the cheapest per key)
            _refuse_index_key(target, patch, key, _path, root)
        current = base.get(key, MISSING)
        if sub is None:
            if current is MISSING:
                if missing_deletions is not None:
                    missing_deletions.append((*_path, key))
                continue
            if result is None:
                result = dict(base) if spare is None else spare.dict_copy(base)
            del result[key]
            if steps is not None:
                steps.append((key, DELETE))
            if edits is not None:
                edits.exact = False
            continue
        whole = edits  # where this key's edits are found by a diff of its values (below)
        if type(sub) is not dict:  # a value set (no call: most of a patch's leaves)
            new = prune_value(sub) if prune and type(sub) is list else sub
        else:
            if edits is not None:
                tc = type(current)
                if tc is dict:  # the merge below lists its own edits
                    whole = None
                elif tc is list or tc is Sparse:  # (array elements patched: a diff lists them by index)
                    edits.exact = False
            new = merge_patch(
                current,
                sub,
                missing_deletions=missing_deletions,
                copies=copies,
                prune=prune,
                edits=None if whole is not None else edits,
                root=root,
                _path=(*_path, key),
            )
            if prune and not new and type(new) is dict:  # left empty: it goes
                if current is not MISSING:
                    if result is None:
                        result = dict(base) if spare is None else spare.dict_copy(base)
                    del result[key]
                    if steps is not None:
                        steps.append((key, DELETE))
                    if edits is not None:
                        edits.exact = False
                continue
            if current is MISSING and sub and new == {}:
                continue  # deletion-only patch through an absent ancestor: no empty parent
        if new is current:
            continue
        # (what ``diff_within`` does at a leaf of the patch's trie; none once the edits cannot
        # be exact: the caller diffs along the trie then, and a diff here, of an array whose
        # elements were patched, would walk the whole array for edits thrown away)
        if whole is not None and whole.exact:
            tn = type(new)
            if tn is type(current) and tn is not dict and tn is not list:
                if new != current:  # (``diff_into``'s step for two scalars of one type, inline)
                    whole.append(Edit((*_path, key), new))
            else:
                diff_into(current, new, (*_path, key), whole)
        if result is None:
            result = dict(base) if spare is None else spare.dict_copy(base)
        result[key] = new
        if steps is not None:
            steps.append((key, new))
    if result is None:
        if type(target) is dict:
            return base
        # nothing set onto a scalar or an array: memory keeps it (an empty patch is a no-op,
        # and only null deletes); a plain merge starts the object from {}
        return target if prune and target is not MISSING else {}
    if spare is not None and steps is not None and type(target) is dict:
        spare.made(result, base, steps)
    return result


def patch_between(old: JSON, new: JSON, edits: list[Edit]) -> JSON:
    """The merge patch that turns ``old`` into ``new`` (``edits`` their :func:`doc.diff.diff`),
    or :data:`MISSING` when no merge patch does: one rendering of the edits reads a value set
    to ``null`` as a deletion and a member named like ``"[0]"`` as an array index, so the
    rendering is kept only when applying it gives ``new`` back exactly."""
    if not edits:
        return {}
    patch = to_patch(edits)
    try:
        rebuilt = merge_patch(old, patch)
    except PatchError:
        return MISSING
    return patch if identical(rebuilt, new) else MISSING


def patch_paths(patch: JSON, _path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths a merge patch can change (its leaves; ``"[N]"`` keys as written): applying it
    changes nothing outside them, whatever the target — what ``doc.diff.within`` narrows a diff
    to."""
    if type(patch) is not dict or not patch:
        return [_path]
    out: list[tuple[str, ...]] = []
    for key, sub in patch.items():
        out.extend(patch_paths(sub, (*_path, key)))
    return out


def patch_within(patch: dict[str, Any], where: Within) -> Within:
    """Add a merge patch's leaves to ``where`` (a trie, as :func:`doc.diff.within` builds) and
    return it: ``within`` of :func:`patch_paths` and the paths ``where`` held, built straight
    from the patch, which is a trie of its leaves already (no path tuples, no second walk)."""
    for key, sub in patch.items():
        if type(sub) is dict and sub:
            below = where.get(key, MISSING)
            if below is None:
                continue  # a leaf already: it may differ anywhere below
            if below is MISSING:
                below = where[key] = {}
            patch_within(sub, below)
        else:
            where[key] = None
    return where


def _refuse_index_key(target: JSON, patch: dict[str, Any], key: str, path: PathT, root: str) -> NoReturn:
    """Refuse ``patch``'s ``key`` of index form (a patch whose keys all address elements of an
    array went to ``_patch_indices``): index syntax is never a literal key."""
    where = _show(path, root)
    if type(target) is not list and type(target) is not Sparse:
        what = "absent" if target is MISSING else _kind(target)
        raise PatchError(
            f"index key {key!r} at {where}: the value there is {what}, not an array; index "
            "keys address existing array elements and are never stored as object keys"
        )
    if not INDEX_KEY.match(key):
        raise PatchError(
            f"index key {key!r} at {where} is not a valid array index: write a zero-based "
            'decimal index without sign, spaces or leading zeros, such as "[0]" or "[12]"'
        )
    other = next(k for k in patch if not INDEX_KEY.match(k))
    raise PatchError(
        f"index key {key!r} at {where} is beside the object key {other!r}: an object patch onto "
        "an array holds index keys only (or ordinary keys only, which replace the array)"
    )


def _kind(value: JSON) -> str:
    """``canonical.kind`` with its article, for a message ("an object", "a string")."""
    name = kind(value)
    return ("an " if name[0] in "aeiou" else "a ") + name


def _patch_indices(
    target: list[Any] | Sparse,
    patch: dict[str, Any],
    missing_deletions: list[PathT] | None,
    copies: Copies | None,
    path: PathT,
    prune: bool,
    root: str,
) -> list[Any] | Sparse:
    steps: list[Step] = []
    for key, sub in patch.items():
        index = int(key[1:-1])
        if index >= len(target):
            raise PatchError(
                f"array index {key} is out of bounds for length {len(target)} at {_show(path, root)}"
            )
        if sub is None:
            raise PatchError(
                f"array index {key} at {_show(path, root)} cannot be deleted; replace the whole array instead"
            )
        element = target[index]
        new = merge_patch(  # (an element left empty stays: slots are kept)
            element,
            sub,
            missing_deletions=missing_deletions,
            copies=copies,
            prune=prune,
            root=root,
            _path=(*path, index),
        )
        if new is not element:
            steps.append((index, new))
    if not steps:
        return target  # every element as it was (``{"[0]": {}}``): no copy, no change
    # (an array held along the patch only: its copy costs the elements it holds)
    if isinstance(target, Sparse):
        held = dict(target.held)
        held.update(steps)
        return Sparse(len(target), held)
    copy = list_copy(copies, target)
    for index, new in steps:
        copy[index] = new
    made(copies, copy, target, steps)
    return copy


def prune_value(value: JSON) -> JSON:
    """Drop empty-object fields recursively; array slots (even ``{}``) stay."""
    if type(value) is dict:
        out = {}
        for k, v in value.items():
            pv = prune_value(v)
            if pv != {}:
                out[k] = pv
        return out
    if type(value) is list:
        return [prune_value(v) for v in value]
    return value


def overlay(*layers: JSON) -> JSON:
    """Recursive overlay, broadest layer first: objects merge, anything else replaces.

    Absent layers (:data:`MISSING`) are skipped; nothing is deleted.
    """
    result: JSON = MISSING
    for layer in layers:
        if layer is MISSING:
            continue
        if type(layer) is dict and type(result) is dict:
            merged = dict(result)
            for key, value in layer.items():
                below = merged.get(key, MISSING)
                # (a key of one layer only is that layer's value: no call)
                merged[key] = value if below is MISSING else overlay(below, value)
            result = merged
        else:
            result = layer
    return result


def _show(path: PathT, root: str = "$") -> str:
    out = root
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else f".{seg}"
    return out


def stored_index_key(node: JSON, as_patch: bool) -> str | None:
    """Where an object stored as written (inside an array) holds a key of index form, as a path
    suffix ending at that key, or None."""
    if type(node) is dict:
        for k, v in node.items():
            if not as_patch and INDEX_FORM.match(k):
                return f"[{k!r}]"
            if type(v) is dict or type(v) is list:
                at = stored_index_key(v, as_patch)
                if at is not None:
                    return f".{k}{at}"
    elif type(node) is list:
        for i, v in enumerate(node):
            if type(v) is dict or type(v) is list:
                at = stored_index_key(v, False)
                if at is not None:
                    return f"[{i}]{at}"
    return None


def stored_null(node: JSON, as_patch: bool) -> str | None:
    """Where ``node`` holds a ``null`` that would be stored (one outside a patch's keys), as a
    path suffix (``.k[2]``), or None. The text is built only on the way out of a find, so the
    common case (no such null) builds none."""
    if type(node) is dict:
        for k, v in node.items():
            if v is None:
                if not as_patch:
                    return f".{k}"
            elif type(v) is dict or type(v) is list:
                at = stored_null(v, as_patch)
                if at is not None:
                    return f".{k}{at}"
    elif type(node) is list:
        for i, v in enumerate(node):
            if v is None:
                return f"[{i}]"
            if type(v) is dict or type(v) is list:
                at = stored_null(v, False)
                if at is not None:
                    return f"[{i}]{at}"
    return None
