"""The idempotency ledger's claims: op ids a commit records, and the SQL that checks them."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Final

from stateflow.errors import Conflict
from stateflow.store.model import DocKey
from stateflow.store.rows import DocRow, any_of, joined


class OpIdTaken(Conflict):
    """Op ids claimed by an update were already recorded (``taken``); nothing was written."""

    code = "op-id-taken"

    def __init__(self, taken: set[tuple[str, str]]) -> None:
        super().__init__(f"op ids already applied: {sorted(taken)}")
        self.taken = frozenset(taken)


SCOPE_PART: Final = "@"
"""Between a claim scope's state and what within the state an id is unique to (no state name
holds it): a purge of the state forgets every scope that starts with its name and this."""


def scope_in(state: str, within: str) -> str:
    """The scope of op ids unique within a part of ``state`` (the declared states: a tenant)."""
    return f"{state}{SCOPE_PART}{within}"


def with_op_id(claims: Sequence[tuple[str, str]], op_id: str | None, scope: str) -> list[tuple[str, str]]:
    """The claims of a call, its own ``op_id`` among them."""
    return [*claims, (scope, op_id)] if op_id is not None else list(claims)


def replayed(taken: OpIdTaken, op_id: str | None, scope: str) -> bool:
    """Whether the call's own ``op_id`` is among the taken claims: the call is a replay."""
    return op_id is not None and (scope, op_id) in taken.taken


_AT_ROW: Final = "EXISTS (SELECT 1 FROM documents WHERE doc_id = ? AND revision = ?)"
_NO_ROW: Final = "NOT EXISTS (SELECT 1 FROM documents WHERE state = ? AND subject = ?)"
_UNCLAIMED: Final = "NOT EXISTS (SELECT 1 FROM applied_ops WHERE scope = ? AND op_id = ?)"


def unmoved(given: Sequence[tuple[DocKey, DocRow]], params: list[Any]) -> str:
    """The values of a condition that holds while every document is still at the row given
    (``NO_ROW``: has none), appended to ``params``; returned: the condition's shape, a letter
    per document (``r``: at its row, ``n``: none) for :func:`checked_transition`. Doc ids are
    never reused, so an id and a revision name one state of one document."""
    shape = ""
    for key, row in given:
        if row.doc_id:
            params += (row.doc_id, row.revision)
            shape += "r"
        else:
            params += key
            shape += "n"
    return shape


@functools.lru_cache(maxsize=256)
def checked_transition(changed: bool, shape: str, claims: int, counted: bool = False) -> str:
    """The transition's insert that writes its row only while the documents of ``shape``
    (:func:`unmoved`) have not moved and none of ``claims`` op ids is claimed — its values the
    time, the origin, the changed keys where ``changed``, the counters' deltas where
    ``counted`` (``Backend.counts_in_transitions``; left out, so NULL, where nothing moved),
    then the condition's. Formatted once per shape: a commit sends the same text (the
    connection's statement cache finds it by identity, not by hashing and comparing a new text
    of a few hundred characters)."""
    parts = [_AT_ROW if part == "r" else _NO_ROW for part in shape]
    parts += [_UNCLAIMED] * claims
    check = joined(parts, "AND") or "1 = 1"
    columns, values = transition_columns(changed, counted)
    return f"INSERT INTO transitions ({columns}) SELECT {values} WHERE {check}"


def transition_columns(changed: bool, counted: bool) -> tuple[str, str]:
    """The columns a transition's insert sets, and their ``?``s: the time, the origin, then the
    changed keys where ``changed`` and the counters' deltas where ``counted``."""
    columns = "at, origin" + (", changed" if changed else "") + (", counted" if counted else "")
    return columns, ", ".join("?" * (2 + changed + counted))


def claims_query(claims: Sequence[tuple[str, str]]) -> tuple[str, list[str]]:
    where = any_of("(scope = ? AND op_id = ?)", len(claims))
    return f"SELECT scope, op_id FROM applied_ops WHERE {where}", [v for pair in claims for v in pair]
