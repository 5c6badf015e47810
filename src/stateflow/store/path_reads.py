"""Path reads: what given paths meet in documents, now or as of a transition, reading only
what the paths reach.

A member kept inline is decoded whole (it is at most ``plan.TREE_MIN`` bytes, and the member
cache keeps it); a member kept as a tree is walked node by node along the path (decoded
nodes are cached by id — content-addressed, so never stale). An as-of read starts from the
member as the nearest snapshot holds it and moves each path's trail forward by the changes
after it (``trail.advance``): a change elsewhere in the member is skipped, and an edit value
kept as a tree is walked along the path, not read. Where each statement is a round trip, a read
``back`` transitions into the past takes all it reads from one statement (``store.asof``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from stateflow.doc.canonical import JSON
from stateflow.doc.diff import Edit, apply_edits
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict, CorruptData, InvalidInput, NotFound
from stateflow.store import asof, tree
from stateflow.store.cache import HeadCache, RevisionCache
from stateflow.store.history import newest_changes, snapshot_and_chain, snapshot_member_rows, whole_chain
from stateflow.store.key_positions import Positions
from stateflow.store.model import DocKey, RevisionNotFound
from stateflow.store.nodes import NodeCache, fetch_bodies, load_tree
from stateflow.store.plan import TREE_MIN
from stateflow.store.rows import DocRow, decode_stored, directory_of
from stateflow.store.trail import (
    MISSING_STEP,
    OBJECT_STEP,
    End,
    KeysEnd,
    KeysForm,
    PathT,
    SliceEnd,
    SliceForm,
    Step,
    Trail,
    TreeRef,
    advance,
    inside_keys,
    inside_slice,
    keys_form,
    slice_form,
    start,
    step_of,
)
from stateflow.store.trail import probe as probe_json
from stateflow.store.tx import Tx


@dataclass(frozen=True, slots=True)
class PathsRead:
    """One document's answer to a path read: its revision (0: never written), the seq that
    wrote that revision, and one :class:`Trail` per requested path, in order."""

    key: DocKey
    revision: int
    seq: int | None
    trails: list[Trail] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Children:
    """A container's kind and size, and a page of its children: ``(key or index, kind, size
    of a container or None, value of a scalar or a small container, else MISSING)``."""

    kind: str
    size: int
    items: list[tuple[str | int, str, int | None, JSON]]


class PathSource(Protocol):
    """What path reads use of the store they serve: its snapshot reads, its document rows, its
    member and node caches, and its history's revision search and edit decoding."""

    _cache: RevisionCache[tuple[int, str], Any]
    _heads: HeadCache
    _node_cache: NodeCache
    _positions: Positions
    holds_sql: ClassVar[str | None]
    member_pairs_sql: ClassVar[str | None]
    statement_snapshots: ClassVar[bool]

    def check_schema(self) -> None: ...

    def _read_tx(self) -> AbstractContextManager[Tx]: ...

    def _statement_tx(self) -> AbstractContextManager[Tx]: ...

    def _row(self, tx: Tx, key: DocKey) -> DocRow | None: ...

    def _rows(self, tx: Tx, keys: Sequence[DocKey]) -> dict[DocKey, DocRow]: ...

    def _revisions_before(self, tx: Tx, tops: dict[int, int], before_seq: int) -> dict[int, int]: ...

    def _fetch(
        self,
        tx: Tx,
        key: DocKey,
        doc_id: int,
        revision: int,
        names: Sequence[str] | None,
        outlines: Sequence[str] = (),
    ) -> tuple[list[tuple[str, int, Any, int]], dict[str, Any]]: ...

    def _edits(
        self,
        tx: Tx,
        keys: dict[int, DocKey],
        changes: list[tuple[int, int, Any]],
        names: set[str] | None,
        *,
        trees: bool = True,
        stored: list[tuple[int, int, str, Any]] | None = None,
    ) -> dict[tuple[int, int], list[Edit]]: ...


class PathReads:
    """Reads of paths inside documents, current and as of a transition — a collaborator of the
    store (``SqlStore.read_paths`` and ``SqlStore.children`` answer through it), given the
    store's :class:`PathSource` side."""

    def __init__(self, source: PathSource) -> None:
        self._store = source

    def read_paths(
        self,
        paths: Mapping[DocKey, Sequence[PathT]],
        *,
        seq: int | None = None,
        revisions: Mapping[DocKey, int] | None = None,
        end: End | None = None,
        back: int = 0,
    ) -> dict[DocKey, PathsRead]:
        """For each document, the :class:`Trail` of each path (document-relative: a member
        name first) in the document as it is now, or right after transition ``seq``, or at the
        given revision (``revisions``, when the caller knows it), or as the ``back``-th newest
        transition that changed any of these documents left them (``back`` equal to the number
        of such transitions retained: before the oldest of them, each document as its oldest retained
        change found it; beyond it: ``NotFound``), all from one consistent snapshot. Only the members the paths name are read, and of a tree member only the nodes
        on the way and the value at the end.

        With ``end``, each trail's value is not the value at the path's end but its ``keys``
        projection (a :class:`KeysForm`) or a range of it (a :class:`SliceForm`), read from
        as few nodes as that takes (an array's length from its root; a range's leaves)."""
        self._store.check_schema()
        if isinstance(end, SliceEnd) and not 0 <= end.start <= end.end:
            raise InvalidInput(f"a range runs from 0 ≤ start ≤ end, got [{end.start}:{end.end}]")
        if seq is not None and (type(seq) is not int or seq < 0):
            raise InvalidInput(f"seq must be an integer ≥ 0, got {seq!r}")
        if type(back) is not int or back < 0:
            raise InvalidInput(f"back must be an integer ≥ 0, got {back!r}")
        if back and (seq is not None or revisions is not None):
            raise InvalidInput("back= takes neither seq= nor revisions=")
        for given in (revisions or {}).values():
            if type(given) is not int or given < 0:
                raise InvalidInput(f"a revision is an integer ≥ 0, got {given!r}")
        for wanted in paths.values():
            for path in wanted:
                if not path or type(path[0]) is not str:
                    raise InvalidInput(f"a document path starts with a member name, got {list(path)!r}")
        if self._store.statement_snapshots and seq is None and (revisions is None or not back):
            # where a statement is a round trip: one, with no BEGIN and COMMIT around it
            done = self._back_in_one(paths, back, end) if back else self._now_in_one(paths, end, revisions)
            if done is not None:
                return done
        out: dict[DocKey, PathsRead] = {}
        with self._store._read_tx() as tx:
            rows = self._store._rows(tx, list(paths))
            if back:  # the transition's revisions come from this snapshot too: one read
                revisions = self._revisions_back(tx, rows, back)
            for key, wanted in paths.items():
                at = None if revisions is None else revisions.get(key)
                out[key] = self._paths_of(tx, key, rows.get(key), [tuple(p) for p in wanted], seq, at, end)
        return out

    def children(self, key: DocKey, path: PathT, *, start: int = 0, limit: int = 200) -> Children | None:
        """The kind, size and children ``start`` to ``start + limit`` of the container at
        ``path`` (document-relative) in the current document — reading the member's nodes down
        to those children and one node per child kept as a subtree, never a grandchild's
        subtree. None when nothing is there; a scalar has no children."""
        self._store.check_schema()
        path = tuple(path)
        if not path or type(path[0]) is not str:
            raise InvalidInput(f"a document path starts with a member name, got {list(path)!r}")
        with self._store._read_tx() as tx:
            row = self._store._row(tx, key)
            if row is None or not row.present:
                return None
            [trail] = self._current(tx, key, row, [path], whole=False)
            if not trail.reached:
                return None
            value = trail.value
            if isinstance(value, TreeRef):
                nodes = self._store._node_cache.reader(tx, f"{key} member {path[0]!r}")
                kind, size, items = tree.listing(value.root, start, limit, nodes)
                return Children(kind, size, items)
        if type(value) is dict:
            entries: list[tuple[str | int, Any]] = list(value.items())
        elif type(value) is list:
            entries = list(enumerate(value))
        else:
            return Children(trail.steps[-1].kind, 0, [])
        shown = [
            (k, trail_kind(v), len(v) if type(v) in (dict, list) else None, v)
            for k, v in entries[max(0, start) : max(0, start) + max(0, limit)]
        ]
        return Children(trail.steps[-1].kind, len(entries), shown)

    # ------------------------------------------------------------------ internals

    def _back_in_one(
        self, paths: Mapping[DocKey, Sequence[PathT]], back: int, end: End | None
    ) -> dict[DocKey, PathsRead] | None:
        """``read_paths(paths, back=back)`` from one statement (``asof.statement``), on
        PostgreSQL with no transaction around it (``_statement_tx``): one round trip instead of
        five (BEGIN with the rows, the transition, the snapshot and its chain, the members or
        edits kept apart, COMMIT). The answer is decided here as the long way decides it. None
        where that statement's rows do not settle the read — the statement chose another
        revision or member row than the checks here, a current member too large to come with
        it is not cached, or stored data read after it (no snapshot is shared by later statements)
        looks damaged; the caller then reads the long way, in one snapshot throughout."""
        wanted = [key for key, p in paths.items() if p]
        names = sorted({str(p[0]) for key in wanted for p in paths[key]})
        if not names or len(paths) > 50:
            return None
        try:
            with self._store._statement_tx() as tx:
                read = asof.parse(tx.all(*asof.statement(list(paths), wanted, names, back)))
                revisions = _back_revisions(read.rows, read.newest, back)
                out: dict[DocKey, PathsRead] = {}
                for key, asked in paths.items():
                    row, at = read.rows.get(key), revisions.get(key)
                    past = None
                    if row is not None and asked and at is not None and 0 < at < row.revision:
                        past = read.past.get(row.doc_id)
                        if past is None or past.revision != at:
                            return None
                    now = None
                    if row is not None and asked and at == row.revision and row.present:
                        now = read.current.get(row.doc_id)
                        if now is None:
                            return None
                    listed = [tuple(p) for p in asked]
                    out[key] = self._paths_of(tx, key, row, listed, None, at, end, past=past, now=now)
                return out
        except (_Unsettled, CorruptData):
            # (damage seen by a later statement — nodes, read in later snapshots — may be a
            # write in between: the long way, in one snapshot, decides)
            return None

    def _now_in_one(
        self,
        paths: Mapping[DocKey, Sequence[PathT]],
        end: End | None,
        revisions: Mapping[DocKey, int] | None = None,
    ) -> dict[DocKey, PathsRead] | None:
        """``read_paths(paths)`` — or ``read_paths(paths, revisions=…)`` where those are the
        documents' current revisions — from one statement (``asof.now_statement``: the rows and
        the members the paths name), on PostgreSQL with no transaction around it: one round trip
        instead of two or three (BEGIN with the rows, the member heads where not cached,
        COMMIT). Nodes of a tree member are read after it, by id (content-addressed: any later
        snapshot holds the same node, or none). None where its rows do not settle the read (a
        revision asked for is not the current one, a current member too large to come with it
        is not cached, or a node read after it looks damaged); the caller then reads the long
        way, in one snapshot throughout."""
        names = sorted({str(p[0]) for asked in paths.values() for p in asked})
        if not names or len(paths) > 50:
            return None
        try:
            with self._store._statement_tx() as tx:
                read = asof.parse(tx.all(*asof.now_statement(list(paths), names)))
                out: dict[DocKey, PathsRead] = {}
                for key, asked in paths.items():
                    row = read.rows.get(key)
                    at = None if revisions is None else revisions.get(key)
                    if at is not None and at != (0 if row is None else row.revision):
                        return None  # another revision: the long way reads it (or says why not)
                    now = None
                    if row is not None and asked and row.present:
                        now = read.current.get(row.doc_id)
                        if now is None:
                            return None
                    listed = [tuple(p) for p in asked]
                    out[key] = self._paths_of(tx, key, row, listed, None, at, end, now=now)
                return out
        except (_Unsettled, CorruptData):  # as in _back_in_one
            return None

    def _revisions_back(self, tx: Tx, rows: Mapping[DocKey, DocRow], back: int) -> dict[DocKey, int]:
        """Each document's revision right after the ``back``-th newest transition that changed
        any of them: the newest ``back + 1`` changes of each document hold every transition
        up to that one (seq grows with revision in one document), read straight off the
        ``(doc_id, revision)`` key in one statement."""
        tops = {row.doc_id: row.revision for row in rows.values() if row.revision > 0}
        found: list[tuple[int, int, int]] = []
        ids = sorted(tops)
        for first in range(0, len(ids), 50):  # bounded statement size
            part = ids[first : first + 50]
            newest, params = newest_changes("seq, doc_id, revision", [(d, tops[d]) for d in part], back + 1)
            found += [(int(s), int(d), int(r)) for s, d, r in tx.all(newest, params)]
        return _back_revisions(rows, found, back)

    def _paths_of(
        self,
        tx: Tx,
        key: DocKey,
        row: DocRow | None,
        paths: list[PathT],
        seq: int | None,
        at: int | None,
        end: End | None = None,
        *,
        past: asof.Past | None = None,
        now: Mapping[str, tuple[int, Any, Any]] | None = None,
    ) -> PathsRead:
        """``past``: what ``asof.statement`` read of the document's past, when it did; ``now``:
        what it read of the current members the paths name (then no statement reads them)."""
        if not paths:  # a document named only for ``back``: nothing of it is read
            return PathsRead(key, row.revision if row and at is None else at or 0, None, [])
        if row is None:
            if at:
                raise RevisionNotFound(key, at, 0)
            return PathsRead(key, 0, None, [start(p, [MISSING_STEP], MISSING) for p in paths])
        revision = row.revision
        if at is not None:
            if at > row.revision:
                raise RevisionNotFound(key, at, row.revision)
            revision = at
        elif seq is not None and (row.updated_seq is None or row.updated_seq > seq):
            revision = self._store._revisions_before(tx, {row.doc_id: row.revision}, seq + 1)[row.doc_id]
        if revision == row.revision:
            trails = self._current(tx, key, row, paths, end=end, now=now)
            return PathsRead(key, revision, row.updated_seq, trails)
        if revision == 0:
            return PathsRead(key, 0, None, [start(p, [MISSING_STEP], MISSING) for p in paths])
        trails, at_seq = self._past(tx, key, row.doc_id, revision, paths, end, past)
        return PathsRead(key, revision, at_seq, trails)

    def _current(
        self,
        tx: Tx,
        key: DocKey,
        row: DocRow,
        paths: list[PathT],
        *,
        whole: bool = True,
        end: End | None = None,
        now: Mapping[str, tuple[int, Any, Any]] | None = None,
    ) -> list[Trail]:
        if not row.present:
            return [start(p, [MISSING_STEP], MISSING) for p in paths]
        names = sorted({str(p[0]) for p in paths})
        values = self._cached_members(row, names)
        if values is not None:
            return [
                self._from_member(tx, key, p, values.get(str(p[0]), _ABSENT), whole=whole, end=end)
                for p in paths
            ]
        if row.whole:  # in whole form (never a tree): the members from its body
            members = self._store._fetch(tx, key, row.doc_id, row.revision, names)[0]
            held = {name: value for name, _, value, _ in members}
            return [
                self._from_member(tx, key, p, held.get(str(p[0]), _ABSENT), whole=whole, end=end)
                for p in paths
            ]
        if now is None:
            found = tx.all(
                f"SELECT name, revision, root FROM members WHERE doc_id = ? AND name IN "
                f"({','.join('?' * len(names))})",
                [row.doc_id, *names],
            )
        else:
            found = [(name, revision, root) for name, (revision, _, root) in now.items()]
        heads = {str(n): (int(r), None if root is None else bytes(root)) for n, r, root in found}
        values = {}
        misses = []
        for name, (revision, root) in heads.items():
            if root is not None:
                values[name] = TreeRef(root)
                continue
            hit, value = self._store._cache.lookup((row.doc_id, name), revision)
            if hit:
                values[name] = value
                continue
            body = None if now is None else now[name][1]
            if body is not None:  # read with the statement
                value = decode_stored(body, f"{key} member {name!r}")
                self._store._cache.put((row.doc_id, name), revision, value, len(body))
                values[name] = value
            elif now is not None:  # too large to come with it: no statement may read it alone
                raise _Unsettled
            else:
                misses.append(name)
        if misses:
            for name, revision, raw in tx.all(
                f"SELECT name, revision, body FROM members WHERE doc_id = ? AND name IN "
                f"({','.join('?' * len(misses))})",
                [row.doc_id, *misses],
            ):
                value = decode_stored(raw, f"{key} member {name!r}")
                self._store._cache.put((row.doc_id, str(name)), int(revision), value, len(raw))
                values[str(name)] = value
        return [
            self._from_member(tx, key, p, values.get(str(p[0]), _ABSENT), whole=whole, end=end) for p in paths
        ]

    def _cached_members(self, row: DocRow, names: list[str]) -> dict[str, Any] | None:
        """The members ``names`` of a present document at ``row``'s revision (a name absent:
        no such member) from the caches alone, with no statement; None unless the member heads
        at that revision are cached and each named member is inline (at most ``TREE_MIN``
        bytes: never a tree) with its value cached."""
        heads = self._store._heads.get(row.doc_id, row.revision)
        if heads is None:
            return None
        wanted = set(names)
        lookup = self._store._cache.lookup
        values: dict[str, Any] = {}
        for _, name, _, revision, size, _ in heads.values():
            if name not in wanted:
                continue
            if size > TREE_MIN:
                return None
            hit, value = lookup((row.doc_id, name), revision)
            if not hit:
                return None
            values[name] = value
        return values

    def _from_member(
        self, tx: Tx, key: DocKey, path: PathT, member: Any, *, whole: bool = True, end: End | None = None
    ) -> Trail:
        """The trail of ``path`` in a present document whose member ``path[0]`` is ``member``."""
        if member is _ABSENT:
            return start(path, [OBJECT_STEP, MISSING_STEP], MISSING)
        steps, value = self._probe_value(tx, key, str(path[0]), member, path[1:], whole=whole, end=end)
        return start(path, [OBJECT_STEP, *steps], value)

    def _probe_value(
        self,
        tx: Tx,
        key: DocKey,
        name: str,
        value: Any,
        path: PathT,
        *,
        whole: bool = True,
        end: End | None = None,
    ) -> tuple[list[Step], JSON]:
        if not isinstance(value, TreeRef):
            steps, found = probe_json(value, path)
            return steps, found if end is None or found is MISSING else _form(found, end)
        what = f"{key} member {name!r}"
        nodes = self._store._node_cache.reader(tx, what)

        def fetch(ids: Sequence[bytes]) -> dict[bytes, bytes]:
            return fetch_bodies(tx, ids)

        holds = self._store.holds_sql
        scan = None if holds is None else self._store._node_cache.scanner(tx, what, holds)
        try:
            steps, found = tree.probe(
                value.root,
                path,
                nodes,
                fetch,
                whole=whole and end is None,
                scan=scan,
                place=self._store._positions.position,
            )
            if end is None or found is MISSING:
                return steps, found
            if not isinstance(found, TreeRef):
                return steps, _form(found, end)
            if isinstance(end, KeysEnd):
                return steps, tree.keys_of(found.root, nodes)
            return steps, tree.slice_of(found.root, end, nodes, fetch)
        except CorruptData as exc:
            if str(exc).startswith("stored "):
                raise
            raise type(exc)(f"stored {what} is corrupt: {exc}") from exc

    def _past(
        self,
        tx: Tx,
        key: DocKey,
        doc_id: int,
        revision: int,
        paths: list[PathT],
        end: End | None = None,
        past: asof.Past | None = None,
    ) -> tuple[list[Trail], int | None]:
        """Trails at an older revision: from the nearest snapshot, moved forward by the
        changes after it (read here, or already by ``asof.statement``: ``past``)."""
        names = {str(p[0]) for p in paths}
        if past is None:
            snap, rows = snapshot_and_chain(tx, key, doc_id, revision)
        else:
            snap = past.snap
            if (snap is None) != (past.snap_revision is None):
                raise _Unsettled
            after = 0 if snap is None else snap[0]
            rows = whole_chain(key, past.chain, after, revision, snapshotted=snap is not None)
        if snap is None:
            trails = [start(p, [MISSING_STEP], MISSING) for p in paths]
        else:
            trails = self._snapshot_trails(tx, key, doc_id, int(snap[0]), snap[1], paths, names, end, past)
        edits = self._store._edits(
            tx,
            {doc_id: key},
            [(doc_id, int(r), e) for r, _, e in rows],
            names,
            trees=False,
            stored=None if past is None else past.stored,
        )

        def probe_any(value: Any, below: PathT) -> tuple[list[Step], JSON]:
            return self._probe_value(tx, key, "edit value", value, below, end=end)

        def load(value: Any) -> JSON:
            return load_tree(tx, value.root, f"{key} edit value") if isinstance(value, TreeRef) else value

        def inside(before: JSON, rest: PathT, edit: Edit) -> tuple[Step, JSON]:
            """An edit inside a value held as its keys or a range: the form moved on by it."""
            if before is MISSING:  # the edit creates the value: it is all the edit says
                value = apply_edits(MISSING, [Edit(rest, load(edit.value))])
                form = _form(value, end) if end is not None else value
            elif isinstance(before, KeysForm):
                set_kind = (
                    ""
                    if edit.is_delete
                    else self._probe_value(tx, key, "", edit.value, (), whole=False)[0][0].kind
                )
                form = inside_keys(before, rest, MISSING if edit.is_delete else edit.value, set_kind)
            else:
                assert isinstance(before, SliceForm) and isinstance(end, SliceEnd)
                value = MISSING if edit.is_delete else load(edit.value)
                form = inside_slice(before, rest, end, value)
            return _form_step(form), form

        for rev, _, _ in rows:
            for edit in edits.get((doc_id, int(rev)), []):
                try:
                    trails = [advance(t, edit, probe_any, load, inside if end else None) for t in trails]
                except Conflict as exc:
                    raise CorruptData(f"{key}: change at revision {rev} does not replay: {exc}") from exc
        if rows:
            return trails, int(rows[-1][1])
        if past is not None:
            return trails, past.at_seq
        at = tx.one("SELECT seq FROM changes WHERE doc_id = ? AND revision = ?", (doc_id, revision))
        return trails, None if at is None else int(at[0])

    def _snapshot_trails(
        self,
        tx: Tx,
        key: DocKey,
        doc_id: int,
        revision: int,
        raw: Any,
        paths: list[PathT],
        names: set[str],
        end: End | None = None,
        past: asof.Past | None = None,
    ) -> list[Trail]:
        what = f"{key} snapshot at revision {revision}"
        data = decode_stored(raw, what)
        if data is None:
            return [start(p, [MISSING_STEP], MISSING) for p in paths]
        if type(data) is dict:  # a whole-body snapshot (schema 3)
            return [self._from_member(tx, key, p, data.get(str(p[0]), _ABSENT), end=end) for p in paths]
        wanted = [(n, r) for n, r in directory_of(data, key, revision) if n in names]
        members: dict[str, Any] = {}
        if wanted and past is not None:
            for name, member_revision in wanted:
                held = past.members.get(name)
                if held is None or held[0] != member_revision:
                    raise _Unsettled  # not the row the directory names: only the exact read tells
                _, body, root = held
                members[name] = (
                    TreeRef(bytes(root))
                    if root is not None
                    else decode_stored(body, f"{what} member {name!r} (revision {member_revision})")
                )
        elif wanted:
            for name, member_revision, body, root in snapshot_member_rows(
                tx, doc_id, wanted, self._store.member_pairs_sql
            ):
                members[str(name)] = (
                    TreeRef(bytes(root))
                    if root is not None
                    else decode_stored(body, f"{what} member {name!r} (revision {member_revision})")
                )
            for name, member_revision in wanted:
                if name not in members:
                    raise CorruptData(
                        f"stored {what} is corrupt: member {name!r} (revision {member_revision}) is missing"
                    )
        return [self._from_member(tx, key, p, members.get(str(p[0]), _ABSENT), end=end) for p in paths]


def _back_revisions(
    rows: Mapping[DocKey, DocRow], found: Sequence[tuple[int, int, int]], back: int
) -> dict[DocKey, int]:
    """Each document's revision right after the ``back``-th newest transition among ``found``,
    their newest ``back + 1`` changes ``(seq, doc_id, revision)`` (see ``_revisions_back``)."""
    seqs = sorted({s for s, _, _ in found}, reverse=True)
    if back > len(seqs):
        raise NotFound(
            f"requested history offset {back} predates the retained history "
            f"({len(seqs)} transition(s) retained for these documents)"
        )
    # ``back == len(seqs)``: before the oldest retained transition, each document at the
    # revision before its oldest retained change — 0 (empty) where that change was its first,
    # else the revision the audit sweep kept a snapshot of when it forgot the changes before
    target = seqs[back] if back < len(seqs) else -1
    out: dict[DocKey, int] = {}
    for key, row in rows.items():
        after = [r for s, d, r in found if d == row.doc_id and s > target]
        out[key] = min(after) - 1 if after else row.revision
    return out


def _form(value: JSON, end: End) -> KeysForm | SliceForm:
    return keys_form(value) if isinstance(end, KeysEnd) else slice_form(value, end)


def _form_step(form: Any) -> Step:
    """The step a value held as a read form stands at."""
    if isinstance(form, KeysForm | SliceForm):
        return Step(form.kind, form.length if form.kind == "array" else 0)
    return step_of(form)


_ABSENT: Any = object()
"""A member the document does not have."""


class _Unsettled(Exception):
    """The rows of ``asof.statement`` do not settle a read: it is read the long way."""


def trail_kind(value: JSON) -> str:
    return step_of(value).kind
