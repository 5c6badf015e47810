"""Intent ownership: a structured ``$ref`` inside an intent means "delete with me".

When a patch deletes a top-level intent key, every eligible target it referenced (an existing
object key under the same scope's ``strategy``, ``tactics`` or ``lazy``) is cleared — unless a
remaining intent of that scope references the same target, an ancestor or a descendant (the
plane root or an array element under it included: too broad or too deep to own, such a ref still
keeps what it reads).
Textual ``$path`` mentions never own; editing an intent to drop a ref leaves the target unowned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stateflow.memory.refs import ownership_target, protected_target, structured_refs

Target = tuple[str, tuple[str, ...]]


def _targets(
    intent: Any, scope: str, read: Callable[[str, str], Target | None] = ownership_target
) -> set[Target]:
    out = set()
    for ref in structured_refs(intent):
        target = read(ref, scope)
        if target is not None:
            out.add(target)
    return out


def _related(a: Target, b: Target) -> bool:
    """Same plane and one key list is a prefix of the other (equal, ancestor or descendant)."""
    if a[0] != b[0]:
        return False
    n = min(len(a[1]), len(b[1]))
    return a[1][:n] == b[1][:n]


def _exists(state: dict[str, Any], target: Target) -> bool:
    node: Any = state.get(target[0])
    for key in target[1]:
        if type(node) is not dict or key not in node:
            return False
        node = node[key]
    return True


def cascade_targets(
    scope: str, before_intents: Any, after_intents: Any, state_after_intents: dict[str, Any]
) -> list[Target]:
    """The targets to clear, minimal and in deterministic order: by path, plane name first
    (``lazy.plans.x`` before ``tactics.draft``, as the published receipt example lists them)."""
    before = before_intents if type(before_intents) is dict else {}
    after = after_intents if type(after_intents) is dict else {}
    deleted = [k for k in before if k not in after]
    if not deleted:
        return []
    candidates: set[Target] = set()
    for key in deleted:
        candidates |= _targets(before[key], scope)
    retained: set[Target] = set()
    for value in after.values():  # (a ref that cannot own still keeps what it reads)
        retained |= _targets(value, scope, protected_target)
    kept = [
        c for c in candidates if not any(_related(c, r) for r in retained) and _exists(state_after_intents, c)
    ]
    minimal = [
        c for c in kept if not any(o != c and o[0] == c[0] and c[1][: len(o[1])] == o[1] for o in kept)
    ]
    return sorted(minimal, key=lambda t: (t[0], t[1]))


def deletion_patch(targets: list[Target]) -> dict[str, Any]:
    """A nested null patch that deletes every target."""
    patch: dict[str, Any] = {}
    for plane, keys in targets:
        node = patch.setdefault(plane, {})
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = None
    return patch
