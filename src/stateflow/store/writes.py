"""Writes: cohort commits, locked read-modify-write, the optimistic path, and the planner.

Writes run in one database transaction: idempotency ledger, compare-and-set checks, member
rows, revisions, one transition row and one change row per touched document, snapshots. Any
failure raises before commit and the transaction rolls back: nothing at all is written.
Each document's write is staged, then planned as rows (:mod:`stateflow.store.plan`), then
emitted by the backend (``Backend._emit``).
"""

from __future__ import annotations

import operator
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Final, Literal, NamedTuple, TypeVar, cast

import orjson

from stateflow.doc.canonical import decode_trusted, encode_trusted
from stateflow.doc.diff import Edit, Within, apply_below, diff_within, within
from stateflow.doc.select import MISSING
from stateflow.doc.sparse import NotHeld
from stateflow.errors import Conflict, InvalidInput, StateflowError, WriteAborted
from stateflow.store import tree_skeleton, tree_update
from stateflow.store.cache import Heads
from stateflow.store.cancel import committed
from stateflow.store.clock import utc_now, utc_now_stored
from stateflow.store.core import KNOWN_ROWS_MAX, ROWS_PER_QUERY, StoreCore
from stateflow.store.counting import FOLD_EVERY, Moved, count_plans, counted_one, encoded
from stateflow.store.ledger import (
    OpIdTaken,
    checked_transition,
    claims_query,
    replayed,
    transition_columns,
    unmoved,
    with_op_id,
)
from stateflow.store.model import Commit, DocKey, Document, Whole, Write, made_commit, made_document
from stateflow.store.nodes import NodeCache, load_tree
from stateflow.store.plan import (
    INLINE_EDITS_MAX,
    NONE,
    SNAPSHOT_LARGE_CHAIN,
    SNAPSHOT_MAX_CHAIN,
    SNAPSHOT_MIN_BYTES,
    TREE_MIN,
    WHOLE_INLINE_MAX,
    WHOLE_ROW_MAX,
    ByPath,
    Fresh,
    Loaded,
    SeqRef,
    Stage,
    WritePlan,
    effective_edits,
    key_problem,
    stamp_row,
    validate_writes,
)
from stateflow.store.rows import (
    CHANGE_MARK,
    NO_ROW,
    UNSEEN_SELECT,
    DocRow,
    MemberHead,
    Wanted,
    decode_stored,
    encoded_outline,
    lock_order,
    outline_of,
    rows_by_key,
    to_row,
    whole_heads,
    whole_members,
)
from stateflow.store.served_patch import Served
from stateflow.store.tree import Builder
from stateflow.store.tree_skeleton import NeedsWhole
from stateflow.store.tx import OFFLINE, Tx

R = TypeVar("R")


class Writes(StoreCore):
    """Commits: ``commit``, ``update`` (locked or optimistic) and the planner behind them."""

    def commit(
        self,
        writes: Sequence[Write],
        origin: dict[str, Any] | None = None,
        *,
        op_id: str | None = None,
        op_scope: str = "",
    ) -> Commit:
        """Commit a cohort: every write is checked, then all are applied in one transaction.

        A failed compare-and-set (``Conflict``) or any other check writes nothing at all.
        """
        self.check_schema()
        validate_writes(writes, origin)
        fresh = Fresh()
        claims = with_op_id([], op_id, op_scope)
        try:
            with self._write_tx() as tx:
                result = self._commit_in(tx, writes, origin or {}, claims, {}, fresh)
        except OpIdTaken as taken:
            if replayed(taken, op_id, op_scope):
                return Commit(applied=False)
            raise
        self._remember(fresh)
        return result

    def update(
        self,
        keys: Iterable[DocKey],
        compute: Callable[[dict[DocKey, Document]], tuple[Sequence[Write], R]],
        origin: dict[str, Any] | None = None,
        *,
        members: Iterable[str] | None = None,
        outlines: Iterable[str] = (),
        shared: Iterable[DocKey] = (),
        op_id: str | None = None,
        op_scope: str = "",
        claims: Sequence[tuple[str, str]] = (),
        optimistic: bool = False,
        checked: bool = False,
        along: Mapping[DocKey, Mapping[str, Within]] | None = None,
    ) -> tuple[Commit, R | None]:
        """Read-modify-write under lock: load ``keys`` (locked against other writers), call
        ``compute(documents)`` → ``(writes, result)``, commit the writes in the same transaction.

        ``shared`` documents are read in the same transaction under a shared lock (they may not
        change before the commit, but other writers that only share them are not blocked; they
        cannot be written by this call). An exception from ``compute`` rolls everything back. A
        replayed ``op_id`` returns ``(Commit(applied=False), None)`` without calling ``compute``.
        ``claims`` are further ``(scope, op_id)`` keys recorded with the commit; if any of them
        is already recorded, :class:`OpIdTaken` is raised (naming them) and nothing is written.

        ``optimistic``: ``compute`` may be called twice (it must not keep state between calls).
        When the store holds every document as it last read or wrote it, ``compute`` first runs
        on those with no lock held (other writers keep going meanwhile), and the commit checks
        that nothing moved — on PostgreSQL in one statement. Anything else (a document moved or
        is not cached, ``compute`` refused, an op id was taken) runs the locked path, which
        decides. If the database ends the write to break a lock cycle (``WriteAborted``, which a
        backend should never cause, see ``rows.lock_order``), nothing was written and an
        optimistic call runs again, at most ``ABORTED_RETRIES`` times: ``compute`` may run more
        than twice then.

        ``checked``: the caller vouches that every value ``compute``'s writes set is plain JSON
        (checked on its way in, or read from the store): the writes' shape is still validated,
        their values are not walked again.

        ``along``: members of a document that ``compute`` reaches only along these paths (a trie
        each, relative to the member; a patch's ``"[N]"`` names an array's element N): where
        such a member is held as a tree and not in memory, ``compute`` gets its skeleton
        (``tree_skeleton``: the containers on the paths, an array as a ``doc.sparse.Sparse`` —
        its real length and the elements on them —, an object as the keys the paths name)
        instead of reading it whole,
        and the writes are staged on it. ``compute`` must then change the member only along
        those paths and delete nothing in it (what the algebra does on a skeleton is then what
        it does on the value), and keeps nothing of the skeleton. Where it (or its writes)
        reaches an element the skeleton does not hold (``doc.sparse.NotHeld``), nothing is
        written and it runs again on the members read whole.
        """
        self.check_schema()
        args = (keys, compute, origin, members, outlines, shared, op_id, op_scope, claims)
        attempt = 0
        while True:
            try:
                return self._update_once(*args, optimistic=optimistic, checked=checked, along=along)
            except WriteAborted:
                if not optimistic or attempt == ABORTED_RETRIES:
                    raise
                attempt += 1
                time.sleep(random.uniform(0.0, 0.002 * attempt))  # (no lockstep)
            except NotHeld:
                if along is None:
                    raise
                # ``compute`` (or its writes) reached an element of a skeleton off the paths:
                # nothing was written; computed again on the members read whole
                along = None

    def update_parts(
        self,
        parts: Sequence[Sequence[DocKey]],
        compute: Callable[[Sequence[DocKey], dict[DocKey, Document]], Sequence[Write]],
        origin: dict[str, Any] | None = None,
        *,
        shared: Sequence[DocKey] = (),
        beside: Callable[[Sequence[DocKey]], Sequence[DocKey]] | None = None,
    ) -> Commit:
        """Read-modify-writes of many documents as one transaction and one transition, a part
        at a time: ``compute(part, documents)`` → the writes of that part's documents (the
        shared ones beside them). All or nothing, as :meth:`update`; but what is held at once
        is one part's documents, writes and rows, not every document's (a maintenance call
        erasing or copying tens of thousands of records), and on PostgreSQL each part's rows
        are one statement, each bounded by the statement timeout on its own.

        Every part's keys come after the previous part's in the lock order (``rows.lock_order``)
        and after ``shared`` (read under a shared lock, given to every part). First every row
        is locked, a part at a time (all before the seq lock, as every writer takes them); then
        each part is read again, computed, staged and sent. ``beside(part)``: more documents
        read with a part, not locked (as committed, as a read outside the transaction sees them),
        given to its compute and not written (the records a copy is made from). No op ids;
        neither what is read nor what is written is cached (the rows known here for its
        documents are forgotten), and the commit lists no revisions."""
        self.check_schema()
        validate_writes([], origin)
        origin = origin or {}
        shared_keys = _in_lock_order(set(shared))
        last = lock_order(shared_keys[-1]) if shared_keys else None
        for part in parts:
            for key in part:
                if problem := key_problem(key):
                    raise problem
                if last is not None and lock_order(key) <= last:
                    raise ValueError(
                        "update_parts: keys must come in ascending lock order, after the shared ones"
                    )
                last = lock_order(key)
        seq: SeqRef | None = None
        seq_of: Callable[[], int] = lambda: 0  # noqa: E731 - (set with the transition)
        changed: list[str] = []  # each part's ``transitions.changed`` items (SQLite)
        moved: Moved = {}  # the counters' deltas of every part (``counts_in_transitions``)
        at = utc_now()
        with self._write_tx() as tx:
            rows, _ = self._claim(tx, shared_keys, ())
            fetched = self._fetch_many(
                tx, [(k, r.doc_id, r.revision, None) for k, r in rows.items() if r.present]
            )
            around = {
                key: Document(
                    key, row.revision, {n: v for n, _, v, _ in fetched[row.doc_id][0]}, row.updated_seq
                )
                if row.present
                else Document(key, row.revision, None, row.updated_seq)
                for key, row in rows.items()
            }
            for part in parts:  # every row locked first, before the transition's seq lock
                self._claim(tx, (), part)
            for part in parts:
                if not part:
                    continue
                _, locked = self._claim(tx, (), part)  # (held already: read again, not waited for)
                present = [(k, r.doc_id, r.revision, None) for k, r in locked.items() if r.present]
                # (read for this part alone: tens of thousands of erased or copied records would
                # fill the caches, pushing out what readers reuse)
                members = self._fetch_many(tx, present, keep=False) if present else {}
                loaded: dict[DocKey, Loaded] = {}
                docs = dict(around)
                for key, row in locked.items():
                    entry = loaded[key] = Loaded(row, complete=not row.present)
                    body = None
                    if row.present:
                        for name, position, value, size in members[row.doc_id][0]:
                            entry.members[name] = (value, position, size)
                        entry.complete = True
                        body = {n: v for n, (v, _, _) in entry.members.items()}
                    docs[key] = Document(key, row.revision, body, row.updated_seq)
                others = [k for k in beside(part) if k not in docs] if beside is not None else []
                if others:
                    found = self._rows(tx, others)
                    read = self._fetch_many(
                        tx,
                        [(k, r.doc_id, r.revision, None) for k, r in found.items() if r.present],
                        keep=False,
                    )
                    for key in others:
                        seen = found.get(key)
                        if seen is None or not seen.present:
                            docs[key] = Document(key, 0 if seen is None else seen.revision, None)
                        else:
                            body = {n: v for n, _, v, _ in read[seen.doc_id][0]}
                            docs[key] = Document(key, seen.revision, body, seen.updated_seq)
                writes = compute(part, docs)
                validate_writes(writes, origin)
                plans: list[WritePlan] = []
                planned: list[DocKey] = []
                for write in sorted(writes, key=lambda w: w.key):
                    held = loaded.get(write.key)
                    if held is None:
                        raise InvalidInput(f"{write.key} is not among the documents of its part")
                    if write.expect is not None and write.expect != held.row.revision:
                        raise Conflict(
                            f"{write.key} changed concurrently: it is at revision {held.row.revision}, "
                            f"the change was computed against revision {write.expect}"
                        )
                    if write.edits:
                        fresh = Fresh()  # (not kept: nothing of the parts goes to the caches)
                        plans.append(self._plan_doc(write, held, self._stage(tx, write, held), fresh))
                        planned.append(write.key)
                        self._rows_known.pop(write.key, None)
                del docs, loaded, members, writes, others
                if not plans:
                    continue
                if seq is None:  # the transition (and on PostgreSQL the seq lock) once
                    seq_of, seq = self._transition(tx, at, origin, "[]" if self.transition_keys else None)
                self._emit(tx, plans, seq)
                if self.transition_keys:
                    changed.append(changed_keys(plans)[1:-1])
                if self.counts_in_transitions:
                    count_plans(plans, partial(zip, [p.doc_id for p in plans], planned, strict=True), moved)
            if seq is not None and self.transition_keys:
                tx.run(
                    "UPDATE transitions SET changed = ? WHERE seq = ?", (f"[{','.join(changed)}]", seq_of())
                )
            if seq is not None and self.counts_in_transitions:
                tx.run("UPDATE transitions SET counted = ? WHERE seq = ?", (encoded(moved), seq_of()))
                self._fold_due(tx, seq_of())
        if seq is None:
            return made_commit(True, None, None, {})
        committed()
        return made_commit(True, seq_of(), at, {})  # (no revisions listed: a list of every document)

    def _update_once(
        self,
        keys: Iterable[DocKey],
        compute: Callable[[dict[DocKey, Document]], tuple[Sequence[Write], R]],
        origin: dict[str, Any] | None,
        members: Iterable[str] | None,
        outlines: Iterable[str],
        shared: Iterable[DocKey],
        op_id: str | None,
        op_scope: str,
        claims: Sequence[tuple[str, str]],
        *,
        optimistic: bool,
        checked: bool = False,
        along: Mapping[DocKey, Mapping[str, Within]] | None = None,
    ) -> tuple[Commit, R | None]:
        """One attempt of :meth:`update`."""
        names = None if members is None else list(members)
        outline_names = list(outlines)
        # every row lock in one ascending pass of the lock order (see ``rows.lock_order``)
        shared_keys = _in_lock_order(set(shared))
        locked = _in_lock_order(set(keys).difference(shared_keys))
        for key in locked:  # (before the lock, which may create the row: PostgreSQL's index
            # cannot hold a longer key, so it is refused alike on every backend)
            if problem := key_problem(key):
                raise problem
        all_claims = with_op_id(claims, op_id, op_scope)
        computed: _Computed | None = None
        # a one-statement commit locks its shared rows, then the others: only in lock order if
        # every shared row comes first (the states' writes: declarations and aliases, records)
        optimistic = optimistic and _shared_first(shared_keys, locked)
        if optimistic and (most := self.optimistic_documents_max) is not None:
            optimistic = len(shared_keys) + len(locked) <= most
        # (not while contended: with several writers on one document it would lose, after
        # waiting for the row lock in turn)
        if optimistic and not self._is_contended(locked):
            fresh = Fresh()
            try:
                done = self._optimistic(
                    locked, shared_keys, compute, origin, all_claims, fresh, names, outline_names, checked
                )
            except _Computed as ready:
                # what it carries, not the frames it was raised through: they hold the documents
                # computed on, and this frame would hold itself (a cycle only the GC frees), so
                # the version this write replaces would outlive the call
                done, computed = None, ready.with_traceback(None)
                computed.__context__ = None
            if isinstance(done, _Moved):
                if not self.reads_before_locking:  # (there, a read without the lock is next)
                    self._lost(locked)
            elif done is not None:
                self._remember(fresh)
                return done
        reads = optimistic and computed is None and self.reads_before_locking
        if reads and not self._is_contended(locked):
            fresh = Fresh()
            try:
                attempt = self._read_then_commit(
                    locked,
                    shared_keys,
                    names,
                    outline_names,
                    compute,
                    origin,
                    all_claims,
                    fresh,
                    checked,
                    along,
                )
            except _Computed as ready:
                attempt, computed = None, ready
            if isinstance(attempt, _Moved):
                # another writer got there first: while they keep writing, wait for the row
                # locks in turn instead of computing again and again on what has moved
                until = time.monotonic() + CONTENDED_SECONDS
                self._contended.update(dict.fromkeys(locked, until))
            elif attempt is not None:
                self._remember(fresh)
                return attempt
        # each document as this store last saw it (for _still_contended)
        seen = {key: self._rows_known.get(key) for key in locked} if optimistic and computed is None else {}
        fresh = Fresh()
        try:
            with self._write_tx() as tx:
                docs: dict[DocKey, Document] = {}
                heads = self._heads_query(locked, names) if self.reads_before_locking else None
                if heads is None:  # (a backend may claim its own way: SQLite does)
                    rows, locked_rows = self._claim(tx, shared_keys, locked, all_claims)
                else:
                    rows, locked_rows, answers = self._claim_then(
                        tx, shared_keys, locked, all_claims, heads[0]
                    )
                    self._took_heads(locked_rows, heads[1], answers[0])
                if seen:
                    self._still_contended(seen, locked_rows)
                fresh.rows.update({key: rows.get(key, NO_ROW) for key in shared_keys})
                fresh.rows.update(locked_rows)
                # then one member-head query for the documents whose heads are not cached (an
                # absent document has no member rows: they go with it)
                wanted: list[Wanted] = [
                    (k, rows[k].doc_id, rows[k].revision, None)
                    for k in shared_keys
                    if k in rows and rows[k].present
                ]
                wanted += [(k, r.doc_id, r.revision, names) for k, r in locked_rows.items() if r.present]
                fetched, skeletons = self._fetch_along(tx, wanted, outline_names, along, locked_rows)
                in_turn: tuple[Commit, R] | None = None
                if computed is None:
                    # the common case planned as the unlocked attempt plans it, on the documents
                    # held here brought up to the locked rows (what moved was read just now)
                    made = self._locked_made(
                        tx,
                        shared_keys,
                        locked,
                        fresh,
                        compute,
                        origin,
                        all_claims,
                        names,
                        outline_names,
                        checked,
                    )
                    if isinstance(made, _Computed):
                        computed = made  # computed, but for the general path to write
                    else:
                        in_turn = made
                if in_turn is not None:
                    commit, result = in_turn
                else:
                    loaded = {key: Loaded(row, complete=not row.present) for key, row in locked_rows.items()}
                    for key in shared_keys:
                        row = rows.get(key)
                        if row is None:
                            docs[key] = Document(key, 0, None)
                            continue
                        body = {n: v for n, _, v, _ in fetched[row.doc_id][0]} if row.present else None
                        docs[key] = Document(key, row.revision, body, row.updated_seq)
                    for key, entry in loaded.items():
                        row = entry.row
                        body = None
                        shapes: dict[str, Any] = {}
                        if row.present:
                            members_of, shapes = fetched[row.doc_id]
                            for name, position, value, size in members_of:
                                entry.members[name] = (value, position, size)
                            entry.complete = names is None
                            entry.by_path = skeletons.get(row.doc_id)
                            body = {n: v for n, _, v, _ in members_of}
                        docs[key] = Document(key, row.revision, body, row.updated_seq, shapes)
                    if computed is not None and computed.holds({**rows, **locked_rows}):
                        writes, result = computed.writes, computed.result  # nothing moved since
                    else:
                        writes, result = compute(docs)
                    validate_writes(writes, origin, values=not checked)
                    for write in writes:
                        if write.key in shared_keys:
                            raise InvalidInput(
                                f"{write.key} was read as shared and cannot be written in this call"
                            )
                    commit = self._commit_in(tx, writes, origin or {}, all_claims, loaded, fresh)
        except OpIdTaken as taken:
            if replayed(taken, op_id, op_scope):
                return Commit(applied=False), None
            raise
        self._remember(fresh)
        return commit, result

    def _lock_many(self, tx: Tx, keys: Sequence[DocKey]) -> dict[DocKey, DocRow]:
        """:meth:`_lock` for several documents (sorted keys), a pipeline per 500 of them."""
        rows: dict[DocKey, DocRow] = {}
        for start in range(0, len(keys), 500):
            rows.update(self._claim(tx, (), keys[start : start + 500])[1])
        return rows

    def _claim(
        self,
        tx: Tx,
        shared: Sequence[DocKey],
        locked: Sequence[DocKey],
        claims: Sequence[tuple[str, str]] = (),
    ) -> tuple[dict[DocKey, DocRow], dict[DocKey, DocRow]]:
        """Start a read-modify-write: refuse claimed op ids already recorded (``OpIdTaken``),
        then read the shared rows and lock (creating if needed) the others, in one ascending
        pass of the lock order (``rows.lock_order``, which every writer follows). All
        statements go out together where the database pipelines."""
        rows, locked_rows, _ = self._claim_then(tx, shared, locked, claims, None)
        return rows, locked_rows

    def _claim_then(
        self,
        tx: Tx,
        shared: Sequence[DocKey],
        locked: Sequence[DocKey],
        claims: Sequence[tuple[str, str]],
        then: tuple[str, Sequence[Any]] | None,
    ) -> tuple[dict[DocKey, DocRow], dict[DocKey, DocRow], list[list[tuple[Any, ...]]]]:
        """:meth:`_claim`, with ``then`` — a query that needs the locks — in the same round trip."""
        # runs in lock order: each run of shared rows is one statement, each locked row one
        runs: list[list[DocKey] | DocKey] = []
        if not shared or not locked or lock_order(shared[-1]) < lock_order(locked[0]):
            runs = [list(shared)] if shared else []
            runs += locked
        else:
            for key, is_shared in sorted(
                [*((k, True) for k in shared), *((k, False) for k in locked)], key=lambda e: lock_order(e[0])
            ):
                if not is_shared:
                    runs.append(key)
                elif runs and isinstance(runs[-1], list):
                    runs[-1].append(key)
                else:
                    runs.append([key])
        if len(shared) > ROWS_PER_QUERY:  # (a run of more shared rows: a statement per part)
            runs = [
                part
                for run in runs
                for part in (
                    [run[i : i + ROWS_PER_QUERY] for i in range(0, len(run), ROWS_PER_QUERY)]
                    if isinstance(run, list)
                    else [run]
                )
            ]
        statements: list[tuple[str, Sequence[Any]]] = [
            self._rows_query(run, self.share_clause) if isinstance(run, list) else self._lock_query(run)
            for run in runs
        ]
        if claims:
            statements.insert(0, claims_query(claims))
        if then is not None:
            statements.append(then)
        answers = tx.all_of(statements)
        if claims and (taken := answers.pop(0)):
            raise OpIdTaken({(r[0], r[1]) for r in taken})
        rows: dict[DocKey, DocRow] = {}
        locked_rows: dict[DocKey, DocRow] = {}
        for run, answer in zip(runs, answers, strict=False):
            if isinstance(run, list):
                rows.update(rows_by_key(answer))
            else:
                locked_rows[run] = to_row(answer[0])
        return rows, locked_rows, answers[len(runs) :]

    def _heads_query(
        self, keys: Sequence[DocKey], names: list[str] | None
    ) -> tuple[tuple[str, list[Any]], set[int]] | None:
        """The member heads of documents whose ids are known here, with the bodies of the
        members named (all for None), and the ids asked for: sent with the row locks, it answers
        what the locked read asks next, so the locks are held one round trip less (two where
        the bodies were not cached). None when an id is not known here."""
        ids = []
        for key in keys:
            row = self._rows_known.get(key)
            if row is None or not row.doc_id:
                return None
            ids.append(row.doc_id)
        if not ids or len(ids) > ROWS_PER_QUERY:  # (more: ``_fetch_many`` reads them in parts)
            return None
        wanted = "TRUE" if names is None else f"name IN ({','.join('?' * len(names))})"
        sql = (
            f"SELECT doc_id, name, position, revision, size, outline, CASE WHEN {wanted} AND root IS NULL "
            f"THEN body END FROM members WHERE doc_id IN ({','.join('?' * len(ids))}) "
            "ORDER BY doc_id, position"
        )
        return (sql, [*(names or ()), *ids]), set(ids)

    def _took_heads(
        self, locked: Mapping[DocKey, DocRow], asked: set[int], answer: list[tuple[Any, ...]]
    ) -> None:
        """Cache what :meth:`_heads_query` read under the locks: the heads at each document's
        locked revision and the member values not cached yet (``_fetch_many`` then finds them)."""
        # (a document in whole form has no member rows: ``_fetch_many`` reads its body)
        revision_of = {
            r.doc_id: r.revision for r in locked.values() if r.present and r.doc_id in asked and not r.whole
        }
        by_doc: dict[int, dict[str, MemberHead]] = {doc_id: {} for doc_id in revision_of}
        for doc_id, name, position, revision, size, outline, body in answer:
            doc_id = int(doc_id)
            if doc_id not in by_doc:
                continue  # a document absent at its locked revision keeps no heads
            by_doc[doc_id][name] = (
                doc_id,
                name,
                int(position),
                int(revision),
                int(size),
                None if outline is None else bytes(outline),
            )
            if body is not None and not self._cache.lookup((doc_id, name), int(revision))[0]:
                value = decode_stored(body, f"document {doc_id} member {name!r}")
                self._cache.put((doc_id, name), int(revision), value, len(body))
        for doc_id, heads in by_doc.items():
            self._heads.put(doc_id, revision_of[doc_id], heads)

    def _remember(self, fresh: Fresh) -> None:
        """Cache members written by a transaction that has committed (never before)."""
        if fresh.members:  # (none for a document written in whole form)
            self._cache.put_many(fresh.members)  # (each entry held as the plan made it)
        hold = self._heads.hold
        for doc_id, entry in fresh.heads.items():
            hold(doc_id, entry)
        if fresh.nodes:
            self._node_cache.written(fresh.nodes)
        if fresh.roots:  # (a document that holds or held a tree member)
            roots = self._roots
            if len(roots) + len(fresh.roots) > KNOWN_ROWS_MAX:
                roots.clear()  # bounded; a miss only costs the root's query
            for doc_id, (revision, held) in fresh.roots.items():
                had = roots.get(doc_id)
                if had is None or had[0] <= revision:  # never back to an older revision
                    roots[doc_id] = (revision, held)
        known = self._rows_known
        if len(known) + len(fresh.rows) > KNOWN_ROWS_MAX:
            known.clear()  # bounded; a miss only means the locked path
            self._recent.clear()
        states = self._recent_states
        for key, row in fresh.rows.items():
            current = known.get(key)
            # a lagging writer must not replace a newer row by an older one
            if current is None or current.doc_id != row.doc_id or current.revision <= row.revision:
                known[key] = row
                if states and key.state in states:  # (held for the latest writes only)
                    self._forget_older(key, row, key in fresh.once)

    def _forget_older(self, key: DocKey, row: DocRow, once: bool = False) -> None:
        """``row``, just remembered, among the latest of the states cached for their latest
        writes (``cache_recent``): the oldest of those is forgotten — its row, its head entry
        and the values of the members that entry names (member form: PostgreSQL's records),
        each where still at its revision (a newer write of it is counted from there), and
        what the backend holds of it (``_forgotten``). Its entry is kept encoded
        (:class:`SpareCopies`) unless it was ``once`` (``Fresh.once``)."""
        recent = self._recent
        recent.append((key, row, once))
        if len(recent) > self._recent_kept:
            try:
                old_key, old, old_once = recent.popleft()
            except IndexError:  # (emptied meanwhile by another thread's ``_remember``)
                return
            known = self._rows_known.get(old_key)
            last = known is not None and known.doc_id == old.doc_id and known.revision == old.revision
            if last:
                self._rows_known.pop(old_key, None)  # (another thread's may have gone first)
            entry = self._heads.drop(old.doc_id, old.revision)
            followed = self._followed
            if followed and old_key in followed:
                followed.discard(old_key)
                old_once = True
            if entry is not None and not old_once and (last or known is None):  # (as last written here)
                self._spare.keep(old_key, old, entry)
            heads = None if entry is None else entry[1]
            if heads:  # (None: a whole-form body held alone, whose members are not cached)
                drop = self._cache.drop
                for name, head in heads.items():
                    drop((old.doc_id, name), head[3])  # (cached at the revision that wrote it)
            self._forgotten(old_key, old.doc_id, old.revision)

    def _commit_in(
        self,
        tx: Tx,
        writes: Sequence[Write],
        origin: dict[str, Any],
        claims: Sequence[tuple[str, str]],
        loaded: dict[DocKey, Loaded],
        fresh: Fresh,
    ) -> Commit:
        at = fresh.at = utc_now()
        self._record_claims(tx, claims, at)
        # Check every compare-and-set before touching anything.
        plan: list[tuple[Write, Loaded]] = []
        ordered = sorted(writes, key=lambda w: w.key)
        # (after the rows already locked: a write beyond them must come after them in the lock
        # order, as a fold's records come after the aliases it locked to find them)
        unlocked = sorted({w.key for w in ordered if w.key not in loaded}, key=lock_order)
        if unlocked:  # all rows in one pipeline (a bulk load commits hundreds of new documents)
            for key, row in self._lock_many(tx, unlocked).items():
                # revision 0: never written, so no members to read back
                loaded[key] = Loaded(row, complete=row.revision == 0)
        for write in ordered:
            entry = loaded[write.key]
            if write.expect is not None and write.expect != entry.row.revision:
                raise Conflict(
                    f"{write.key} changed concurrently: it is at revision {entry.row.revision}, "
                    f"the change was computed against revision {write.expect}"
                )
            if write.edits:
                plan.append((write, entry))
        if not plan:
            return Commit(applied=True, revisions={w.key: loaded[w.key].row.revision for w in writes})
        staged = [(w, e, self._stage(tx, w, e)) for w, e in plan]
        revisions = {w.key: loaded[w.key].row.revision for w in writes}
        # planned first (no statement): the transition's row lists its changes' keys
        plans = [self._plan_doc(write, entry, stage, fresh) for write, entry, stage in staged]
        if self.whole_form:
            for (write, entry, stage), planned in zip(staged, plans, strict=True):
                self._shrunk_into_whole(tx, write.key, entry, stage, planned, fresh)
        return self._commit_plans(tx, [w.key for w, _, _ in staged], plans, origin, claims, revisions, fresh)

    def _erase_held(self, tx: Tx, held: dict[DocKey, DocRow], origin: dict[str, Any], fresh: Fresh) -> None:
        """Erase the documents of ``held`` (locked in ``tx``) as one transition, committing ``tx``."""
        loaded = {key: Loaded(row, complete=not row.present) for key, row in held.items()}
        # (a document deleted whole: its members' names and sizes are staged, never their values)
        writes = [
            Write(key, [Edit(())], row.revision, paths=[[]]) for key, row in held.items() if row.present
        ]
        self._commit_in(tx, writes, origin, (), loaded, fresh)

    @staticmethod
    def _record_claims(tx: Tx, claims: Sequence[tuple[str, str]], at: str) -> None:
        """Record the claimed op ids, first: a claim taken meanwhile ends the call before any
        write (``OpIdTaken``). Their seq is set with the transition (``_commit_plans``)."""
        if claims:
            taken = tx.all(
                "INSERT INTO applied_ops (scope, op_id, applied_at) VALUES "
                + ", ".join(["(?, ?, ?)"] * len(claims))
                + " ON CONFLICT (scope, op_id) DO NOTHING RETURNING scope, op_id",
                [v for scope, claimed in claims for v in (scope, claimed, at)],
            )
            if len(taken) != len(set(claims)):
                raise OpIdTaken(set(claims) - {(r[0], r[1]) for r in taken})

    def _commit_plans(
        self,
        tx: Tx,
        keys: Sequence[DocKey],
        plans: Sequence[WritePlan],
        origin: dict[str, Any],
        claims: Sequence[tuple[str, str]],
        revisions: dict[DocKey, int],
        fresh: Fresh,
    ) -> Commit:
        """Write the plans of ``keys`` (one each) in ``tx``, whose locks hold every document
        as planned on, at ``fresh.at``: the transition, the claims' seq (recorded already)
        and the rows. The rest needs no answer before the commit: where the database can
        pipeline, the transition, every row write and the COMMIT travel together."""
        at = fresh.at
        counted = (
            encoded(count_plans(plans, lambda: zip([p.doc_id for p in plans], keys, strict=True)))
            if self.counts_in_transitions
            else None
        )
        with tx.batch(commit=True):
            seq_of, seq = self._transition(
                tx, at, origin, changed_keys(plans) if self.transition_keys else None, counted
            )
            for scope, claimed in claims:
                tx.run(
                    f"UPDATE applied_ops SET seq = {seq.sql} WHERE scope = ? AND op_id = ?",
                    (*seq.params, scope, claimed),
                )
            self._emit(tx, plans, seq)
            if self.counts_in_transitions:
                self._fold_due(tx, seq_of())
        seq_now = seq_of()
        _stamp(keys, plans, seq_now, at, fresh)
        return _committed(keys, plans, revisions, seq_now, at)

    def _optimistic(
        self,
        locked: Sequence[DocKey],
        shared: Sequence[DocKey],
        compute: Callable[[dict[DocKey, Document]], tuple[Sequence[Write], R]],
        origin: dict[str, Any] | None,
        claims: Sequence[tuple[str, str]],
        fresh: Fresh,
        names: list[str] | None = None,
        outline_names: Sequence[str] = (),
        checked: bool = False,
    ) -> tuple[Commit, R] | _Moved | None:
        """Compute against the documents as last seen here, then commit checking that none of
        them moved; ``MOVED`` when one had (nothing was written), None when that cannot be done.
        ``names`` and ``outline_names`` as for the locked path: a locked document's body holds
        only the members named (all when None), its outlines those named, from the cached
        heads; a shared document's body is whole."""
        entries = {}
        new: list[DocKey] = []
        for key in (*shared, *locked):
            known = self._known(key)
            unseen = known is None and key not in self._rows_known
            if key not in shared and (unseen or (known is not None and known[0] is NO_ROW)):
                new.append(key)  # no row seen here: a new document, most likely
                continue
            if known is None:
                return None  # not cached
            entries[key] = known
        if new:
            created = self._absent_rows(new)
            if created is None or len(created) != len(new):
                return None  # the backend creates rows in the locked path, or some existed already
            entries.update({key: (row, None, {}) for key, row in created.items()})
        docs = self._documents(entries, shared, names, outline_names)
        if docs is None:
            return None
        try:
            writes, result = compute(docs)
            validate_writes(writes, origin, values=not checked)
        except Exception:  # maybe computed on documents that moved: the locked path decides
            return None
        made = self._plan_made(writes, entries, shared, fresh)
        if made is None:
            fresh.clear()  # (what a plan given up half way left for the caches)
        else:  # the common case: each document's rows straight from its edits
            keys, plans = made
            committed = self._commit_planned(
                [(key, entries[key][0]) for key in locked],
                [(key, entries[key][0]) for key in shared],
                list(dict.fromkeys(claims)),
                origin or {},
                plans,
            )
            if committed is None:
                return MOVED
            _stamp(keys, plans, *committed, fresh)
            return _committed(
                keys, plans, {w.key: entries[w.key][0].revision for w in writes}, *committed
            ), result
        # the written documents' members are staged on: each gets its own copy
        loaded = {key: _loaded(*entries[key]) for key in locked}
        plan = _offline_plan(writes, loaded)
        if not plan:
            return None
        try:
            staged = [(w, e, self._stage(OFFLINE, w, e)) for w, e in plan]
        except _NeedsLock:  # a tree member: the locked path stages it, reusing this computation
            seen = {key: entries[key][0] for key in (*shared, *locked)}
            raise _Computed(writes, result, seen) from None
        except StateflowError:
            return None
        done = self._commit_staged(
            staged,
            [(key, entries[key][0]) for key in locked],
            [(key, entries[key][0]) for key in shared],
            list(dict.fromkeys(claims)),
            origin or {},
            {w.key: loaded[w.key].row.revision for w in writes},
            fresh,
        )
        return MOVED if done is None else (done, result)

    def _locked_made(
        self,
        tx: Tx,
        shared: Sequence[DocKey],
        locked: Sequence[DocKey],
        fresh: Fresh,
        compute: Callable[[dict[DocKey, Document]], tuple[Sequence[Write], R]],
        origin: dict[str, Any] | None,
        claims: Sequence[tuple[str, str]],
        names: list[str] | None,
        outline_names: Sequence[str],
        checked: bool,
    ) -> tuple[Commit, R] | _Computed | None:
        """The locked path's common case, once its locks are held and what moved is read
        (``fresh.rows``: every row as read under them; the member heads and named values
        cached): ``compute`` on the documents as held here at those rows and the rows planned
        by :meth:`_plan_made`, as the unlocked attempt does, then written in ``tx`` with no
        check (nothing can move under these locks; the claims are recorded first, as
        ``_commit_in`` records them). Several writers of one document take
        this path on every write (each finds the document moved by the one before): it is
        the time the others wait. ``_Computed``: computed, but the general path must write it
        (``_plan_made`` declined); None: a document is not all held here (a member not read
        and not cached at its revision), so the general path reads and computes."""
        rows = fresh.rows
        entries = {}
        for key in (*shared, *locked):
            known = self._known(key, rows[key])
            if known is None:
                return None
            entries[key] = known
        docs = self._documents(entries, shared, names, outline_names)
        if docs is None:
            return None
        writes, result = compute(docs)  # (it raises under the locks: what it raises is the answer)
        validate_writes(writes, origin, values=not checked)
        read = dict(rows)
        fresh.at = utc_now()
        made = self._plan_made(writes, entries, shared, fresh)
        if made is None:
            fresh.clear()  # (what a plan given up half way left for the caches)
            fresh.rows.update(read)
            return _Computed(writes, result, {})
        keys, plans = made
        self._record_claims(tx, claims, fresh.at)
        revisions = {w.key: entries[w.key][0].revision for w in writes}
        return self._commit_plans(tx, keys, plans, origin or {}, claims, revisions, fresh), result

    def _documents(
        self,
        entries: Mapping[DocKey, tuple[DocRow, dict[str, Any] | None, Heads]],
        shared: Sequence[DocKey],
        names: list[str] | None,
        outline_names: Sequence[str],
    ) -> dict[DocKey, Document] | None:
        """The documents ``compute`` is handed, from those held here (``_known``): as the
        locked read hands them (see ``_optimistic``); None when a named outline's heads are
        not cached."""
        docs = {}
        handed = self._handed
        for key, (row, body, _) in entries.items():
            if (names is not None or outline_names) and key not in shared and body is not None:
                heads = None
                if outline_names:
                    heads = self._heads.get(row.doc_id, row.revision)
                    if heads is None:
                        return None  # the heads are not cached at this revision
                docs[key] = named_document(key, row, body, heads, names, outline_names)
                continue
            doc = handed.get(key)
            if (
                doc is None
                or doc.body is not body
                or doc.revision != row.revision
                or doc.seq != row.updated_seq
            ):
                doc = made_document(key, row.revision, body, row.updated_seq, {})
                if len(handed) >= HANDED_MAX:
                    handed.clear()  # bounded; a miss only builds the document again
                handed[key] = doc
            docs[key] = doc
        return docs

    def _plan_made(
        self,
        writes: Sequence[Write],
        entries: Mapping[DocKey, tuple[DocRow, dict[str, Any] | None, Heads]],
        shared: Sequence[DocKey],
        fresh: Fresh,
    ) -> tuple[list[DocKey], list[WritePlan]] | None:
        """An optimistic write's plans in its common case, straight from each write's edits and
        the body it says they make (``Write.bodies``, a patch's merge or a diff): what
        :meth:`_stage` and :meth:`_plan_doc` make of them, the same rows, through
        :meth:`_plan_groups` — no ``Loaded`` copy of the members, no ``Stage``, no edit applied.
        The documents written and their plans, in key order; None where the general path must
        decide (``fresh`` may then hold part of a plan: the caller clears it) — a write to a
        shared, unseen or absent document, a failed compare-and-set, a whole-document edit, a
        member the write was not computed on as held here, one deleted by more than its own
        delete, one that is or becomes a tree, or nothing to write."""
        keys: list[DocKey] = []
        plans: list[WritePlan] = []
        for write in writes if len(writes) < 2 else sorted(writes, key=_WRITE_KEY):
            key = write.key
            known = entries.get(key)
            if known is None or key in shared:
                return None
            row, before, heads = known
            if write.expect is not None and write.expect != row.revision:
                return None
            if not write.edits:
                continue
            if write.bodies is None or before is None:
                return None
            made_from, made_to = write.bodies
            if made_to is None:
                return None
            groups: dict[str, list[Any]] = {}
            paths: list[list[Any]] = []  # (the change's paths by default: the edits')
            for edit in write.edits:
                path, value = edit.path, edit.value
                if not path:
                    return None
                name: str = path[0]  # type: ignore[assignment]
                listed = list(path)  # (one list for the edit's entry and its path: both only encoded)
                paths.append(listed)
                entry = [listed] if value is MISSING else [listed, value]
                group = groups.get(name)
                if group is not None:
                    group.append(entry)
                    continue
                # computed on the very member held here (values are never mutated), as ``_stage``
                # asks before it takes the write's own result
                if made_from.get(name, MISSING) is not before.get(name, MISSING):
                    return None
                groups[name] = [entry]
            for name, group in groups.items():
                # a member the write deletes: only by its own delete (else its edits would apply)
                if name not in made_to and (name not in before or group != [[[name]]]):
                    return None
            encoded = encode_trusted(paths) if write.paths is None else _paths_of(write)
            plan = self._plan_groups(key.state, row, before, heads, made_to, groups, encoded, fresh)
            if plan is None:
                return None
            keys.append(key)
            plans.append(plan)
        return (keys, plans) if plans else None

    def _still_contended(self, seen: Mapping[DocKey, DocRow | None], now: Mapping[DocKey, DocRow]) -> None:
        """Under the row locks: a document another writer wrote since this store last saw it
        stays contended (its next write here waits for the lock again, instead of reading and
        computing on what will have moved by the time it commits: with several writers on one
        document each such attempt lost, and its work took the CPU the lock holder needed);
        one nobody else wrote since is not (the next write tries without the lock again)."""
        until = 0.0
        for key, was in seen.items():
            row = now.get(key)
            if was is None or row is None or was.doc_id != row.doc_id:
                continue
            if row.revision > was.revision:
                until = until or time.monotonic() + CONTENDED_SECONDS
                self._contended[key] = until
            else:
                self._contended.pop(key, None)

    def _lost(self, keys: Sequence[DocKey]) -> None:
        """An unlocked commit found a document moved, one whose row this store had seen (a guess
        that a document was new proves nothing): another writer got there first. While they keep
        writing, its writes here take the lock at once instead of computing on what will have
        moved again, and then taking the lock anyway (SQLite: two turns in the writers' queue
        for one call, the second as long as a locked write's)."""
        known = self._rows_known
        until = time.monotonic() + CONTENDED_SECONDS
        self._contended.update((key, until) for key in keys if known.get(key, NO_ROW).doc_id)

    def _served_contended(self, done: Served) -> None:
        """After a memory patch merged for all (``patch_on_server``: the server's merge, or the
        SQLite turn that carried it): a document another writer wrote since this store's last
        such patch stays contended a while longer; where nobody did, it is left to lapse when it
        was due (not dropped at once: with several writers, one of them finding a turn nobody
        else took is common, and its next write would try without the lock, lose, and take the
        locked path — several merges' turns)."""
        until = time.monotonic() + CONTENDED_SECONDS
        last = self._served_revisions
        if len(last) > KNOWN_ROWS_MAX:
            last.clear()
        for key, revision in done.commit.revisions.items():
            if last.get(key) != done.docs[key].revision:
                self._contended[key] = until
            last[key] = revision

    def _is_contended(self, keys: Sequence[DocKey]) -> bool:
        """Whether an optimistic read of one of ``keys`` lost to another writer a moment ago."""
        contended = self._contended
        if not contended:
            return False
        now = time.monotonic()
        if len(contended) > KNOWN_ROWS_MAX:
            for key, until in list(contended.items()):
                if until < now:
                    contended.pop(key, None)
        return any(contended.get(key, 0.0) > now for key in keys)

    def _read_then_commit(
        self,
        locked: Sequence[DocKey],
        shared: Sequence[DocKey],
        names: list[str] | None,
        outline_names: list[str],
        compute: Callable[[dict[DocKey, Document]], tuple[Sequence[Write], R]],
        origin: dict[str, Any] | None,
        claims: Sequence[tuple[str, str]],
        fresh: Fresh,
        checked: bool = False,
        along: Mapping[DocKey, Mapping[str, Within]] | None = None,
    ) -> tuple[Commit, R] | _Moved | None:
        """Read the documents in one snapshot with no lock held, compute and stage the writes
        there, then commit checking that none of them moved (on PostgreSQL one statement, which
        joins group commit): other writers of the same documents wait only for that statement,
        never for this call's reads and merge. ``MOVED`` when a document moved meanwhile
        (nothing was written); None when the locked path has to decide (a document
        has no row yet, an op id is taken, ``compute`` refused, nothing to write)."""
        keys = sorted({*shared, *locked})
        with self._read_tx() as tx:
            statements = self._rows_queries(keys)
            parts = len(statements)
            if claims:
                statements.append(claims_query(claims))
            answers = tx.all_of(statements)
            if claims and answers[parts]:
                return None  # the locked path refuses it, or answers the replay
            rows = rows_by_key(answers[0] if parts == 1 else [r for part in answers[:parts] for r in part])
            if any(key not in rows for key in locked):
                return None  # a new document: the locked path creates its row
            for key in shared:  # (one without a row is checked to have none still)
                rows.setdefault(key, NO_ROW)
            wanted: list[Wanted] = [
                (k, rows[k].doc_id, rows[k].revision, None if k in shared else names)
                for k in keys
                if rows[k].present
            ]
            fetched, skeletons = self._fetch_along(tx, wanted, outline_names, along, rows)
            docs: dict[DocKey, Document] = {}
            loaded: dict[DocKey, Loaded] = {}
            for key in keys:
                row = rows[key]
                body = None
                shapes: dict[str, Any] = {}
                entry = Loaded(row, complete=names is None or not row.present)
                if row.present:
                    members_of, shapes = fetched[row.doc_id]
                    entry.members = {n: (v, p, size) for n, p, v, size in members_of}
                    entry.by_path = skeletons.get(row.doc_id)
                    body = {n: v for n, _, v, _ in members_of}
                docs[key] = Document(key, row.revision, body, row.updated_seq, shapes)
                if key not in shared:
                    loaded[key] = entry
            try:
                writes, result = compute(docs)
                validate_writes(writes, origin, values=not checked)
            except Exception:  # the locked path computes again and raises what it raises
                return None
            plan = _offline_plan(writes, loaded)
            if not plan:
                return None
            try:
                # members the write names but the read did not hold are read in this snapshot
                staged = [(w, e, self._stage(tx, w, e)) for w, e in plan]
            except StateflowError:
                return None
        # every row as read (a shared one without a row too: the commit checks it has none
        # still; a locked one the write leaves alone, as a scope a patch does not touch), so the
        # next write computes on them with no read (``_optimistic``), as after a locked one. (A
        # locked row left out would look new to the next optimistic attempt: a row created
        # again under another id, a commit whose check then fails, and this path again.)
        fresh.rows.update({key: rows[key] for key in keys})
        done = self._commit_staged(
            staged,
            [(key, rows[key]) for key in locked],
            [(key, rows[key]) for key in shared],
            list(dict.fromkeys(claims)),
            origin or {},
            {w.key: loaded[w.key].row.revision for w in writes},
            fresh,
        )
        return MOVED if done is None else (done, result)

    def _commit_staged(
        self,
        staged: Sequence[tuple[Write, Loaded, Stage]],
        locked: Sequence[tuple[DocKey, DocRow]],
        shared: Sequence[tuple[DocKey, DocRow]],
        claims: Sequence[tuple[str, str]],
        origin: dict[str, Any],
        revisions: dict[DocKey, int],
        fresh: Fresh,
    ) -> Commit | None:
        """The end of every write computed without row locks: plan the staged writes and commit
        them if none of the ``locked`` and ``shared`` rows moved (None: nothing was written),
        and the outcome (``revisions``: the written documents' current ones), with what
        ``fresh`` holds for the caches stamped with the commit's seq and time."""
        plans = [self._plan_doc(w, e, stage, fresh) for w, e, stage in staged]
        committed = self._commit_planned(locked, shared, claims, origin, plans)
        if committed is None:
            return None
        keys = [w.key for w, _, _ in staged]
        _stamp(keys, plans, *committed, fresh)
        return _committed(keys, plans, revisions, *committed)

    def _absent_rows(self, keys: Sequence[DocKey]) -> dict[DocKey, DocRow] | None:
        """Rows (absent, revision 0) for documents that have none, before an optimistic commit
        that names them — created now, or created by that commit (a backend's choice); None
        where the locked path had better create them (it costs no round trip here). Keys known
        to have a row are left out of the answer."""
        return None

    def _known(
        self, key: DocKey, row: DocRow | None = None
    ) -> tuple[DocRow, dict[str, Any] | None, Heads] | None:
        """A document as last seen here — its row, body and member heads (shared, read-only) —
        if all of it is cached; at ``row`` where given (one read under this write's locks), else
        at the row this store last saw."""
        if row is None:
            row = self._rows_known.get(key)
            if row is None:
                return None
        if not row.present:
            return row, None, {}
        # one entry per document: its heads at this revision and, mostly, its body assembled
        entry = self._heads.entry(row.doc_id, row.revision)
        if entry is None:
            return None
        heads = entry[1]
        if entry[2] is not None:
            return row, entry[2], heads
        doc_id = row.doc_id
        values = self._cache.lookup_all([((doc_id, name), h[3]) for name, h in heads.items()])
        if values is None:
            return None
        body = dict(zip(heads, values, strict=True))
        # bodies are shared read-only, like every cached value
        self._heads.put(doc_id, row.revision, heads, body, row.body_size)
        return row, body, heads

    def _known_body(self, key: DocKey) -> tuple[DocRow, dict[str, Any] | None] | None:
        """:meth:`_known`'s row and body alone, for a caller that reads no heads (the shared
        documents of ``write_whole``): a body held without its heads (``cache.Held``) is
        answered without making them."""
        row = self._rows_known.get(key)
        if row is None:
            return None
        if not row.present:
            return row, None
        body = self._heads.body(row.doc_id, row.revision)
        if body is not None:
            return row, body
        found = self._known(key, row)  # (heads held without the body: assembled)
        return None if found is None else (row, found[1])

    def _commit_planned(
        self,
        locked: Sequence[tuple[DocKey, DocRow]],
        shared: Sequence[tuple[DocKey, DocRow]],
        claims: Sequence[tuple[str, str]],
        origin: dict[str, Any],
        plans: Sequence[WritePlan],
    ) -> tuple[int, str] | None:
        """Commit planned rows if every document is still at the row given (``NO_ROW``: none)
        and no claim is taken; the new seq and the transition's time, or None (nothing written).

        Here: one write transaction that checks, then writes (SQLite's writer lock excludes
        every other writer meanwhile, so the check holds to the commit). The time is taken under
        that lock, so on one file times follow seq order as on the locked path."""
        counted = None
        counts = self.counts_in_transitions
        if counts:  # (from the plans alone: before the turn, which other writers wait for)
            if len(plans) == 1:  # (most commits: one document)
                counted = counted_one(plans[0], locked)
            else:
                counted = encoded(count_plans(plans, lambda: [(r.doc_id, k) for k, r in locked]))
        with self._write_tx() as tx:
            if self.times_as_micros:
                at, stored = utc_now_stored()
            else:
                at = stored = utc_now()
            # the checks ride with the transition's insert: no row comes back when one fails
            params: list[Any] = [stored, encode_trusted(origin)]
            keys = self.transition_keys
            if keys:
                params.append(changed_keys(plans))
            # (NULL where nothing moved — a store ``put``'s rewrite —: the column left out, not
            # a None bound, which the driver adapts through a call of its adapter)
            moved = counted is not None
            if moved:
                params.append(counted)
            shape = unmoved((*shared, *locked), params)
            for claim in claims:
                params += claim
            inserted = tx.insert_one(checked_transition(keys, shape, len(claims), moved), params, "seq")
            if inserted is None:
                return None
            seq = inserted
            # (no ``tx.batch``: a backend that pipelines commits through its own
            # ``_commit_planned``; the no-op batch entered and left cost ~2,000 instructions)
            if claims:
                tx.run(
                    "INSERT INTO applied_ops (scope, op_id, applied_at, seq) VALUES "
                    + ", ".join(["(?, ?, ?, ?)"] * len(claims)),
                    [v for scope, op_id in claims for v in (scope, op_id, at, seq)],
                )
            # (the tuple made in C: a NamedTuple's own ``__new__`` is a Python call, ~1,200 more)
            self._emit(tx, plans, _new_tuple(SeqRef, ("?", (seq,))))
            if counts and seq % FOLD_EVERY == 0:  # (``_fold_due``, inline: every commit asks)
                self._fold_counts(tx)
            return seq, at

    def _transition(
        self, tx: Tx, at: str, origin: dict[str, Any], changed: str | None, counted: str | None = None
    ) -> tuple[Callable[[], int], SeqRef]:
        """Insert the transition row; return how to get its seq and how statements name it."""
        seq_of = self._insert_transition(tx, at, origin, changed, counted)
        if self.current_seq_sql is None:
            return seq_of, SeqRef("?", (seq_of(),))
        return seq_of, SeqRef(self.current_seq_sql, ())

    def _insert_transition(
        self, tx: Tx, at: str, origin: dict[str, Any], changed: str | None, counted: str | None = None
    ) -> Callable[[], int]:
        """Insert the transition row; return how to get its seq (maybe only after the batch)."""
        keys, counts = self.transition_keys, self.counts_in_transitions
        params: list[Any] = [self._stored_time(at), encode_trusted(origin)]
        if keys:
            params.append(changed)
        if counts:
            params.append(counted)
        seq = tx.insert_one(_TRANSITION_INSERTS[keys, counts], params, "seq")
        assert seq is not None
        return lambda: seq

    def _fold_due(self, tx: Tx, seq: int) -> None:
        """After the rows of a commit whose transition keeps its counters' deltas
        (``counts_in_transitions``), in its transaction: the fold of every ``FOLD_EVERY``-th
        seq — one commit in that many, whichever process and path wrote it. In the commit's own
        transaction, not one after it: one writer holds the database either way, and so no
        crash can leave the fold undone or done twice (the deltas and ``counts_folded`` move
        together, with the commit)."""
        if seq % FOLD_EVERY == 0:
            self._fold_counts(tx)

    def _stage(self, tx: Tx, write: Write, entry: Loaded, by_path: bool = True) -> Stage:
        """Apply the write's edits to the loaded members; nothing is written yet. (An edit's
        value is tested against MISSING here, not through ``is_delete``: a call per edit.)
        A member held as a tree and not in memory is staged on its skeleton along the edits'
        paths (``_stage_by_path``), unless ``by_path`` is False: then, as where the skeleton
        does not say enough for its tree's update, it is read whole."""
        row = entry.row
        stage = Stage(row.present)
        key = write.key
        if entry.by_path and by_path:
            stage.by_path = dict(entry.by_path)
        # A member as the write's edits make it, when the write says so itself: it was computed
        # from this very object (values are never mutated, so the same object is the same
        # value) — then its result is taken, not the edits applied again. (A deleted member
        # is MISSING there, and the deletion is applied: the same result.)
        made_from: Mapping[str, Any] = {}
        made_to: Mapping[str, Any] = {}
        whole_free = False
        if write.bodies is not None:
            before, after_body = write.bodies
            if after_body is not None:
                made_from, made_to, whole_free = before, after_body, True
        made: set[str] = set()
        gone: set[str] | None = None  # (see the whole-document edit below)
        # (the stage's fields as locals while the edits run, set back at the end)
        values, touched, changed, present = stage.values, stage.touched, stage.changed, stage.present
        members = entry.members
        if not all([e.path for e in write.edits]):  # (a list: cheaper than a generator for a few)
            whole_free = False
            if (
                row.present
                and not entry.complete
                and all([not e.path and e.value is MISSING for e in write.edits])
            ):
                # the document deleted whole: its members go by name (their sizes counted), so
                # their values — a large member's whole tree — are never read
                for member, head in (self._heads_at(tx, key, row) or {}).items():
                    if member not in members:
                        members[member] = (MISSING, head[2], head[4])
            else:
                self._load_members(tx, key, entry, None)
            values = {n: v for n, (v, _, _) in members.items()}
            touched = dict.fromkeys(values)
        elif row.present and not entry.complete and self._whole_candidate(key.state, row):
            self._load_members(tx, key, entry, None)  # (its form follows from the whole body)
        elif row.present and not entry.complete:
            # the members the edits name that are not in hand, read together (their heads and
            # values in a statement or a few): one read per member walked the document's heads
            # each time, quadratic in the edits of a commit that names many
            # (a top-level member's name is a string: ``validate_writes``)
            wanted = cast("list[str]", [name for e in write.edits if (name := e.path[0]) not in members])
            if wanted and by_path and tx is not OFFLINE:
                wanted = self._stage_by_path(tx, write, entry, stage, wanted)
            if wanted:
                self._load_members(tx, key, entry, wanted)
        for edit in write.edits:
            path, value = edit.path, edit.value
            if not path:
                # the members written before it are overwritten: the document's own (to delete
                # or rewrite) and the new body's are what is left, in that order, so that a
                # member new to the document takes its place from this edit on, as in a replay
                # of the change (which keeps its edits from the last whole-document edit on)
                values = {n: MISSING for n in values if n in members}
                if value is MISSING:
                    present = False
                else:
                    values |= value
                    present = True
                touched = dict.fromkeys(values)
                changed = {n: [((), False)] for n in values}  # set whole
                # the document's members it deletes: the next edit of one is its first touch
                # from here on (the replay's order: its edits from this one on)
                gone = {n for n, v in values.items() if v is MISSING}
                continue
            name = path[0]
            assert isinstance(name, str)
            if gone and name in gone:
                gone.discard(name)
                del touched[name]
            if name not in values:  # (every member named is in hand: read above)
                have = members.get(name) if row.present else None
                values[name] = have[0] if have else MISSING
            if not present:
                if value is MISSING:
                    touched[name] = None  # nothing to delete, but touched: its place is taken
                    continue
                present = True
            if values[name] is MISSING and value is not MISSING and row.present and name in members:
                # a member of the document this write deleted, written again: a new row, at
                # the next place (a replay of the change deletes it and appends it there)
                if stage.reborn is None:
                    stage.reborn = set()
                stage.reborn.add(name)
            if name in made:
                pass  # the write's own result already holds every edit of this member
            elif (
                whole_free
                and made_from.get(name, MISSING) is values[name]
                and (after := made_to.get(name, MISSING)) is not MISSING
            ):
                values[name] = after
                made.add(name)
            else:
                try:  # (the edit applied to its member, the places it names from the root)
                    values[name] = apply_below(values[name], path, 1, value)
                except Conflict as exc:
                    raise Conflict(f"{key}: {exc}") from exc
            touched[name] = None
            edited = changed.get(name)
            if edited is None:
                changed[name] = [(path[1:], value is MISSING)]
            else:
                edited.append((path[1:], value is MISSING))
        stage.values, stage.touched, stage.changed, stage.present = values, touched, changed, present
        try:
            self._stage_trees(tx, key, entry, stage)
        except (NeedsWhole, NotHeld):
            for name in stage.by_path or ():
                entry.members.pop(name, None)
            entry.by_path = None
            return self._stage(tx, write, entry, by_path=False)
        return stage

    def _stage_by_path(
        self, tx: Tx, write: Write, entry: Loaded, stage: Stage, wanted: list[str]
    ) -> list[str]:
        """Of the members ``wanted`` by the write's edits, those held as trees and not in memory
        (the first write after a restart beside a large member) put in ``entry`` as skeletons
        read along the edits' paths (``tree_skeleton``), not read whole: the edits are applied
        to a skeleton as to the value, and the tree updated from it. The others are returned,
        to be read as before. A member edited whole (or deleted), or whose edits' paths cannot
        say where it changes (a key deleted and set again), is among them."""
        row = entry.row
        heads = self._heads_at(tx, write.key, row)
        if heads is None or all((h := heads.get(name)) is None or h[4] <= TREE_MIN for name in wanted):
            return wanted  # (most writes: no tree member)
        paths: dict[str, list[tuple[tuple[str | int, ...], bool]]] = {}
        for edit in write.edits:
            paths.setdefault(cast(str, edit.path[0]), []).append((edit.path[1:], edit.value is MISSING))
        rest = []
        for name in dict.fromkeys(wanted):
            edits = paths[name]
            found = None
            if all([path for path, _ in edits]):  # (none sets or deletes the member whole)
                found = self._skeleton(tx, write.key, row, heads.get(name), tree_update.where_of(edits))
            if found is None:
                rest.append(name)
                continue
            entry.members[name] = (found.skeleton.value, *found.head)
            if stage.by_path is None:
                stage.by_path = {}
            stage.by_path[name] = found.by_path
        return rest

    def _heads_at(self, tx: Tx, key: DocKey, row: DocRow) -> Mapping[str, MemberHead] | None:
        """A present document's member heads at its revision: cached, else read (and kept)."""
        heads = self._heads.get(row.doc_id, row.revision)
        if heads is None:
            self._fetch_many(tx, [(key, row.doc_id, row.revision, [])])  # (the heads alone)
            heads = self._heads.get(row.doc_id, row.revision)
        return heads

    def _skeleton(
        self, tx: Tx, key: DocKey, row: DocRow, head: MemberHead | None, where: Within
    ) -> _Skeletal | None:
        """The member ``head`` describes as its skeleton along ``where``, when it is held as a
        tree and not in memory (in memory, or inline, it is had whole for nothing)."""
        if head is None or head[4] <= TREE_MIN or not where:
            return None
        if self._cache.lookup((row.doc_id, head[1]), head[3])[0]:
            return None
        root = self._root_of(tx, row, head[1])
        if root is None:
            return None
        what = f"{key} member {head[1]!r}"
        holds = self.holds_sql  # (a key of a large object: found where its bytes are)
        skeleton = tree_skeleton.skeleton(
            root,
            where,
            self._node_cache.getter(tx, what),
            partial(load_tree, tx, what=what),
            None if holds is None else self._node_cache.scanner(tx, what, holds),
        )
        return _Skeletal(skeleton, ByPath(skeleton, root, head[5]), (head[2], head[4]))

    def _fetch_along(
        self,
        tx: Tx,
        wanted: list[Wanted],
        outlines: Sequence[str],
        along: Mapping[DocKey, Mapping[str, Within]] | None,
        rows: Mapping[DocKey, DocRow],
    ) -> tuple[
        dict[int, tuple[list[tuple[str, int, Any, int]], dict[str, Any]]], dict[int, dict[str, ByPath]]
    ]:
        """:meth:`_fetch_many`, but a member ``along`` names for its document (see
        :meth:`update`) that is held as a tree and not in memory is its skeleton along the
        paths given, not read whole; and those skeletons by document id."""
        skeletons: dict[int, dict[str, ByPath]] = {}
        if not along:
            return self._fetch_many(tx, wanted, outlines), skeletons
        extra: dict[int, list[tuple[str, int, Any, int]]] = {}
        narrowed: list[Wanted] = []
        for key, doc_id, revision, names in wanted:
            paths = along.get(key)
            row = rows.get(key)
            heads = None
            if paths and names is not None and row is not None and row.revision == revision:
                heads = self._heads_at(tx, key, row)
            if heads is not None and paths and names is not None and row is not None:
                for name, where in paths.items():
                    if name not in names:
                        continue
                    found = self._skeleton(tx, key, row, heads.get(name), where)
                    if found is None:
                        continue
                    skeletons.setdefault(doc_id, {})[name] = found.by_path
                    extra.setdefault(doc_id, []).append(
                        (name, found.head[0], found.skeleton.value, found.head[1])
                    )
                if doc_id in skeletons:
                    names = [n for n in names if n not in skeletons[doc_id]]
            narrowed.append((key, doc_id, revision, names))
        fetched = self._fetch_many(tx, narrowed, outlines)
        for doc_id, members in extra.items():
            fetched[doc_id][0].extend(members)
            fetched[doc_id][0].sort(key=_SECOND)
        return fetched, skeletons

    def _stage_trees(self, tx: Tx, key: DocKey, entry: Loaded, stage: Stage) -> None:
        """Update the trees of touched members held as trees, by path (the nodes to write)."""
        if not entry.row.present or not stage.present:
            return  # (no member held as a tree before: nothing to update)
        members = entry.members
        for name in stage.touched:
            old = members.get(name)
            if old is None or old[2] <= TREE_MIN:
                continue  # (most writes: every member small)
            value = stage.values.get(name, MISSING)
            if value is MISSING:
                continue
            what = f"{key} member {name!r}"
            where = tree_update.where_of(stage.changed.get(name, [((), False)]))
            by_path = stage.by_path.get(name) if stage.by_path else None
            if by_path is not None:  # its skeleton, and every position from the tree
                updated = tree_update.update(
                    by_path.root,
                    old[2],
                    old[0],
                    value,
                    self._node_cache.getter(tx, what),
                    where,
                    None,
                    by_path.skeleton.shapes,
                )
                if updated.root is None or updated.size <= TREE_MIN:
                    raise NeedsWhole(f"{what} goes inline")
                stage.trees[name] = updated
                continue
            if tx is OFFLINE:  # no transaction: the root and the nodes from the caches, or the lock
                known = self._roots.get(entry.row.doc_id)
                if known is None or known[0] != entry.row.revision or name not in known[1]:
                    raise _NeedsLock(f"{what}: its root is read under the lock")
                get = _cached_only(self._node_cache, what)
                stage.trees[name] = tree_update.update(
                    known[1][name], old[2], old[0], value, get, where, self._positions
                )
                continue
            root = self._root_of(tx, entry.row, name)
            if root is None:
                continue  # a large member written before trees existed: built whole, once
            # nodes through the decoded-node cache: a node's id is its hash, so a cached one is
            # never stale, and the path an edit walks is mostly the one the last edit wrote
            stage.trees[name] = tree_update.update(
                root, old[2], old[0], value, self._node_cache.getter(tx, what), where, self._positions
            )

    def _root_of(self, tx: Tx, row: DocRow, name: str) -> bytes | None:
        """The root of a member's tree (None: the member is inline) at the document's revision:
        as the last commit here left it (every write moves the revision on, so an entry is never
        stale), else read."""
        known = self._roots.get(row.doc_id)
        if known is not None and known[0] == row.revision and name in known[1]:
            return known[1][name]
        found = tx.one("SELECT root FROM members WHERE doc_id = ? AND name = ?", (row.doc_id, name))
        if found is None or found[0] is None:
            return None
        root = bytes(found[0])
        # read under the lock at this revision: committed, so it may be kept
        known = self._roots.get(row.doc_id)
        if known is None or known[0] < row.revision:
            self._roots[row.doc_id] = (row.revision, {name: root})
        elif known[0] == row.revision:
            known[1][name] = root
        return root

    def _plan_doc(self, write: Write, entry: Loaded, stage: Stage, fresh: Fresh) -> WritePlan:
        """The rows one document's write changes, decided before any statement is sent (the
        statements themselves are :meth:`_emit`'s)."""
        row = entry.row
        edits = write.edits
        if not row.present and len(edits) == 1 and not edits[0].path and not edits[0].is_delete:
            # a first body (or one after a delete) set whole: its rows straight from it
            return self._plan_new(write.key.state, row, stage.values, None, _paths_of(write), fresh)
        doc_id = row.doc_id
        revision = row.revision + 1
        size = row.body_size
        position = row.next_position
        refs: dict[int, bytes] = {}  # subtrees of the members' new trees, by id() of the value
        present = stage.present
        plan = WritePlan(doc_id, revision, present, row.present)
        # the member heads after this write follow from those before it, when they are known
        before = self._heads.get(doc_id, row.revision) if row.present else {}
        heads = None if before is None else dict(before)
        had = self._roots.get(doc_id)
        # the roots of members held as trees after this write (a member not named: not known)
        roots = dict(had[1]) if had is not None and had[0] == row.revision and row.present else {}
        # (the loop's lookups bound once: it runs for every member written)
        values, trees, old_members = stage.values, stage.trees, entry.members if row.present else {}
        reborn = stage.reborn
        deletes: list[tuple[int, str]] = []
        update_rows: list[tuple[Any, ...]] = []
        insert_rows: list[tuple[Any, ...]] = []
        nodes: dict[bytes, bytes] = {}
        cache, updates, inserts = fresh.members.append, update_rows.append, insert_rows.append
        effective = effective_edits(edits)
        # a body set whole (only ever the first effective edit): its members keep the places
        # they had and new ones go after, so history must record it in that order — a replay
        # sets the body as recorded, and must give the keys this write leaves
        placed: dict[str, int] | None = (
            {} if effective and not effective[0].path and effective[0].value is not MISSING else None
        )
        for name in stage.touched:
            value = values[name]
            old = old_members.get(name)
            if value is MISSING or not present:
                if old is not None:
                    deletes.append((doc_id, name))
                    size -= old[2]
                if heads is not None:
                    heads.pop(name, None)
                roots.pop(name, None)
                continue
            tree = trees.get(name) if trees else None
            if tree is None:  # (``member_row``'s common case inline: a small member, one row)
                body = encode_trusted(value)
                encoded = len(body)
                root = None
                if encoded > TREE_MIN:
                    body, root, encoded = member_row(value, None, nodes, refs, body)
            else:
                body, root, encoded = member_row(value, tree, nodes, refs)
            if root is None:
                if roots:
                    roots.pop(name, None)
            else:
                roots[name] = root
                if tree is not None:
                    fresh.keep_nodes(tree.nodes)
            by_path = stage.by_path.get(name) if stage.by_path else None
            if by_path is None:
                outline = encoded_outline(value) if type(value) is dict else None
                cache(((doc_id, name), revision, value, encoded))
            else:  # a skeleton: its outline follows from the one before, and no value is kept
                outline = _outline_after(by_path.outline, value, stage.changed[name])
            if old is not None and (reborn is None or name not in reborn):
                updates((body, revision, encoded, outline, root, doc_id, name))
                size += encoded - old[2]
                at = old[1]
            else:
                if old is not None:  # deleted and written again by this write: a new row, last
                    deletes.append((doc_id, name))
                    size -= old[2]
                inserts((doc_id, name, position, revision, encoded, outline, body, root))
                at = position
                position += 1
                size += encoded
            if heads is not None:
                heads[name] = (doc_id, name, at, revision, encoded, outline)
            if placed is not None:
                placed[name] = at
        if deletes:
            plan.deletes = deletes
        if update_rows:
            plan.updates = update_rows
        if insert_rows:
            plan.inserts = insert_rows
        if nodes:
            plan.nodes = nodes
        if not present:
            size = 0
            heads = {}
            roots = {}
        if roots or had is not None:  # (a document with no tree member never needs an entry)
            fresh.keep_roots(doc_id, (revision, roots))
        if heads is not None:
            heads_after = {h[1]: h for h in sorted(heads.values(), key=_POSITION)}
            fresh.heads[doc_id] = (revision, heads_after, None, 0)
            if not present:
                if self.keeps_bodies:
                    fresh.keep_body(doc_id, (revision, None, 0))
            elif entry.complete or not row.present:
                touched = stage.touched
                whole = {n: values[n] if n in touched else old_members[n][0] for n in heads_after}
                if row.present:
                    # a document written again is likely written again: the next write finds it
                    # whole here instead of assembling it from the member caches (``_known``)
                    fresh.heads[doc_id] = (revision, heads_after, whole, size)
                if self.keeps_bodies:
                    fresh.keep_body(doc_id, (revision, whole, size))
        plan.paths = _paths_of(write)
        room = self._change_room(plan)
        groups: dict[str, list[Any]] = {}
        held: dict[str, bytes] = {}
        if placed is not None:
            body = effective[0].value
            # (a member the write's later edits delete again: its place is moot, put last)
            ordered = sorted(body, key=lambda n: placed.get(n, position))
            if ordered != list(body):
                effective = [Edit((), {n: body[n] for n in ordered}), *effective[1:]]
        for edit in effective:
            path, value = edit.path, edit.value
            member = str(path[0]) if path else ""
            # (refs: only when a member is held as a tree, which few writes touch)
            ref = refs.get(id(value)) if refs and path and type(value) in (dict, list) else None
            if ref is None:  # (edit.to_json(), without the calls)
                entry_json = [list(path)] if value is MISSING else [list(path), value]
                group = groups.get(member)
                if group is None:
                    groups[member] = [entry_json]
                else:
                    group.append(entry_json)
            else:  # the value is a subtree of the member's new tree: stored as its ref
                groups.setdefault(member, []).append([list(path), None, ref.hex()])
                held[member] = held.get(member, b"") + ref
        planned: list[tuple[int, int, str, bytes, bytes | None, int]] = []
        edit_bytes = 0
        # in first-touched order (whole-document edits, if any, first): new members are
        # appended in it, and a replay of the change must append them the same way
        for at, (member, group) in enumerate(groups.items()):
            encoded_group = encode_trusted(group)
            edit_bytes += len(encoded_group)
            planned.append((doc_id, revision, member, encoded_group, held.get(member) if held else None, at))
        whole_only = len(planned) == 1 and planned[0][2] == ""
        if not held and (edit_bytes <= INLINE_EDITS_MAX or (whole_only and edit_bytes <= WHOLE_INLINE_MAX)):
            parts = []
            for e in planned:
                parts.append(b"[" + orjson.dumps(e[2]) + b"," + e[3] + b"]")
            inline = b"[" + b",".join(parts) + b"]"
            if room is None or len(inline) <= room:
                plan.inline = inline
                planned = []
        if planned:
            plan.edits = planned
        self._document_after(plan, row, edit_bytes, size, position)
        if self.whole_form and (row.whole or (size <= WHOLE_ROW_MAX and self._whole_bound(write.key.state))):
            names = entry.members if row.present else ()
            self._whole_rows(plan, row, write.key.state, _body_after(entry, stage, plan), names, fresh)
        return plan

    def _whole_candidate(self, state: str, row: DocRow) -> bool:
        """Whether a write of this present document is planned on its whole body: its form after
        the write follows from it (a document in whole form, or one that fits its state's bound
        before the write — one shrunk below it by this write converts on its next)."""
        if not self.whole_form:
            return False
        return row.whole or (row.body_size <= WHOLE_ROW_MAX and 0 < row.body_size <= self._whole_bound(state))

    def _shrunk_into_whole(
        self, tx: Tx, key: DocKey, entry: Loaded, stage: Stage, plan: WritePlan, fresh: Fresh
    ) -> None:
        """A write that leaves a document in member form within its state's whole-form bound,
        planned on only the members it names: the others read now, and the document converted
        (the form follows from the whole body)."""
        size = plan.row.body_size
        if (
            plan.body is not None
            or not plan.present
            or entry.complete
            or size > WHOLE_ROW_MAX
            or size > self._whole_bound(key.state)
        ):
            return
        self._load_members(tx, key, entry, None)
        self._whole_rows(plan, entry.row, key.state, _body_after(entry, stage, plan), entry.members, fresh)

    def _whole_rows(
        self,
        plan: WritePlan,
        row: DocRow,
        state: str,
        body: Mapping[str, Any] | None,
        before: Iterable[str],
        fresh: Fresh,
        encoded: bytes | None = None,
        moved: tuple[list[str], list[str]] | None = None,
    ) -> None:
        """A planned write's form: whole where ``state`` keeps whole bodies and the body after
        the write (``body``, in position order; None: not in hand, member form) fits the
        state's bound — the encoded body in the row, no member rows —, else the member rows
        planned; a document that was in whole form has none, so it gets a row for every member
        (a delete: none). ``before``: the member names before the write (what the counters
        count, ``names_moved``); ``encoded``: the body's encoding where the planner made it;
        ``moved``: the names added and dropped where the planner knows them (a document in
        whole form before the write, whose rows name every member it adds and drops)."""
        doc = plan.row
        doc_id, revision = plan.doc_id, plan.revision
        was_whole = plan.was_whole = row.whole and row.present
        if was_whole and row.marked is not False:  # (its change may be the mark: replaced first)
            plan.copies_mark = row.body_size if row.marked else -1
        if plan.present and body is not None and doc.body_size <= (bound := self._whole_bound(state)):
            data = encode_trusted(body) if encoded is None else encoded
            if len(data) <= bound:
                plan.names_moved = _names_moved(before, body) if moved is None else moved
                plan.body = data
                plan.deletes = plan.updates = plan.inserts = ()
                plan.nodes = NONE
                doc.whole = True
                doc.marked = False  # (the creating write marks its change: ``_plan_new``)
                held = fresh.heads.get(doc_id)
                if held is None or held[0] != revision or held[2] is None:
                    planned = (
                        held[1]
                        if held is not None and held[0] == revision
                        else whole_members(doc_id, revision, data, "a planned body")[0]
                    )
                    fresh.heads[doc_id] = (revision, planned, dict(body), doc.body_size)
                return
        if not was_whole:
            return  # member form before and after: the rows as planned
        plan.body = b""  # leaving whole form (body NULL)
        plan.names_moved = _names_moved(before, body if plan.present else None)
        if not plan.present:
            plan.deletes = plan.updates = plan.inserts = ()
            return
        assert body is not None, "a document in whole form is planned on its whole body"
        written = {u[6]: (u[0], u[2], u[3], u[4]) for u in plan.updates}
        written.update({i[1]: (i[6], i[4], i[5], i[7]) for i in plan.inserts})
        inserts: list[tuple[Any, ...]] = []
        heads: dict[str, MemberHead] = {}
        cache = fresh.members.append
        for position, (name, value) in enumerate(body.items()):
            made = written.get(name)
            if made is None:
                data = encode_trusted(value)
                made = (data, len(data), encoded_outline(value) if type(value) is dict else None, None)
                cache(((doc_id, name), revision, value, made[1]))
            stored, size, outline, root = made
            inserts.append((doc_id, name, position, revision, size, outline, stored, root))
            heads[name] = (doc_id, name, position, revision, size, outline)
        plan.deletes = plan.updates = ()
        plan.inserts = inserts
        if doc.next_position < len(inserts):
            doc.next_position = len(inserts)
        fresh.heads[doc_id] = (revision, heads, dict(body), doc.body_size)

    def _emit(self, tx: Tx, plans: Sequence[WritePlan], seq: SeqRef) -> None:
        """Send the statements of planned document writes (inside the commit's batch)."""
        if len(plans) > 1 and all([_plain_update(p) for p in plans]):
            # several documents' plain updates (a patch_state of several scopes): each kind of
            # row in one statement for all of them, not one per document
            _emit_together(tx, plans, seq)
            return
        sql = _BY_SEQ_SQL.get(seq.sql) or _statements_for(seq.sql)
        for plan in plans:
            body = plan.body  # (None: member form, as before the write)
            if plan.copies_mark is not None:  # (first: the copy is of the row's body before this write)
                _copy_mark(tx, plan.doc_id, plan.revision - 1, plan.copies_mark, self.change_row_max)
            if plan.created is not None:  # a new row, written whole before the rows naming it
                doc = plan.row
                tx.run(
                    sql.document_insert,
                    (
                        doc.doc_id,
                        *plan.created,
                        doc.revision,
                        int(doc.present),
                        *seq.params,
                        doc.snapshot_revision,
                        doc.bytes_since_snapshot,
                        doc.body_size,
                        doc.next_position,
                        body or None,
                    ),
                )
            elif body and not plan.was_whole and plan.was_present:
                tx.run("DELETE FROM members WHERE doc_id = ?", (plan.doc_id,))  # into whole form
            if plan.nodes:
                tx.many(
                    "INSERT INTO nodes (id, body) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
                    list(plan.nodes.items()),
                )
            if plan.deletes and plan.present:  # an absent document loses every member below
                tx.many("DELETE FROM members WHERE doc_id = ? AND name = ?", plan.deletes)
            if plan.updates:
                tx.many(_MEMBER_UPDATE, plan.updates)
            if plan.inserts:
                tx.many(_MEMBER_INSERT, plan.inserts)
            if not plan.present:
                tx.run("DELETE FROM members WHERE doc_id = ?", (plan.doc_id,))
            tx.run(
                sql.change_insert,
                (
                    plan.doc_id,
                    plan.revision,
                    *seq.params,
                    None if plan.paths_apart else plan.paths,
                    plan.inline,
                ),
            )
            if plan.paths_apart:
                tx.run(
                    "INSERT INTO change_paths (doc_id, revision, paths) VALUES (?, ?, ?)",
                    (plan.doc_id, plan.revision, plan.paths),
                )
            if plan.edits:
                tx.many(
                    "INSERT INTO change_edits (doc_id, revision, member, edits, roots, ord) VALUES (?, ?, ?, ?, ?, ?)",
                    plan.edits,
                )
            if plan.snapshot:
                if body:  # a whole-form document's snapshot is its body (as schema 3's were)
                    tx.run(
                        "INSERT INTO snapshots (doc_id, revision, body) VALUES (?, ?, ?)",
                        (plan.doc_id, plan.revision, body),
                    )
                else:
                    self._take_snapshot(tx, plan.doc_id, plan.revision, plan.present)
            if plan.created is not None:
                continue
            after = plan.document  # (the field, not ``row``'s call)
            assert after is not None
            # `present` is indexed: setting it, even to the same value, rewrites an index page
            if body is not None:  # (whole form after the write, or before it)
                if plan.present != plan.was_present:
                    tx.run(
                        sql.document_update_present_body,
                        (int(after.present), body or None, *_document_params(after, seq)),
                    )
                else:
                    tx.run(sql.document_update_body, (body or None, *_document_params(after, seq)))
            elif plan.present != plan.was_present:
                tx.run(sql.document_update_present, (int(after.present), *_document_params(after, seq)))
            else:
                tx.run(sql.document_update, _document_params(after, seq))

    def write_whole(
        self,
        key: DocKey,
        build: Callable[[dict[DocKey, Any], dict[str, Any] | None], Whole],
        origin: dict[str, Any],
        *,
        shared: Sequence[DocKey] = (),
        also: DocKey | None = None,
        exists: bool = False,
    ) -> bool:
        """One document written whole — ``build(shared bodies, current body or None)`` gives
        its new body, the paths it wrote and maybe its members' encodings (:class:`Whole`) — on
        the documents as last seen here: ``update``'s optimistic attempt for this one shape (one
        document, no op id), without the steps only the general one needs (the ``compute``
        contract, the check of every value). ``build`` vouches that the body is plain JSON and
        not the caller's (it raises to refuse: nothing is written). Where the document has no
        body yet, its rows come straight from the body (``_plan_new``: no diff, no staging).
        The same rows, change, history and caches as ``update``; the commit checks that neither
        ``key`` nor a ``shared`` document moved. ``also``: one more shared document that
        changes from write to write (a checkpoint's parent), kept out of the key of the shared
        rows handed before, which a key of its own would miss every time. ``key`` not seen here
        (new, or written before this process or by another) is most likely new: created with no
        read; should it have a row after all, its creation fails, nothing is written, and it is
        read (:meth:`_read_unseen`) and written again on what it holds. ``exists``: the caller
        expects a document there (a writes record of a checkpoint another process put), read
        first where not seen. A document whose cache entry was let go is read again. False when
        it cannot be done so (a shared document moved, nothing to write, a member held as a
        tree): nothing was written, and ``update`` decides."""
        if not self._schema_checked:  # (once per store: no call per write)
            self.check_schema()
        if self._contended and self._is_contended((key,)):  # (mostly none: no call)
            return False
        # the shared documents (a declaration, say) are mostly where they were at this
        # caller's last write: their rows as last seen here, compared in C with those of the
        # last write that handed them (identical, or equal: one state of each), say so,
        # without the member caches
        if type(shared) is not tuple:
            shared = tuple(shared)
        held = self._shared_known
        handed = held.get(shared)
        rows = tuple(map(self._rows_known.get, handed[0] if handed is not None else shared))
        if handed is None or handed[1] != rows:
            bodies: dict[DocKey, Any] = {}
            shared_rows = []
            ordered = _shared_in_order(shared)
            for other in ordered:
                found = self._seen_body(other)
                if found is None:
                    return False  # (a member held as a tree: not read here)
                bodies[other] = found[1]
                shared_rows.append((other, found[0]))
            if len(held) >= HANDED_MAX:
                held.clear()  # bounded; a miss only assembles them again
            handed = held[shared] = (
                tuple(ordered),
                tuple(row for _, row in shared_rows),
                bodies,
                tuple(shared_rows),
                lock_order(ordered[-1]) if ordered else None,  # (the last one's place, for ``also``)
            )
        bodies, rows_held = handed[2], handed[3]
        if also is not None:
            found = self._known_body(also)
            followed = found is not None  # (held: its copy, once let go, would serve nobody)
            if not followed:  # (a parent let go here: read as it is)
                found = self._seen_body(also)
            if found is None:
                return False  # (a member held as a tree: not read here)
            bodies = {**bodies, also: found[1]}
            added = (*rows_held, (also, found[0]))
            if rows_held and lock_order(also) < handed[4]:  # (the one order)
                added = tuple(sorted(added, key=lambda pair: lock_order(pair[0])))
            rows_held = added
        # the document as last seen here: none (a new one: its row made, absent), else its
        # row, body and heads (``_known``)
        row = self._rows_known.get(key)
        if row is None and not exists and self._spare.holds(key):  # (let go here: not new)
            exists = True
        guessed = row is None and not exists  # (not seen here: most likely new, created unread)
        if row is None and exists:
            row = self._read_unseen(key)
        if row is None or row is NO_ROW:
            created = self._absent_rows([key])
            if not created:
                return False
            row = created[key]
            body: dict[str, Any] | None = None
            heads: Heads = NONE
        else:
            known = self._known(key, row)
            if known is None:  # its row is known, its members are not
                if not self._unheld(key):
                    return False  # (a member held as a tree: not read here)
                read = self._read_unseen(key)
                known = None if read is NO_ROW else self._known(key, read)
                if known is None:
                    return False  # (a member held as a tree: not read here; or gone)
                row = known[0]
            body, heads = known[1], known[2]
        whole = build(bodies, body)
        fresh = Fresh()
        # (the whole body set, as most adapters' writes are: those paths' encoding is known)
        paths = _ROOT_ENCODED if whole.paths == _ROOT_PATHS else encode_trusted(whole.paths)
        if not row.present:  # the first body (or one after a delete): rows straight from it
            plan = self._plan_new(
                key.state, row, whole.body, whole.encoded, paths, fresh, not whole.rewritten
            )
        else:
            # a body replaced: its rows straight from its edits — the writer's, made with the
            # body (``whole.edits``), else the diff's — through the one planner, without a
            # ``Write``, ``Loaded`` or ``Stage``, no edit applied (each member written is the new
            # body's own), no tree step; nothing changed, or a member written that is or
            # becomes a tree (larger than ``TREE_MIN``): the general path (``update``) writes it
            assert body is not None
            groups = whole.edits if whole.edits is not None else _edits_by_member(body, whole)
            if not groups:
                return False
            replaced = self._plan_groups(key.state, row, body, heads, whole.body, groups, paths, fresh)
            if replaced is None:
                return False
            plan = replaced
        plans = [plan]
        committed = self._commit_planned([(key, row)], rows_held, (), origin, plans)
        if committed is None:
            if guessed and self._read_unseen(key) is not NO_ROW:
                # it had a row after all: written again on what it holds, now seen (once: the
                # general path, ``update``'s, would guess it new again and then lock it)
                return self.write_whole(key, build, origin, shared=shared, also=also)
            return False
        seq, at = committed  # (unpacked here: a call by ``*`` makes a tuple of every argument)
        _stamp((key,), plans, seq, at, fresh)
        self._remember(fresh)
        if also is not None and followed:
            # served a write as its ``also`` while held (a checkpoint whose child was put): no
            # copy of it once the caches let it go (``_forget_older``)
            was_followed = self._followed
            if len(was_followed) >= 2 * self._recent_kept:
                was_followed.clear()  # (bounded: at worst a few copies kept for nobody)
            was_followed.add(also)
        return True

    def body_as_seen(self, key: DocKey) -> tuple[int, dict[str, Any] | None] | None:
        found = self._seen_body(key)
        return None if found is None else (found[0].revision, found[1])

    def _seen_body(self, key: DocKey) -> tuple[DocRow, dict[str, Any] | None] | None:
        """:meth:`_known_body`, and where ``key`` is not held here (not seen, or let go) read as
        it is first (:meth:`_read_unseen`): how ``write_whole`` finds its shared documents and
        the saver a checkpoint's parent. None: a member held as a tree, which is not read."""
        found = self._known_body(key)
        if found is None and self._unheld(key):
            self._read_unseen(key)
            found = self._known_body(key)
        return found

    def _unheld(self, key: DocKey) -> bool:
        """Whether ``key`` is not seen here, or its heads were let go by the caches: then
        :meth:`_read_unseen` reads it for a lean write. Its heads held but not a member's value
        is a member held as a tree, which that read does not read either."""
        row = self._rows_known.get(key)
        return row is None or (row.present and self._heads.entry(row.doc_id, row.revision) is None)

    def _read_unseen(self, key: DocKey) -> DocRow:
        """A document not seen here, read as it is by one statement (one round trip, in one
        snapshot): its row (``NO_ROW``: it has none), remembered as seen, and where present its
        body and member heads into the caches, where :meth:`_known` finds them (a member held
        as a tree is not read: the write then takes the general path) — or, where the caches let
        it go with a spare copy (:class:`SpareCopies`), taken back from that copy, no statement.
        No lock is held: the write that follows checks at its commit that the row did not move."""
        spare = self._spare.take(key)
        if spare is not None:  # let go by the caches, kept encoded: no query
            fields, heads_held, encoded, size = spare
            row = DocRow(*fields)
            body = decode_trusted(encoded)  # (this process's own encoding of a stored body)
            self._heads.hold(
                row.doc_id, (row.revision, None if heads_held is None else dict(heads_held), body, size)
            )
        else:
            row = self._read_row(key)
        # (counted among the latest writes, so let go again in turn; a write that follows is
        # counted with its own row, and a read alone keeps no copy)
        seen = Fresh()
        seen.rows[key] = row
        seen.once = (key,)
        self._remember(seen)
        return row

    def _read_row(self, key: DocKey) -> DocRow:
        """:meth:`_read_unseen`'s statement: ``key``'s row, and its body and heads into the caches."""
        with self._statement_tx() as tx:
            found = tx.all(UNSEEN_SELECT, [key.state, key.subject])
        first = found[0] if found else None
        row = NO_ROW if first is None else to_row(first)
        if first is not None and row.present:
            doc_id, revision = row.doc_id, row.revision
            if first[12] is not None:  # whole form: the body is the row's
                heads, body = whole_members(doc_id, revision, first[12], f"{key} body")
                self._heads.put(doc_id, revision, heads, body, sum(h[4] for h in heads.values()))
            else:
                members = [(doc_id, *r[13:19]) for r in found if r[13] is not None]
                self._took_heads({key: row}, {doc_id}, members)
        return row

    def _plan_new(
        self,
        state: str,
        row: DocRow,
        body: dict[str, Any],
        encoded: Mapping[str, bytes] | None,
        paths: bytes,
        fresh: Fresh,
        marks: bool = True,
    ) -> WritePlan:
        """The rows of a document written whole where it has no body (new, or deleted before):
        every member inserted, one change setting the whole body — what :meth:`_plan_doc` makes
        of that write, made straight from the members' encodings (``encoded``, the writer's;
        else encoded here, once: the change's edit is made of the same bytes). ``paths``: the
        change's touched paths, encoded. ``body`` goes to the caches as it is. Where ``state``
        keeps whole bodies and the body fits its bound, the document is in whole form and
        its plan is made so from the start (:meth:`_new_whole`: no member rows made to be
        dropped), its change the mark unless not ``marks`` (``Whole.rewritten``); else member
        form."""
        if self.whole_form:
            bounds = self._whole_bounds  # (read by an earlier write: no call)
            bound = self._whole_bound(state) if bounds is None else bounds.get(state, 0)
        else:
            bound = 0
        made = self._new_whole(row, body, encoded, fresh, bound, marks) if bound else None
        if made is not None:
            plan, whole, size, position = made
        else:  # member form: a row for every member
            doc_id = row.doc_id
            revision = row.revision + 1
            position = row.next_position
            size = 0
            plan = WritePlan(doc_id, revision, True, False)
            inserts: list[tuple[Any, ...]] = []
            cached = fresh.members
            heads: dict[str, MemberHead] = {}
            roots: dict[str, bytes] = {}
            parts = []
            for name, value in body.items():
                data = encode_trusted(value) if encoded is None else encoded[name]
                length = len(data)
                if length <= TREE_MIN:  # (inline, as ``member_row`` keeps it: no call)
                    stored, root = data, None
                else:
                    nodes = plan.nodes if isinstance(plan.nodes, dict) else {}
                    stored, root, length = member_row(value, None, nodes, {}, data)
                    if nodes:
                        plan.nodes = nodes
                if root is not None:
                    roots[name] = root
                outline = encoded_outline(value) if type(value) is dict else None
                cached.append(((doc_id, name), revision, value, length))
                inserts.append((doc_id, name, position, revision, length, outline, stored, root))
                heads[name] = (doc_id, name, position, revision, length, outline)
                parts.append(orjson.dumps(name) + b":" + data)
                position += 1
                size += length
            plan.inserts = inserts
            if roots or self._roots.get(doc_id) is not None:
                fresh.keep_roots(doc_id, (revision, roots))
            # (the body as it is: the next write of this document starts from it, ``_known``)
            fresh.heads[doc_id] = (revision, heads, body, size)
            if self.keeps_bodies:
                fresh.keep_body(doc_id, (revision, body, size))
            whole = b"{" + b",".join(parts) + b"}"
        # the change: ``[[[], body]]`` (the whole body set), inline in its row when small
        plan.paths = paths
        room = self._change_room(plan)
        if made is not None and marks:
            # whole form: the change keeps the mark, not a second copy of the row's body — the
            # first write past this revision puts the copy in its place (``_copy_mark``); the
            # snapshot's count takes the edit's length as member form's (``[[[],`` and ``]]``)
            self._document_after(plan, row, len(whole) + 7, size, position, True, True)
            plan.inline = CHANGE_MARK
            return plan
        edit = b"[[[]," + whole + b"]]"
        inline = b'[["",' + edit + b"]]" if len(edit) <= WHOLE_INLINE_MAX else None
        if inline is not None and (room is None or len(inline) <= room):
            plan.inline = inline
        else:
            plan.edits = [(plan.doc_id, plan.revision, "", edit, None, 0)]
        if made is not None:  # whole form, its change keeping the body (``Whole.rewritten``)
            self._document_after(plan, row, len(edit), size, position, True, False)
        else:
            self._document_after(plan, row, len(edit), size, position)
        return plan

    def _new_whole(
        self,
        row: DocRow,
        body: dict[str, Any],
        encoded: Mapping[str, bytes] | None,
        fresh: Fresh,
        bound: int,
        once: bool,
    ) -> tuple[WritePlan, bytes, int, int] | None:
        """:meth:`_plan_new`'s plan of a document whose state keeps whole bodies up to
        ``bound`` encoded bytes, in whole form (the encoded body in its row) — the plan
        :meth:`_whole_rows` makes of member rows, made without them: no member rows, no
        member-cache entries (a whole-form document's members come from the head cache's
        body) — with the body's encoding, its size and the next position; None where the body
        does not fit (member form). ``once``: the document is likely written once (its change
        keeps the mark: a checkpoint), so the head cache holds its body alone and makes its
        heads when first asked (``cache.Held``) — nobody reads the heads of a document while it
        is whole but a rewrite, and the next put's check of it (``_known_body``) reads the body
        alone; else they are made now, for its next write (``rows.whole_heads``)."""
        if encoded is None:
            encoded = {name: encode_trusted(value) for name, value in body.items()}
        size = 0
        parts = []
        dumps = _dumps
        for name in body:
            data = encoded[name]
            size += len(data)
            parts.append(dumps(name) + b":" + data)
        whole = b"{" + b",".join(parts) + b"}"
        if len(whole) > bound:  # (``bound`` is at most ``WHOLE_ROW_MAX``)
            return None
        doc_id = row.doc_id
        revision = row.revision + 1
        plan = WritePlan(doc_id, revision, True, False)
        plan.body = whole
        plan.names_moved = (list(body), [])  # (every name added: ``_names_moved`` of none before)
        if self._roots.get(doc_id) is not None:  # (it held a tree member before its delete)
            fresh.keep_roots(doc_id, (revision, {}))
        heads = None if once else whole_heads(doc_id, revision, body, encoded)
        fresh.heads[doc_id] = (revision, heads, body, size)
        if self.keeps_bodies:
            fresh.keep_body(doc_id, (revision, body, size))
        return plan, whole, size, row.next_position + len(body)

    def _plan_groups(
        self,
        state: str,
        row: DocRow,
        before: dict[str, Any],
        had: Heads,
        after: Mapping[str, Any],
        groups: dict[str, list[Any]],
        paths: bytes,
        fresh: Fresh,
    ) -> WritePlan | None:
        """The rows of a present document's write whose edits, grouped by member in
        first-touched order (``groups``: each edit as its JSON, ``[path]`` or ``[path, value]``),
        leave each member named in ``after`` (absent there: deleted) — ``before`` and
        ``had``: every member's head as last seen here. The rows :meth:`_stage` and
        :meth:`_plan_doc` make of those edits, without applying one (each member written is
        ``after``'s own). None when a member written is or becomes a tree (larger than
        ``TREE_MIN``): the general path writes that. ``paths``: the change's, encoded."""
        if row.whole and self.whole_form:  # (most rewrites of a whole-form document stay whole)
            rewritten = self._rewrite_whole(state, row, before, had, after, groups, paths, fresh)
            if rewritten is not False:
                return rewritten
        return self._plan_members(state, row, before, had, after, groups, paths, fresh)

    def _plan_members(
        self,
        state: str,
        row: DocRow,
        before: dict[str, Any],
        had: Heads,
        after: Mapping[str, Any],
        groups: dict[str, list[Any]],
        paths: bytes,
        fresh: Fresh,
    ) -> WritePlan | None:
        """:meth:`_plan_groups` with member rows: a document in member form before or after the
        write (one in whole form before it that leaves that form: converted)."""
        doc_id = row.doc_id
        revision = row.revision + 1
        size = row.body_size
        position = row.next_position
        plan = WritePlan(doc_id, revision, True, True)
        # the heads and body after the write: those before, in position order, each member
        # written replaced in its place (a new one takes the next position, at the end) — no
        # loop over the members not written
        heads = dict(had)
        body_after = dict(before)
        # the member cache's entries; where the document may be in whole form after the write,
        # kept once the form is known: then it has none (its members come from the head
        # cache's body)
        whole = self.whole_form and (row.whole or self._whole_bound(state) > 0)
        entries: list[tuple[tuple[int, str], int, Any, int]] = [] if whole else fresh.members
        cache = entries.append
        # (each list of rows made by its first row: most writes only update)
        updates: list[tuple[Any, ...]] | None = None
        inserts: list[tuple[Any, ...]] | None = None
        deletes: list[tuple[int, str]] | None = None
        for name in groups:
            old = had.get(name)
            if old is not None and old[4] > TREE_MIN:
                return None  # (maybe a tree: its nodes are the locked path's)
            value = after.get(name, MISSING)
            if value is MISSING:  # (a delete edit names a member the document has)
                assert old is not None
                if deletes is None:
                    deletes = plan.deletes = []
                deletes.append((doc_id, name))
                size -= old[4]
                del heads[name], body_after[name]
                continue
            body = encode_trusted(value)
            encoded = len(body)
            if encoded > TREE_MIN:
                return None  # it becomes a tree
            outline = encoded_outline(value) if type(value) is dict else None
            cache(((doc_id, name), revision, value, encoded))
            if old is not None:
                if updates is None:
                    updates = plan.updates = []
                updates.append((body, revision, encoded, outline, None, doc_id, name))
                size += encoded - old[4]
                at = old[2]
            else:
                if inserts is None:
                    inserts = plan.inserts = []
                inserts.append((doc_id, name, position, revision, encoded, outline, body, None))
                at = position
                position += 1
                size += encoded
            heads[name] = (doc_id, name, at, revision, encoded, outline)
            body_after[name] = value
        roots = self._roots.get(doc_id)
        if roots is not None:  # (a document that held a tree member: its roots after this write)
            kept = dict(roots[1]) if roots[0] == row.revision else {}
            for name in groups:
                kept.pop(name, None)
            fresh.keep_roots(doc_id, (revision, kept))
        fresh.heads[doc_id] = (revision, heads, body_after, size)
        if self.keeps_bodies:
            fresh.keep_body(doc_id, (revision, body_after, size))
        plan.paths = paths
        self._document_after(plan, row, _change_edits(plan, groups, self._change_room(plan)), size, position)
        if whole:
            if row.whole or size <= WHOLE_ROW_MAX:
                # (whole before: ``had`` names every member, so the rows say what moved)
                moved: tuple[list[str], list[str]] | None = (
                    ([i[1] for i in inserts or ()], []) if row.whole and deletes is None else None
                )
                self._whole_rows(plan, row, state, body_after, before, fresh, None, moved)
            if not plan.body:  # (member form after the write: its members cached)
                fresh.members += entries
        return plan

    def _rewrite_whole(
        self,
        state: str,
        row: DocRow,
        before: dict[str, Any],
        had: Heads,
        after: Mapping[str, Any],
        groups: dict[str, list[Any]],
        paths: bytes,
        fresh: Fresh,
    ) -> WritePlan | Literal[False]:
        """:meth:`_plan_groups`'s plan of a document in whole form before the write that stays
        in whole form after it — its new body encoded in its row — made without the member
        rows that form drops (no row tuples, no member-cache entries; the heads and body
        after the write go to the head cache as :meth:`_plan_groups` leaves them). False
        where the body after the write does not fit the state's bound: nothing was planned,
        and :meth:`_plan_members` plans the member rows it converts to (or says a member
        becomes a tree: a whole-form body is at most ``WHOLE_ROW_MAX``, far below ``TREE_MIN``,
        so no member of one is a tree, and one that becomes a tree leaves the bound)."""
        doc_id = row.doc_id
        revision = row.revision + 1
        size = row.body_size
        position = row.next_position
        # the heads and body after the write: those before, each member written replaced in
        # its place (a new one takes the next position, at the end)
        heads = dict(had)
        body_after = dict(before)
        added: list[str] = []
        dropped = False
        for name in groups:
            old = had.get(name)
            value = after.get(name, MISSING)
            if value is MISSING:  # (a delete edit names a member the document has)
                assert old is not None
                size -= old[4]
                del heads[name], body_after[name]
                dropped = True
                continue
            try:  # (orjson itself: ``encode_trusted``'s call only where it refuses)
                size_of = len(_dumps(value))
            except TypeError:
                size_of = len(encode_trusted(value))
            if old is not None:
                size += size_of - old[4]
                at = old[2]
                outline = old[5]
                if type(value) is not dict:
                    outline = None
                elif outline is None or not _outline_kept(before[name], value):
                    outline = encoded_outline(value)
            else:
                added.append(name)
                at = position
                position += 1
                size += size_of
                outline = encoded_outline(value) if type(value) is dict else None
            heads[name] = (doc_id, name, at, revision, size_of, outline)
            body_after[name] = value
        bounds = self._whole_bounds  # (read by the write before: no call)
        bound = self._whole_bound(state) if bounds is None else bounds.get(state, 0)
        if size > bound:
            return False
        try:
            body = _dumps(body_after)
        except TypeError:
            body = encode_trusted(body_after)
        if len(body) > bound:
            return False
        plan = WritePlan(doc_id, revision, True, True)
        plan.paths = paths
        room = self.change_row_max  # (``_change_room``, inline: on every rewrite)
        if room is not None:
            if len(paths) > room // 2:
                plan.paths_apart = True
            else:
                room -= len(paths)
        self._document_after(plan, row, _change_edits(plan, groups, room), size, position)
        plan.body = body
        plan.was_whole = True
        if row.marked is not False:  # (its change may be the mark: replaced first)
            plan.copies_mark = row.body_size if row.marked else -1
        # (whole before: ``had`` names every member, so the rows say what moved)
        plan.names_moved = _names_moved(before, body_after) if dropped else (added, [])
        doc = plan.row
        doc.whole = True
        doc.marked = False  # (the creating write marks its change: ``_plan_new``)
        roots = self._roots.get(doc_id)
        if roots is not None:  # (a document that held a tree member: its roots after this write)
            kept = dict(roots[1]) if roots[0] == row.revision else {}
            for name in groups:
                kept.pop(name, None)
            fresh.keep_roots(doc_id, (revision, kept))
        fresh.heads[doc_id] = (revision, heads, body_after, size)
        if self.keeps_bodies:
            fresh.keep_body(doc_id, (revision, body_after, size))
        return plan

    def _change_room(self, plan: WritePlan) -> int | None:
        """Room left in the change row for inline edits once its paths are in (None: any);
        paths too long for it go to ``change_paths`` (``Backend.change_row_max``)."""
        room = self.change_row_max  # (SQLite: a change row is kept from overflowing its page)
        if room is not None:
            if len(plan.paths) > room // 2:
                plan.paths_apart = True
            else:
                room -= len(plan.paths)
        return room

    @staticmethod
    def _document_after(
        plan: WritePlan,
        row: DocRow,
        edit_bytes: int,
        size: int,
        position: int,
        whole: bool = False,
        marked: bool | None = None,
    ) -> None:
        """The document's row after a planned write: a snapshot when one is due. ``whole`` and
        ``marked``: the row's (``DocRow``), where the planner knows them already."""
        revision = plan.revision
        since = row.bytes_since_snapshot + edit_bytes
        snapshot_revision = row.snapshot_revision
        chain = revision - snapshot_revision
        if (
            chain >= SNAPSHOT_MAX_CHAIN
            # (not ``max``: a call of it makes an argument tuple, ~770 instructions a write)
            or since >= (size if size > SNAPSHOT_MIN_BYTES else SNAPSHOT_MIN_BYTES)
            or (chain >= SNAPSHOT_LARGE_CHAIN and size >= TREE_MIN)
        ):
            plan.snapshot = True
            snapshot_revision, since = revision, 0
        plan.document = DocRow(  # (positional: keywords cost a third of the call; the seq and
            # time are the commit's, ``stamp_row``)
            row.doc_id,
            revision,
            plan.present,
            None,
            snapshot_revision,
            since,
            size,
            position,
            None,
            whole,
            marked,
        )

    def _take_snapshot(self, tx: Tx, doc_id: int, revision: int, present: bool) -> None:
        """Record the body as written: its directory, and the member values no earlier
        snapshot holds (straight from the member rows, never decoded)."""
        if not present:
            tx.run(
                "INSERT INTO snapshots (doc_id, revision, body) VALUES (?, ?, ?)", (doc_id, revision, b"null")
            )
            return
        tx.run(
            "INSERT INTO snapshot_members (doc_id, name, revision, body, root) "
            "SELECT m.doc_id, m.name, m.revision, m.body, m.root FROM members m WHERE m.doc_id = ? AND NOT EXISTS "
            "(SELECT 1 FROM snapshot_members s WHERE s.doc_id = m.doc_id AND s.name = m.name "
            "AND s.revision = m.revision)",
            (doc_id,),
        )
        tx.run(
            "INSERT INTO snapshots (doc_id, revision, body) "
            "SELECT ?, ?, CAST(json_group_array(json_array(name, revision)) AS BLOB) "
            "FROM (SELECT name, revision FROM members WHERE doc_id = ? ORDER BY position)",
            (doc_id, revision, doc_id),
        )


_ROOT_PATHS: Final[list[list[str]]] = [[]]
"""The paths of a write that sets the whole body (``Whole.paths``)."""
_ROOT_ENCODED: Final = b"[[]]"
"""``encode_trusted(_ROOT_PATHS)``."""

_WRITE_KEY = operator.attrgetter("key")
"""A write's key (C, not a lambda: a cohort of several writes is sorted on every commit)."""


_dumps: Final = orjson.dumps


def _change_edits(plan: WritePlan, groups: dict[str, list[Any]], room: int | None) -> int:
    """A planned write's edits, grouped by member in first-touched order (each as its JSON), in
    its change row where they fit (``room``: what its paths leave, None: any), else a
    ``change_edits`` row per member; their encoded bytes (what the snapshot's count adds)."""
    doc_id, revision = plan.doc_id, plan.revision
    if len(groups) == 1:  # (most writes edit one member: no lists, no join)
        ((member, group),) = groups.items()
        try:  # (orjson itself: ``encode_trusted``'s call only where it refuses)
            encoded_group = _dumps(group)
        except TypeError:
            encoded_group = encode_trusted(group)
        edit_bytes = len(encoded_group)
        if edit_bytes <= INLINE_EDITS_MAX:
            alone = b"[[%b,%b]]" % (_dumps(member), encoded_group)
            if room is None or len(alone) <= room:
                plan.inline = alone
                return edit_bytes
        plan.edits = [(doc_id, revision, member, encoded_group, None, 0)]
        return edit_bytes
    planned: list[tuple[int, int, str, bytes, bytes | None, int]] = []
    parts = []  # (each member's inline form, made beside its row: no second loop)
    edit_bytes = 0
    for at, (member, group) in enumerate(groups.items()):  # (first-touched, as ``_plan_doc``)
        encoded_group = encode_trusted(group)
        edit_bytes += len(encoded_group)
        planned.append((doc_id, revision, member, encoded_group, None, at))
        parts.append(b"[" + _dumps(member) + b"," + encoded_group + b"]")
    inline = b"[" + b",".join(parts) + b"]" if edit_bytes <= INLINE_EDITS_MAX else None
    if inline is not None and (room is None or len(inline) <= room):
        plan.inline = inline
    else:
        plan.edits = planned
    return edit_bytes


def _outline_kept(was: Any, value: dict[str, Any]) -> bool:
    """Whether an object member's outline — its keys in order and their kinds
    (``rows.outline_of``) — is still the one it had as ``was``: the same keys in the same
    order, each holding a value of the same type (a kind is a type's). Compared in C, without
    the outline made and encoded again."""
    return (
        type(was) is dict
        and list(was) == list(value)
        and list(map(type, was.values())) == list(map(type, value.values()))
    )


def _edits_by_member(before: dict[str, Any], whole: Whole) -> dict[str, list[Any]]:
    """The edits taking ``before`` (a present body, every member as last seen here) to
    ``whole.body`` along ``whole.paths``, grouped by member in first-touched order (new
    members take positions in it), each as its JSON: what ``Write.between(before, whole.body,
    changed=whole.paths)`` stages, for :meth:`Writes._plan_groups` (a writer that made its
    edits with the body hands them instead, ``whole.edits``). Both bodies are objects, so
    every edit's path names a member."""
    groups: dict[str, list[Any]] = {}
    for edit in diff_within(before, whole.body, within(whole.paths)):
        path, value = edit.path, edit.value
        entry = [list(path)] if value is MISSING else [list(path), value]
        name: str = path[0]  # type: ignore[assignment]
        group = groups.get(name)
        if group is None:
            groups[name] = [entry]
        else:
            group.append(entry)
    return groups


def _outline_after(
    before: bytes | None, value: Any, changed: Sequence[tuple[tuple[str | int, ...], bool]]
) -> bytes | None:
    """An object member's outline after edits inside it (none of them at its root), from its
    outline before: a key set or made takes the kind of its value now (a new one goes last, as
    in the object), a deleted one goes."""
    if type(value) is not dict:
        return None
    kinds: dict[str, str] = {} if before is None else decode_stored(before, "member outline")
    for path, _ in changed:
        key = path[0]
        if type(key) is not str:
            continue
        if key not in value:
            kinds.pop(key, None)
        elif len(path) == 1 or key not in kinds:
            kinds[key] = outline_of({key: value[key]})[key]
    return b"%b" % orjson.dumps(kinds)


def _names_moved(before: Iterable[str], after: Mapping[str, Any] | None) -> tuple[list[str], list[str]]:
    """The member names a write adds and drops: from ``before``'s to ``after``'s (None: none)."""
    names = list(before)
    had = set(names)
    added = [] if after is None else [name for name in after if name not in had]
    dropped = [name for name in names if after is None or name not in after]
    return added, dropped


def _body_after(entry: Loaded, stage: Stage, plan: WritePlan) -> dict[str, Any] | None:
    """The body a planned write leaves, its members in position order (None: absent, or not
    every member in hand)."""
    row = entry.row
    if not plan.present or (row.present and not entry.complete):
        return None
    values, touched = stage.values, stage.touched
    placed = {i[1]: i[2] for i in plan.inserts}  # (a member inserted: its new place)
    order: list[tuple[int, str, Any]] = []
    members = entry.members if row.present else {}
    for name, (value, position, _) in members.items():
        if name in touched:
            value = values[name]
            if value is MISSING:
                continue
            position = placed.get(name, position)
        order.append((position, name, value))
    order += [(at, name, values[name]) for name, at in placed.items() if name not in members]
    order.sort(key=operator.itemgetter(0))
    return {name: value for _, name, value in order}


def _paths_of(write: Write) -> bytes:
    """A write's touched paths as its change row keeps them (by default its edits' paths)."""
    paths = write.paths if write.paths is not None else [e.path for e in write.edits]
    return encode_trusted([list(p) for p in paths])


def _plain_update(plan: WritePlan) -> bool:
    """Whether a plan only updates or adds member rows of a document that exists before and
    after it, with its edits inline in its change row (no nodes, deletes, snapshot or rows
    apart): the rows :func:`_emit_together` writes."""
    return (
        plan.created is None
        and plan.present
        and plan.was_present
        and not plan.nodes
        and not plan.deletes
        and not plan.paths_apart
        and not plan.edits
        and not plan.snapshot
        and plan.body is None
    )


# The statements of a document's rows, shared by ``Writes._emit`` (one document at a time) and
# ``_emit_together`` (several documents' plain updates at once).
_MEMBER_UPDATE: Final = (
    "UPDATE members SET body = ?, revision = ?, size = ?, outline = ?, root = ? WHERE doc_id = ? AND name = ?"
)
_MEMBER_INSERT: Final = (
    "INSERT INTO members (doc_id, name, position, revision, size, outline, body, root) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


_TRANSITION_INSERTS: Final = {
    (keys, counts): "INSERT INTO transitions ({}) VALUES ({})".format(*transition_columns(keys, counts))
    for keys in (False, True)
    for counts in (False, True)
}
"""The transition's plain insert by (``transition_keys``, ``counts_in_transitions``)."""


def changed_keys(plans: Sequence[WritePlan]) -> str:
    """``transitions.changed`` for these plans: the JSON ``[[doc_id, revision], …]`` of the
    changes they write (see ``transition_keys``)."""
    if len(plans) == 1:  # (most commits: one document, no list made)
        plan = plans[0]
        return f"[[{plan.doc_id},{plan.revision}]]"
    return "[" + ",".join([f"[{p.doc_id},{p.revision}]" for p in plans]) + "]"


_MARK_HELD: Final = (
    "doc_id = ? AND revision = ? AND edits = X'3D' AND EXISTS (SELECT 1 FROM documents d "
    "WHERE d.doc_id = changes.doc_id AND d.revision = changes.revision AND d.body IS NOT NULL)"
)
"""The change ``(doc_id, revision)`` keeps the mark (``rows.CHANGE_MARK``) and its document's
row is still at that revision, in whole form (a row past it is damage: left for ``check``)."""
_MARK_INLINE: Final = (
    "UPDATE changes SET edits = (SELECT CAST('[[\"\",[[[],' || CAST(d.body AS TEXT) || ']]]]' AS BLOB) "
    "FROM documents d WHERE d.doc_id = changes.doc_id) WHERE "
    + _MARK_HELD
    + " AND (SELECT length(d.body) FROM documents d WHERE d.doc_id = changes.doc_id) + 14 "
    "+ coalesce(length(CAST(paths AS BLOB)), 0) <= ?"
)
"""The mark replaced by the body it stands for, ``[["", [[[], body]]]]`` inline, where that
fits the change row (the room its paths leave, ``Backend.change_row_max``): the placement of
every whole-document edit (``Writes._plan_new``; ``WHOLE_INLINE_MAX`` is above any whole-form
body). Made of the row's own bytes in SQL: no writer needs the body in hand (a delete, an erase
do not load it)."""
_MARK_APART: Final = "UPDATE changes SET edits = NULL WHERE " + _MARK_HELD
"""…else the change row's edits apart (NULL), and the edit a ``change_edits`` row of member
``''`` (``_MARK_EDIT``)."""
_MARK_EDIT: Final = (
    "INSERT INTO change_edits (doc_id, revision, member, edits, roots, ord) "
    "SELECT doc_id, ?, '', CAST('[[[],' || CAST(body AS TEXT) || ']]' AS BLOB), NULL, 0 "
    "FROM documents WHERE doc_id = ?"
)
_MARK_PROBE: Final = (
    "SELECT (SELECT length(d.body) FROM documents d WHERE d.doc_id = changes.doc_id) + 14 "
    "+ coalesce(length(CAST(paths AS BLOB)), 0) FROM changes WHERE " + _MARK_HELD
)
"""Where a writer does not know whether the change keeps the mark (a row read from the file):
the length its copy would take in the change row, and no row where there is no mark to copy —
one statement for the writes that find none."""
_NO_ROOM_LIMIT: Final = 2**62
"""The room of a change row where the backend sets none (``Backend.change_row_max`` None)."""


def _copy_mark(tx: Tx, doc_id: int, revision: int, size: int, room: int | None) -> None:
    """Before a write moves a whole-form document past ``revision``: the mark its change may
    keep there replaced by the body the row still holds, in the write's transaction — once in
    a document's life. ``size``: the body's members' encoded sizes (which its encoding exceeds)
    where the writer planned the marked revision; -1 where it read the row and does not know
    (probed first: one statement where there is no mark). One statement where the copy fits
    the change row, two (three) where it does not; none changes a row where the change keeps no
    mark. (No ``RETURNING``: SQLite buffers its rows in a temporary table, ~43,000
    instructions.)"""
    if room is None:
        room = _NO_ROOM_LIMIT
    if size < 0:
        probed = tx.one(_MARK_PROBE, (doc_id, revision))
        if probed is None:
            return
        fits = int(probed[0]) <= room
    else:
        fits = size + 16 <= room
    if fits and tx.run(_MARK_INLINE, (doc_id, revision, room)):
        return
    if tx.run(_MARK_APART, (doc_id, revision)):
        tx.run(_MARK_EDIT, (revision, doc_id))


_CHANGE_INSERT: Final = "INSERT INTO changes (doc_id, revision, seq, paths, edits) VALUES (?, ?, {seq}, ?, ?)"
_DOCUMENT_UPDATE: Final = (
    "UPDATE documents SET {setting}revision = ?, updated_seq = {seq}, snapshot_revision = ?, "
    "bytes_since_snapshot = ?, body_size = ?, next_position = ? WHERE doc_id = ?"
)
_DOCUMENT_INSERT: Final = (
    "INSERT INTO documents (doc_id, state, subject, revision, present, updated_seq, "
    "snapshot_revision, bytes_since_snapshot, body_size, next_position, body) "
    "VALUES (?, ?, ?, ?, ?, {seq}, ?, ?, ?, ?, ?)"
)


class _SeqStatements(NamedTuple):
    """The statements of a document's rows for one way of naming the transition's seq."""

    change_insert: str
    document_update: str
    document_update_present: str
    """the update that also sets ``present`` (its first parameter)"""
    document_insert: str
    document_update_body: str
    """the update that also sets ``body`` (its first parameter; NULL: member form)"""
    document_update_present_body: str
    """the update that also sets ``present`` and ``body`` (its first two parameters)"""


_BY_SEQ_SQL: dict[str, _SeqStatements] = {}
"""``_SeqStatements`` by ``SeqRef.sql`` (a backend names the seq one or two ways): each text
formatted once, not on every write (``str.format`` of these templates: ~5,500 instructions a
statement, 2% of a store ``put``)."""


def _statements_for(seq_sql: str) -> _SeqStatements:
    made = _BY_SEQ_SQL.get(seq_sql)
    if made is None:
        made = _BY_SEQ_SQL[seq_sql] = _SeqStatements(
            _CHANGE_INSERT.format(seq=seq_sql),
            _DOCUMENT_UPDATE.format(setting="", seq=seq_sql),
            _DOCUMENT_UPDATE.format(setting="present = ?, ", seq=seq_sql),
            _DOCUMENT_INSERT.format(seq=seq_sql),
            _DOCUMENT_UPDATE.format(setting="body = ?, ", seq=seq_sql),
            _DOCUMENT_UPDATE.format(setting="present = ?, body = ?, ", seq=seq_sql),
        )
    return made


def _document_params(doc: DocRow, seq: SeqRef) -> tuple[Any, ...]:
    """``_DOCUMENT_UPDATE``'s parameters after ``setting``'s."""
    return (
        doc.revision,
        *seq.params,
        doc.snapshot_revision,
        doc.bytes_since_snapshot,
        doc.body_size,
        doc.next_position,
        doc.doc_id,
    )


def _emit_together(tx: Tx, plans: Sequence[WritePlan], seq: SeqRef) -> None:
    """The rows of plain updates (:func:`_plain_update`) of several documents: the same rows as
    ``Writes._emit`` writes one document at a time, each kind in one statement."""
    updates = [u for p in plans for u in p.updates]
    if updates:
        tx.many(_MEMBER_UPDATE, updates)
    inserts = [i for p in plans for i in p.inserts]
    if inserts:
        tx.many(_MEMBER_INSERT, inserts)
    sql = _statements_for(seq.sql)
    tx.many(sql.change_insert, [(p.doc_id, p.revision, *seq.params, p.paths, p.inline) for p in plans])
    tx.many(sql.document_update, [_document_params(p.row, seq) for p in plans])


_new_tuple: Final = tuple.__new__
"""A tuple of a ``NamedTuple`` class made from its fields' values, in C."""


_SHARED_ORDERS: dict[tuple[DocKey, ...], list[DocKey]] = {}
"""The shared documents of ``write_whole`` (a writer passes the same few tuples every time), in
the lock order: sorted once each, not on every write."""


def _shared_in_order(shared: Sequence[DocKey]) -> Sequence[DocKey]:
    """``shared`` sorted by ``rows.lock_order``."""
    if len(shared) < 2:
        return shared
    if type(shared) is not tuple:
        return sorted(shared, key=lock_order)
    ordered = _SHARED_ORDERS.get(shared)
    if ordered is None:
        if len(_SHARED_ORDERS) >= 256:
            _SHARED_ORDERS.clear()  # bounded; a miss only sorts again
        ordered = _SHARED_ORDERS[shared] = sorted(shared, key=lock_order)
    return ordered


def _in_lock_order(keys: set[DocKey]) -> list[DocKey]:
    """``keys`` sorted by ``rows.lock_order`` (one or none: nothing to sort, no key computed)."""
    return list(keys) if len(keys) < 2 else sorted(keys, key=lock_order)


_POSITION = operator.itemgetter(2)
"""A member head's position (C, not a lambda: heads are sorted on every write)."""


def _shared_first(shared: Sequence[DocKey], locked: Sequence[DocKey]) -> bool:
    """Whether every shared row comes before every locked one in the lock order (both sorted)."""
    return not shared or not locked or lock_order(shared[-1]) < lock_order(locked[0])


HANDED_MAX = 256
"""Documents an optimistic write handed to its computation, kept to hand again while their row
and body stay the same (the declarations and aliases every record write reads): a frozen
dataclass costs a ``__setattr__`` per field to build. Few: each keeps its body alive."""

ABORTED_RETRIES = 3
"""How many times an optimistic ``update`` runs again after the database ended it to break a
lock cycle (``WriteAborted``): a backstop, the lock order is what keeps cycles from forming."""


class _Moved:
    """A document moved between an optimistic read and its commit (nothing was written)."""


MOVED = _Moved()


def named_document(
    key: DocKey,
    row: DocRow,
    body: dict[str, Any],
    heads: Heads | None,
    names: Sequence[str] | None,
    outline_names: Sequence[str],
) -> Document:
    """The document as the locked path hands it when members or outlines are named: the named
    members of ``body`` and the named outlines from ``heads`` (its member heads at the row's
    revision; None where no outline is named)."""
    shapes: dict[str, Any] = {}
    if outline_names and heads is not None:
        for h in heads.values():  # (no message made per outline: one only for one that fails)
            name, raw = h[1], h[5]
            if name in outline_names:
                try:
                    shapes[name] = None if raw is None else orjson.loads(raw)
                except (orjson.JSONDecodeError, TypeError):
                    shapes[name] = decode_stored(raw, f"{key} outline of {name!r}")  # (raises)
    if names is not None:  # in the members' order, as the locked read gives them
        named = set(names)
        if not named.issuperset(body):  # (else the body is the named members already)
            body = {n: v for n, v in body.items() if n in named}
    return made_document(key, row.revision, body, row.updated_seq, shapes)


CONTENDED_SECONDS = 0.5
"""How long writes of a document whose optimistic read lost go straight to its row lock: with
several writers on one document most optimistic attempts lose, each a read and a merge spent
for nothing, while a waiter for the row lock spends nothing until its turn."""


class _NeedsLock(StateflowError):
    """A write computed optimistically touches a tree member: the locked path stages it."""

    code = "conflict"


def _offline_plan(writes: Sequence[Write], loaded: Mapping[DocKey, Loaded]) -> list[tuple[Write, Loaded]]:
    """The writes with edits, each beside the document it was computed on, for a write that
    commits without row locks; empty when the locked path must decide instead: a write names a
    shared or unread document, its compare-and-set fails, or nothing is to be written (the
    locked path records any op id as before)."""
    plan = []
    for write in writes if len(writes) < 2 else sorted(writes, key=lambda w: w.key):
        held = loaded.get(write.key)
        if held is None or (write.expect is not None and write.expect != held.row.revision):
            return []
        if write.edits:
            plan.append((write, held))
    return plan


def _cached_only(cache: NodeCache, what: str) -> tree_update.Get:
    """Nodes from the decoded-node cache only, for a write staged with no transaction: a miss
    sends the write to the locked path, which reads them."""

    def get(ident: bytes) -> dict[str, Any]:
        node = cache.peek(ident)
        if node is None:
            raise _NeedsLock(f"{what}: its nodes are read under the lock")
        return node

    return get


class _Skeletal(NamedTuple):
    """A member read as its skeleton: the skeleton, how its write is staged, and its place
    and stored size."""

    skeleton: tree_skeleton.Skeleton
    by_path: ByPath
    head: tuple[int, int]


_SECOND = operator.itemgetter(1)


class _Computed(Exception):
    """Writes computed optimistically that the locked path must stage (a tree member's nodes
    are read under the lock); it reuses them when no document moved since they were computed,
    instead of computing them again (which, beside a large member, costs copies of it)."""

    def __init__(self, writes: Sequence[Write], result: Any, seen: dict[DocKey, DocRow]) -> None:
        super().__init__()
        self.writes, self.result, self.seen = writes, result, seen

    def holds(self, rows: Mapping[DocKey, DocRow]) -> bool:
        """Whether every document is where the computation saw it."""
        for key, was in self.seen.items():
            now = rows.get(key, NO_ROW)
            if (now.doc_id, now.revision, now.present) != (was.doc_id, was.revision, was.present):
                return False
        return True


def _loaded(row: DocRow, body: dict[str, Any] | None, heads: Heads) -> Loaded:
    """A document as ``_known`` gives it, as the general path stages it: its own members (name
    → value, position, size), complete."""
    members = {} if body is None else {n: (body[n], h[2], h[4]) for n, h in heads.items()}
    return Loaded(row, members, complete=True)


def member_row(
    value: Any,
    updated: tree_update.Updated | None,
    nodes: dict[bytes, bytes],
    refs: dict[int, bytes],
    encoded: bytes | None = None,
) -> tuple[bytes, bytes | None, int]:
    """A member's row as written — (body, root, encoded size) — adding any nodes its tree needs
    and the subtrees it holds (``refs``): a tree when the value is larger than ``TREE_MIN``,
    inline otherwise. ``encoded``: the value's encoding, when the caller has it."""
    if updated is not None and updated.root is not None and updated.size > TREE_MIN:
        nodes.update(updated.nodes)
        refs.update(updated.refs)
        return b"", updated.root, updated.size
    body = encode_trusted(value) if encoded is None else encoded
    if len(body) <= TREE_MIN:
        return body, None, len(body)
    builder = Builder()
    built = builder.build(value)
    if built.root is None:  # a long string: nothing to split
        return body, None, len(body)
    nodes.update(built.nodes)
    refs.update(builder.refs())
    return b"", built.root, len(body)


def _stamp(keys: Sequence[DocKey], plans: Sequence[WritePlan], seq: int, at: str, fresh: Fresh) -> None:
    """``fresh`` stamped with the commit of ``plans`` (one per key of ``keys``): its seq and
    time (that of the bodies it keeps, ``Fresh.bodies``) and the documents' new rows. The call
    committed: it is no longer cancelled (``store.cancel``), whatever it does next."""
    committed()
    fresh.seq, fresh.at = seq, at
    rows = fresh.rows
    # (one plan per key by construction: ``strict=True`` would make a keyword call per commit)
    for key, planned in zip(keys, plans):  # noqa: B905
        rows[key] = stamp_row(planned, seq, at)


def _committed(
    keys: Sequence[DocKey], plans: Sequence[WritePlan], revisions: dict[DocKey, int], seq: int, at: str
) -> Commit:
    """The outcome of committed plans (what goes to the caches: :func:`_stamp`)."""
    for key, planned in zip(keys, plans):  # noqa: B905 (as in ``_stamp``)
        revisions[key] = planned.revision
    return made_commit(True, seq, at, revisions)
