"""PostgreSQL: the common optimistic commits as one prepared plain statement per shape.

``stateflow_commit`` (the PL/pgSQL commit function) takes any commit as one ``json`` payload;
for the few shapes nearly every write has — documents that exist, written by rewriting and
adding members, checked against shared and absent keys — the same checks, locks and rows are
one statement of data-modifying CTEs instead, its parameters typed (no ``json`` to parse, no
PL/pgSQL expressions to set up, one plan instead of six statements' start-ups). The shape (the
counts of each kind of key and row, and which documents' ``present`` moves) names the
statement; every other commit (claims, tree nodes, deletes,
documents gone, edits apart, snapshots, more rows than ``MAX_ROWS``) goes through the function.

Order, as the function's: the absent keys checked (no lock), the shared rows locked ``FOR
SHARE`` with their revision, the written rows ``FOR UPDATE`` with theirs (both in the order the
client gives, ``rows.lock_order``), then the seq lock, then the writes. The checks are one
conjunction in the seq lock's ``WHERE`` — ``NOT EXISTS`` per absent key, then ``EXISTS`` of
each row locked (a sublink ``FOR SHARE`` or ``FOR UPDATE``), in that order: uncorrelated, so
each is an InitPlan of the same cost, and the planner keeps them in the order written as one
one-time filter, evaluated left to right before the lock; a row's sublink runs (and locks it)
only when the checks before it passed — so a failed check stops them: no transition, no row
written, no seq returned (the caller's None, as the function's NULL; the creating statement,
below, takes them the same way). A locked row is found by its id (the primary key): a
document's id never names another key (ids come from a sequence, no writer moves a row's key, a key deleted and created
again has a new id), so the id and the revision check what the key would, without the key's
text index and parameters — as long as the database is not put back under a running store (a
restore or a failover that rewinds the ids' sequence: restart every store process then,
``docs/operations.md``). A revision is in its lock's WHERE: under READ COMMITTED a row changed
meanwhile is re-checked on its newest version (EvalPlanQual) and found wanting. The writes all
join the transition's CTE: none runs without it (the creating statement's, below, of one new
row: that row's insert, as the transition's own).

A commit whose documents are all new (a LangGraph checkpoint, a new item or subject) inserts
their rows with their final values, so only after the seq lock (``updated_seq`` is the seq):
the absent keys checked (with several new rows, their keys among them) and the shared rows
locked as above, then the seq lock, then the seq (``nextval``), then the rows inserted, and the transition, members
and changes written with them. A key committed by another writer since this one looked writes
nothing: one new row's insert fails on the key's constraint (``KEY_TAKEN``: no transition, no
row; the seq taken stays unused — a gap, as after any rolled-back commit; nothing reads seqs as
dense), and the caller takes it as None; with several new rows such a key fails the check before
the seq lock instead. Several rows are inserted ``ON CONFLICT (state, subject) DO NOTHING``, the
transition gated on every one inserted: some keys of several committed while the statement
waited for the seq lock are an error on purpose (``TAKEN_MEANWHILE``), the rows inserted rolled
back with it. The
function inserts new rows before it takes the seq lock: a key it holds uncommitted while it
waits for the seq lock this statement holds is a lock cycle, which ``lock_timeout`` — set only once the seq lock
is held — ends after ``NEW_KEY_WAIT``, not the deadlock check after ``deadlock_timeout``. The
caller's None either way; the locked path decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Final

from stateflow.store.counting import Moved, encoded, subject_kind
from stateflow.store.migrations import SCHEMA_VERSION
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
    """A commit as its shape's statement (``statement``) and its parameters; ``slow()`` gives
    the same commit as the commit function's parameters (where the fast statement is not sent: a
    group's transaction, the async store's bridge)."""

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
    created: Sequence[tuple[DocKey, int]] = (),
) -> tuple[Shape, list[bytes | None]] | None:
    """The commit's shape and its statement's parameters (text or bytes, as ``statement``'s
    formats say), or None where the commit is not one of the fast shapes. ``created``: the rows
    it creates, in the lock order — then every row it writes."""
    absent: list[bytes | None] = []
    share: list[bytes | None] = []
    for key, row in shared:
        if not row.doc_id:
            absent += (key.state.encode(), key.subject.encode())
        else:
            share += (b"%d" % row.doc_id, b"%d" % row.revision)
    # several new rows' keys are checked absent before the seq lock too: a key another process
    # created since this one looked ends the commit there, not in the error on purpose after the
    # seq lock (``_creating``); one new row's conflict is a plain None there, not worth the probe
    checked = created if len(created) > 1 else ()
    for key, _doc_id in checked:
        absent += (key.state.encode(), key.subject.encode())
    lock: list[bytes | None] = []  # (rows of documents that exist: key, id and revision)
    if not created:
        for _key, row in locked:
            lock += (b"%d" % row.doc_id, b"%d" % row.revision)
    moved: Moved = {}  # (the counters' deltas: the transition's ``counted``)
    upd: list[bytes | None] = []
    ins: list[bytes | None] = []
    docs: list[bytes | None] = []
    moves: list[bool] = []
    for p in plans:
        d = p.document
        if not p.present or p.deletes or p.nodes or p.edits or p.inline is None or p.snapshot or d is None:
            return None
        flips = p.present != p.was_present
        state = ""
        if flips or p.inserts:  # (counted: a document made present — new, or 0 -> 1 — and members added)
            written = _key_of(p.doc_id, locked, created)
            if written is None:
                return None
            state = written.state
            if flips:
                counter = (state, "kind", subject_kind(written.subject))
                moved[counter] = moved.get(counter, 0) + 1
        for body, revision, size, outline, root, doc_id, name in p.updates:
            upd += (
                body,
                b"%d" % revision,
                b"%d" % size,
                outline,
                root,
                scalar_of(body, size),
                b"%d" % doc_id,
                name.encode(),
            )
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
                scalar_of(body, size),
            )
            counter = (state, "member", name)
            moved[counter] = moved.get(counter, 0) + 1
        docs += (b"%d" % p.doc_id, b"%d" % p.revision, p.paths, p.inline, b"%d" % d.revision)
        if flips:
            docs.append(b"1" if d.present else b"0")
        moves.append(flips)
        docs += (
            b"%d" % d.snapshot_revision,
            b"%d" % d.bytes_since_snapshot,
            b"%d" % d.body_size,
            b"%d" % d.next_position,
        )
    shape = (
        len(absent) // 2 - len(checked),
        len(share) // 2,
        len(lock) // 2,
        len(created),
        len(upd) // _UPD_FIELDS,
        len(ins) // _INS_FIELDS,
        tuple(moves),
    )
    if not moves or not (lock or created) or max(shape[:6]) > MAX_ROWS or len(moves) > MAX_ROWS:
        return None
    text = encoded(moved)
    counted = [] if text is None else [text.encode()]
    if created:
        return _creating_values(absent, share, created, plans, ins, at, origin, seq_lock, counted, shape)
    return shape, [at.encode(), origin, seq_lock, *absent, *share, *lock, *counted, *upd, *ins, *docs]


_UPD_FIELDS: Final = 8  # (a rewritten member row's parameters, ``_writes``)
_INS_FIELDS: Final = 9  # (an added member row's, ``_member_row``)
SCALAR_MAX: Final = 1048576
"""The largest member body ``scalar`` holds (bigger ones are trees or past what ``jsonb`` takes)."""


def scalar_of(body: bytes, size: int) -> bytes | None:
    """``members.scalar`` of a member row: its body where it is a scalar ``jsonb`` can hold —
    inline (a tree's body is empty), up to 1 MiB, not an object or array (a canonical body's
    first byte, with bit 5 set, is ``{`` only for ``[`` and ``{``), no escaped NUL — else None.
    The server's ``stateflow_scalar`` is the rule (the write functions set the column by it,
    ``stateflow check`` compares every row with it); the fast statements take the value as a
    parameter, so no statement sets up the rule's expression (schema 40)."""
    if size > SCALAR_MAX or not body or body[0] | 32 == 123 or b"\\u0000" in body:
        return None
    return body


def _key_of(
    doc_id: int, locked: Sequence[tuple[DocKey, DocRow]], created: Sequence[tuple[DocKey, int]]
) -> DocKey | None:
    """The key of the written document ``doc_id`` (a few of them: looked up only for a commit
    that moves a counter)."""
    for key, made in created:
        if made == doc_id:
            return key
    for key, row in locked:
        if row.doc_id == doc_id:
            return key
    return None


def _creating_values(
    absent: list[bytes | None],
    share: list[bytes | None],
    created: Sequence[tuple[DocKey, int]],
    plans: Sequence[WritePlan],
    ins: list[bytes | None],
    at: str,
    origin: bytes,
    seq_lock: bytes,
    counted: list[bytes],
    shape: Shape,
) -> tuple[Shape, list[bytes | None]] | None:
    """A creating commit's parameters: each new row with its final values, in the lock order,
    then the members and each document's change."""
    by_id = {p.doc_id: p for p in plans}
    if len(by_id) != len(created) or shape[4]:  # (a new document has no member to rewrite)
        return None
    rows: list[bytes | None] = []
    for key, doc_id in created:
        p = by_id.get(doc_id)
        d = p.document if p is not None else None
        if d is None:
            return None
        rows += (
            b"%d" % doc_id,
            key.state.encode(),
            key.subject.encode(),
            b"%d" % d.revision,
            b"%d" % d.snapshot_revision,
            b"%d" % d.bytes_since_snapshot,
            b"%d" % d.body_size,
            b"%d" % d.next_position,
        )
    changes: list[bytes | None] = []
    for p in plans:
        changes += (b"%d" % p.doc_id, b"%d" % p.revision, p.paths, p.inline)
    return shape, [*absent, *share, at.encode(), origin, seq_lock, *counted, *rows, *ins, *changes]


class _Params:
    """A statement's ``$n`` placeholders, numbered as made, and their formats."""

    def __init__(self) -> None:
        self.formats: list[int] = []

    def __call__(self, cast: str, fmt: int = _T) -> str:
        self.formats.append(fmt)
        return f"${len(self.formats)}::{cast}"


@lru_cache(maxsize=256)
def statement(shape: Shape) -> Prepared:
    """The prepared statement for ``shape``."""
    n_absent, n_share, n_lock, n_new, n_upd, n_ins, moves = shape
    name = "stateflow_fast_" + "_".join(map(str, shape[:6])) + "_" + "".join("1" if m else "0" for m in moves)
    p = _Params()
    ctes: list[str] = []
    if n_new:
        gate = _locks(p, n_absent + (n_new if n_new > 1 else 0), n_share, 0)
        sql = _creating(p, ctes, gate, n_new, n_ins, len(moves))
    else:
        at, origin, seq_lock = p("text"), p("bytea", _B), p("bigint")
        gate = _locks(p, n_absent, n_share, n_lock)
        sql = _writes(p, ctes, gate, at, origin, seq_lock, n_upd, n_ins, moves)
    return name.encode(), sql.encode(), tuple(p.formats)


def _locks(p: _Params, n_absent: int, n_share: int, n_lock: int) -> str:
    """Every check in the lock order as one conjunction (the seq lock's one-time filter): each
    absent key's ``NOT EXISTS``, then each row to lock found by id and revision, ``EXISTS``
    over its locking sublink. Uncorrelated, each is an InitPlan of the same (zero) cost: the
    planner keeps the order written, and the filter, evaluated left to right, stops at the first
    failed check — a row is locked only when every check before it passed. Neither a CTE per
    row nor a chain of them: each was a tuplestore and a scan more to set up per execution."""
    gate = "".join(
        f" AND NOT EXISTS (SELECT FROM documents WHERE state = {p('text')} AND subject = {p('text')})"
        for _ in range(n_absent)
    )
    for n, mode in ((n_share, "SHARE"), (n_lock, "UPDATE")):
        for _ in range(n):
            gate += (
                f" AND EXISTS (SELECT FROM documents WHERE doc_id = {p('bigint')} "
                f"AND revision = {p('bigint')} FOR {mode})"
            )
    return gate


NEW_KEY_WAIT: Final = "50ms"
"""How long a creating statement waits, holding the seq lock, for a new row's key that another
writer inserted and has not committed (``lock_timeout``, set for the statement's transaction
only after the seq lock is held): that writer — the commit function, the locked path — inserted it
before taking the seq lock and now waits for it, a lock cycle the deadlock check would find
only after ``deadlock_timeout``. The statement fails instead (``LOCK_NOT_AVAILABLE``), nothing
written, and the locked path lands the write after the other."""
LOCK_NOT_AVAILABLE: Final = "55P03"
TAKEN_MEANWHILE: Final = "22012"
"""A creating statement of several rows found some of their keys created meanwhile by another
writer (``division_by_zero``, raised on purpose: the rows it did insert are rolled back with it)."""
KEY_TAKEN: Final = ("23505", "documents_state_subject_key")
"""A creating statement of one row found its key created meanwhile by another writer: the
``unique_violation`` of the key's constraint (the statement's one row, nothing written)."""


FENCE_MARK: Final = "stateflow schema version "
"""What the error of a write refused by :func:`fenced` says, before the store's version."""


def fenced(lock_id: str) -> str:
    """``lock_id`` (SQL: the seq lock's id, which every write computes to take that lock), or an
    error where the store's schema is no longer this release's: a newer release migrated it
    while this process ran, and its writes are refused, not written in a shape that schema does
    not expect. The version is ``stateflow_schema_version()``'s constant body (schema 38), which
    the planner folds: a plan holds ``lock_id`` alone and reads nothing when it runs. A migration
    defines the function again, which invalidates every plan that folded it; planned again, the
    expression is the error — raised while planning, before anything is written."""
    return (
        f"(CASE WHEN stateflow_schema_version() = '{SCHEMA_VERSION}' THEN {lock_id} "
        f"ELSE CAST('{FENCE_MARK}' || stateflow_schema_version() AS bigint) END)"
    )


def _creating(p: _Params, ctes: list[str], gate: str, n_new: int, n_ins: int, n_docs: int) -> str:
    """A commit whose documents are all new, after ``gate``'s checks: the seq lock, then the new
    rows inserted with their final values, the writes gated on every one of them inserted."""
    at, origin, seq_lock = p("text"), p("bytea", _B), p("bigint")
    counted = p("text")  # (every new document is made present: its kind's delta, at least)
    # The seq lock, then the seq and ``lock_timeout``: evaluated on the locking subquery's row,
    # so only once the seq lock is held (the wait for it stays unbounded). Where the gate fails,
    # no seq is taken.
    ctes.append(
        f"q AS MATERIALIZED (SELECT nextval('transitions_seq_seq'::regclass) AS seq, "
        f"set_config('lock_timeout', '{NEW_KEY_WAIT}', true) FROM (SELECT pg_advisory_xact_lock("
        f"({fenced(seq_lock)} << 32) | (hashtext(current_schema())::bigint & 4294967295)) WHERE true{gate}) AS x)"
    )
    rows = ", ".join(
        f"({p('bigint')}, {p('text')}, {p('text')}, {p('bigint')}, {p('bigint')}, {p('bigint')}, "
        f"{p('bigint')}, {p('bigint')})"
        for _ in range(n_new)
    )
    # inserted with ``present`` 1 (counted in the transition's ``counted``). A key that
    # exists (committed by another writer since the client looked): several rows insert nothing
    # for it (the count below); one row fails on the key's constraint (``KEY_TAKEN``), nothing
    # written (``ON CONFLICT``'s speculative insertion cost ~20,000 server instructions a write)
    taken = " ON CONFLICT (state, subject) DO NOTHING" if n_new > 1 else ""
    ctes.append(
        "n AS (INSERT INTO documents (doc_id, state, subject, revision, present, updated_seq, "
        "snapshot_revision, bytes_since_snapshot, body_size, next_position) "
        "SELECT v.id, v.st, v.su, v.r, 1, q.seq, v.sr, v.bs, v.sz, v.np "
        f"FROM q, (VALUES {rows}) AS v(id, st, su, r, sr, bs, sz, np){taken} RETURNING updated_seq)"
    )
    # several rows: the transition only where every row was inserted; none inserted: nothing
    # written (the caller's None); some of them: an error, so the ones inserted go too
    if n_new == 1:
        # one row: the transition, members and change on the insert's row (every write joins
        # ``rows_of``), the transition's insert the statement itself (no count, no CTE of its
        # own to set up and scan again)
        rows_of, seq = "n", "n.updated_seq"
        last = (
            f"INSERT INTO transitions (seq, at, origin, counted) SELECT n.updated_seq, {at}, {origin}, {counted} "
            "FROM n RETURNING seq"
        )
    else:
        rows_of, seq, last = "t", "t.seq", "SELECT seq FROM t"
        ctes.append(
            f"t AS (INSERT INTO transitions (seq, at, origin, counted) SELECT q.seq, {at}, {origin}, {counted} "
            "FROM q WHERE (SELECT "
            f"CASE count(*) WHEN {n_new} THEN true WHEN 0 THEN false ELSE count(*) / 0 = 0 END FROM n) RETURNING seq)"
        )
    if n_ins:
        _member_inserts(p, ctes, n_ins, rows_of)
    changes = [
        f"SELECT {p('bigint')}, {p('bigint')}, {seq}, {p('bytea', _B)}, {p('bytea', _B)} FROM {rows_of}"
        for _ in range(n_docs)
    ]
    ctes.append(
        f"c AS (INSERT INTO changes (doc_id, revision, seq, paths, edits) {' UNION ALL '.join(changes)})"
    )
    return "WITH " + ", ".join(ctes) + " " + last


def _member_inserts(p: _Params, ctes: list[str], n_ins: int, rows_of: str) -> None:
    """The members added, in one insert joined to ``rows_of`` (the transition's, or one new
    document's row: none, none added)."""
    rows = ", ".join(_member_row(p) for _ in range(n_ins))
    ctes.append(
        "i AS (INSERT INTO members (doc_id, name, position, revision, size, outline, body, root, scalar) "
        f"SELECT v.* FROM {rows_of}, (VALUES {rows}) AS v)"
    )


def _member_row(p: _Params) -> str:
    """One member row's values, its ``scalar`` last (:func:`scalar_of`)."""
    return (
        f"({p('bigint')}, {p('text')}, {p('bigint')}, {p('bigint')}, {p('bigint')}, {p('bytea', _B)}, "
        f"{p('bytea', _B)}, {p('bytea', _B)}, {p('bytea', _B)})"
    )


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
    # the seq lock (held to commit: seq values become visible in commit order), after every lock;
    # the counters' deltas in the transition where a document is made present or a member added
    # (no fast shape deletes one)
    counts, counted = ("", "") if not (any(moves) or n_ins) else (", counted", f", {p('text')}")
    ctes.append(
        f"t AS (INSERT INTO transitions (at, origin{counts}) SELECT {at}, {origin}{counted} "
        "FROM (SELECT pg_advisory_xact_lock("
        f"({fenced(seq_lock)} << 32) | (hashtext(current_schema())::bigint & 4294967295)) WHERE true{gate}) AS x "
        "RETURNING seq)"
    )
    for i in range(n_upd):
        body, rev, size, outline, root, scalar = (
            p("bytea", _B),
            p("bigint"),
            p("bigint"),
            p("bytea", _B),
            p("bytea", _B),
            p("bytea", _B),
        )
        ctes.append(
            f"u{i} AS (UPDATE members SET body = {body}, revision = {rev}, size = {size}, outline = {outline}, "
            f"root = {root}, scalar = {scalar} FROM t WHERE doc_id = {p('bigint')} AND name = {p('text')})"
        )
    if n_ins:
        _member_inserts(p, ctes, n_ins, "t")
    changes = []
    for i, moved in enumerate(moves):
        doc, change_rev, paths, edits, rev = (
            p("bigint"),
            p("bigint"),
            p("bytea", _B),
            p("bytea", _B),
            p("bigint"),
        )
        # (present set only where it moves: a column set is one more to write and check)
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
