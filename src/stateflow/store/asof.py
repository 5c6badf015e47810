"""An as-of path read's reads of the database in one statement.

A read ``back`` transitions into the past needs the documents' rows, the transition (their
newest changes), each document's revision right after it, the nearest snapshot at or below
that revision, the change chain after the snapshot (with the edits kept apart in
``change_edits``) and the snapshot's members the paths name. Each read depends on the one
before it; as separate statements they cost a round trip each on PostgreSQL, plus BEGIN and
COMMIT to see them in one snapshot. :func:`statement` asks for all of it at once — one
statement sees one snapshot on every backend, so it needs no explicit transaction — and
:func:`parse` sorts its rows out. The caller still decides everything from the rows as the
separate reads would (which transition, which revision, whether the chain is whole, whether
each member the snapshot's directory lists is there); where the statement's own choice of
revision or member row differs from that decision, the caller reads again the long way.
:func:`now_statement` is the same for a read of the current documents: their rows and the
members the paths name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from stateflow.store.model import DocKey
from stateflow.store.rows import DocRow, any_of

# The statement's rows: (kind, doc_id, a, b, c, name, subject, body, root), by kind:
#   DOC       a document: revision, present, updated_seq; name: its state, subject
#   NEWEST    one of a document's newest ``back + 1`` changes: revision, seq
#   TARGET    a document read in the past: its revision there, the snapshot's revision (or
#             NULL), the seq of the change that wrote that revision (or NULL)
#   SNAPSHOT  that snapshot: revision, body
#   CHAIN     a change after the snapshot up to the revision: revision, seq, inline edits
#   MEMBER    a named member as the snapshot holds it: the newest of its rows at or below the
#             snapshot's revision: revision, name, body, root
#   EDITS     the edits of a chain change kept in ``change_edits``: revision, member, edits
#   CURRENT   a named member of a document the transition left as it is now: revision, name,
#             body (only up to ``CURRENT_BODY_MAX`` bytes, else NULL), root
DOC, NEWEST, TARGET, SNAPSHOT, CHAIN, MEMBER, EDITS, CURRENT = range(8)

CURRENT_BODY_MAX = 16 * 1024
"""A current member's body comes with the statement up to this size (the member cache may
hold it already: a larger one not held there is read the long way)."""


HEAD = "WITH d AS (SELECT d.doc_id, d.revision, d.present, d.updated_seq, d.state, d.subject "
"""How both statements begin: PostgreSQL's store prepares them at their first use (their plans
take ~1 ms; psycopg would send each unprepared, planned anew, its first five times on every
pooled connection)."""


@lru_cache(maxsize=64)
def _sql(keys: int, wanted: int, names: int) -> str:
    every = any_of("(d.state = ? AND d.subject = ?)", keys)  # as ``rows.key_filter``
    some = any_of("(d.state = ? AND d.subject = ?)", wanted)
    named = ",".join("?" * names)
    chain = "x.doc_id = q.doc_id AND x.revision > coalesce(q.snap, 0) AND x.revision <= q.rev"
    blob = "CAST(NULL AS BYTEA)"  # typed: a UNION's NULL column is text on PostgreSQL otherwise
    return (
        f"{HEAD}FROM documents d WHERE {every}), "
        # each document's newest back + 1 changes: from the (back + 1)-th newest revision up
        "c AS (SELECT x.seq, x.doc_id, x.revision FROM d JOIN changes x ON x.doc_id = d.doc_id "
        "AND x.revision <= d.revision AND x.revision >= coalesce((SELECT y.revision FROM changes y "
        "WHERE y.doc_id = d.doc_id AND y.revision <= d.revision ORDER BY y.revision DESC LIMIT 1 OFFSET ?), 0)), "
        # the transition: the back-th newest of their seqs
        "t AS (SELECT seq FROM c GROUP BY seq ORDER BY seq DESC LIMIT 1 OFFSET ?), "
        # each document with paths: the revision before its first change after the transition
        "p AS (SELECT d.doc_id, (SELECT min(c.revision) FROM c, t WHERE c.doc_id = d.doc_id "
        f"AND c.seq > t.seq) - 1 AS rev FROM d WHERE {some}), "
        "n AS (SELECT d.doc_id FROM d JOIN p ON p.doc_id = d.doc_id WHERE p.rev IS NULL "
        "AND d.present = 1 AND EXISTS (SELECT 1 FROM t)), "
        "q AS (SELECT p.doc_id, p.rev, (SELECT max(s.revision) FROM snapshots s WHERE s.doc_id = p.doc_id "
        "AND s.revision <= p.rev) AS snap FROM p WHERE p.rev > 0) "
        f"SELECT {DOC}, d.doc_id, d.revision, d.present, d.updated_seq, d.state, d.subject, {blob}, {blob} "
        "FROM d "
        f"UNION ALL SELECT {NEWEST}, c.doc_id, c.revision, c.seq, NULL, NULL, NULL, NULL, NULL FROM c "
        f"UNION ALL SELECT {TARGET}, q.doc_id, q.rev, q.snap, x.seq, NULL, NULL, NULL, NULL FROM q "
        "LEFT JOIN changes x ON x.doc_id = q.doc_id AND x.revision = q.rev "
        f"UNION ALL SELECT {SNAPSHOT}, s.doc_id, s.revision, NULL, NULL, NULL, NULL, s.body, NULL FROM q "
        "JOIN snapshots s ON s.doc_id = q.doc_id AND s.revision = q.snap "
        f"UNION ALL SELECT {CHAIN}, x.doc_id, x.revision, x.seq, NULL, NULL, NULL, x.edits, NULL FROM q "
        f"JOIN changes x ON {chain} "
        f"UNION ALL SELECT {MEMBER}, m.doc_id, m.revision, NULL, NULL, m.name, NULL, m.body, m.root FROM q "
        f"JOIN snapshot_members m ON m.doc_id = q.doc_id AND m.name IN ({named}) AND m.revision = "
        "(SELECT max(y.revision) FROM snapshot_members y WHERE y.doc_id = q.doc_id AND y.name = m.name "
        "AND y.revision <= q.snap) "
        f"UNION ALL SELECT {EDITS}, e.doc_id, e.revision, NULL, NULL, e.member, NULL, e.edits, NULL FROM q "
        f"JOIN changes x ON {chain} AND x.edits IS NULL JOIN change_edits e ON e.doc_id = x.doc_id "
        f"AND e.revision = x.revision AND (e.member = '' OR e.member IN ({named})) "
        # (a document with none of the members: one row with no name, saying it was read)
        f"UNION ALL SELECT {CURRENT}, n.doc_id, m.revision, NULL, NULL, m.name, NULL, "
        f"CASE WHEN m.root IS NULL AND m.size <= {CURRENT_BODY_MAX} THEN m.body END, m.root FROM n "
        f"LEFT JOIN members m ON m.doc_id = n.doc_id AND m.name IN ({named})"
    )


@lru_cache(maxsize=64)
def _now_sql(keys: int, names: int) -> str:
    every = any_of("(d.state = ? AND d.subject = ?)", keys)  # as ``rows.key_filter``
    named = ",".join("?" * names)
    blob = "CAST(NULL AS BYTEA)"
    return (
        f"{HEAD}FROM documents d WHERE {every}) "
        f"SELECT {DOC}, d.doc_id, d.revision, d.present, d.updated_seq, d.state, d.subject, {blob}, {blob} "
        "FROM d "
        f"UNION ALL SELECT {CURRENT}, d.doc_id, m.revision, NULL, NULL, m.name, NULL, "
        f"CASE WHEN m.root IS NULL AND m.size <= {CURRENT_BODY_MAX} THEN m.body END, m.root FROM d "
        f"LEFT JOIN members m ON m.doc_id = d.doc_id AND m.name IN ({named}) WHERE d.present = 1"
    )


def now_statement(keys: Sequence[DocKey], names: Sequence[str]) -> tuple[str, list[Any]]:
    """The statement reading the rows of ``keys`` and, of each present one, the current
    members ``names`` (at least one) as ``statement`` reads them (``CURRENT``): a current path
    read in one statement, which needs no transaction to see one snapshot."""
    return _now_sql(len(keys), len(names)), [*(v for k in keys for v in k), *names]


def statement(
    keys: Sequence[DocKey], wanted: Sequence[DocKey], names: Sequence[str], back: int
) -> tuple[str, list[Any]]:
    """The statement reading ``back`` transitions into the past of ``keys``: the rows of
    every key, the history of the ``wanted`` ones (those with paths) for the members ``names``
    (at least one)."""
    params: list[Any] = [v for k in keys for v in k]
    params += [back, back]
    params += [v for k in wanted for v in k]
    params += [*names, *names, *names]
    return _sql(len(keys), len(wanted), len(names)), params


@dataclass(slots=True)
class Past:
    """What the statement read of one document's past: the revision it chose, the snapshot's
    ``(revision, body)`` (None: none at or below it), the chain's ``(revision, seq, inline
    edits)`` in revision order, the seq of the change that wrote the revision, the member rows
    (name → ``(revision, body, root)``) and the ``change_edits`` rows ``(doc_id, revision,
    member, edits)`` of the chain, whole-document edits first."""

    revision: int
    snap_revision: int | None
    at_seq: int | None
    snap: tuple[int, Any] | None = None
    chain: list[tuple[int, int, Any]] = field(default_factory=list)
    members: dict[str, tuple[int, Any, Any]] = field(default_factory=dict)
    stored: list[tuple[int, int, str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class Read:
    """The statement's rows sorted out: documents by key, the newest changes ``(seq, doc_id,
    revision)``, and what was read of each past by doc_id."""

    rows: dict[DocKey, DocRow]
    newest: list[tuple[int, int, int]]
    past: dict[int, Past]
    current: dict[int, dict[str, tuple[int, Any, Any]]]
    """the named members of each present document the transition left as it is now: name →
    ``(revision, body or None, root)``"""


def parse(found: list[tuple[Any, ...]]) -> Read:
    rows: dict[DocKey, DocRow] = {}
    newest: list[tuple[int, int, int]] = []
    past: dict[int, Past] = {}
    current: dict[int, dict[str, tuple[int, Any, Any]]] = {}
    rest: list[tuple[Any, ...]] = []
    for r in found:
        kind = r[0]
        if kind == DOC:
            # the read side of the row: a path read uses no writer's bookkeeping (zeros here)
            seq = r[4]
            rows[DocKey(r[5], r[6])] = DocRow(
                int(r[1]), int(r[2]), bool(r[3]), None if seq is None else int(seq), 0, 0, 0, 0
            )
        elif kind == NEWEST:
            newest.append((int(r[3]), int(r[1]), int(r[2])))
        elif kind == TARGET:
            past[int(r[1])] = Past(
                int(r[2]), None if r[3] is None else int(r[3]), None if r[4] is None else int(r[4])
            )
        elif kind == CURRENT:
            held = current.setdefault(int(r[1]), {})
            if r[5] is not None:
                held[str(r[5])] = (int(r[2]), r[7], r[8])
        else:
            rest.append(r)
    for kind, doc_id, revision, seq, _, name, _, body, root in rest:
        into = past[int(doc_id)]
        if kind == SNAPSHOT:
            into.snap = (int(revision), body)
        elif kind == CHAIN:
            into.chain.append((int(revision), int(seq), body))
        elif kind == MEMBER:
            into.members[str(name)] = (int(revision), body, root)
        else:
            into.stored.append((int(doc_id), int(revision), str(name), body))
    for into in past.values():
        into.chain.sort(key=lambda c: c[0])
        into.stored.sort(key=lambda e: (e[1], e[2]))  # '' (the whole document) first
    return Read(rows, newest, past, current)
