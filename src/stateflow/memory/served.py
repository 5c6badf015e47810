"""Which ``patch_state`` calls a store may merge itself (PostgreSQL: in its commit statement).

The common case: every supplied scope patch sets values in ``strategy`` or ``tactics`` only,
each a non-empty object whose values are non-empty objects or leaves that are strings,
integers or booleans — no deletions (``null``), no empty objects (nothing to prune), no arrays
or floats (whose equality JSON text cannot decide), no ``[N]`` keys (array items), no key that
encoding escapes; with no hot budget set (a refusal would come after the commit). Such a patch
cannot be refused once its arguments are checked, cascades no ownership and touches no
provenance, so the store may commit it before this process computes the receipt from the basis
the store merged into. Everything else goes the ordinary way (``Store.update``).
"""

from __future__ import annotations

from typing import Any, Final

SERVED_PLANES: Final = frozenset({"strategy", "tactics"})
MAX_DEPTH: Final = 32
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**63 - 1


def served_case(supplied: dict[str, dict[str, Any]]) -> bool:
    """Whether every scope patch of a ``patch_state`` call is of the common case."""
    for scope_patch in supplied.values():
        if not scope_patch:
            return False
        for name, value in scope_patch.items():
            if name not in SERVED_PLANES or not _plain_object(value, 0):
                return False
    return True


def _plain_object(value: Any, depth: int) -> bool:
    if type(value) is not dict or not value or depth > MAX_DEPTH:
        return False
    for key, sub in value.items():
        if not _plain_key(key):
            return False
        kind = type(sub)
        if kind is dict:
            if not _plain_object(sub, depth + 1):
                return False
        elif kind is not str and kind is not bool and not (kind is int and _INT_MIN <= sub <= _INT_MAX):
            return False
    return True


def _plain_key(key: str) -> bool:
    """A key stored as it is written (no escape in its encoding) and naming no array item."""
    if not key or key[0] == "[" or '"' in key or "\\" in key:
        return False
    return all(ch >= " " for ch in key)
