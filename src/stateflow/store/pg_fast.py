"""PostgreSQL: the common optimistic commits as one prepared plain statement per shape.

``stateflow_commit`` (the PL/pgSQL commit function) takes any commit as one ``json`` payload;
for the few shapes nearly every write has — documents that exist, written by rewriting and
adding members, checked against shared and absent keys — the same checks, locks and rows are
one statement of data-modifying CTEs instead, its parameters typed (no ``json`` to parse, no
PL/pgSQL expressions to set up, one plan instead of six statements' start-ups). The shape (the
counts of each kind of key and row, and which documents' ``present`` moves) names the
statement (or two: rows to create, below); every other commit (claims, tree nodes, deletes,
documents gone, edits apart, snapshots, more rows than ``MAX_ROWS``) goes through the function.

Order, as the function's: the absent keys checked (no lock), the shared rows locked ``FOR
SHARE`` with their revision, the written rows ``FOR UPDATE`` with theirs (both in the order the
client gives, ``rows.lock_order``), then the seq lock, then the writes. Each CTE is gated on the
one before it by an uncorrelated ``EXISTS`` — a one-time filter, evaluated before its own scan —
so a failed check stops the chain: no transition, no row written, no seq returned (the caller's
None, as the function's NULL). A revision is in its lock's WHERE: under READ COMMITTED a row
changed meanwhile is re-checked on its newest version (EvalPlanQual) and found wanting. The
writes all join the transition's CTE: none runs without it.

A commit that creates its documents' rows (a LangGraph checkpoint, a new item or subject) is two
statements in one transaction, sent in one round trip (libpq's pipeline mode, one Sync after
both: they commit together). In one statement a CTE's inserted rows are invisible to the others,
and the function creates the rows before the seq lock while the rows' ``updated_seq`` needs the
seq. The first checks the absent keys, locks the shared rows and inserts the new rows ``ON
CONFLICT (state, subject) DO NOTHING``, as the function does; the second is gated on every new
row's id now existing — ids reserved for this commit, which only it inserts, so a key created
meanwhile by another writer (its row under another id) leaves one missing — then takes the seq
lock and writes as the one statement does. A gate that fails writes nothing more (the rows the
first inserted stay, empty, as the function's ``RETURN NULL`` leaves them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Final

from stateflow.store.model import DocKey
from stateflow.store.plan import WritePlan
from stateflow.store.rows import DocRow

MAX_ROWS: Final = 8
"""The most keys of one kind, or member rows, or documents a fast statement takes (more: the
function): a statement is prepared per shape on each connection, so shapes stay few. (A new
LangGraph store item inserts six members.)"""

Shape = tuple[int, int, int, int, int, int, tuple[bool, ...]]
"""(absent keys, shared keys, written keys, new keys (rows created: then no written key), member
rows rewritten, member rows added, for each document written whether its ``present`` moves)."""
Prepared = tuple[bytes, bytes, tuple[int, ...]]
"""A prepared statement's name, text and parameters' formats."""

_T: Final = 0  # (a text parameter's format)
_B: Final = 1  # (binary: bytea)


class FastCommit:
    """A commit as its shape's statements (``statements``) and their parameters (the first
    ``split`` values the first statement's where there are two, the rest the second's);
    ``slow()`` gives the same commit as the commit function's parameters (where the fast
    statement is not sent: a group's transaction, the async store's bridge)."""

    __slots__ = ("shape", "slow", "split", "values")

    def __init__(
        self, shape: Shape, values: list[bytes | None], slow: Callable[[], list[Any]], split: int = 0
    ) -> None:
        self.shape = shape
        self.values = values
        self.slow = slow
        self.split = split


def fast_values(
    locked: Sequence[tuple[DocKey, DocRow]],
    shared: Sequence[tuple[DocKey, DocRow]],
    plans: Sequence[WritePlan],
    at: str,
    origin: bytes,
    seq_lock: bytes,
    created: Sequence[tuple[DocKey, int]] = (),
) -> tuple[Shape, list[bytes | None], int] | None:
    """The commit's shape, its statements' parameters (text or bytes, as ``statements``'
    formats say) and how many of them are the first statement's where it has two (``created``:
    the rows it creates, in the lock order, then every row it writes; else 0), or None where the
    commit is not one of the fast shapes."""
    absent: list[bytes | None] = []
    share: list[bytes | None] = []
    for key, row in shared:
        if row.doc_id:
            share += (key.state.encode(), key.subject.encode(), b"%d" % row.doc_id, b"%d" % row.revision)
        else:
            absent += (key.state.encode(), key.subject.encode())
    lock: list[bytes | None] = []
    new: list[bytes | None] = []
    ids: list[bytes | None] = []
    if created:
        for key, doc_id in created:
            new += (b"%d" % doc_id, key.state.encode(), key.subject.encode())
            ids.append(b"%d" % doc_id)
    else:
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
    shape = (
        len(absent) // 2,
        len(share) // 4,
        len(lock) // 4,
        len(ids),
        len(upd) // 7,
        len(ins) // 8,
        tuple(moves),
    )
    if not moves or not (lock or ids) or max(shape[:6]) > MAX_ROWS or len(moves) > MAX_ROWS:
        return None
    if ids:
        first = [*absent, *share, *new]
        return shape, [*first, at.encode(), origin, seq_lock, *ids, *upd, *ins, *docs], len(first)
    return shape, [at.encode(), origin, seq_lock, *absent, *share, *lock, *upd, *ins, *docs], 0


class _Params:
    """A statement's ``$n`` placeholders, numbered as made, and their formats."""

    def __init__(self) -> None:
        self.formats: list[int] = []

    def __call__(self, cast: str, fmt: int = _T) -> str:
        self.formats.append(fmt)
        return f"${len(self.formats)}::{cast}"


@lru_cache(maxsize=256)
def statements(shape: Shape) -> tuple[Prepared, ...]:
    """The prepared statements for ``shape``: one, or two (rows created) sent in one transaction."""
    n_absent, n_share, n_lock, n_new, n_upd, n_ins, moves = shape
    name = "stateflow_fast_" + "_".join(map(str, shape[:6])) + "_" + "".join("1" if m else "0" for m in moves)
    p = _Params()
    ctes: list[str] = []
    gate = ""  # the condition that the checks so far passed (an uncorrelated EXISTS)
    if n_new:
        # the first statement: checks, shared locks and the new rows (locked by their insert)
        gate = _checks(p, ctes, n_absent, n_share, 0)
        rows = ", ".join(f"({p('bigint')}, {p('text')}, {p('text')})" for _ in range(n_new))
        with_ = "WITH " + ", ".join(ctes) + " " if ctes else ""
        first = (
            f"{with_}INSERT INTO documents (doc_id, state, subject) SELECT v.* FROM (VALUES {rows}) AS v "
            f"WHERE true{gate} ON CONFLICT (state, subject) DO NOTHING"
        )
        head: tuple[Prepared, ...] = ((f"{name}_a".encode(), first.encode(), tuple(p.formats)),)
        p, ctes = _Params(), []
        at, origin, seq_lock = p("text"), p("bytea", _B), p("bigint")
        # every new row is there: each id was reserved for this commit, and inserted by nobody else
        gate = "".join(
            f" AND EXISTS (SELECT FROM documents WHERE doc_id = {p('bigint')})" for _ in range(n_new)
        )
    else:
        head = ()
        at, origin, seq_lock = p("text"), p("bytea", _B), p("bigint")
        gate = _checks(p, ctes, n_absent, n_share, n_lock)
    sql = _writes(p, ctes, gate, at, origin, seq_lock, n_upd, n_ins, moves)
    return (*head, (name.encode(), sql.encode(), tuple(p.formats)))


def _checks(p: _Params, ctes: list[str], n_absent: int, n_share: int, n_lock: int) -> str:
    """The checks and locks before the seq lock, as CTEs each gated on the one before it; the
    gate that says they all passed."""
    gate = ""
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
    return gate


def _writes(
    p: _Params,
    ctes: list[str],
    gate: str,
    at: str,
    origin: str,
    seq_lock: str,
    n_upd: int,
    n_ins: int,
    moves: tuple[bool, ...],
) -> str:
    """The seq lock (gated on ``gate``) and the writes after it, returning the seq."""
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
    return "WITH " + ", ".join(ctes) + " SELECT seq FROM t"
