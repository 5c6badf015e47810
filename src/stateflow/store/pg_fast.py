"""PostgreSQL: the common optimistic commits as one prepared plain statement per shape.

``stateflow_commit`` (the PL/pgSQL commit function) takes any commit as one ``json`` payload;
for the few shapes nearly every write has — documents that exist, written by rewriting and
adding members, checked against shared and absent keys — the same checks, locks and rows are
one statement of data-modifying CTEs instead, its parameters typed (no ``json`` to parse, no
PL/pgSQL expressions to set up, one plan instead of six statements' start-ups). The shape (the
counts of each kind of key and row, and which documents' ``present`` moves) names the
statement; every other commit (claims, tree nodes, deletes, documents gone, edits apart,
snapshots, rows to create, more rows than ``MAX_ROWS``) goes through the function.

Order, as the function's: the absent keys checked (no lock), the shared rows locked ``FOR
SHARE`` with their revision, the written rows ``FOR UPDATE`` with theirs (both in the order the
client gives, ``rows.lock_order``), then the seq lock, then the writes. Each CTE is gated on the
one before it by an uncorrelated ``EXISTS`` — a one-time filter, evaluated before its own scan —
so a failed check stops the chain: no transition, no row written, no seq returned (the caller's
None, as the function's NULL). A revision is in its lock's WHERE: under READ COMMITTED a row
changed meanwhile is re-checked on its newest version (EvalPlanQual) and found wanting. The
writes all join the transition's CTE: none runs without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Final

from stateflow.store.model import DocKey
from stateflow.store.plan import WritePlan
from stateflow.store.rows import DocRow

MAX_ROWS: Final = 4
"""The most keys of one kind, or member rows, or documents a fast statement takes (more: the
function): a statement is prepared per shape on each connection, so shapes stay few."""

Shape = tuple[int, int, int, int, int, tuple[bool, ...]]
"""(absent keys, shared keys, written keys, member rows rewritten, member rows added, for each
document written whether its ``present`` moves)."""

_T: Final = 0  # (a text parameter's format)
_B: Final = 1  # (binary: bytea)


class FastCommit:
    """A commit as its shape's statement (``statement``) and that statement's parameters;
    ``slow()`` gives the same commit as the commit function's parameters (where the fast
    statement is not sent: a group's transaction, the async store's bridge)."""

    __slots__ = ("shape", "slow", "values")

    def __init__(self, shape: Shape, values: list[bytes | None], slow: Callable[[], list[Any]]) -> None:
        self.shape = shape
        self.values = values
        self.slow = slow


def fast_values(
    locked: Sequence[tuple[DocKey, DocRow]],
    shared: Sequence[tuple[DocKey, DocRow]],
    plans: Sequence[WritePlan],
    at: str,
    origin: bytes,
    seq_lock: bytes,
) -> tuple[Shape, list[bytes | None]] | None:
    """The commit's shape and its statement's parameters (text or bytes, as ``statement``'s
    formats say), or None where the commit is not one of the fast shapes."""
    absent: list[bytes | None] = []
    share: list[bytes | None] = []
    for key, row in shared:
        if row.doc_id:
            share += (key.state.encode(), key.subject.encode(), b"%d" % row.doc_id, b"%d" % row.revision)
        else:
            absent += (key.state.encode(), key.subject.encode())
    lock: list[bytes | None] = []
    for key, row in locked:
        lock += (key.state.encode(), key.subject.encode(), b"%d" % row.doc_id, b"%d" % row.revision)
    upd: list[bytes | None] = []
    ins: list[bytes | None] = []
    docs: list[bytes | None] = []
    moves: list[bool] = []
    for p in plans:
        d = p.document
        if not p.present or p.deletes or p.nodes or p.edits or p.inline is None or p.snapshot or d is None:
            return None
        for body, revision, size, outline, root, doc_id, name in p.updates:
            upd += (body, b"%d" % revision, b"%d" % size, outline, root, b"%d" % doc_id, name.encode())
        for doc_id, name, position, revision, size, outline, body, root in p.inserts:
            ins += (
                b"%d" % doc_id,
                name.encode(),
                b"%d" % position,
                b"%d" % revision,
                b"%d" % size,
                outline,
                body,
                root,
            )
        docs += (b"%d" % p.doc_id, b"%d" % p.revision, p.paths, p.inline, b"%d" % d.revision)
        moved = p.present != p.was_present
        if moved:
            docs.append(b"1" if d.present else b"0")
        moves.append(moved)
        docs += (
            b"%d" % d.snapshot_revision,
            b"%d" % d.bytes_since_snapshot,
            b"%d" % d.body_size,
            b"%d" % d.next_position,
        )
    shape = (len(absent) // 2, len(share) // 4, len(lock) // 4, len(upd) // 7, len(ins) // 8, tuple(moves))
    if not moves or not lock or max(shape[:5]) > MAX_ROWS or len(moves) > MAX_ROWS:
        return None
    return shape, [at.encode(), origin, seq_lock, *absent, *share, *lock, *upd, *ins, *docs]


@lru_cache(maxsize=256)
def statement(shape: Shape) -> tuple[bytes, bytes, tuple[int, ...]]:
    """The prepared statement's name, text and parameters' formats for ``shape``."""
    n_absent, n_share, n_lock, n_upd, n_ins, moves = shape
    formats: list[int] = []
    count = 0

    def p(cast: str, fmt: int = _T) -> str:
        nonlocal count
        count += 1
        formats.append(fmt)
        return f"${count}::{cast}"

    at, origin, seq_lock = p("text"), p("bytea", _B), p("bigint")
    ctes: list[str] = []
    gate = ""  # the condition that the checks so far passed (an uncorrelated EXISTS)
    if n_absent:
        absent = " AND ".join(
            f"NOT EXISTS (SELECT FROM documents WHERE state = {p('text')} AND subject = {p('text')})"
            for _ in range(n_absent)
        )
        ctes.append(f"a AS MATERIALIZED (SELECT 1 WHERE {absent})")
        gate = " AND EXISTS (SELECT FROM a)"
    for kind, n, mode in (("s", n_share, "SHARE"), ("l", n_lock, "UPDATE")):
        for i in range(n):
            name = f"{kind}{i}"
            ctes.append(
                f"{name} AS MATERIALIZED (SELECT 1 FROM documents WHERE state = {p('text')} "
                f"AND subject = {p('text')} AND doc_id = {p('bigint')} AND revision = {p('bigint')}"
                f"{gate} FOR {mode})"
            )
            gate = f" AND EXISTS (SELECT FROM {name})"
    # the seq lock (held to commit: seq values become visible in commit order), after every lock
    ctes.append(
        f"t AS (INSERT INTO transitions (at, origin) SELECT {at}, {origin} FROM (SELECT pg_advisory_xact_lock("
        f"({seq_lock} << 32) | (hashtext(current_schema())::bigint & 4294967295)) WHERE true{gate}) AS x "
        "RETURNING seq)"
    )
    for i in range(n_upd):
        body, rev, size, outline, root = (
            p("bytea", _B),
            p("bigint"),
            p("bigint"),
            p("bytea", _B),
            p("bytea", _B),
        )
        ctes.append(
            f"u{i} AS (UPDATE members SET body = {body}, revision = {rev}, size = {size}, outline = {outline}, "
            f"root = {root} FROM t WHERE doc_id = {p('bigint')} AND name = {p('text')})"
        )
    if n_ins:
        # one insert: its counter's statement trigger runs once, as the function's
        rows = ", ".join(
            f"({p('bigint')}, {p('text')}, {p('bigint')}, {p('bigint')}, {p('bigint')}, {p('bytea', _B)}, "
            f"{p('bytea', _B)}, {p('bytea', _B)})"
            for _ in range(n_ins)
        )
        ctes.append(
            "i AS (INSERT INTO members (doc_id, name, position, revision, size, outline, body, root) "
            f"SELECT v.* FROM t, (VALUES {rows}) AS v)"
        )
    changes = []
    for i, moved in enumerate(moves):
        doc, change_rev, paths, edits, rev = (
            p("bigint"),
            p("bigint"),
            p("bytea", _B),
            p("bytea", _B),
            p("bigint"),
        )
        # (present set only where it moves: else its counter's trigger is not even considered)
        present = f"present = {p('smallint')}, " if moved else ""
        ctes.append(
            f"d{i} AS (UPDATE documents SET revision = {rev}, {present}updated_seq = t.seq, "
            f"snapshot_revision = {p('bigint')}, bytes_since_snapshot = {p('bigint')}, "
            f"body_size = {p('bigint')}, next_position = {p('bigint')} FROM t WHERE doc_id = {doc})"
        )
        changes.append(f"SELECT {doc}, {change_rev}, t.seq, {paths}, {edits} FROM t")
    ctes.append(
        f"c AS (INSERT INTO changes (doc_id, revision, seq, paths, edits) {' UNION ALL '.join(changes)})"
    )
    sql = "WITH " + ", ".join(ctes) + " SELECT seq FROM t"
    name = "stateflow_fast_" + "_".join(map(str, shape[:5])) + "_" + "".join("1" if m else "0" for m in moves)
    return name.encode(), sql.encode(), tuple(formats)
