"""The store's core: construction and caches, the schema check, current reads, and the row
and member access every other part of the algorithm builds on."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Final, Self, TypeVar

from stateflow.errors import CorruptData, InvalidInput, StoreNotMigrated, StoreTooNew
from stateflow.store.backend import Backend
from stateflow.store.cache import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_SPARE_BYTES,
    HeadCache,
    Heads,
    RevisionCache,
    SpareCopies,
)
from stateflow.store.clock import micros_of
from stateflow.store.key_positions import Positions
from stateflow.store.migrations import SCHEMA_VERSION, statements
from stateflow.store.model import DocKey, Document, doc_keys
from stateflow.store.nodes import NodeCache, load_tree
from stateflow.store.open import store_command
from stateflow.store.plan import WHOLE_ROW_MAX, Loaded
from stateflow.store.rows import (
    ROW_COLUMNS,
    ROW_SELECT,
    DocRow,
    MemberHead,
    Wanted,
    decode_stored,
    key_filter,
    rows_by_key,
    to_row,
    whole_members,
)
from stateflow.store.tx import Tx

R = TypeVar("R")

WHOLE_PREFIX: Final = "whole:"
"""``stateflow_meta`` keys ``whole:<state>``: the states that keep whole bodies, and their bounds."""
KNOWN_ROWS_MAX: Final = 100_000
"""Document rows remembered as last read or written here, at most."""
RECENT_KEPT: Final = 1024
"""The writes of states cached for their latest writes only (``cache_recent``) whose rows and
head entries are held, at most."""
ROWS_PER_QUERY: Final = 4096
"""Documents one statement reads the rows (or member heads) of, at most: two parameters a key,
within SQLite's 32,766 (a read of more keys takes a statement per part, in one transaction)."""


class StoreCore(Backend):
    """Documents over a SQL database: what every part of the algorithm shares."""

    url: str

    def __init__(self, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._schema_checked = False
        self._when_migrated: list[Callable[[], None]] = []
        """run once, when the store is first found migrated (see ``when_migrated``)"""
        self._cache: RevisionCache[tuple[int, str], Any] = RevisionCache(cache_bytes, largest=cache_bytes)
        """decoded member values by (doc_id, name), at the revision that last wrote the member"""
        self._heads = HeadCache()
        """per document: its member heads at a revision and, where known, its body assembled"""
        self._rows_known: dict[DocKey, DocRow] = {}
        """document rows as last read or written here (see ``update(optimistic=True)``)"""
        self._recent_states: frozenset[str] = frozenset()
        """the states whose documents the caches hold for the latest writes only (``cache_recent``)"""
        self._recent: deque[tuple[DocKey, DocRow, bool]] = deque()
        """the rows of those states' documents as their writes (or reads) left them, oldest
        first, each with whether it was only read (``Fresh.once``: let go without a spare copy):
        each forgotten with its head entry ``RECENT_KEPT`` writes later, if still at that
        revision (``Writes._remember``), not kept up to ``KNOWN_ROWS_MAX``"""
        self._recent_kept = RECENT_KEPT
        self._spare = SpareCopies(DEFAULT_SPARE_BYTES)
        """those documents once let go, encoded, for a writer that meets them again"""
        self._followed: set[DocKey] = set()
        """those documents a write followed on as its ``also`` while held here (a checkpoint
        whose child was put): let go without a copy (``Writes.write_whole``)"""
        self._handed: dict[DocKey, Document] = {}
        """documents as an optimistic write last handed them to its computation (``Writes``)"""
        self._shared_known: dict[tuple[DocKey, ...], tuple[Any, ...]] = {}
        """per tuple of documents ``write_whole`` last read as shared: them in the lock order,
        their rows, bodies and (key, row) pairs as ``_known`` gave them (``Writes``)"""
        self._contended: dict[DocKey, float] = {}
        """documents an optimistic read lost to another writer, until when (monotonic) their
        writes take the row locks first (see ``update(optimistic=True)``)"""
        self._served_revisions: dict[DocKey, int] = {}
        """each document's revision after this store's last memory patch merged for all
        (``patch_on_server``; see ``Writes._served_contended``)"""
        self._node_cache = NodeCache()
        """decoded tree nodes by id, for path reads"""
        self._positions = Positions()
        """where large objects' keys stand, by the root of their trees (tree updates)"""
        self._whole_bounds: dict[str, int] | None = None
        """each state that keeps whole bodies: its bound (``keep_whole``), read once"""
        self._roots: dict[int, tuple[int, dict[str, bytes]]] = {}
        """doc_id → (document revision, root of each member held as a tree at it): a tree
        update starts from its member's root without a statement (a round trip on PostgreSQL)"""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stored_time(self, at: str) -> str | int:
        """The clock's text ``at`` as ``transitions.at`` holds it (``times_as_micros``)."""
        return micros_of(at) if self.times_as_micros else at

    # ------------------------------------------------------------------ schema

    def schema_version(self) -> int | None:
        """The migrated schema version, or None when the store has no schema at all."""
        with self._read_tx() as tx:
            return self._version_in(tx)

    def _version_in(self, tx: Tx) -> int | None:
        tables = self._table_names(tx)
        if "stateflow_meta" not in tables:
            if tables & {"documents", "members", "transitions"}:
                raise StoreNotMigrated(
                    f"{self.url} holds tables but no stateflow schema version; "
                    "it is not a stateflow store or its schema is damaged"
                )
            return None
        row = tx.one("SELECT value FROM stateflow_meta WHERE key = 'schema_version'")
        if row is None:
            raise StoreNotMigrated(f"{self.url}: stateflow_meta has no schema_version")
        try:
            return int(row[0])
        except ValueError as exc:
            raise CorruptData(f"{self.url}: schema_version {row[0]!r} is not a number") from exc

    def migrate(self) -> tuple[int, int]:
        """Bring the schema to the version this code knows; return (from, to). Idempotent."""
        with self._write_tx() as tx:
            self._lock_migration(tx)
            current = self._version_in(tx) or 0
            if current > SCHEMA_VERSION:
                raise self._too_new(current)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in statements(self._migrations()[version]):
                    tx.run(statement)
                if version == 1:
                    tx.run("INSERT INTO stateflow_meta (key, value) VALUES ('schema_version', '1')")
                else:
                    tx.run(
                        "UPDATE stateflow_meta SET value = ? WHERE key = 'schema_version'",
                        (str(version),),
                    )
        self._migrated()
        return current, SCHEMA_VERSION

    def _auto_migrate(self) -> None:
        """Migrate on open: a store already at this version is only read (no write turn, which
        every opening process would otherwise queue for)."""
        if self.schema_version() == SCHEMA_VERSION:
            self._migrated()
        else:
            self.migrate()

    def _too_new(self, version: int) -> StoreTooNew:
        return StoreTooNew(
            f"{self.url} has schema version {version}, newer than this stateflow knows "
            f"({SCHEMA_VERSION}); upgrade stateflow to use it"
        )

    def check_schema(self) -> None:
        """Refuse to work on a store that is not migrated to exactly our version."""
        if self._schema_checked:
            return
        refusal = self.version_refusal(self.schema_version())
        if refusal is not None:
            raise refusal
        self._migrated()

    def version_refusal(self, version: int | None) -> StoreNotMigrated | StoreTooNew | None:
        """What refuses a store at schema ``version`` (None: no schema), saying what to do —
        migrate it, or upgrade stateflow —; None at this stateflow's version."""
        if version is None or version < SCHEMA_VERSION:
            command, note = store_command(self.url, "migrate")
            why = self.unwritable()
            if why is not None:  # (`migrate` would be refused too: what keeps it out comes first)
                return StoreNotMigrated(
                    f"{self.url} is not migrated (schema version {version or 0}, need "
                    f"{SCHEMA_VERSION}) and cannot be migrated as it is opened: {why}; run `{command}`{note} "
                    "where it can be written, or open it with the stateflow version that wrote it"
                )
            return StoreNotMigrated(
                f"{self.url} is not migrated (schema version {version or 0}, need "
                f"{SCHEMA_VERSION}); run `{command}`{note}"
            )
        return self._too_new(version) if version > SCHEMA_VERSION else None

    def when_migrated(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once, as soon as this store is found migrated — now if it is known
        to be, else on the first use that finds it so (a server started before ``stateflow
        migrate`` installs what it needs then)."""
        if self._schema_checked:
            callback()
        else:
            self._when_migrated.append(callback)

    def _migrated(self) -> None:
        self._schema_checked = True
        waiting, self._when_migrated = self._when_migrated, []
        for i, callback in enumerate(waiting):
            try:
                callback()
            except BaseException:
                self._when_migrated[:0] = waiting[i:]  # tried again on the next use
                raise

    # ------------------------------------------------------------------ reads

    def read(
        self,
        keys: Iterable[DocKey],
        members: Iterable[str] | Mapping[DocKey, Iterable[str] | None] | None = None,
        *,
        outlines: Iterable[str] = (),
    ) -> dict[DocKey, Document]:
        """Current documents, all from one consistent snapshot.

        ``members`` restricts the bodies to those top-level members (the others are not read).
        ``outlines`` names members whose outline (immediate keys → kinds, for an object member)
        is wanted without reading the member itself.
        """
        self.check_schema()
        keys = doc_keys(keys, "read")
        per_key = members if isinstance(members, Mapping) else None
        shared = None if members is None or per_key is not None else [str(m) for m in members]
        outline_names = list(outlines)
        with self._read_tx() as tx:
            rows = self._rows(tx, keys)
            wanted: list[Wanted] = []
            for key in keys:
                row = rows.get(key)
                if row is not None and row.present:
                    names = shared
                    if per_key is not None:
                        asked = per_key.get(key)
                        names = None if asked is None else list(asked)
                    wanted.append((key, row.doc_id, row.revision, names))
            fetched = self._fetch_many(tx, wanted, outline_names)
        out: dict[DocKey, Document] = {}
        for key in keys:
            row = rows.get(key)
            if row is None:
                out[key] = Document(key, 0, None)
                continue
            body = None
            shapes: dict[str, Any] = {}
            if row.present:
                members_of, shapes = fetched[row.doc_id]
                body = {n: v for n, _, v, _ in members_of}
            out[key] = Document(key, row.revision, body, row.updated_seq, shapes, row.at)
        return out

    def get(
        self, key: DocKey, members: Iterable[str] | None = None, *, outlines: Iterable[str] = ()
    ) -> Document:
        return self.read(doc_keys([key], "get"), members, outlines=outlines)[key]

    def member_sizes(self, key: DocKey) -> dict[str, int]:
        """The document's top-level members, in order, with their stored sizes in bytes — no
        value is read ({} for a document that does not exist)."""
        self.check_schema()
        with self._read_tx() as tx:
            row = self._row(tx, key)
            if row is None or not row.present:
                return {}
            if row.whole:
                heads = self._fetch(tx, key, row.doc_id, row.revision, None)[0]
                return {name: size for name, _, _, size in heads}
            rows = tx.all("SELECT name, size FROM members WHERE doc_id = ? ORDER BY position", (row.doc_id,))
        return {str(name): int(size) for name, size in rows}

    def cached(self, key: Hashable, build: Callable[[], R]) -> R:
        """``build()`` — or, on stores that can tell cheaply that nothing was committed since,
        the value an earlier ``build()`` under the same ``key`` returned. ``build`` must derive
        its value from this store's current data only; the value is shared, so treat it as
        immutable."""
        return build()

    # ------------------------------------------------------------------ whole form

    def keep_whole(self, state: str, max_bytes: int = WHOLE_ROW_MAX) -> bool:
        """Keep the documents of ``state`` whose encoded body is at most ``max_bytes`` (at most
        ``WHOLE_ROW_MAX``) in whole form from their next write on: the body in the document's
        row, no member rows. Persisted in the store (``stateflow_meta`` row ``whole:<state>``);
        idempotent: where the store already records that bound, nothing is written (so a
        read-only store answers True; asked for another bound, it refuses, ``StoreReadOnly``).
        ``max_bytes=0`` writes member form again, and the row stays: it also says that the state
        may hold whole-form documents. False where the backend keeps member form always
        (PostgreSQL, ``Backend.whole_form``): nothing recorded."""
        if type(state) is not str or not state:
            raise InvalidInput("keep_whole: a state is a non-empty string")
        if type(max_bytes) is not int or not 0 <= max_bytes <= WHOLE_ROW_MAX:
            raise InvalidInput(f"keep_whole: max_bytes is an integer from 0 to {WHOLE_ROW_MAX}")
        self.check_schema()
        if not self.whole_form:
            return False
        recorded = self._read_whole_bounds()
        if recorded.get(state) != max_bytes:
            with self._write_tx() as tx:
                tx.run(
                    "INSERT INTO stateflow_meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (WHOLE_PREFIX + state, str(max_bytes)),
                )
        bounds = self._whole_bounds
        self._whole_bounds = {**(recorded if bounds is None else bounds), state: max_bytes}
        return True

    def cache_recent(self, state: str) -> None:
        """Hold what this store's caches keep of ``state``'s documents — their rows, heads and
        bodies as written here — for the latest writes only (``RECENT_KEPT``: 1,024),
        not up to the caches' bounds (100,000 documents): for a state whose records are
        written in a burst and seldom asked for again (a checkpointer's), whose objects a long
        run would otherwise keep alive by the hundred thousand, for the garbage collector's
        every full pass to walk. A record no longer held is read from the store when asked.
        This process's choice only: nothing is recorded."""
        if type(state) is not str or not state:
            raise InvalidInput("cache_recent: a state is a non-empty string")
        self._recent_states = self._recent_states | {state}

    def _whole_bound(self, state: str) -> int:
        """The encoded size up to which ``state``'s documents are written in whole form (0:
        member form), as recorded when this store first asked (a later ``keep_whole`` by
        another process applies here once the store is opened again; either form reads alike)."""
        bounds = self._whole_bounds
        if bounds is None:
            if not self.whole_form:
                return 0
            bounds = self._whole_bounds = self._read_whole_bounds()
        return bounds.get(state, 0)

    def _read_whole_bounds(self) -> dict[str, int]:
        with self._read_tx() as tx:
            found = tx.all(
                "SELECT key, value FROM stateflow_meta WHERE substr(key, 1, ?) = ?",
                (len(WHOLE_PREFIX), WHOLE_PREFIX),
            )
        return {str(key)[len(WHOLE_PREFIX) :]: int(value) for key, value in found}

    def _may_hold_whole(self, tx: Tx, state: str) -> bool:
        """Whether ``state`` may hold whole-form documents (``keep_whole`` was ever asked for
        it), read now in ``tx``: a reader that reads member rows only refuses such a state."""
        if not self.whole_form:
            return False
        return tx.one("SELECT 1 FROM stateflow_meta WHERE key = ?", (WHOLE_PREFIX + state,)) is not None

    # ------------------------------------------------------------------ rows and members

    def _row(self, tx: Tx, key: DocKey) -> DocRow | None:
        return self._rows(tx, [key]).get(key)

    def _rows(self, tx: Tx, keys: Sequence[DocKey]) -> dict[DocKey, DocRow]:
        """The rows of several documents in one query."""
        if not keys:
            return {}
        if len(keys) <= ROWS_PER_QUERY:
            return rows_by_key(tx.all(*self._rows_query(keys)))
        # past a statement's parameters (SQLite takes 32,766): a query per part, one snapshot
        rows: dict[DocKey, DocRow] = {}
        for start in range(0, len(keys), ROWS_PER_QUERY):
            rows.update(rows_by_key(tx.all(*self._rows_query(keys[start : start + ROWS_PER_QUERY]))))
        return rows

    @staticmethod
    def _rows_query(keys: Sequence[DocKey], suffix: str = "") -> tuple[str, list[str]]:
        """The rows of at most ``ROWS_PER_QUERY`` documents (more: :meth:`_rows_queries`)."""
        where, params = key_filter(keys)
        return f"{ROW_SELECT} WHERE {where}{suffix}", params

    @classmethod
    def _rows_queries(cls, keys: Sequence[DocKey], suffix: str = "") -> list[tuple[str, list[str]]]:
        """The rows of any number of documents: a statement per ``ROWS_PER_QUERY`` keys, in
        their order (a ``suffix`` that locks in the lock order keeps it, given keys in it)."""
        if len(keys) <= ROWS_PER_QUERY:
            return [cls._rows_query(keys, suffix)]
        return [
            cls._rows_query(keys[start : start + ROWS_PER_QUERY], suffix)
            for start in range(0, len(keys), ROWS_PER_QUERY)
        ]

    def _lock(self, tx: Tx, key: DocKey) -> DocRow:
        """The document's row, created (revision 0, absent) if needed, locked for this tx."""
        r = tx.one(*self._lock_query(key))
        assert r is not None
        return to_row(r)

    @staticmethod
    def _lock_query(key: DocKey) -> tuple[str, tuple[str, ...]]:
        # One statement creates the row if needed and returns it; on PostgreSQL the
        # DO UPDATE also takes the row lock (held to commit), serializing this document.
        return (
            "INSERT INTO documents (state, subject) VALUES (?, ?) ON CONFLICT (state, subject) "
            f"DO UPDATE SET revision = documents.revision RETURNING {ROW_COLUMNS}",
            (key.state, key.subject),
        )

    def _load_members(
        self,
        tx: Tx,
        key: DocKey,
        entry: Loaded,
        names: Sequence[str] | None,
        outlines: Sequence[str] = (),
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        wanted = None if names is None else [n for n in names if n not in entry.members]
        shapes: dict[str, Any] = {}
        if (names is None and not entry.complete) or wanted or outlines:
            members, shapes = self._fetch(tx, key, entry.row.doc_id, entry.row.revision, wanted, outlines)
            for name, position, value, size in members:
                entry.members[name] = (value, position, size)
        if names is None:
            entry.complete = True
        items = sorted(entry.members.items(), key=lambda kv: kv[1][1])
        if names is None:
            return {n: v for n, (v, _, _) in items}, shapes
        named = set(names)  # (not the list: a test per member of each name, for many names)
        return {n: v for n, (v, _, _) in items if n in named}, shapes

    def _fetch_many(
        self,
        tx: Tx,
        wanted: Sequence[Wanted],
        outlines: Sequence[str] = (),
        *,
        keep: bool = True,
    ) -> dict[int, tuple[list[tuple[str, int, Any, int]], dict[str, Any]]]:
        """Members of several documents: one head query for the documents whose heads are not
        cached at their revision, one body query for the member cache misses. ``keep``: what
        is read enters the caches (False: read for one use — documents about to be erased or
        rewritten by the thousand, which would push out what readers reuse)."""
        if not wanted:
            return {}
        keys = {doc_id: key for key, doc_id, _, _ in wanted}
        by_doc: dict[int, Heads] = {}
        unknown: dict[int, int] = {}
        whole: dict[int, dict[str, Any]] = {}
        """doc_id → body of each whole-form document read here (its heads are the body's)"""
        held: dict[int, dict[str, Any]] = {}
        """doc_id → body held with the heads cached (a member the member cache misses: from it)"""
        for _, doc_id, revision, _ in wanted:
            cached = self._heads.entry(doc_id, revision)
            if cached is None:
                unknown[doc_id] = revision
            else:
                by_doc[doc_id] = cached[1]
                if cached[2] is not None:
                    held[doc_id] = cached[2]
        if unknown:
            ids = list(unknown)
            read: dict[int, dict[str, MemberHead]] = {doc_id: {} for doc_id in ids}
            heads = []
            for start in range(0, len(ids), ROWS_PER_QUERY):  # (a statement's parameters: bounded)
                chunk = ids[start : start + ROWS_PER_QUERY]
                heads += tx.all(
                    "SELECT doc_id, name, position, revision, size, outline FROM members "
                    f"WHERE doc_id IN ({','.join('?' * len(chunk))}) ORDER BY doc_id, position",
                    chunk,
                )
            for h in heads:
                read[int(h[0])][h[1]] = (
                    int(h[0]),
                    h[1],
                    int(h[2]),
                    int(h[3]),
                    int(h[4]),
                    None if h[5] is None else bytes(h[5]),
                )
            if self.whole_form:  # a document with no member rows may be in whole form
                for doc_id, raw in self._whole_bodies(tx, [d for d in ids if not read[d]]).items():
                    read[doc_id], whole[doc_id] = whole_members(
                        doc_id, unknown[doc_id], raw, f"{keys[doc_id]} body"
                    )
            for doc_id, revision in unknown.items() if keep else ():
                body = whole.get(doc_id)
                size = 0 if body is None else sum(h[4] for h in read[doc_id].values())
                self._heads.put(doc_id, revision, read[doc_id], body, size)
            by_doc.update(read)
        names_of = {doc_id: (None if names is None else set(names)) for _, doc_id, _, names in wanted}
        values: dict[tuple[int, str], Any] = {}
        misses: list[tuple[int, str]] = []
        for doc_id, rows in by_doc.items():
            names = names_of[doc_id]
            body = whole.get(doc_id)
            if body is not None:  # (read just now: every member in hand)
                for name in rows:
                    if names is None or name in names:
                        values[(doc_id, name)] = body[name]
                continue
            known = held.get(doc_id)
            for _, name, _, revision, _, _ in rows.values():
                if names is not None and name not in names:
                    continue
                hit, value = self._cache.lookup((doc_id, name), int(revision))
                if hit:
                    values[(doc_id, name)] = value
                elif known is not None:
                    values[(doc_id, name)] = known[name]
                else:
                    misses.append((doc_id, name))
        sizes = {(d, h[1]): int(h[4]) for d, rows in by_doc.items() for h in rows.values()} if misses else {}
        for start in range(0, len(misses), 200):
            part = misses[start : start + 200]
            where = " OR ".join(["(doc_id = ? AND name = ?)"] * len(part))
            for doc_id, name, revision, raw, root in tx.all(
                f"SELECT doc_id, name, revision, body, root FROM members WHERE {where}",
                [v for pair in part for v in pair],
            ):
                what = f"{keys[int(doc_id)]} member {name!r}"
                value = decode_stored(raw, what) if root is None else load_tree(tx, bytes(root), what)
                values[(int(doc_id), name)] = value
                if keep:
                    weight = len(raw) if root is None else sizes.get((int(doc_id), name), 0)
                    self._cache.put((int(doc_id), name), int(revision), value, weight)
        if misses and self.whole_form:
            # heads held here of a document in whole form: its members are its body's
            lost = {d for d, n in misses if (d, n) not in values}
            revision_of = {doc_id: revision for _, doc_id, revision, _ in wanted}
            for doc_id, raw in self._whole_bodies(tx, list(lost)).items():
                _, body = whole_members(doc_id, revision_of[doc_id], raw, f"{keys[doc_id]} body")
                for d, name in misses:
                    if d == doc_id and name in body:
                        values[(d, name)] = body[name]
        out: dict[int, tuple[list[tuple[str, int, Any, int]], dict[str, Any]]] = {}
        for _, doc_id, _, _ in wanted:
            rows = by_doc.get(doc_id, {})
            shapes = {
                n: None if o is None else decode_stored(o, f"{keys[doc_id]} outline of {n!r}")
                for _, n, _, _, _, o in rows.values()
                if n in outlines
            }
            members = [
                (n, int(p), values[(doc_id, n)], int(size))
                for _, n, p, _, size, _ in rows.values()
                if (doc_id, n) in values
            ]
            out[doc_id] = (members, shapes)
        return out

    @staticmethod
    def _whole_bodies(tx: Tx, ids: Sequence[int]) -> dict[int, Any]:
        """The bodies of those of ``ids`` in whole form (``documents.body``), by doc_id."""
        found: dict[int, Any] = {}
        for start in range(0, len(ids), ROWS_PER_QUERY):
            chunk = ids[start : start + ROWS_PER_QUERY]
            for doc_id, raw in tx.all(
                f"SELECT doc_id, body FROM documents WHERE doc_id IN ({','.join('?' * len(chunk))}) "
                "AND body IS NOT NULL",
                chunk,
            ):
                found[int(doc_id)] = raw
        return found

    def _fetch(
        self,
        tx: Tx,
        key: DocKey,
        doc_id: int,
        revision: int,
        names: Sequence[str] | None,
        outlines: Sequence[str] = (),
    ) -> tuple[list[tuple[str, int, Any, int]], dict[str, Any]]:
        """One document's members ``(name, position, value, size)`` and requested outlines.

        Values come from the cache when the member's revision matches; only the others are read
        and decoded — a warm read of a slice of a huge member never touches its bytes.
        """
        return self._fetch_many(tx, [(key, doc_id, revision, names)], outlines)[doc_id]
