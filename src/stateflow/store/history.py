"""History: as-of reads, change pages and the transition feed.

Every retained revision is rebuilt from the nearest snapshot at or below it plus the changes
after it (a bounded replay, see ``plan.SNAPSHOT_MAX_CHAIN``); a page of changes is read newest
first straight off each document's ``(doc_id, revision)`` key.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import orjson

from stateflow.doc.canonical import JSON
from stateflow.doc.diff import Edit, apply_edits
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict, CorruptData, CorruptStore, InvalidInput, NotFound
from stateflow.store import tree
from stateflow.store.clock import time_text
from stateflow.store.core import StoreCore
from stateflow.store.model import Change, DocKey, Document, RevisionNotFound, Transition, doc_keys
from stateflow.store.nodes import Generations, fetch_bodies, load_tree
from stateflow.store.rows import (
    CHANGE_MARK,
    decode_edits,
    decode_inline,
    decode_origin,
    decode_stored,
    directory_of,
    restrict_edit,
)
from stateflow.store.trail import TreeRef
from stateflow.store.tx import Tx

SQL_INT_MAX: Final = 2**63 - 1
"""The largest integer either database binds (a seq, a revision, a ``LIMIT`` are at most this)."""


class Reuse:
    """What a replay of one document's history keeps from one snapshot's rebuild to the next:
    the snapshot member rows decoded (by ``(name, revision)``; values are never mutated, so one
    decoded value serves every snapshot that lists the row) and the tree nodes decoded."""

    def __init__(self) -> None:
        self.members: dict[tuple[str, int], Any] = {}
        self.nodes = Generations()

    def keep(self, doc: Document) -> None:
        """After a rebuild: keep the member rows ``doc`` still holds (a later snapshot may list
        them again), not every member the history ever had, and the nodes of the trees just
        loaded (a later version of a tree shares most of them)."""
        held = doc.body or {}
        self.members = {pair: v for pair, v in self.members.items() if held.get(pair[0]) is v}
        if self.nodes.current:
            self.nodes.turn()


class History(StoreCore):
    """As-of reads, history pages and transitions."""

    def read_at(
        self,
        key: DocKey,
        *,
        revision: int | None = None,
        seq: int | None = None,
        members: Iterable[str] | None = None,
    ) -> Document:
        """The document as it was at ``revision``, or right after transition ``seq``.

        Rebuilt from the nearest snapshot plus the changes after it (a bounded replay).
        """
        self.check_schema()
        doc_keys([key], "read_at")
        if (revision is None) == (seq is None):
            raise InvalidInput("read_at takes exactly one of revision= or seq=")
        names = None if members is None else set(members)
        with self._read_tx() as tx:
            row = self._row(tx, key)
            if seq is not None:
                if seq < 0:
                    raise InvalidInput(f"seq must be ≥ 0, got {seq}")
                revision = (
                    self._revisions_before(tx, {row.doc_id: row.revision}, seq + 1)[row.doc_id] if row else 0
                )
            assert revision is not None
            current = row.revision if row else 0
            if revision < 0 or revision > current:
                raise RevisionNotFound(key, revision, current)
            if row is None or revision == 0:
                return Document(key, 0, None)
            if revision == row.revision:
                if not row.present:
                    return Document(key, revision, None, row.updated_seq)
                wanted = None if names is None else list(names)
                body = {n: v for n, _, v, _ in self._fetch(tx, key, row.doc_id, row.revision, wanted)[0]}
                return Document(key, revision, body, row.updated_seq)
            return self._rebuild(tx, key, row.doc_id, revision, names)

    def _rebuild(
        self,
        tx: Tx,
        key: DocKey,
        doc_id: int,
        revision: int,
        names: set[str] | None,
        reuse: Reuse | None = None,
    ) -> Document:
        """The document at ``revision`` from its nearest snapshot and the changes after it
        (``reuse``: what a replay keeps of the rebuilds before, see :meth:`replay`)."""
        snap, rows = snapshot_and_chain(tx, key, doc_id, revision)
        value: JSON = MISSING
        start = 0
        if snap is not None:
            start = int(snap[0])
            value = decode_stored(snap[1], f"{key} snapshot at revision {start}")
            if type(value) is list:  # a directory (schema 4): the members are rows of their own
                value = self._snapshot_members(tx, key, doc_id, start, value, names, reuse)
            if value is not None and type(value) is not dict:
                raise CorruptData(f"{key} snapshot at revision {start} is not an object")
            if value is None:
                value = MISSING
            elif names is not None:
                value = {k: v for k, v in value.items() if k in names}
        edits_by_rev = self._edits(tx, {doc_id: key}, [(doc_id, int(r), e) for r, _, e in rows], names)
        seq = None
        for rev, row_seq, _ in rows:
            try:
                value = apply_edits(value, edits_by_rev.get((doc_id, int(rev)), []))
            except Conflict as exc:
                raise CorruptData(f"{key}: change at revision {rev} does not replay: {exc}") from exc
            if names is not None and type(value) is dict:
                value = {k: v for k, v in value.items() if k in names}
            seq = int(row_seq)
        if not rows:  # the revision is the snapshot's own: its seq is its change's
            at = tx.one("SELECT seq FROM changes WHERE doc_id = ? AND revision = ?", (doc_id, revision))
            seq = None if at is None else int(at[0])
        return Document(key, revision, None if value is MISSING else value, seq)

    def replay(self, key: DocKey, doc_id: int, first: int, last: int) -> Iterator[Document]:
        """Every revision from ``first`` to ``last`` in order, each what ``read_at`` rebuilds —
        the nearest snapshot at or below it plus the changes after it — and the first that does
        not rebuild raises what ``read_at`` would. A revision whose nearest snapshot is its
        predecessor's is its predecessor with its own change applied, which is the same
        replay without doing it again: a rebuild per revision decoded the snapshot's members
        (a large member's whole tree) once per revision, so ``stateflow check`` of a document
        cost its history times its size. A snapshot's member row is decoded once while the
        revisions replayed still hold it, however many snapshots list it (values are never
        mutated, so one decoded value serves them all). Each part between two snapshots is
        read in one read transaction: the caller reads nothing else while it holds one."""
        reuse = Reuse()
        start = first
        while start <= last:
            with self._read_tx() as tx:
                end = last  # (the last revision of this part: the one before the next snapshot)
                if start < last:
                    following = tx.one(
                        "SELECT min(revision) FROM snapshots WHERE doc_id = ? AND revision > ? AND revision <= ?",
                        (doc_id, start, last),
                    )
                    end = last if following is None or following[0] is None else int(following[0]) - 1
                doc = self._rebuild(tx, key, doc_id, start, None, reuse)
                reuse.keep(doc)
                yield doc
                rows = (
                    tx.all(
                        "SELECT revision, seq, edits FROM changes WHERE doc_id = ? AND revision > ? "
                        "AND revision <= ? ORDER BY revision",
                        (doc_id, start, end),
                    )
                    if start < end
                    else []
                )
                value: JSON = MISSING if doc.body is None else doc.body
                chain = iter(rows)
                for expected in range(start + 1, end + 1):
                    row = next(chain, None)
                    if row is None or int(row[0]) != expected:  # (revisions are unique and in order)
                        raise CorruptData(f"{key}: the change chain to revision {expected} has gaps")
                    edits = self._edits(tx, {doc_id: key}, [(doc_id, expected, row[2])], None)
                    try:
                        value = apply_edits(value, edits.get((doc_id, expected), []))
                    except Conflict as exc:
                        raise CorruptData(
                            f"{key}: change at revision {expected} does not replay: {exc}"
                        ) from exc
                    yield Document(key, expected, None if value is MISSING else value, int(row[1]))
            start = end + 1

    def _snapshot_members(
        self,
        tx: Tx,
        key: DocKey,
        doc_id: int,
        start: int,
        directory: list[Any],
        names: set[str] | None,
        reuse: Reuse | None = None,
    ) -> dict[str, Any]:
        """The members a snapshot's directory lists (only ``names``, when given), in order;
        ``reuse``: member rows and nodes decoded before, added to here."""
        what = f"{key} snapshot at revision {start}"
        wanted = [(n, r) for n, r in directory_of(directory, key, start) if names is None or n in names]
        found: dict[tuple[str, int], Any] = {} if reuse is None else reuse.members
        unread = [pair for pair in wanted if pair not in found]
        for name, revision, raw, root in snapshot_member_rows(tx, doc_id, unread, self.member_pairs_sql):
            named = f"{what} member {name!r}"
            value = (
                decode_stored(raw, named)
                if root is None
                else load_tree(tx, bytes(root), named, None if reuse is None else reuse.nodes)
            )
            found[(name, int(revision))] = value
        body: dict[str, Any] = {}
        for name, revision in wanted:
            if (name, revision) not in found:
                raise CorruptData(
                    f"stored {what} is corrupt: member {name!r} (revision {revision}) is missing"
                )
            body[name] = found[(name, revision)]
        return body

    def history(
        self,
        keys: Iterable[DocKey],
        *,
        limit: int = 100,
        before_seq: int | None = None,
        members: Iterable[str] | None = None,
        shallow: bool = False,
    ) -> list[Change]:
        """Changes of these documents, newest first (at most ``limit``, seq < ``before_seq``).

        ``members`` limits the edits returned to those top-level members (the others are not
        read); every change is still listed, possibly with no edits. ``shallow``: an edit's
        value kept as a tree (over ``plan.TREE_MIN`` bytes) comes back as an empty container of
        its kind, read from the tree's root node alone — the edits then say what kind of value
        each sets (what a change's ``keys`` projection needs), not what it holds.
        """
        self.check_schema()
        keys = doc_keys(keys, "history")
        if limit <= 0 or not keys:
            return []
        limit = min(limit, SQL_INT_MAX)  # (no document has more changes; SQL binds no more)
        names = None if members is None else set(members)
        with self._read_tx() as tx:
            ids = {}
            revisions: dict[DocKey, int] = {}
            rows_of = self._rows(tx, keys)
            for key in keys:
                row = rows_of.get(key)
                if row is not None:
                    ids[row.doc_id] = key
                    revisions[key] = row.revision
            if not ids:
                return []
            # Each document's newest changes come straight off its (doc_id, revision) key — in one
            # document, revision order is seq order — so no query sorts a long history; only
            # the few rows taken per document are merged by seq.
            tops = {doc_id: revisions[key] for doc_id, key in ids.items()}
            written = {rows_of[key].updated_seq or 0 for key in ids.values()}
            if before_seq is not None and max(written) >= before_seq:  # else: the current tops
                tops = self._revisions_before(tx, tops, before_seq)
            doc_ids = [doc_id for doc_id, top in tops.items() if top > 0]
            rows: list[tuple[Any, ...]] = []
            for start in range(0, len(doc_ids), 50):  # bounded statement size
                part = doc_ids[start : start + 50]
                newest, params = newest_changes(
                    "seq, doc_id, revision, paths, edits", [(d, tops[d]) for d in part], limit
                )
                rows += tx.all(
                    "SELECT c.seq, t.at, t.origin, c.doc_id, c.revision, c.paths, c.edits "
                    f"FROM ({newest}) c JOIN transitions t ON t.seq = c.seq "
                    "ORDER BY c.seq DESC, c.doc_id LIMIT ?",
                    [*params, limit],
                )
            if len(doc_ids) > 50:
                rows = sorted(rows, key=lambda r: (-int(r[0]), int(r[3])))[:limit]
            rows = _with_paths(tx, rows)
            edits = self._edits(tx, ids, [(int(r[3]), int(r[4]), r[6]) for r in rows], names, shallow=shallow)
            return [self._change(r, ids[int(r[3])], edits) for r in rows]

    def _revisions_before(self, tx: Tx, tops: dict[int, int], before_seq: int) -> dict[int, int]:
        """For each document (id → its current revision), the newest revision written before
        ``before_seq`` (0: none), by binary search over its revisions (seq grows with revision
        in one document) — a handful of key lookups however deep the page. Revisions whose
        history was pruned are skipped over: each probe takes the first change at or after the
        revision it asks for. (PostgreSQL runs the same search in a function, in one call.)"""
        found: dict[int, int] = {}
        for doc_id, revision in tops.items():
            low, high = 0, revision  # revision `low` is before, every one above `high` is not
            while low < high:
                middle = (low + high + 1) // 2
                probe = tx.one(
                    "SELECT revision, seq FROM changes WHERE doc_id = ? AND revision >= ? "
                    "ORDER BY revision LIMIT 1",
                    (doc_id, middle),
                )
                if probe is None or int(probe[1]) >= before_seq:
                    high = middle - 1
                else:
                    low = int(probe[0])  # >= middle
            found[doc_id] = low
        return found

    def transitions(self, *, after_seq: int = 0, limit: int = 100) -> list[Transition]:
        """Transitions with seq > ``after_seq`` in seq order, each with all its changes."""
        self.check_schema()
        with self._read_tx() as tx:
            if self.transition_keys:
                heads = tx.all(
                    "SELECT seq, at, origin, changed FROM transitions WHERE seq > ? ORDER BY seq LIMIT ?",
                    (after_seq, limit),
                )
                rows = listed_changes(tx, heads)
            else:
                heads = tx.all(
                    "SELECT seq, at, origin FROM transitions WHERE seq > ? ORDER BY seq LIMIT ?",
                    (after_seq, limit),
                )
                rows = tx.all(_TRANSITION_CHANGES, (heads[0][0], heads[-1][0])) if heads else []
            if not heads:
                return []
            rows = _with_paths(tx, rows)
            keys = {int(r[3]): DocKey(r[6], r[7]) for r in rows}
            edits = self._edits(tx, keys, [(int(r[3]), int(r[4]), r[8]) for r in rows], None)
            by_seq: dict[int, list[Change]] = {}
            for r in rows:
                by_seq.setdefault(int(r[0]), []).append(self._change(r, keys[int(r[3])], edits))
            return [
                Transition(int(h[0]), time_text(h[1]), decode_origin(h[2], h[0]), by_seq.get(int(h[0]), []))
                for h in heads
            ]

    def _edits(
        self,
        tx: Tx,
        keys: dict[int, DocKey],
        changes: list[tuple[int, int, Any]],
        names: set[str] | None,
        *,
        trees: bool = True,
        shallow: bool = False,
        stored: list[tuple[int, int, str, Any]] | None = None,
    ) -> dict[tuple[int, int], list[Edit]]:
        """The edits of each ``(doc_id, revision, inline edits or None)``: whole-document edits
        first, then per member (see ``INLINE_EDITS_MAX``). A value kept as a tree is read
        whole, or with ``trees=False`` left as its :class:`~stateflow.store.trail.TreeRef`.
        ``stored``: the ``change_edits`` rows of these changes (whole-document edits first;
        for ``names`` only), already read (``asof.statement``)."""
        out: dict[tuple[int, int], list[Edit]] = {}
        if not changes or (names is not None and not names):
            return out
        apart: list[tuple[int, int]] = []
        marks: list[tuple[int, int]] = []
        for doc_id, revision, inline in changes:
            if inline is None:
                apart.append((doc_id, revision))
                continue
            if inline == CHANGE_MARK:  # (the body its row holds at this revision)
                marks.append((doc_id, revision))
                continue
            what = f"{keys.get(doc_id, doc_id)} change at revision {revision}"
            for member, raw in decode_inline(inline, what):
                if names is not None and member != "" and member not in names:
                    continue
                edits = decode_edits(raw, what)
                if member == "" and names is not None:
                    edits = [restrict_edit(e, names) for e in edits]
                out.setdefault((doc_id, revision), []).extend(edits)
        for doc_id, revision, member, raw in _apart_rows(tx, apart, names) if stored is None else stored:
            what = f"{keys.get(int(doc_id), doc_id)} change at revision {revision}"
            if shallow:
                resolve: Any = functools.partial(_tree_shape, tx, what)
            else:
                resolve = functools.partial(_tree_value, tx, what) if trees else TreeRef
            edits = decode_edits(raw, what, resolve)
            if member == "" and names is not None:
                edits = [restrict_edit(e, names) for e in edits]
            out.setdefault((int(doc_id), int(revision)), []).extend(edits)
        if marks:
            for (doc_id, revision), body in resolve_marks(tx, keys, marks).items():
                edit = Edit((), body)
                out[(doc_id, revision)] = [edit if names is None else restrict_edit(edit, names)]
        return out

    def _change(self, r: tuple[Any, ...], key: DocKey, edits: dict[tuple[int, int], list[Edit]]) -> Change:
        seq = int(r[0])
        return Change(
            seq=seq,
            at=time_text(r[1]),
            origin=decode_origin(r[2], seq),
            key=key,
            revision=int(r[4]),
            edits=edits.get((int(r[3]), int(r[4])), []),
            paths=decode_stored(r[5], f"{key} paths at revision {r[4]}"),
        )


def resolve_marks(
    tx: Tx, keys: dict[int, DocKey], marks: Sequence[tuple[int, int]]
) -> dict[tuple[int, int], dict[str, Any]]:
    """The body each marked change ``(doc_id, revision)`` stands for (``rows.CHANGE_MARK``:
    the creating change of a whole-form document): its document's ``documents.body``, which
    must be at that revision — a mark is replaced by its copy before any write moves the row
    past it, so a row elsewhere (or not in whole form) is damage, ``CorruptData``. Read in the
    caller's transaction, one statement for up to 500 documents."""
    ids = sorted({doc_id for doc_id, _ in marks})
    rows: dict[int, tuple[int, Any]] = {}
    for start in range(0, len(ids), 500):  # bounded statement size
        part = ids[start : start + 500]
        for doc_id, revision, body in tx.all(
            f"SELECT doc_id, revision, body FROM documents WHERE doc_id IN ({','.join('?' * len(part))})",
            part,
        ):
            rows[int(doc_id)] = (int(revision), body)
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for doc_id, revision in marks:
        what = f"{keys.get(doc_id, doc_id)} change at revision {revision}"
        found = rows.get(doc_id)
        if found is None or found[0] != revision or found[1] is None:
            held = (
                "no row"
                if found is None
                else f"a row at revision {found[0]}" + ("" if found[1] is not None else " in member form")
            )
            raise CorruptData(
                f"stored {what} is corrupt: it keeps the mark of the whole body its document's row holds "
                f"at that revision (whole form), but the document has {held}: the mark was not replaced "
                "by its copy when the document moved on"
            )
        body = decode_stored(found[1], f"{keys.get(doc_id, doc_id)} body")
        if type(body) is not dict:
            raise CorruptData(f"stored {what} is corrupt: the body its mark stands for is not an object")
        out[(doc_id, revision)] = body
    return out


def _apart_rows(tx: Tx, apart: list[tuple[int, int]], names: set[str] | None) -> Iterator[tuple[Any, ...]]:
    """The ``change_edits`` rows ``(doc_id, revision, member, edits)`` of the changes ``apart``
    (``(doc_id, revision)``), only ``names``' where given, each change's in the order written
    (``ord``: whole-document edits first, then the members as first touched, which is the order
    a replay must add new members in; rows from before schema 37 all 0: by name)."""
    for start in range(0, len(apart), 200):  # bounded statement size
        part = apart[start : start + 200]
        where = " OR ".join("(doc_id = ? AND revision = ?)" for _ in part)
        params: list[Any] = [v for pair in part for v in pair]
        if names is not None:
            where = f"({where}) AND (member = '' OR member IN ({','.join('?' * len(names))}))"
            params.extend(sorted(names))
        yield from tx.all(
            f"SELECT doc_id, revision, member, edits FROM change_edits WHERE {where} "
            "ORDER BY doc_id, revision, ord, member",
            params,
        )


def snapshot_member_rows(
    tx: Tx, doc_id: int, pairs: Sequence[tuple[str, int]], whole: str | None = None
) -> Iterator[tuple[Any, ...]]:
    """The ``snapshot_members`` rows ``(name, revision, body, root)`` of one document's
    ``(name, revision)`` pairs: by ``whole`` (``Backend.member_pairs_sql``) in one statement, or
    as lists of pairs the rows are joined to, each pair a lookup of the table's key (``CROSS
    JOIN`` keeps SQLite from turning the join round). Pairs OR-ed in a WHERE were tested against
    every row of the document on SQLite, so reading a snapshot of n members cost n²."""
    if whole is not None:
        if pairs:
            yield from tx.all(whole, [[n for n, _ in pairs], [r for _, r in pairs], doc_id])
        return
    for first in range(0, len(pairs), _SPANS_MAX):
        part = pairs[first : first + _SPANS_MAX]
        size = _spans_size(len(part))
        params: list[Any] = [v for pair in part for v in pair]
        params += ("", -1) * (size - len(part))  # no row: the statement's text is one of a few
        yield from tx.all(_pairs_statement(size), [*params, doc_id])


@functools.lru_cache(maxsize=16)
def _pairs_statement(size: int) -> str:
    """The snapshot member rows of ``size`` ``(name, revision)`` pairs of one document."""
    pairs = ",".join(["(?, ?)"] * size)
    return (
        "SELECT m.name, m.revision, m.body, m.root "
        f"FROM (VALUES {pairs}) k CROSS JOIN snapshot_members m "
        "WHERE m.doc_id = ? AND m.name = k.column1 AND m.revision = k.column2"
    )


def _with_paths(tx: Tx, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Change rows (doc_id, revision and paths at 3, 4 and 5) with the paths kept apart in
    ``change_paths`` (a NULL ``paths``: SQLite's rows too long for their page) filled in."""
    apart = [(r[3], r[4]) for r in rows if r[5] is None]
    if not apart:
        return rows
    found: dict[tuple[int, int], Any] = {}
    for start in range(0, len(apart), 200):  # bounded statement size
        part = apart[start : start + 200]
        where = " OR ".join("(doc_id = ? AND revision = ?)" for _ in part)
        for doc_id, revision, paths in tx.all(
            f"SELECT doc_id, revision, paths FROM change_paths WHERE {where}",
            [v for pair in part for v in pair],
        ):
            found[(int(doc_id), int(revision))] = paths
    return [r if r[5] is not None else (*r[:5], found.get((int(r[3]), int(r[4]))), *r[6:]) for r in rows]


def _tree_value(tx: Tx, what: str, root: bytes) -> Any:
    """An edit's value held as a tree (``[path, null, root]`` in stored edits)."""
    return load_tree(tx, root, what)


def _tree_shape(tx: Tx, what: str, root: bytes) -> Any:
    """An edit's value held as a tree as an empty container of its kind: only its root node
    is read (a tree holds an object or an array, and its root says which)."""
    try:
        data = tree.node(root, lambda ids: fetch_bodies(tx, ids))
        kind, _ = tree.shape(data)
    except CorruptData as exc:
        raise type(exc)(f"stored {what} is corrupt: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptStore(f"stored {what} is corrupt: node {root.hex()}: {exc!r}") from exc
    return [] if kind == "array" else {}


def newest_changes(columns: str, tops: Sequence[tuple[int, int]], limit: int) -> tuple[str, list[Any]]:
    """A query of each document's newest ``limit`` changes at or below its top revision
    (``tops``: doc_id and revision), one ``LIMIT`` per document on the ``(doc_id, revision)``
    key, and its parameters (keep ``tops`` short: one subquery each)."""
    sql = " UNION ALL ".join(
        f"SELECT * FROM (SELECT {columns} FROM changes WHERE doc_id = ? "
        f"AND revision <= ? ORDER BY revision DESC LIMIT ?) AS d{n}"
        for n in range(len(tops))
    )
    return sql, [p for doc_id, top in tops for p in (doc_id, top, limit)]


def whole_chain(
    key: DocKey, rows: list[tuple[Any, ...]], after: int, revision: int, *, snapshotted: bool
) -> list[tuple[Any, ...]]:
    """``rows`` — the ``(revision, seq, edits)`` changes after ``after`` up to ``revision`` —
    if they are all there; a revision older than the retained history is ``NotFound``, a gap
    in the chain corrupt."""
    if len(rows) != revision - after:
        if not snapshotted and (not rows or int(rows[0][0]) > 1):
            raise NotFound(f"{key} revision {revision} predates the retained history")
        raise CorruptData(f"{key}: the change chain to revision {revision} has gaps")
    return rows


_SNAPSHOT_AND_CHAIN = (
    "WITH s AS (SELECT revision, body FROM snapshots WHERE doc_id = ? AND revision <= ? "
    "ORDER BY revision DESC LIMIT 1) "
    "SELECT 0, revision, NULL, body FROM s UNION ALL "
    "SELECT 1, revision, seq, edits FROM changes WHERE doc_id = ? "
    "AND revision > coalesce((SELECT revision FROM s), 0) AND revision <= ? ORDER BY 1, 2"
)


def snapshot_and_chain(
    tx: Tx, key: DocKey, doc_id: int, revision: int
) -> tuple[tuple[Any, ...] | None, list[tuple[Any, ...]]]:
    """``(revision, body)`` of the newest snapshot at or before ``revision`` (None: there is
    none) and the ``(revision, seq, edits)`` changes after it up to ``revision``, in order
    (checked by :func:`whole_chain`) — an as-of read's two reads of history in one statement
    (on PostgreSQL each statement is a round trip)."""
    snap: tuple[Any, ...] | None = None
    rows: list[tuple[Any, ...]] = []
    for kind, rev, seq, raw in tx.all(_SNAPSHOT_AND_CHAIN, (doc_id, revision, doc_id, revision)):
        if kind == 0:
            snap = (rev, raw)
        else:
            rows.append((rev, seq, raw))
    after = 0 if snap is None else int(snap[0])
    return snap, whole_chain(key, rows, after, revision, snapshotted=snap is not None)


_TRANSITION_CHANGES: Final = (
    "SELECT c.seq, t.at, t.origin, c.doc_id, c.revision, c.paths, d.state, d.subject, c.edits "
    "FROM changes c JOIN transitions t ON t.seq = c.seq "
    "JOIN documents d ON d.doc_id = c.doc_id WHERE c.seq >= ? AND c.seq <= ? "
    "ORDER BY c.seq, d.state, d.subject"
)
"""The changes of the transitions in a seq range, through the index of changes by seq."""


def listed_changes(tx: Tx, heads: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The change rows of ``_TRANSITION_CHANGES`` for a page of transitions that list their
    changes' keys (``heads``: seq, at, origin and ``changed`` of every transition in a seq
    range, in order; see ``transition_keys``).

    The keys are decoded here, and each document's changes read as one range of its
    ``(doc_id, revision)`` key, from the lowest revision the page lists to the highest: in one
    document revision order is seq order, so every change in that range belongs to a
    transition of the page (JSON read in SQL cost more per key than the old index of changes by
    seq did per change). A key whose change was pruned or purged since finds no row."""
    low: dict[int, int] = {}  # each document's first and last revision the page lists
    high: dict[int, int] = {}
    try:  # (one decode for the page: a call per transition cost more than the parse)
        for keys in orjson.loads("[" + ",".join([h[3] for h in heads if h[3] is not None]) + "]"):
            for doc_id, revision in keys:
                low.setdefault(doc_id, revision)
                high[doc_id] = revision  # (heads come in seq order, so revisions come in order)
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise _corrupt_keys(heads) from exc
    found = {int(h[0]): h for h in heads}
    listed = list(low)
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(listed), _SPANS_MAX):
        part = listed[start : start + _SPANS_MAX]
        size = _spans_size(len(part))
        params: list[int] = []
        for doc_id in part:
            params += (doc_id, low[doc_id], high[doc_id])
        params += (0, 1, 0) * (size - len(part))  # an empty range: the statement's text is one of a few
        for seq, doc_id, revision, paths, state, subject, edits in tx.all(_spans_statement(size), params):
            owner = found.get(seq)
            if owner is not None:  # (a change whose transition is missing is damage: check names it)
                rows.append((seq, owner[1], owner[2], doc_id, revision, paths, state, subject, edits))
    if len(listed) > _SPANS_MAX:
        rows.sort(key=lambda r: (r[0], r[6], r[7]))
    return rows


_SPANS_MAX: Final = 256
"""Documents read by one statement of :func:`listed_changes` (three parameters each)."""


def _spans_size(n: int) -> int:
    """The number of ranges a statement for ``n`` takes: 4, a multiple of 8 up to 64, then the
    next power of two (a dozen statement texts, each prepared once per connection)."""
    if n <= 4:
        return 4
    return -(-n // 8) * 8 if n <= 64 else 1 << (n - 1).bit_length()


def _corrupt_keys(heads: list[tuple[Any, ...]]) -> CorruptData:
    """The damage :func:`listed_changes` met, naming the first transition whose keys are not
    ``[[doc_id, revision], …]``."""
    for head in heads:
        try:
            for doc_id, revision in orjson.loads(head[3] or "[]"):
                if type(doc_id) is not int or type(revision) is not int:
                    raise TypeError(doc_id, revision)
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return CorruptData(f"transition {head[0]}: its changes' keys are corrupt: {head[3]!r}")
    return CorruptData(f"transitions {heads[0][0]}–{heads[-1][0]}: their changes' keys are corrupt")


@functools.lru_cache(maxsize=16)
def _spans_statement(size: int) -> str:
    """The changes (seq, doc_id, revision, paths, state, subject, edits) in ``size`` ranges of
    revisions ``(doc_id, low, high)``, in transition order."""
    ranges = ",".join(["(?, ?, ?)"] * size)
    return (
        "SELECT c.seq, c.doc_id, c.revision, c.paths, d.state, d.subject, c.edits "
        f"FROM (VALUES {ranges}) k JOIN documents d ON d.doc_id = k.column1 "
        "JOIN changes c ON c.doc_id = k.column1 AND c.revision BETWEEN k.column2 AND k.column3 "
        "ORDER BY c.seq, d.state, d.subject"
    )
