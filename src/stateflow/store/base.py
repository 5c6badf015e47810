"""The store algorithm, shared by every SQL backend.

A backend supplies connections and transactions (:class:`SqlStore` subclasses); everything that
decides what is written lives here once, so both backends pass one contract suite.

Writes run in one database transaction: idempotency ledger, compare-and-set checks, member
rows, revisions, one transition row and one change row per touched document, snapshots. Any
failure raises before commit and the transaction rolls back: nothing at all is written.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Final, NamedTuple, TypeVar

import orjson

from stateflow.doc.canonical import JSON, check, decode, encode_trusted, json_contains, kind
from stateflow.doc.diff import Edit, apply_edits
from stateflow.doc.select import MISSING
from stateflow.errors import (
    Conflict,
    CorruptData,
    InvalidInput,
    InvalidJSON,
    NotFound,
    StateflowError,
    StoreNotMigrated,
    StoreTooNew,
)
from stateflow.store.cache import DEFAULT_CACHE_BYTES, HeadCache, RevisionCache
from stateflow.store.migrations import SCHEMA_VERSION, statements
from stateflow.store.model import Change, Commit, DocKey, Document, Listed, Transition, Write

R = TypeVar("R")

SNAPSHOT_MAX_CHAIN: Final = 256
"""Take a snapshot at least every this many revisions, so an as-of read replays a bounded chain."""
SNAPSHOT_MIN_BYTES: Final = 4096
"""…or as soon as the changes since the last snapshot outweigh the body (and this floor)."""
INLINE_EDITS_MAX: Final = 512
"""A change whose encoded edits fit in this many bytes keeps them in its own row (one row, one
page touched, per change); larger ones get a ``change_edits`` row per member, so that reading
some members' history never decodes another member's large edit."""


_second: tuple[int, str] = (-1, "")
"""The last second formatted by ``utc_now`` (formatting is most of its cost; every write asks)."""


def utc_now() -> str:
    """The store's one clock: fixed-width ISO-8601 UTC, so text order is time order."""
    global _second
    second, micros = divmod(time.time_ns() // 1000, 1_000_000)
    cached = _second
    if cached[0] != second:
        cached = _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{micros:06d}Z"


def utc_text(moment: datetime) -> str:
    """``moment`` (UTC) as the store writes times: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Tx(abc.ABC):
    """A minimal cursor facade over one open database transaction. SQL uses ``?`` params."""

    @abc.abstractmethod
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    @abc.abstractmethod
    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute; return the number of affected rows."""

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Execute one statement for each parameter row."""
        for params in rows:
            self.run(sql, params)

    def batch(self, *, commit: bool = False) -> AbstractContextManager[Any]:
        """Statements whose results are not needed may be sent without waiting (PostgreSQL
        pipeline mode); a no-op elsewhere. ``commit``: the transaction may commit with the
        batch (the store's transaction then does not send its own COMMIT)."""
        return nullcontext()

    def all_of(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
        """Several queries whose answers are needed together (one round trip where possible)."""
        return [self.all(sql, params) for sql, params in statements]

    def later(self, sql: str, params: Sequence[Any] = ()) -> Callable[[], list[tuple[Any, ...]]]:
        """Execute; the rows may be read only once the enclosing batch is done."""
        rows = self.all(sql, params)
        return lambda: rows


@dataclass(slots=True)
class _Row:
    doc_id: int
    revision: int
    present: bool
    updated_seq: int | None
    snapshot_revision: int
    bytes_since_snapshot: int
    body_size: int
    next_position: int
    at: str | None = None


_ROW_COLUMNS: Final = (
    "doc_id, revision, present, updated_seq, snapshot_revision, bytes_since_snapshot, "
    "body_size, next_position"
)
_ROW_SELECT: Final = (
    "SELECT "
    + ", ".join("d." + c.strip() for c in _ROW_COLUMNS.split(","))
    + ", t.at, d.state, d.subject FROM documents d LEFT JOIN transitions t ON t.seq = d.updated_seq"
)


@dataclass(slots=True)
class _Loaded:
    """Members of one document loaded inside a write transaction (reused by the commit)."""

    row: _Row
    members: dict[str, tuple[JSON, int, int]] = field(default_factory=dict)
    """name → (value, position, encoded size)"""
    complete: bool = False


_Head = tuple[int, str, int, int, int, Any]
"""A member row without its body: (doc_id, name, position, revision, size, outline)."""


_Wanted = tuple[DocKey, int, int, Sequence[str] | None]
"""A document whose members are wanted: (key, doc_id, revision, names or None for all)."""


class _SeqRef(NamedTuple):
    """How a statement names the transaction's seq: SQL and the parameters it takes."""

    sql: str
    params: tuple[int, ...]


@dataclass(slots=True)
class _Fresh:
    """What a transaction wrote, for the caches once it has committed (never before)."""

    members: list[tuple[int, str, int, Any, int]] = field(default_factory=list)
    """(doc_id, name, revision, value, size) of each member value written"""
    heads: dict[int, tuple[int, list[_Head]]] = field(default_factory=dict)
    """doc_id → (revision, member heads) after the write, where the heads before it were known"""
    bodies: dict[int, tuple[int, dict[str, Any] | None, str, int]] = field(default_factory=dict)
    """doc_id → (revision, body, at, encoded size) after the write, where every member was known
    (only for stores that keep whole bodies: ``keeps_bodies``)"""
    rows: dict[DocKey, _Row] = field(default_factory=dict)
    """document rows as this transaction read or left them (for writes computed optimistically)"""
    at: str = ""
    """The transaction's time."""
    seq: int | None = None
    """The transaction's seq, once known."""


class OpIdTaken(Conflict):
    """Op ids claimed by an update were already recorded (``taken``); nothing was written."""

    code = "op-id-taken"

    def __init__(self, taken: set[tuple[str, str]]) -> None:
        super().__init__(f"op ids already applied: {sorted(taken)}")
        self.taken = frozenset(taken)


def _with_op_id(claims: Sequence[tuple[str, str]], op_id: str | None, scope: str) -> list[tuple[str, str]]:
    """The claims of a call, its own ``op_id`` among them."""
    return [*claims, (scope, op_id)] if op_id is not None else list(claims)


def _replayed(taken: OpIdTaken, op_id: str | None, scope: str) -> bool:
    """Whether the call's own ``op_id`` is among the taken claims: the call is a replay."""
    return op_id is not None and (scope, op_id) in taken.taken


def _unmoved(
    given: Sequence[tuple[DocKey, _Row]], claims: Sequence[tuple[str, str]]
) -> tuple[str, list[Any]]:
    """A condition that holds while every document is still at the row given (``_NO_ROW``:
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


def _claims_query(claims: Sequence[tuple[str, str]]) -> tuple[str, list[str]]:
    where = " OR ".join(["(scope = ? AND op_id = ?)"] * len(claims))
    return f"SELECT scope, op_id FROM applied_ops WHERE {where}", [v for pair in claims for v in pair]


class SqlStore(abc.ABC):
    """Documents, cohorts, history and the idempotency ledger over a SQL database."""

    url: str

    def __init__(self, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._schema_checked = False
        self._cache: RevisionCache[tuple[int, str], Any] = RevisionCache(cache_bytes, largest=cache_bytes)
        """decoded member values by (doc_id, name), at the revision that last wrote the member"""
        self._heads = HeadCache()
        self._rows_known: dict[DocKey, _Row] = {}
        """document rows as last read or written here (see ``update(optimistic=True)``)"""
        self._assembled: RevisionCache[int, tuple[dict[str, Any], dict[str, tuple[Any, int, int]]]] = (
            RevisionCache(ASSEMBLED_BYTES)
        )
        """(body, members) of documents as ``_known`` last assembled them"""

    # ------------------------------------------------------------------ backend hooks

    @abc.abstractmethod
    def _read_tx(self) -> Any:
        """Context manager: a read-only transaction over one consistent snapshot."""

    @abc.abstractmethod
    def _write_tx(self) -> Any:
        """Context manager: a serializable-enough write transaction; rolls back on error."""

    @abc.abstractmethod
    def _migrations(self) -> dict[int, str]: ...

    @abc.abstractmethod
    def _table_names(self, tx: Tx) -> set[str]: ...

    def _lock_migration(self, tx: Tx) -> None:  # noqa: B027 - optional hook
        """Called first in the migration transaction (serializes concurrent migrators)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> SqlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        self._schema_checked = True
        return current, SCHEMA_VERSION

    def _too_new(self, version: int) -> StoreTooNew:
        return StoreTooNew(
            f"{self.url} has schema version {version}, newer than this stateflow knows "
            f"({SCHEMA_VERSION}); upgrade stateflow to use it"
        )

    def check_schema(self) -> None:
        """Refuse to work on a store that is not migrated to exactly our version."""
        if self._schema_checked:
            return
        version = self.schema_version()
        if version is None or version < SCHEMA_VERSION:
            raise StoreNotMigrated(
                f"{self.url} is not migrated (schema version {version or 0}, need "
                f"{SCHEMA_VERSION}); run `stateflow --store {self.url} migrate`"
            )
        if version > SCHEMA_VERSION:
            raise self._too_new(version)
        self._schema_checked = True

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
        keys = list(keys)
        per_key = members if isinstance(members, Mapping) else None
        shared = None if members is None or per_key is not None else [str(m) for m in members]
        outline_names = list(outlines)
        with self._read_tx() as tx:
            rows = self._rows(tx, keys)
            wanted: list[_Wanted] = []
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
        return self.read([key], members, outlines=outlines)[key]

    def cached(self, key: Hashable, build: Callable[[], R]) -> R:
        """``build()`` — or, on stores that can tell cheaply that nothing was committed since,
        the value an earlier ``build()`` under the same ``key`` returned. ``build`` must derive
        its value from this store's current data only; the value is shared, so treat it as
        immutable."""
        return build()

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
                raise NotFound(f"{key} has no revision {revision} (current revision {current})")
            if row is None or revision == 0:
                return Document(key, 0, None)
            if revision == row.revision:
                if not row.present:
                    return Document(key, revision, None, row.updated_seq)
                wanted = None if names is None else list(names)
                body = {n: v for n, _, v, _ in self._fetch(tx, key, row.doc_id, row.revision, wanted)[0]}
                return Document(key, revision, body, row.updated_seq)
            return self._rebuild(tx, key, row.doc_id, revision, names)

    def _rebuild(self, tx: Tx, key: DocKey, doc_id: int, revision: int, names: set[str] | None) -> Document:
        snap = tx.one(
            "SELECT revision, body FROM snapshots WHERE doc_id = ? AND revision <= ? "
            "ORDER BY revision DESC LIMIT 1",
            (doc_id, revision),
        )
        value: JSON = MISSING
        start = 0
        if snap is not None:
            start = int(snap[0])
            value = _decode(snap[1], f"{key} snapshot at revision {start}")
            if value is not None and type(value) is not dict:
                raise CorruptData(f"{key} snapshot at revision {start} is not an object")
            if value is None:
                value = MISSING
            elif names is not None:
                value = {k: v for k, v in value.items() if k in names}
        rows = tx.all(
            "SELECT revision, seq, edits FROM changes WHERE doc_id = ? AND revision > ? AND revision <= ? "
            "ORDER BY revision",
            (doc_id, start, revision),
        )
        if len(rows) != revision - start:
            if snap is None and (not rows or int(rows[0][0]) > 1):
                raise NotFound(f"{key} revision {revision} predates the retained history")
            raise CorruptData(f"{key}: the change chain to revision {revision} has gaps")
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
        return Document(key, revision, None if value is MISSING else value, seq)

    def history(
        self,
        keys: Iterable[DocKey],
        *,
        limit: int = 100,
        before_seq: int | None = None,
        members: Iterable[str] | None = None,
    ) -> list[Change]:
        """Changes of these documents, newest first (at most ``limit``, seq < ``before_seq``).

        ``members`` limits the edits returned to those top-level members (the others are not
        read); every change is still listed, possibly with no edits.
        """
        self.check_schema()
        keys = list(keys)
        if limit <= 0 or not keys:
            return []
        names = None if members is None else set(members)
        with self._read_tx() as tx:
            ids = {}
            revisions: dict[DocKey, int] = {}
            for key in keys:
                row = self._row(tx, key)
                if row is not None:
                    ids[row.doc_id] = key
                    revisions[key] = row.revision
            if not ids:
                return []
            # Each document's newest changes come straight off its (doc_id, revision) key — in one
            # document, revision order is seq order — so no query sorts a long history; only
            # the few rows taken per document are merged by seq.
            tops = {doc_id: revisions[key] for doc_id, key in ids.items()}
            if before_seq is not None:
                tops = self._revisions_before(tx, tops, before_seq)
            doc_ids = [doc_id for doc_id, top in tops.items() if top > 0]
            rows: list[tuple[Any, ...]] = []
            for start in range(0, len(doc_ids), 50):  # bounded statement size
                part = doc_ids[start : start + 50]
                newest = " UNION ALL ".join(
                    f"SELECT * FROM (SELECT seq, doc_id, revision, paths, edits FROM changes "
                    f"WHERE doc_id = ? AND revision <= ? ORDER BY revision DESC LIMIT ?) AS d{n}"
                    for n in range(len(part))
                )
                params: list[Any] = []
                for doc_id in part:
                    params += [doc_id, tops[doc_id], limit]
                rows += tx.all(
                    "SELECT c.seq, t.at, t.origin, c.doc_id, c.revision, c.paths, c.edits "
                    f"FROM ({newest}) c JOIN transitions t ON t.seq = c.seq "
                    "ORDER BY c.seq DESC, c.doc_id LIMIT ?",
                    [*params, limit],
                )
            if len(doc_ids) > 50:
                rows = sorted(rows, key=lambda r: (-int(r[0]), int(r[3])))[:limit]
            edits = self._edits(tx, ids, [(int(r[3]), int(r[4]), r[6]) for r in rows], names)
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
            heads = tx.all(
                "SELECT seq, at, origin FROM transitions WHERE seq > ? ORDER BY seq LIMIT ?",
                (after_seq, limit),
            )
            if not heads:
                return []
            rows = tx.all(
                "SELECT c.seq, t.at, t.origin, c.doc_id, c.revision, c.paths, d.state, d.subject, c.edits "
                "FROM changes c JOIN transitions t ON t.seq = c.seq "
                "JOIN documents d ON d.doc_id = c.doc_id WHERE c.seq >= ? AND c.seq <= ? "
                "ORDER BY c.seq, d.state, d.subject",
                (heads[0][0], heads[-1][0]),
            )
            keys = {int(r[3]): DocKey(r[6], r[7]) for r in rows}
            edits = self._edits(tx, keys, [(int(r[3]), int(r[4]), r[8]) for r in rows], None)
            by_seq: dict[int, list[Change]] = {}
            for r in rows:
                by_seq.setdefault(int(r[0]), []).append(self._change(r, keys[int(r[3])], edits))
            return [
                Transition(int(s), at, _decode_origin(o, s), by_seq.get(int(s), [])) for s, at, o in heads
            ]

    def _edits(
        self,
        tx: Tx,
        keys: dict[int, DocKey],
        changes: list[tuple[int, int, Any]],
        names: set[str] | None,
    ) -> dict[tuple[int, int], list[Edit]]:
        """The edits of each ``(doc_id, revision, inline edits or None)``: whole-document edits
        first, then per member (see ``INLINE_EDITS_MAX``)."""
        out: dict[tuple[int, int], list[Edit]] = {}
        if not changes or (names is not None and not names):
            return out
        stored: list[tuple[int, int]] = []
        for doc_id, revision, inline in changes:
            if inline is None:
                stored.append((doc_id, revision))
                continue
            what = f"{keys.get(doc_id, doc_id)} change at revision {revision}"
            for member, raw in _decode_inline(inline, what):
                if names is not None and member != "" and member not in names:
                    continue
                edits = _decode_edits(raw, what)
                if member == "" and names is not None:
                    edits = [_restrict(e, names) for e in edits]
                out.setdefault((doc_id, revision), []).extend(edits)
        for start in range(0, len(stored), 200):  # bounded statement size
            part = stored[start : start + 200]
            where = " OR ".join("(doc_id = ? AND revision = ?)" for _ in part)
            params: list[Any] = [v for pair in part for v in pair]
            if names is not None:
                where = f"({where}) AND (member = '' OR member IN ({','.join('?' * len(names))}))"
                params.extend(sorted(names))
            rows = tx.all(
                f"SELECT doc_id, revision, member, edits FROM change_edits WHERE {where} "
                "ORDER BY doc_id, revision, member",
                params,
            )
            for doc_id, revision, member, raw in rows:
                what = f"{keys.get(int(doc_id), doc_id)} change at revision {revision}"
                edits = _decode_edits(raw, what)
                if member == "" and names is not None:
                    edits = [_restrict(e, names) for e in edits]
                out.setdefault((int(doc_id), int(revision)), []).extend(edits)
        return out

    def _change(self, r: tuple[Any, ...], key: DocKey, edits: dict[tuple[int, int], list[Edit]]) -> Change:
        seq = int(r[0])
        return Change(
            seq=seq,
            at=r[1],
            origin=_decode_origin(r[2], seq),
            key=key,
            revision=int(r[4]),
            edits=edits.get((int(r[3]), int(r[4])), []),
            paths=_decode(r[5], f"{key} paths at revision {r[4]}"),
        )

    # ------------------------------------------------------------------ writes

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
        _validate(writes, origin)
        fresh = _Fresh()
        claims = _with_op_id([], op_id, op_scope)
        try:
            with self._write_tx() as tx:
                result = self._commit_in(tx, writes, origin or {}, claims, {}, fresh)
        except OpIdTaken as taken:
            if _replayed(taken, op_id, op_scope):
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
        decides.
        """
        self.check_schema()
        names = None if members is None else list(members)
        outline_names = list(outlines)
        shared_keys = sorted(set(shared))
        locked = sorted(set(keys) - set(shared_keys))
        all_claims = _with_op_id(claims, op_id, op_scope)
        if optimistic and names is None and not outline_names:
            fresh = _Fresh()
            done = self._optimistic(locked, shared_keys, compute, origin, all_claims, fresh)
            if done is not None:
                self._remember(fresh)
                return done
        fresh = _Fresh()
        try:
            with self._write_tx() as tx:
                docs: dict[DocKey, Document] = {}
                rows, locked_rows = self._claim(tx, shared_keys, locked, all_claims)
                loaded = {key: _Loaded(row) for key, row in locked_rows.items()}
                fresh.rows.update({key: rows.get(key, _NO_ROW) for key in shared_keys})
                fresh.rows.update(locked_rows)
                # then one member-head query for the documents whose heads are not cached
                wanted: list[_Wanted] = [
                    (k, rows[k].doc_id, rows[k].revision, None)
                    for k in shared_keys
                    if k in rows and rows[k].present
                ]
                wanted += [
                    (k, e.row.doc_id, e.row.revision, names) for k, e in loaded.items() if e.row.present
                ]
                fetched = self._fetch_many(tx, wanted, outline_names)
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
                        body = {n: v for n, _, v, _ in members_of}
                    docs[key] = Document(key, row.revision, body, row.updated_seq, shapes)
                writes, result = compute(docs)
                _validate(writes, origin)
                for write in writes:
                    if write.key in shared_keys:
                        raise InvalidInput(
                            f"{write.key} was read as shared and cannot be written in this call"
                        )
                commit = self._commit_in(tx, writes, origin or {}, all_claims, loaded, fresh)
        except OpIdTaken as taken:
            if _replayed(taken, op_id, op_scope):
                return Commit(applied=False), None
            raise
        self._remember(fresh)
        return commit, result

    def _claim(
        self,
        tx: Tx,
        shared: Sequence[DocKey],
        locked: Sequence[DocKey],
        claims: Sequence[tuple[str, str]] = (),
    ) -> tuple[dict[DocKey, _Row], dict[DocKey, _Row]]:
        """Start a read-modify-write: refuse claimed op ids already recorded (``OpIdTaken``),
        read the shared rows, then lock (creating if needed) the others — in this order, the
        order fold and re-declare use too. All statements go out together where the database
        pipelines."""
        statements: list[tuple[str, Sequence[Any]]] = [self._lock_query(key) for key in locked]
        if shared:
            statements.insert(0, self._rows_query(shared, self.share_clause))
        if claims:
            statements.insert(0, _claims_query(claims))
        answers = tx.all_of(statements)
        if claims and (taken := answers.pop(0)):
            raise OpIdTaken({(r[0], r[1]) for r in taken})
        rows = _by_key(answers.pop(0)) if shared else {}
        return rows, {key: _to_row(answer[0]) for key, answer in zip(locked, answers, strict=True)}

    def _remember(self, fresh: _Fresh) -> None:
        """Cache members written by a transaction that has committed (never before)."""
        for doc_id, name, revision, value, size in fresh.members:
            self._cache.put((doc_id, name), revision, value, size)
        for doc_id, (revision, heads) in fresh.heads.items():
            self._heads.put(doc_id, revision, heads)
        known = self._rows_known
        if len(known) + len(fresh.rows) > KNOWN_ROWS_MAX:
            known.clear()  # bounded; a miss only means the locked path
        for key, row in fresh.rows.items():
            current = known.get(key)
            # a lagging writer must not replace a newer row by an older one
            if current is None or current.doc_id != row.doc_id or current.revision <= row.revision:
                known[key] = row

    def _commit_in(
        self,
        tx: Tx,
        writes: Sequence[Write],
        origin: dict[str, Any],
        claims: Sequence[tuple[str, str]],
        loaded: dict[DocKey, _Loaded],
        fresh: _Fresh,
    ) -> Commit:
        at = fresh.at = utc_now()
        if claims:  # recorded first: a claim taken meanwhile ends the call before any write
            taken = tx.all(
                "INSERT INTO applied_ops (scope, op_id, applied_at) VALUES "
                + ", ".join(["(?, ?, ?)"] * len(claims))
                + " ON CONFLICT (scope, op_id) DO NOTHING RETURNING scope, op_id",
                [v for scope, claimed in claims for v in (scope, claimed, at)],
            )
            if len(taken) != len(set(claims)):
                raise OpIdTaken(set(claims) - {(r[0], r[1]) for r in taken})
        # Check every compare-and-set before touching anything.
        plan: list[tuple[Write, _Loaded]] = []
        for write in sorted(writes, key=lambda w: w.key):
            entry = loaded.get(write.key)
            if entry is None:
                entry = loaded[write.key] = _Loaded(self._lock(tx, write.key))
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
        # The rest needs no answer before the commit: where the database can pipeline, the
        # transition, every row write and the COMMIT travel together.
        with tx.batch(commit=True):
            seq_of, seq = self._transition(tx, at, origin)
            for scope, claimed in claims:
                tx.run(
                    f"UPDATE applied_ops SET seq = {seq.sql} WHERE scope = ? AND op_id = ?",
                    (*seq.params, scope, claimed),
                )
            plans = [self._plan_doc(write, entry, stage, fresh) for write, entry, stage in staged]
            self._emit(tx, plans, seq)
        return _committed(staged, plans, revisions, seq_of(), at, fresh)

    def _optimistic(
        self,
        locked: Sequence[DocKey],
        shared: Sequence[DocKey],
        compute: Callable[[dict[DocKey, Document]], tuple[Sequence[Write], R]],
        origin: dict[str, Any] | None,
        claims: Sequence[tuple[str, str]],
        fresh: _Fresh,
    ) -> tuple[Commit, R] | None:
        """Compute against the documents as last seen here, then commit checking that none of
        them moved; None when that cannot be done or did not hold (nothing was written)."""
        entries = {}
        for key in (*shared, *locked):
            known = self._known(key)
            if known is None or (known[0] is _NO_ROW and key not in shared):
                return None  # not cached, or a document whose row the locked path must create
            entries[key] = known
        docs = {
            key: Document(key, row.revision, body, row.updated_seq) for key, (row, body, _) in entries.items()
        }
        try:
            writes, result = compute(docs)
            _validate(writes, origin)
        except Exception:  # maybe computed on documents that moved: the locked path decides
            return None
        # the written documents' members are staged on: each gets its own copy
        loaded = {key: _Loaded(entries[key][0], dict(entries[key][2]), complete=True) for key in locked}
        plan = []
        for write in sorted(writes, key=lambda w: w.key):
            entry = loaded.get(write.key)
            if entry is None or (write.expect is not None and write.expect != entry.row.revision):
                return None  # a shared or unlocked document, or a compare-and-set that fails
            if write.edits:
                plan.append((write, entry))
        if not plan:
            return None  # nothing to write: the locked path records any op id as before
        try:
            staged = [(w, e, self._stage(_OFFLINE, w, e)) for w, e in plan]
        except StateflowError:
            return None
        plans = [self._plan_doc(w, e, stage, fresh) for w, e, stage in staged]
        committed = self._commit_planned(
            [(key, entries[key][0]) for key in locked],
            [(key, entries[key][0]) for key in shared],
            list(dict.fromkeys(claims)),
            origin or {},
            plans,
        )
        if committed is None:
            return None
        seq, at = committed
        fresh.bodies = {d: (r, body, at, size) for d, (r, body, _, size) in fresh.bodies.items()}
        revisions = {w.key: loaded[w.key].row.revision for w in writes}
        return _committed(staged, plans, revisions, seq, at, fresh), result

    def _known(
        self, key: DocKey
    ) -> tuple[_Row, dict[str, Any] | None, Mapping[str, tuple[Any, int, int]]] | None:
        """A document as last seen here — its row, body and members (name → value, position,
        size; shared, read-only) — if all of it is cached."""
        row = self._rows_known.get(key)
        if row is None:
            return None
        if not row.present:
            return row, None, {}
        assembled = self._assembled.get(row.doc_id, row.revision)
        if assembled is not None:
            return row, assembled[0], assembled[1]
        heads = self._heads.get(row.doc_id, row.revision)
        if heads is None:
            return None
        members: dict[str, tuple[Any, int, int]] = {}
        for _, name, position, revision, size, _ in heads:
            hit, value = self._cache.lookup((row.doc_id, name), revision)
            if not hit:
                return None
            members[name] = (value, position, size)
        body = {name: value for name, (value, _, _) in members.items()}
        # bodies and members are shared read-only, like every cached value
        self._assembled.put(row.doc_id, row.revision, (body, members), row.body_size)
        return row, body, members

    def _commit_planned(
        self,
        locked: Sequence[tuple[DocKey, _Row]],
        shared: Sequence[tuple[DocKey, _Row]],
        claims: Sequence[tuple[str, str]],
        origin: dict[str, Any],
        plans: Sequence[_DocPlan],
    ) -> tuple[int, str] | None:
        """Commit planned rows if every document is still at the row given (``_NO_ROW``: none)
        and no claim is taken; the new seq and the transition's time, or None (nothing written).

        Here: one write transaction that checks, then writes (SQLite's writer lock excludes
        every other writer meanwhile, so the check holds to the commit). The time is taken under
        that lock, so on one file times follow seq order as on the locked path."""
        with self._write_tx() as tx:
            at = utc_now()
            # the checks ride with the transition's insert: no row comes back when one fails
            check, params = _unmoved([*shared, *locked], claims)
            inserted = tx.all(
                f"INSERT INTO transitions (at, origin) SELECT ?, ? WHERE {check} RETURNING seq",
                (at, encode_trusted(origin), *params),
            )
            if not inserted:
                return None
            seq = int(inserted[0][0])
            with tx.batch(commit=True):
                if claims:
                    tx.run(
                        "INSERT INTO applied_ops (scope, op_id, applied_at, seq) VALUES "
                        + ", ".join(["(?, ?, ?, ?)"] * len(claims)),
                        [v for scope, op_id in claims for v in (scope, op_id, at, seq)],
                    )
                self._emit(tx, plans, _SeqRef("?", (seq,)))
            return seq, at

    keeps_bodies = False
    """Whether writes report whole bodies they leave behind to ``_remember`` (``_Fresh.bodies``)."""

    current_seq_sql: str | None = None
    """SQL naming the seq just inserted by this transaction, where it can be used before its
    value is known (pipelined writes); None: the value is read back and sent as a parameter."""

    def _transition(self, tx: Tx, at: str, origin: dict[str, Any]) -> tuple[Callable[[], int], _SeqRef]:
        """Insert the transition row; return how to get its seq and how statements name it."""
        seq_of = self._insert_transition(tx, at, origin)
        if self.current_seq_sql is None:
            return seq_of, _SeqRef("?", (seq_of(),))
        return seq_of, _SeqRef(self.current_seq_sql, ())

    def _insert_transition(self, tx: Tx, at: str, origin: dict[str, Any]) -> Callable[[], int]:
        """Insert the transition row; return how to get its seq (maybe only after the batch)."""
        row = tx.one(
            "INSERT INTO transitions (at, origin) VALUES (?, ?) RETURNING seq",
            (at, encode_trusted(origin)),
        )
        assert row is not None
        seq = int(row[0])
        return lambda: seq

    def _stage(self, tx: Tx, write: Write, entry: _Loaded) -> _Stage:
        """Apply the write's edits to the loaded members; nothing is written yet."""
        row = entry.row
        stage = _Stage(present=row.present)
        key = write.key
        if any(not e.path for e in write.edits):
            self._load_members(tx, key, entry, None)
            stage.values = {n: v for n, (v, _, _) in entry.members.items()}
            stage.touched = dict.fromkeys(stage.values)
        for edit in write.edits:
            if not edit.path:
                if edit.is_delete:
                    stage.values = dict.fromkeys(stage.values, MISSING)
                    stage.present = False
                else:
                    stage.values = {n: MISSING for n in stage.values} | dict(edit.value)
                    stage.present = True
                stage.touched.update(dict.fromkeys(stage.values))
                continue
            name = edit.path[0]
            assert isinstance(name, str)
            if name not in stage.values:
                if row.present and name not in entry.members and not entry.complete:
                    self._load_members(tx, key, entry, [name])
                have = entry.members.get(name) if row.present else None
                stage.values[name] = have[0] if have else MISSING
            if not stage.present:
                if edit.is_delete:
                    continue  # deleting inside an absent document: nothing to do
                stage.present = True
            try:
                stage.values[name] = apply_edits(stage.values[name], [Edit(edit.path[1:], edit.value)])
            except Conflict as exc:
                raise Conflict(f"{key}: {exc}") from exc
            stage.touched[name] = None
        return stage

    def _plan_doc(self, write: Write, entry: _Loaded, stage: _Stage, fresh: _Fresh) -> _DocPlan:
        """The rows one document's write changes, decided before any statement is sent (the
        statements themselves are :meth:`_emit`'s)."""
        row = entry.row
        revision = row.revision + 1
        size = row.body_size
        position = row.next_position
        plan = _DocPlan(row.doc_id, revision, present=stage.present, was_present=row.present)
        # the member heads after this write follow from those before it, when they are known
        before = self._heads.get(row.doc_id, row.revision) if row.present else []
        heads = None if before is None else {h[1]: h for h in before}
        for name in stage.touched:
            value = stage.values[name]
            old = entry.members.get(name) if row.present else None
            if value is MISSING or not stage.present:
                if old is not None:
                    plan.deletes.append((row.doc_id, name))
                    size -= old[2]
                if heads is not None:
                    heads.pop(name, None)
                continue
            body = encode_trusted(value)
            outline = encode_trusted(outline_of(value)) if type(value) is dict else None
            fresh.members.append((row.doc_id, name, revision, value, len(body)))
            if old is not None:
                plan.updates.append((body, revision, len(body), outline, row.doc_id, name))
                size += len(body) - old[2]
                at = old[1]
            else:
                plan.inserts.append((row.doc_id, name, position, revision, len(body), outline, body))
                at = position
                position += 1
                size += len(body)
            if heads is not None:
                heads[name] = (row.doc_id, name, at, revision, len(body), outline)
        if not stage.present:
            size = 0
            heads = {}
        if heads is not None:
            after = sorted(heads.values(), key=lambda h: h[2])
            fresh.heads[row.doc_id] = (revision, after)
            if self.keeps_bodies and (entry.complete or not row.present):
                whole = {
                    h[1]: stage.values[h[1]] if h[1] in stage.touched else entry.members[h[1]][0]
                    for h in after
                }
                fresh.bodies[row.doc_id] = (revision, whole if stage.present else None, fresh.at, size)
        paths = (
            [list(p) for p in write.paths] if write.paths is not None else [list(e.path) for e in write.edits]
        )
        plan.paths = encode_trusted(paths)
        groups: dict[str, list[Any]] = {}
        for edit in _effective_edits(write.edits):
            groups.setdefault(str(edit.path[0]) if edit.path else "", []).append(edit.to_json())
        plan.edits = [
            (row.doc_id, revision, member, encode_trusted(group)) for member, group in sorted(groups.items())
        ]
        edit_bytes = sum(len(e[3]) for e in plan.edits)
        if edit_bytes <= INLINE_EDITS_MAX:
            plan.inline = (
                b"[" + b",".join(b"[" + orjson.dumps(e[2]) + b"," + e[3] + b"]" for e in plan.edits) + b"]"
            )
            plan.edits = []
        since = row.bytes_since_snapshot + edit_bytes
        snapshot_revision = row.snapshot_revision
        if revision - snapshot_revision >= SNAPSHOT_MAX_CHAIN or since >= max(size, SNAPSHOT_MIN_BYTES):
            plan.snapshot = True
            snapshot_revision, since = revision, 0
        plan.document = (
            revision,
            1 if stage.present else 0,
            snapshot_revision,
            since,
            size,
            position,
            row.doc_id,
        )
        return plan

    def _emit(self, tx: Tx, plans: Sequence[_DocPlan], seq: _SeqRef) -> None:
        """Send the statements of planned document writes (inside the commit's batch)."""
        for plan in plans:
            if plan.deletes and plan.present:  # an absent document loses every member below
                tx.many("DELETE FROM members WHERE doc_id = ? AND name = ?", plan.deletes)
            if plan.updates:
                tx.many(
                    "UPDATE members SET body = ?, revision = ?, size = ?, outline = ? "
                    "WHERE doc_id = ? AND name = ?",
                    plan.updates,
                )
            if plan.inserts:
                tx.many(
                    "INSERT INTO members (doc_id, name, position, revision, size, outline, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    plan.inserts,
                )
            if not plan.present:
                tx.run("DELETE FROM members WHERE doc_id = ?", (plan.doc_id,))
            tx.run(
                f"INSERT INTO changes (doc_id, revision, seq, paths, edits) VALUES (?, ?, {seq.sql}, ?, ?)",
                (plan.doc_id, plan.revision, *seq.params, plan.paths, plan.inline),
            )
            if plan.edits:
                tx.many(
                    "INSERT INTO change_edits (doc_id, revision, member, edits) VALUES (?, ?, ?, ?)",
                    plan.edits,
                )
            if plan.snapshot:
                tx.run(
                    "INSERT INTO snapshots (doc_id, revision, body) VALUES (?, ?, ?)",
                    (
                        plan.doc_id,
                        plan.revision,
                        self._raw_body(tx, plan.doc_id) if plan.present else b"null",
                    ),
                )
            revision, present, snapshot_revision, since, size, position, doc_id = plan.document
            # `present` is indexed: setting it, even to the same value, rewrites an index page
            setting = "present = ?, " if plan.present != plan.was_present else ""
            tx.run(
                f"UPDATE documents SET {setting}revision = ?, updated_seq = {seq.sql}, "
                "snapshot_revision = ?, bytes_since_snapshot = ?, body_size = ?, next_position = ? "
                "WHERE doc_id = ?",
                (
                    *((present,) if setting else ()),
                    revision,
                    *seq.params,
                    snapshot_revision,
                    since,
                    size,
                    position,
                    doc_id,
                ),
            )

    def _raw_body(self, tx: Tx, doc_id: int) -> bytes:
        """The current body as JSON bytes, assembled from member rows without decoding them."""
        rows = tx.all("SELECT name, body FROM members WHERE doc_id = ? ORDER BY position", (doc_id,))
        return b"{" + b",".join(orjson.dumps(n) + b":" + bytes(b) for n, b in rows) + b"}"

    # ------------------------------------------------------------------ rows and members

    def _row(self, tx: Tx, key: DocKey) -> _Row | None:
        return self._rows(tx, [key]).get(key)

    share_clause = ""
    """Appended to the row query of documents a write transaction reads without writing."""

    def _rows(self, tx: Tx, keys: Sequence[DocKey]) -> dict[DocKey, _Row]:
        """The rows of several documents in one query."""
        if not keys:
            return {}
        return _by_key(tx.all(*self._rows_query(keys)))

    @staticmethod
    def _rows_query(keys: Sequence[DocKey], suffix: str = "") -> tuple[str, list[str]]:
        where, params = key_filter(keys)
        return f"{_ROW_SELECT} WHERE {where}{suffix}", params

    def _lock(self, tx: Tx, key: DocKey) -> _Row:
        """The document's row, created (revision 0, absent) if needed, locked for this tx."""
        r = tx.one(*self._lock_query(key))
        assert r is not None
        return _to_row(r)

    @staticmethod
    def _lock_query(key: DocKey) -> tuple[str, tuple[str, str]]:
        # One statement creates the row if needed and returns it; on PostgreSQL the
        # DO UPDATE also takes the row lock (held to commit), serializing this document.
        return (
            "INSERT INTO documents (state, subject) VALUES (?, ?) ON CONFLICT (state, subject) "
            f"DO UPDATE SET revision = documents.revision RETURNING {_ROW_COLUMNS}",
            (key.state, key.subject),
        )

    def _load_members(
        self,
        tx: Tx,
        key: DocKey,
        entry: _Loaded,
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
        return {n: v for n, (v, _, _) in items if names is None or n in names}, shapes

    def _fetch_many(
        self,
        tx: Tx,
        wanted: Sequence[_Wanted],
        outlines: Sequence[str] = (),
    ) -> dict[int, tuple[list[tuple[str, int, Any, int]], dict[str, Any]]]:
        """Members of several documents: one head query for the documents whose heads are not
        cached at their revision, one body query for the member cache misses."""
        if not wanted:
            return {}
        by_doc: dict[int, list[_Head]] = {}
        unknown: dict[int, int] = {}
        for _, doc_id, revision, _ in wanted:
            cached = self._heads.get(doc_id, revision)
            if cached is None:
                unknown[doc_id] = revision
            else:
                by_doc[doc_id] = cached
        if unknown:
            ids = list(unknown)
            for h in tx.all(
                "SELECT doc_id, name, position, revision, size, outline FROM members "
                f"WHERE doc_id IN ({','.join('?' * len(ids))}) ORDER BY doc_id, position",
                ids,
            ):
                by_doc.setdefault(int(h[0]), []).append(
                    (int(h[0]), h[1], int(h[2]), int(h[3]), int(h[4]), None if h[5] is None else bytes(h[5]))
                )
            for doc_id, revision in unknown.items():
                self._heads.put(doc_id, revision, by_doc.setdefault(doc_id, []))
        keys = {doc_id: key for key, doc_id, _, _ in wanted}
        names_of = {doc_id: (None if names is None else set(names)) for _, doc_id, _, names in wanted}
        values: dict[tuple[int, str], Any] = {}
        misses: list[tuple[int, str]] = []
        for doc_id, rows in by_doc.items():
            names = names_of[doc_id]
            for _, name, _, revision, _, _ in rows:
                if names is not None and name not in names:
                    continue
                hit, value = self._cache.lookup((doc_id, name), int(revision))
                if hit:
                    values[(doc_id, name)] = value
                else:
                    misses.append((doc_id, name))
        for start in range(0, len(misses), 200):
            part = misses[start : start + 200]
            where = " OR ".join(["(doc_id = ? AND name = ?)"] * len(part))
            for doc_id, name, revision, raw in tx.all(
                f"SELECT doc_id, name, revision, body FROM members WHERE {where}",
                [v for pair in part for v in pair],
            ):
                value = _decode(raw, f"{keys[int(doc_id)]} member {name!r}")
                values[(int(doc_id), name)] = value
                self._cache.put((int(doc_id), name), int(revision), value, len(raw))
        out: dict[int, tuple[list[tuple[str, int, Any, int]], dict[str, Any]]] = {}
        for _, doc_id, _, _ in wanted:
            rows = by_doc.get(doc_id, [])
            shapes = {
                n: None if o is None else _decode(o, f"{keys[doc_id]} outline of {n!r}")
                for _, n, _, _, _, o in rows
                if n in outlines
            }
            members = [
                (n, int(p), values[(doc_id, n)], int(size))
                for _, n, p, _, size, _ in rows
                if (doc_id, n) in values
            ]
            out[doc_id] = (members, shapes)
        return out

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

    # ------------------------------------------------------------------ listings and search

    def scan(self, state: str, *, after: str | None = None, limit: int = 200) -> list[Listed]:
        """Present documents of ``state`` in subject order (bytewise), strictly after ``after``."""
        self.check_schema()
        with self._read_tx() as tx:
            return self._scan(tx, state, after, limit)

    def _scan(
        self, tx: Tx, state: str, after: str | None, limit: int, extra: str = "", params: Sequence[Any] = ()
    ) -> list[Listed]:
        rows = tx.all(
            "SELECT d.subject, d.revision, d.updated_seq, t.at FROM documents d "
            "LEFT JOIN transitions t ON t.seq = d.updated_seq "
            f"WHERE d.state = ? AND d.present = 1 AND d.subject > ? {extra} ORDER BY d.subject LIMIT ?",
            (state, after or "", *params, limit),
        )
        return [
            Listed(DocKey(state, r[0]), int(r[1]), None if r[2] is None else int(r[2]), r[3]) for r in rows
        ]

    def count(self, state: str) -> int:
        self.check_schema()
        with self._read_tx() as tx:
            row = tx.one("SELECT COUNT(*) FROM documents WHERE state = ? AND present = 1", (state,))
        return int(row[0]) if row else 0

    def member_counts(self, state: str) -> dict[str, int]:
        """How many present documents of ``state`` have each top-level member."""
        self.check_schema()
        with self._read_tx() as tx:
            rows = tx.all(
                "SELECT m.name, COUNT(*) FROM members m JOIN documents d ON d.doc_id = m.doc_id "
                "WHERE d.state = ? AND d.present = 1 GROUP BY m.name",
                (state,),
            )
        return {r[0]: int(r[1]) for r in rows}

    def search(
        self, state: str, filters: dict[str, Any], *, after: str | None = None, limit: int = 200
    ) -> list[Listed]:
        """Present documents of ``state`` that contain ``filters`` (``jsonb @>`` semantics), in
        subject order after ``after``."""
        self.check_schema()
        if type(filters) is not dict or not filters:
            raise InvalidInput("search needs a non-empty filters object (a containment document)")
        check(filters, "filters")
        out: list[Listed] = []
        with self._read_tx() as tx:
            cursor = after
            while len(out) < limit:
                page = self._search_candidates(tx, state, filters, cursor, max(limit, 200))
                if not page:
                    break
                cursor = page[-1].key.subject
                out.extend(self._verify(tx, page, filters)[: limit - len(out)])
        return out

    def _search_candidates(
        self, tx: Tx, state: str, filters: dict[str, Any], after: str | None, limit: int
    ) -> list[Listed]:
        """Documents that may match (the default: every document; a backend may prefilter)."""
        return self._scan(tx, state, after, limit)

    def _verify(self, tx: Tx, page: list[Listed], filters: dict[str, Any]) -> list[Listed]:
        """Check containment in Python for members the backend could not check itself."""
        out = []
        for item in page:
            row = self._row(tx, item.key)
            if row is None:
                continue
            unchecked = self._unchecked(tx, row.doc_id, filters)
            members, _ = (
                self._fetch(tx, item.key, row.doc_id, row.revision, unchecked) if unchecked else ([], {})
            )
            body = {n: v for n, _, v, _ in members}
            if all(n in body and json_contains(body[n], filters[n]) for n in unchecked):
                out.append(item)
        return out

    def _unchecked(self, tx: Tx, doc_id: int, filters: dict[str, Any]) -> list[str]:
        """Filter members whose containment the candidate query did not establish."""
        return list(filters)

    def prune_history(self, state: str, older_than: str) -> int:
        """Forget the changes of ``state``'s documents written before ``older_than`` (ISO-8601
        UTC); return how many change rows went.

        A snapshot is kept at the newest forgotten revision, so every later revision stays
        readable as of; earlier ones then answer "predates the retained history". Transitions
        left without any change are deleted.
        """
        self.check_schema()
        removed = 0
        with self._write_tx() as tx:
            cuts = tx.all(
                "SELECT d.doc_id, d.subject, MAX(c.revision) FROM changes c JOIN transitions t ON t.seq = c.seq "
                "JOIN documents d ON d.doc_id = c.doc_id WHERE d.state = ? AND t.at < ? GROUP BY d.doc_id, d.subject",
                (state, older_than),
            )
            seqs: set[int] = set()
            for doc_id, subject, cut in cuts:
                doc_id, cut = int(doc_id), int(cut)
                key = DocKey(state, subject)
                if tx.one("SELECT 1 FROM snapshots WHERE doc_id = ? AND revision = ?", (doc_id, cut)) is None:
                    doc = self._rebuild(tx, key, doc_id, cut, None)
                    body = b"null" if doc.body is None else encode_trusted(doc.body)
                    tx.run(
                        "INSERT INTO snapshots (doc_id, revision, body) VALUES (?, ?, ?)", (doc_id, cut, body)
                    )
                seqs |= {
                    int(r[0])
                    for r in tx.all(
                        "SELECT seq FROM changes WHERE doc_id = ? AND revision <= ?", (doc_id, cut)
                    )
                }
                tx.run("DELETE FROM change_edits WHERE doc_id = ? AND revision <= ?", (doc_id, cut))
                removed += tx.run("DELETE FROM changes WHERE doc_id = ? AND revision <= ?", (doc_id, cut))
                tx.run("DELETE FROM snapshots WHERE doc_id = ? AND revision < ?", (doc_id, cut))
            self._drop_orphan_transitions(tx, sorted(seqs))
        return removed

    def _drop_orphan_transitions(self, tx: Tx, seqs: list[int]) -> None:
        for start in range(0, len(seqs), 500):
            part = seqs[start : start + 500]
            tx.run(
                f"DELETE FROM transitions WHERE seq IN ({','.join('?' * len(part))}) "
                "AND NOT EXISTS (SELECT 1 FROM changes c WHERE c.seq = transitions.seq) "
                # the newest stays: SQLite numbers a new transition after the highest one left
                "AND seq < (SELECT MAX(seq) FROM transitions)",
                part,
            )

    def purge(self, state: str) -> int:
        """Delete every document of ``state`` with its history (no audit survives); return how many.

        Transitions left without any change are deleted too.
        """
        self.check_schema()
        with self._write_tx() as tx:
            ids = [int(r[0]) for r in tx.all("SELECT doc_id FROM documents WHERE state = ?", (state,))]
            seqs = sorted(
                {
                    int(r[0])
                    for r in tx.all(
                        "SELECT DISTINCT c.seq FROM changes c JOIN documents d ON d.doc_id = c.doc_id WHERE d.state = ?",
                        (state,),
                    )
                }
            )
            for table in ("change_edits", "changes", "snapshots", "members"):
                tx.run(
                    f"DELETE FROM {table} WHERE doc_id IN (SELECT doc_id FROM documents WHERE state = ?)",
                    (state,),
                )
            tx.run("DELETE FROM documents WHERE state = ?", (state,))
            self._drop_orphan_transitions(tx, seqs)
            tx.run("DELETE FROM applied_ops WHERE scope = ?", (state,))
        for key in list(self._rows_known):  # (a copy: other threads may add rows meanwhile)
            if key.state == state:
                self._rows_known.pop(key, None)
        return len(ids)

    # ------------------------------------------------------------------ ledger and retention

    def applied_op(self, op_id: str, scope: str = "") -> int | bool | None:
        """False if ``op_id`` was never applied; else the seq it produced (None for a no-op)."""
        self.check_schema()
        with self._read_tx() as tx:
            row = tx.one("SELECT seq FROM applied_ops WHERE scope = ? AND op_id = ?", (scope, op_id))
        if row is None:
            return False
        return None if row[0] is None else int(row[0])

    def prune_ops(self, older_than: str) -> int:
        """Forget idempotency keys applied before ``older_than`` (ISO-8601 UTC); return count."""
        self.check_schema()
        with self._write_tx() as tx:
            return int(tx.run("DELETE FROM applied_ops WHERE applied_at < ?", (older_than,)))


_NO_ROW: Final = _Row(0, 0, False, None, 0, 0, 0, 0)
"""Known to have no row at all (never written)."""
KNOWN_ROWS_MAX: Final = 100_000
ASSEMBLED_BYTES: Final = 64 * 1024 * 1024
"""Bodies of known documents kept assembled (by encoded size; members are shared with the
member cache, so this bounds what stays alive after the member cache lets go)."""


def _committed(
    staged: Sequence[tuple[Write, _Loaded, _Stage]],
    plans: Sequence[_DocPlan],
    revisions: dict[DocKey, int],
    seq: int,
    at: str,
    fresh: _Fresh,
) -> Commit:
    """The outcome of committed plans; their documents' new rows go to ``fresh`` for the caches."""
    fresh.seq, fresh.at = seq, at
    for (write, _, _), planned in zip(staged, plans, strict=True):
        revisions[write.key] = planned.revision
        fresh.rows[write.key] = _row_after(planned, seq, at)
    return Commit(applied=True, seq=seq, at=at, revisions=revisions)


def _row_after(plan: _DocPlan, seq: int, at: str) -> _Row:
    """A document's row as a committed plan left it."""
    revision, present, snapshot_revision, since, size, position, doc_id = plan.document
    return _Row(doc_id, revision, bool(present), seq, snapshot_revision, since, size, position, at)


class _Offline(Tx):
    """Staging a write computed optimistically needs no database: every member is in hand."""

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise AssertionError("no database access while staging an optimistic write")

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        raise AssertionError("no database access while staging an optimistic write")


_OFFLINE: Final = _Offline()


@dataclass(slots=True)
class _DocPlan:
    """One document's write as rows (see ``SqlStore._plan_doc``)."""

    doc_id: int
    revision: int
    present: bool
    """whether the document exists after the write (if not, every member row goes)"""
    was_present: bool = False
    deletes: list[tuple[int, str]] = field(default_factory=list)
    updates: list[tuple[Any, ...]] = field(default_factory=list)
    """(body, revision, size, outline, doc_id, name)"""
    inserts: list[tuple[Any, ...]] = field(default_factory=list)
    """(doc_id, name, position, revision, size, outline, body)"""
    paths: bytes = b"[]"
    edits: list[tuple[int, int, str, bytes]] = field(default_factory=list)
    """change_edits rows: (doc_id, revision, member, edits)"""
    inline: bytes | None = None
    """the edits in the change row instead, as ``[[member, edits], …]`` (small changes)"""
    snapshot: bool = False
    """take a snapshot of the body as written"""
    document: tuple[Any, ...] = ()
    """(revision, present, snapshot_revision, bytes_since_snapshot, body_size, next_position, doc_id)"""


@dataclass(slots=True)
class _Stage:
    present: bool
    values: dict[str, JSON] = field(default_factory=dict)
    touched: dict[str, None] = field(default_factory=dict)
    """Member names to write, in first-touched order (new members get positions in it)."""


def outline_of(value: dict[str, Any]) -> dict[str, str]:
    """An object member's outline: its immediate keys and their kinds (never their values)."""
    return {k: kind(v) for k, v in value.items()}


def key_filter(keys: Sequence[DocKey]) -> tuple[str, list[str]]:
    """A WHERE clause (on ``documents d``) matching exactly these keys, with its parameters."""
    return _key_where(len(keys)), [v for k in keys for v in k]


@lru_cache(maxsize=64)
def _key_where(count: int) -> str:
    return " OR ".join(["(d.state = ? AND d.subject = ?)"] * count)


def _by_key(rows: list[tuple[Any, ...]]) -> dict[DocKey, _Row]:
    # keys read back from the database were valid when written: no need to check them again
    return {DocKey._make((r[9], r[10])): _to_row(r) for r in rows}


def _to_row(r: tuple[Any, ...]) -> _Row:
    return _Row(
        doc_id=int(r[0]),
        revision=int(r[1]),
        present=bool(r[2]),
        updated_seq=None if r[3] is None else int(r[3]),
        snapshot_revision=int(r[4]),
        bytes_since_snapshot=int(r[5]),
        body_size=int(r[6]),
        next_position=int(r[7]),
        at=r[8] if len(r) > 8 else None,
    )


def _decode(raw: Any, what: str) -> Any:
    try:
        return decode(bytes(raw))
    except (InvalidJSON, TypeError, ValueError) as exc:
        raise CorruptData(f"stored {what} is corrupt: {exc}") from exc


def _decode_inline(raw: Any, what: str) -> list[tuple[str, Any]]:
    """A change row's inline edits: ``(member, edits as JSON)`` pairs."""
    data = _decode(raw, what)
    if type(data) is not list or not all(type(p) is list and len(p) == 2 and type(p[0]) is str for p in data):
        raise CorruptData(f"stored {what} is corrupt: inline edits are not [member, edits] pairs")
    return [(p[0], p[1]) for p in data]


def _decode_edits(raw: Any, what: str) -> list[Edit]:
    data = raw if type(raw) is list else _decode(raw, what)
    try:
        if type(data) is not list:
            raise InvalidInput("not a list")
        return [Edit.from_json(e) for e in data]
    except InvalidInput as exc:
        raise CorruptData(f"stored {what} is corrupt: {exc}") from exc


def _effective_edits(edits: Sequence[Edit]) -> Sequence[Edit]:
    """Edits before the last whole-document edit are overwritten by it: drop them, so storing
    whole-document edits first (then per member) replays exactly."""
    last_root = max((i for i, e in enumerate(edits) if not e.path), default=0)
    return edits[last_root:]


def _restrict(edit: Edit, names: set[str]) -> Edit:
    """A whole-document edit seen through a member filter."""
    if edit.is_delete or type(edit.value) is not dict:
        return edit
    return Edit(edit.path, {k: v for k, v in edit.value.items() if k in names})


def _decode_origin(raw: Any, seq: Any) -> dict[str, Any]:
    data = _decode(raw, f"origin of transition {seq}")
    if type(data) is not dict:
        raise CorruptData(f"stored origin of transition {seq} is not an object")
    return data


def _validate(writes: Sequence[Write], origin: dict[str, Any] | None) -> None:
    """Refuse malformed writes before any database work."""
    seen: set[DocKey] = set()
    for write in writes:
        if not isinstance(write, Write):
            raise InvalidInput(f"a cohort holds Write objects, got {type(write).__name__}")
        if write.key in seen:
            raise InvalidInput(f"{write.key} appears twice in one cohort; combine its edits")
        seen.add(write.key)
        if write.expect is not None and (type(write.expect) is not int or write.expect < 0):
            raise InvalidInput(f"{write.key}: expected revision must be an integer ≥ 0")
        for edit in write.edits:
            if not edit.path:
                if not edit.is_delete and type(edit.value) is not dict:
                    raise InvalidInput(f"{write.key}: a document must be a JSON object")
            elif type(edit.path[0]) is not str:
                raise InvalidInput(f"{write.key}: a document's top level is an object, not an array")
            if not edit.is_delete:
                check(edit.value, f"{write.key}")
    if origin is not None:
        if type(origin) is not dict:
            raise InvalidInput("origin must be a JSON object")
        check(origin, "origin")
