"""The idempotency ledger's claims: op ids a commit records, and the SQL that checks them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stateflow.errors import Conflict
from stateflow.store.model import DocKey
from stateflow.store.rows import DocRow


class OpIdTaken(Conflict):
    """Op ids claimed by an update were already recorded (``taken``); nothing was written."""

    code = "op-id-taken"

    def __init__(self, taken: set[tuple[str, str]]) -> None:
        super().__init__(f"op ids already applied: {sorted(taken)}")
        self.taken = frozenset(taken)


def with_op_id(claims: Sequence[tuple[str, str]], op_id: str | None, scope: str) -> list[tuple[str, str]]:
    """The claims of a call, its own ``op_id`` among them."""
    return [*claims, (scope, op_id)] if op_id is not None else list(claims)


def replayed(taken: OpIdTaken, op_id: str | None, scope: str) -> bool:
    """Whether the call's own ``op_id`` is among the taken claims: the call is a replay."""
    return op_id is not None and (scope, op_id) in taken.taken


def unmoved(
    given: Sequence[tuple[DocKey, DocRow]], claims: Sequence[tuple[str, str]]
) -> tuple[str, list[Any]]:
    """A condition that holds while every document is still at the row given (``NO_ROW``:
    has none) and no op id is claimed; doc ids are never reused, so an id and a revision name
    one state of one document."""
    parts: list[str] = []
    params: list[Any] = []
    for key, row in given:
        if row.doc_id:
            parts.append("EXISTS (SELECT 1 FROM documents WHERE doc_id = ? AND revision = ?)")
            params += (row.doc_id, row.revision)
        else:
            parts.append("NOT EXISTS (SELECT 1 FROM documents WHERE state = ? AND subject = ?)")
            params += key
    for claim in claims:
        parts.append("NOT EXISTS (SELECT 1 FROM applied_ops WHERE scope = ? AND op_id = ?)")
        params += claim
    return " AND ".join(parts) or "1 = 1", params


def claims_query(claims: Sequence[tuple[str, str]]) -> tuple[str, list[str]]:
    where = " OR ".join(["(scope = ? AND op_id = ?)"] * len(claims))
    return f"SELECT scope, op_id FROM applied_ops WHERE {where}", [v for pair in claims for v in pair]
