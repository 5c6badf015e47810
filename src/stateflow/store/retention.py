"""Retention: forgetting old history, purging a state, and the idempotency ledger's upkeep.

Pruning keeps every later revision readable as of: a snapshot is written at the newest
forgotten revision before the changes up to it go.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from stateflow.doc.canonical import encode_trusted
from stateflow.errors import InvalidInput
from stateflow.store.clock import micros_cutoff
from stateflow.store.history import History
from stateflow.store.ledger import scope_in
from stateflow.store.model import DocKey
from stateflow.store.nodes import BATCH, all_roots, walk
from stateflow.store.plan import Fresh
from stateflow.store.rows import decode_stored, directory_of, lock_order, whole_members
from stateflow.store.tx import Tx
from stateflow.store.writes import member_row


class Retention(History):
    """Pruning history, purging states and the ledger (pruning rebuilds through ``History``)."""

    def prune_history(self, state: str, older_than: str) -> int:
        """Forget the changes of ``state``'s documents written before ``older_than`` (ISO-8601
        UTC); return how many change rows went.

        A snapshot is kept at the newest forgotten revision, so every later revision stays
        readable as of; earlier ones then answer "predates the retained history". Transitions
        left without any change are deleted, but for a document's last write: its time stays the
        record's ``updated_at``.
        """
        self.check_schema()
        removed = 0
        try:  # (SQLite keeps times as microseconds: compared as numbers, not text)
            micros = micros_cutoff(older_than)
        except ValueError as exc:
            raise InvalidInput(f"older_than {older_than!r} is not an ISO-8601 time") from exc
        cutoff: str | int = micros if self.times_as_micros else older_than
        with self._write_tx() as tx:
            cuts = tx.all(
                "SELECT d.doc_id, d.subject, MAX(c.revision) FROM changes c JOIN transitions t ON t.seq = c.seq "
                "JOIN documents d ON d.doc_id = c.doc_id WHERE d.state = ? AND t.at < ? GROUP BY d.doc_id, d.subject",
                (state, cutoff),
            )
            seqs: set[int] = set()
            for doc_id, subject, cut in cuts:
                doc_id, cut = int(doc_id), int(cut)
                key = DocKey(state, subject)
                if tx.one("SELECT 1 FROM snapshots WHERE doc_id = ? AND revision = ?", (doc_id, cut)) is None:
                    self._snapshot_at(tx, key, doc_id, cut)
                seqs |= {
                    int(r[0])
                    for r in tx.all(
                        "SELECT seq FROM changes WHERE doc_id = ? AND revision <= ?", (doc_id, cut)
                    )
                }
                tx.run("DELETE FROM change_edits WHERE doc_id = ? AND revision <= ?", (doc_id, cut))
                removed += tx.run("DELETE FROM changes WHERE doc_id = ? AND revision <= ?", (doc_id, cut))
                tx.run("DELETE FROM snapshots WHERE doc_id = ? AND revision < ?", (doc_id, cut))
                self._drop_orphan_snapshot_members(tx, key, doc_id)
            self._drop_orphan_transitions(tx, sorted(seqs))
            self._collect_nodes(tx)
        return removed

    def _snapshot_at(self, tx: Tx, key: DocKey, doc_id: int, revision: int) -> None:
        """A snapshot of the document as of ``revision`` (its members keyed by that revision)."""
        body = self._rebuild(tx, key, doc_id, revision, None).body
        if body is not None:
            nodes: dict[bytes, bytes] = {}
            rows = [
                (doc_id, name, revision, *member_row(value, None, nodes, {})[:2])
                for name, value in body.items()
            ]
            tx.many(
                "INSERT INTO nodes (id, body) VALUES (?, ?) ON CONFLICT (id) DO NOTHING", list(nodes.items())
            )
            tx.many(
                "INSERT INTO snapshot_members (doc_id, name, revision, body, root) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (doc_id, name, revision) DO NOTHING",
                rows,
            )
        directory = b"null" if body is None else encode_trusted([[name, revision] for name in body])
        tx.run(
            "INSERT INTO snapshots (doc_id, revision, body) VALUES (?, ?, ?)", (doc_id, revision, directory)
        )

    def _drop_orphan_snapshot_members(self, tx: Tx, key: DocKey, doc_id: int) -> None:
        """Delete the member values no remaining snapshot of the document lists."""
        live: set[tuple[str, int]] = set()
        for revision, raw in tx.all(
            "SELECT revision, body FROM snapshots WHERE doc_id = ? AND substr(body, 1, 1) = ?", (doc_id, b"[")
        ):
            live.update(
                directory_of(decode_stored(raw, f"{key} snapshot at revision {revision}"), key, revision)
            )
        stale = [
            (doc_id, name, int(revision))
            for name, revision in tx.all(
                "SELECT name, revision FROM snapshot_members WHERE doc_id = ?", (doc_id,)
            )
            if (name, int(revision)) not in live
        ]
        tx.many("DELETE FROM snapshot_members WHERE doc_id = ? AND name = ? AND revision = ?", stale)

    def _collect_nodes(self, tx: Tx) -> int:
        """Delete the nodes no member and no snapshot reaches (mark from every root, sweep the
        rest); return how many went. Nodes are shared across revisions and documents, so only
        a walk from all roots can tell."""
        if tx.one("SELECT 1 FROM nodes LIMIT 1") is None:
            return 0
        self._lock_nodes(tx)
        # a damaged tree keeps what can still be reached; check reports the damage
        live = walk(tx, all_roots(tx), problem=lambda _: None)
        stale = [bytes(r[0]) for r in tx.all("SELECT id FROM nodes") if bytes(r[0]) not in live]
        for start in range(0, len(stale), BATCH):
            part = stale[start : start + BATCH]
            tx.run(f"DELETE FROM nodes WHERE id IN ({','.join('?' * len(part))})", part)
        return len(stale)

    def _drop_orphan_transitions(self, tx: Tx, seqs: list[int]) -> None:
        left = (  # (SQLite: through the keys the transition lists, as ``transitions`` reads them)
            "SELECT 1 FROM json_each(transitions.changed) k "
            "JOIN changes c ON c.doc_id = k.value ->> 0 AND c.revision = k.value ->> 1"
            if self.transition_keys
            else "SELECT 1 FROM changes c WHERE c.seq = transitions.seq"
        )
        if not seqs:
            return
        self._fold_counts(tx)  # (the deltas the transitions deleted below may hold)
        # a document's last write stays: its time is the record's updated_at, which record
        # retention compares with its cutoff (gone, the record never expired). Any document's,
        # not only this state's (a batch's transition may span states), and no index leads from
        # a seq to its documents: they are read in one pass here, not once per part below
        last = {
            int(r[0])
            for r in tx.all(
                "SELECT updated_seq FROM documents WHERE updated_seq BETWEEN ? AND ?", (seqs[0], seqs[-1])
            )
        }
        seqs = [seq for seq in seqs if seq not in last]
        for start in range(0, len(seqs), 500):
            part = seqs[start : start + 500]
            tx.run(
                f"DELETE FROM transitions WHERE seq IN ({','.join('?' * len(part))}) "
                f"AND NOT EXISTS ({left}) "
                # the newest stays: SQLite numbers a new transition after the highest one left
                "AND seq < (SELECT MAX(seq) FROM transitions)",
                part,
            )

    def purge(self, state: str, *, erase: Sequence[DocKey] = (), origin: dict[str, Any] | None = None) -> int:
        """Delete every document of ``state`` with its history (no audit survives); return how many.

        Transitions left without any change are deleted too. ``erase``: documents of other
        states (the catalog entries that declare ``state``) erased in the same transaction, as
        one transition with ``origin``. They are locked first, so a writer that shares them
        (every record write shares its declaration) either committed before the purge, and its
        record goes with the others, or waits and finds them erased: nothing written meanwhile
        is left behind, and the purge and the erase happen together or not at all. A key of
        ``state`` itself in ``erase`` is refused (``invalid-input``, nothing done): the purge
        deletes it with its history, where an erase would record a change of it.
        """
        inside = sorted({key.subject for key in erase if key.state == state})
        if inside:
            raise InvalidInput(
                f"purge of state {state!r} cannot also erase its own documents ({', '.join(map(repr, inside))}):"
                " the purge deletes them with their history; erase names documents of other states"
            )
        self.check_schema()
        fresh = Fresh()
        with self._write_tx() as tx:
            held = self._claim(tx, (), sorted(set(erase), key=lock_order))[1] if erase else {}
            # Only the documents held here are deleted, each statement naming them by id: one
            # created meanwhile is left whole (the purge came first), never half deleted with
            # its counters left counting it.
            ids = self._lock_state(tx, state)
            seqs: set[int] = set()
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                among = f"doc_id IN ({','.join('?' * len(part))})"
                seqs.update(
                    int(r[0]) for r in tx.all(f"SELECT DISTINCT seq FROM changes WHERE {among}", part)
                )
                if self.counts_in_transitions:  # (no transition of its own: counted here)
                    self._uncount(tx, part)
                for table in (
                    "change_edits",
                    "changes",
                    "snapshot_members",
                    "snapshots",
                    "members",
                    "documents",
                ):
                    tx.run(f"DELETE FROM {table} WHERE {among}", part)
            self._fold_counts(tx)  # (the deltas of its deletes too: the state's rows then at zero)
            tx.run("DELETE FROM state_counts WHERE state = ? AND n = 0", (state,))
            self._drop_orphan_transitions(tx, sorted(seqs))
            # the state's claims: scoped by the state alone (before ids were a tenant's) or within it
            prefix = scope_in(state, "")
            tx.run(
                "DELETE FROM applied_ops WHERE scope = ? OR substr(scope, 1, ?) = ?",
                (state, len(prefix), prefix),
            )
            self._collect_nodes(tx)
            if held:  # last: the commit ends the transaction
                self._erase_held(tx, held, origin or {}, fresh)
        self._remember(fresh)
        for key in list(self._rows_known):  # (a copy: other threads may add rows meanwhile)
            if key.state == state:
                self._rows_known.pop(key, None)
        self._spare.clear()
        return len(ids)

    def meta_value(self, key: str) -> str | None:
        """The store's ``stateflow_meta`` value under ``key`` (an adapter's format mark), or None."""
        self.check_schema()
        with self._read_tx() as tx:
            row = tx.one("SELECT value FROM stateflow_meta WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def rename_subjects(
        self, state: str, renamed: Callable[[str], str | None], *, mark: tuple[str, str], batch: int = 500
    ) -> bool:
        """Move ``state``'s documents (present or not) to the subjects ``renamed`` gives (None:
        left where it is), their ids — and so their history, audit and counters — unmoved;
        then record ``mark`` (``stateflow_meta`` key and value). A transaction per ``batch``
        documents, each under the write lock (and the migrators' lock): other writers wait for
        a batch, never for the whole. A document whose new subject another already holds stays
        where it is, and the mark is then not recorded unless that document is absent (erased:
        nothing reads it by its subject but its history). Nothing is done where the mark is
        already there. Returns whether the mark is recorded."""
        self.check_schema()
        key, value = mark
        if self.meta_value(key) == value:
            return True
        after, blocked = "", False
        while True:
            with self._write_tx() as tx:
                self._lock_migration(tx)
                rows = tx.all(
                    "SELECT subject, present FROM documents WHERE state = ? AND subject > ? "
                    "ORDER BY subject LIMIT ?",
                    (state, after, batch),
                )
                moves = {
                    old: new for (old, _) in rows if (new := renamed(str(old))) is not None and new != old
                }
                absent = {str(old) for (old, present) in rows if not present}
                taken = self._subjects_held(tx, state, list(moves.values()))
                for old, new in moves.items():
                    if new in taken:
                        # (an absent document left where it is reads as nothing either way)
                        blocked = blocked or old not in absent
                        continue
                    tx.run(
                        "UPDATE documents SET subject = ? WHERE state = ? AND subject = ?", (new, state, old)
                    )
                last = len(rows) < batch
                if last and not blocked:
                    tx.run("DELETE FROM stateflow_meta WHERE key = ?", (key,))
                    tx.run("INSERT INTO stateflow_meta (key, value) VALUES (?, ?)", (key, value))
            self._forget_keys(
                [DocKey(state, old) for old in moves] + [DocKey(state, new) for new in moves.values()]
            )
            if last:
                return not blocked
            after = str(rows[-1][0])

    def _subjects_held(self, tx: Tx, state: str, subjects: Sequence[str]) -> set[str]:
        held: set[str] = set()
        for start in range(0, len(subjects), 500):
            part = subjects[start : start + 500]
            held.update(
                str(r[0])
                for r in tx.all(
                    f"SELECT subject FROM documents WHERE state = ? AND subject IN ({','.join('?' * len(part))})",
                    (state, *part),
                )
            )
        return held

    def _forget_keys(self, keys: Sequence[DocKey]) -> None:
        """Forget what is held here by document key for ``keys`` (documents moved to other
        subjects, or to these: their ids unmoved), then what the backend holds."""
        for key in keys:
            self._rows_known.pop(key, None)
            self._handed.pop(key, None)
            self._contended.pop(key, None)
            self._served_revisions.pop(key, None)
        self._spare.drop(keys)
        self._shared_known.clear()
        self._subjects_moved(keys)

    def _uncount(self, tx: Tx, doc_ids: Sequence[int]) -> None:
        """Take the documents ``doc_ids`` (about to be deleted) and their members off the
        counters' rows: what the counting triggers did on SQLite until schema 43, for a delete
        that writes no transition to keep its deltas in."""
        among = ",".join("?" * len(doc_ids))
        tx.run(
            "INSERT INTO state_counts (state, counter, name, n) "
            f"SELECT state, 'kind', {self._kind_sql()}, -COUNT(*) FROM documents "
            f"WHERE doc_id IN ({among}) AND present = 1 GROUP BY 1, 3 "
            "ON CONFLICT (state, counter, name) DO UPDATE SET n = n + excluded.n",
            doc_ids,
        )
        tx.run(
            "INSERT INTO state_counts (state, counter, name, n) "
            "SELECT d.state, 'member', m.name, -COUNT(*) FROM members m JOIN documents d ON d.doc_id = m.doc_id "
            f"WHERE m.doc_id IN ({among}) GROUP BY 1, 3 "
            "ON CONFLICT (state, counter, name) DO UPDATE SET n = n + excluded.n",
            doc_ids,
        )
        if not self.whole_form:
            return
        # a whole-form document's names are its body's (it has no member rows)
        names: dict[tuple[str, str], int] = {}
        for doc_id, state, revision, raw in tx.all(
            f"SELECT doc_id, state, revision, body FROM documents WHERE doc_id IN ({among}) "
            "AND present = 1 AND body IS NOT NULL",
            doc_ids,
        ):
            for name in whole_members(int(doc_id), int(revision), raw, f"document {doc_id} body")[0]:
                names[(state, name)] = names.get((state, name), 0) + 1
        for (state, name), n in names.items():
            tx.run(
                "INSERT INTO state_counts (state, counter, name, n) VALUES (?, 'member', ?, ?) "
                "ON CONFLICT (state, counter, name) DO UPDATE SET n = n + excluded.n",
                (state, name, -n),
            )

    def applied_op(self, op_id: str, scope: str = "") -> int | bool | None:
        """False if ``op_id`` was never applied; else the seq it produced (None for a no-op)."""
        self.check_schema()
        with self._read_tx() as tx:
            row = tx.one("SELECT seq FROM applied_ops WHERE scope = ? AND op_id = ?", (scope, op_id))
        if row is None:
            return False
        return None if row[0] is None else int(row[0])

    def claims_in(self, scope: str) -> bool:
        """Whether any op id is claimed in ``scope``."""
        self.check_schema()
        with self._read_tx() as tx:
            return tx.one("SELECT 1 FROM applied_ops WHERE scope = ? LIMIT 1", (scope,)) is not None

    def prune_ops(self, older_than: str) -> int:
        """Forget idempotency keys applied before ``older_than`` (ISO-8601 UTC); return count."""
        self.check_schema()
        with self._write_tx() as tx:
            return int(tx.run("DELETE FROM applied_ops WHERE applied_at < ?", (older_than,)))
