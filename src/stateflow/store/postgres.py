"""PostgreSQL backend: psycopg 3 with a connection pool, row locks, commit-ordered seq.

Writers lock the rows of the documents they touch: one ``INSERT … ON CONFLICT DO UPDATE …
RETURNING`` creates an absent document's row or locks the existing one until commit. Right
before the transition row is inserted a transaction-level advisory lock is taken, so ``seq``
values become visible in commit order:
a reader paging by ``seq`` never skips a transition that commits later with a smaller number.
Reads run in ``REPEATABLE READ READ ONLY`` transactions: one snapshot per read.
"""

from __future__ import annotations

import logging
import math
import re
import struct
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from decimal import Decimal
from functools import lru_cache, partial
from time import monotonic
from typing import Any, ClassVar, Final

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from stateflow.doc.canonical import encode_trusted, plain_number
from stateflow.errors import (
    CallCancelled,
    CorruptData,
    StoreError,
    StoreNotMigrated,
    StoreReadOnly,
    StoreTimeout,
    StoreTooNew,
    StoreUnavailable,
    UnsupportedStore,
    WriteAborted,
)
from stateflow.store import asof, served_patch
from stateflow.store.backend import Candidates, SortSql
from stateflow.store.base import SqlStore
from stateflow.store.cache import RevisionCache
from stateflow.store.cancel import CANCELLED, committed, current, uncancellable
from stateflow.store.clock import restored_at, utc_now
from stateflow.store.commit_groups import CommitGroups, Member
from stateflow.store.core import ROWS_PER_QUERY
from stateflow.store.counting import FOLD_EVERY, tried, waited
from stateflow.store.history import SQL_INT_MAX
from stateflow.store.id_blocks import IdBlocks
from stateflow.store.listing import subjects_sql
from stateflow.store.migrations import (
    INDEXABLE,
    POSTGRES,
    POSTGRES_SCALAR_VALUE_KEY,
    POSTGRES_SCALAR_VALUE_WHERE,
    SCALAR_CONTAINMENT_WHERE,
    SCHEMA_VERSION,
    VALUE_INDEX_MAX,
)
from stateflow.store.model import DocKey, Document, doc_keys, made_document
from stateflow.store.open import display_location
from stateflow.store.pg_fast import (
    FENCE_MARK,
    KEY_TAKEN,
    LOCK_NOT_AVAILABLE,
    TAKEN_MEANWHILE,
    FastCommit,
    fast_values,
    fenced,
)
from stateflow.store.pg_fast import statement as fast_statement
from stateflow.store.pg_pool import CheckedPool, ended, refuse_if_forked, this_process
from stateflow.store.plan import Fresh, SeqRef, WritePlan
from stateflow.store.rows import (
    LOCK_ORDER_SQL,
    ROW_COLUMNS,
    DocRow,
    decode_stored,
    key_filter,
    lock_order,
    to_row,
)
from stateflow.store.tx import Tx

_SCALAR_INDEXABLE: Final = SCALAR_CONTAINMENT_WHERE.format(m="m.")  # the members in the containment index
MIN_SERVER_VERSION: Final = 140000
"""The oldest PostgreSQL (``server_version_num``) the schema's functions run on."""
_SEQ_LOCK: Final = 0x5EF10  # advisory lock id that orders transition inserts
_SEQ_LOCK_KEY: Final = f"(({fenced('?::bigint')} << 32) | (hashtext(current_schema())::bigint & 4294967295))"
"""The seq lock's key, which every write takes: refused (``fenced``) once a newer release has
migrated the store."""
_FOLD_LOCK: Final = _SEQ_LOCK + 2  # advisory lock id a fold of the counters' deltas takes (tried)
"""The seq lock's key for the store in the session's schema: advisory locks are per database,
so a constant key would queue the writers of every store (schema) of a database behind each
other; only one store's transitions need commit order."""

_WHOLE_READ: Final = (
    "SELECT d.state, d.subject, d.doc_id, d.revision, d.present, d.updated_seq, t.at, "
    # the body assembled from member rows in the server: one row and one decode per document
    "(SELECT '\\x7b'::bytea || coalesce(string_agg(convert_to(to_json(m.name)::text, 'UTF8') "
    "|| '\\x3a'::bytea || m.body, '\\x2c'::bytea ORDER BY m.position), ''::bytea) || '\\x7d'::bytea "
    "FROM members m WHERE m.doc_id = d.doc_id AND d.present = 1), "
    # members held as trees are read through the member cache instead
    "EXISTS (SELECT 1 FROM members m WHERE m.doc_id = d.doc_id AND m.root IS NOT NULL) "
    "FROM documents d LEFT JOIN transitions t ON t.seq = d.updated_seq WHERE {where}"
)
_REVISIONS: Final = "SELECT d.doc_id, d.revision FROM documents d WHERE {where}"


DEFAULT_MAX_GROUP: Final = 64
"""At most this many commits share one transaction (see ``CommitGroups``)."""
SEEN_KEYS_MAX: Final = 10_000
"""Keys remembered as read before (see ``read``), at most."""
BODY_CACHE_BYTES: Final = 64 * 1024 * 1024
"""Whole bodies kept by revision, by encoded size."""
KEPT_FOR: Final = 1.0
"""Seconds a connection taken from the pool for commits sent alone is kept before it goes back
(at the next such commit): the pool's own checks on a returned connection — its lifetime, a
broken one replaced — apply to it that often."""
KEEP_FROM_POOL_SIZE: Final = 3
"""The least ``max_size`` at which commits sent alone keep a connection of the pool: the pool
then lends the others at least two while one is kept (a smaller pool is left to them whole)."""


class _PgTx(Tx):
    def __init__(
        self, conn: psycopg.Connection[Any], begin: str | None = None, where: str = "the store"
    ) -> None:
        self.conn = conn
        self.where = where
        """The store as its refusals name it (its ``url``, the password masked)."""
        self._pipeline: psycopg.Pipeline | None = None
        self.begin = begin
        """BEGIN not sent yet: it travels with the first statement (one round trip saved)."""
        self.committed = False
        """COMMIT already went out with a batch."""
        self.poisoned = False
        """A statement failed inside a pipeline: the connection must not be reused."""

    @contextmanager
    def _pipelined(self) -> Iterator[psycopg.Pipeline]:
        # After a failure inside a pipeline, psycopg may believe a statement was prepared whose
        # PREPARE never ran (the server skipped it with the rest of the pipeline); that
        # connection would then fail later calls with "prepared statement … does not exist".
        try:
            with self.conn.pipeline() as pipeline:
                yield pipeline
        except psycopg.Error as exc:
            self.poisoned = True
            interrupt_behind(exc)
            raise
        except BaseException as exc:
            if not isinstance(exc, Exception):  # stopped part way (a Ctrl-C): results may be on their way
                self.poisoned = True
            raise

    def _execute(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[Any]:
        sql = _pg(sql)
        if self.begin is None:
            return self.conn.execute(sql, params, prepare=True if sql.startswith(asof.HEAD) else None)
        begin, self.begin = self.begin, None
        # leaving the pipeline sends its Sync and waits for the results: one round trip (a
        # `sync()` of our own before it would cost a second, empty one)
        with self._pipelined():
            self.conn.execute(begin)
            cur = self.conn.execute(sql, params)
        return cur

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with _mapped_errors(self.where):
            cur = self._execute(sql, params)
            if self._pipeline is not None:
                self._pipeline.sync()  # results are wanted now: wait for them
            return _rows_of(cur)

    @contextmanager
    def batch(self, *, commit: bool = False) -> Iterator[Any]:
        with _mapped_errors(self.where), self._pipelined() as pipeline:
            self._pipeline = pipeline
            try:
                yield pipeline
                if commit and self.begin is None:
                    self.conn.execute("COMMIT")  # rides with the batch; an error above skips it
                    self.committed = True
            finally:
                self._pipeline = None

    def all_of(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
        with _mapped_errors(self.where):
            with self._pipelined():  # its end syncs and fetches every result: one round trip
                if self.begin is not None:
                    self.conn.execute(self.begin)
                    self.begin = None
                cursors = [self.conn.execute(_pg(sql), params) for sql, params in statements]
            return [_rows_of(cur) for cur in cursors]

    def later(self, sql: str, params: Sequence[Any] = ()) -> Callable[[], list[tuple[Any, ...]]]:
        if self._pipeline is None or self.begin is not None:
            return super().later(sql, params)
        with _mapped_errors(self.where):
            cur = self._execute(sql, params)

        def rows() -> list[tuple[Any, ...]]:
            with _mapped_errors(self.where):
                return cur.fetchall()

        return rows

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        with _mapped_errors(self.where):
            return self._execute(sql, params).rowcount


class PostgresStore(SqlStore):
    # SQLite's write transaction already excludes every other writer; here a shared row lock
    # keeps such documents unchanged (a writer of them takes an exclusive lock).
    # (in the lock order every writer follows, shared or exclusive: see ``rows.lock_order``)
    share_clause = f" ORDER BY {LOCK_ORDER_SQL} FOR SHARE OF d"
    holds_sql: ClassVar[str | None] = "position(? IN body) > 0"
    member_pairs_sql: ClassVar[str | None] = (
        "SELECT m.name, m.revision, m.body, m.root FROM unnest(?::text[], ?::bigint[]) AS k(name, revision) "
        "JOIN snapshot_members m ON m.doc_id = ? AND m.name = k.name AND m.revision = k.revision"
    )
    runs_on_loop: ClassVar[bool] = False
    """whether the store runs on an event loop (the async store: its callers commit alone, through
    its pool's context manager; see ``stateflow.aio.runs_on_loop``)"""
    cancellable: ClassVar[bool] = True
    """a call run under a cancel (``store.cancel``) has its running statement interrupted when
    cancelled"""

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        statement_timeout: float | None = None,
        auto_migrate: bool = False,
        read_only: bool = False,
        max_group: int = DEFAULT_MAX_GROUP,
    ) -> None:
        """``timeout``: how long a call waits for a connection during an outage before it fails
        with ``store-unavailable`` (default 10 s);
        ``connect_timeout``: how long one connection attempt may take (default 5 s), unless the
        URL sets its own ``connect_timeout``, which wins: the URL is the one place that names a
        store's server, while the CLI and server always pass their configured setting;
        ``statement_timeout``: the server cancels a statement that runs longer (``store-timeout``,
        its transaction rolled back; default 60 s; 0 turns it off), unless the URL's ``options``
        set their own ``statement_timeout``, which wins, as the URL's ``connect_timeout`` does —
        a query whose caller went away ends by then instead of running on;
        ``max_group``: at most this many ready commits of this process's threads share one
        transaction (group commit; 1 turns it off);
        ``read_only``: every session starts with ``default_transaction_read_only`` on, so the
        server itself refuses any write (``store-read-only``); we refuse ours before sending."""
        super().__init__()
        self.read_only = read_only
        self._bodies: RevisionCache[int, Document] = RevisionCache(BODY_CACHE_BYTES)
        """whole documents as read here, by doc_id and revision (a body written here is made one
        when it is first read: ``_written``)"""
        self._seen: dict[DocKey, None] = {}
        """keys read here before (present, deleted or never written)"""
        self.url = display_location(url)
        self._spare_ids = IdBlocks()
        """document ids taken from the sequence ahead, for rows a commit creates"""
        self._unborn: dict[int, DocKey] = {}
        """ids handed out by ``_absent_rows`` whose rows the commit writing them creates"""
        wait = timeout if timeout is not None else DEFAULT_WAIT
        kwargs: dict[str, Any] = {"autocommit": True}
        try:
            given = conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise UnsupportedStore(f"{self.url} is not a valid PostgreSQL URL: {_one_line(exc)}") from None
        given_timeout = given.get("connect_timeout")
        if given_timeout is not None and _WHOLE_NUMBER.fullmatch(str(given_timeout)) is None:
            # refused as the other options are (``mode``), naming what it takes: psycopg's own
            # refusal names neither, and libpq reads only an integer
            raise UnsupportedStore(
                "PostgreSQL option connect_timeout must be a whole number of seconds (such as 5; "
                f"0: no limit), not {str(given_timeout)!r}"
            )
        if "connect_timeout" not in given:  # (a keyword given to connect overrides the URL's own)
            kwargs["connect_timeout"] = max(1, round(connect_timeout or DEFAULT_CONNECT_TIMEOUT))
        options = str(given.get("options") or "")
        if _SETS_STATEMENT_TIMEOUT.search(options) is None:  # (the URL's own wins, as above)
            limit = DEFAULT_STATEMENT_TIMEOUT if statement_timeout is None else statement_timeout
            options += f" -c statement_timeout={max(0, round(limit * 1000))}"
        if read_only:
            options += " -c default_transaction_read_only=on"
        kwargs["options"] = options.strip()
        # One direct attempt first: when the server cannot be reached, its cause (refused, unknown
        # host, missing database or role) is the answer, within the connect timeout — instead of
        # the pool retrying in the background until its own timeout and saying only that.
        try:
            self._probe(url, kwargs)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot connect to {self.url}: {_one_line(exc)}") from None
        except psycopg.ProgrammingError as exc:  # a value read before connecting
            raise UnsupportedStore(f"{self.url} is not a valid PostgreSQL URL: {_one_line(exc)}") from None
        _quiet_pool_log()
        # autocommit: a lone statement needs no BEGIN/COMMIT round trips; transactions are explicit
        self._pool = self._open_pool(url, min_size=min_size, max_size=max_size, timeout=wait, kwargs=kwargs)
        self._pool.open(wait=False)
        self._opened_in = this_process()
        """the process whose connections these are (``pg_pool.refuse_if_forked``)"""
        self._keeps = not self.runs_on_loop and max_size >= KEEP_FROM_POOL_SIZE
        """commits sent alone keep a connection of the pool (``_commit_kept``)"""
        self._kept: psycopg.Connection[Any] | None = None
        self._kept_until = 0.0
        self._kept_lock = threading.Lock()
        self._pinned = threading.local()
        """``tx``: the read transaction of this thread's ``snapshot``, if it is inside one"""
        """held by the commit using ``_kept``; a commit finding it held takes one from the pool"""
        self._groups: CommitGroups[_Planned, int] | None = (
            None if self.runs_on_loop else CommitGroups(self._send_group, max_group, alone=self._send_planned)
        )
        """group commit across this process's threads (the async store's callers are tasks of
        one loop, which must not block waiting for each other: they commit alone)"""
        if auto_migrate and not read_only:
            self._auto_migrate()

    def unwritable(self) -> str | None:
        return "its sessions are read-only (mode=ro)" if self.read_only else None

    def _probe(self, url: str, kwargs: dict[str, Any]) -> None:
        psycopg.connect(url, **kwargs).close()

    def _open_pool(self, url: str, **options: Any) -> Any:
        """The connection pool (``store.postgres_async`` gives an async one): one that lends no
        connection the server has ended (``store.pg_pool``)."""
        return CheckedPool(url, open=False, **options)

    @contextmanager
    def _tx(self, read_only: bool) -> Iterator[Tx]:
        begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if read_only else "BEGIN"
        with self._connection() as conn:
            tx = _PgTx(conn, begin, self.url)
            try:
                yield tx
            except BaseException:
                if tx.poisoned:
                    conn.close()  # the pool replaces a closed connection
                elif tx.begin is None:  # a transaction was opened
                    with suppress(psycopg.Error):  # the failure may already have ended it
                        conn.execute("ROLLBACK")
                raise
            if tx.begin is None and not tx.committed:
                with _mapped_errors(self.url):
                    conn.execute("COMMIT")
            if tx.begin is None and not read_only:
                # whatever wrote in it (a retention sweep's deletes too, not only a document
                # commit): what it wrote stands, so the call is no longer cancelled — a call of
                # several transactions cancelled after one of them would be told it wrote nothing
                committed()

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection for a read or a transaction: none within the pool's wait, or a
        server that went away, is ``StoreUnavailable``."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise StoreUnavailable(
                f"{self.url}: no database connection within {self._pool.timeout:g} s "
                "(is the server down?); retry later"
            ) from None
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"PostgreSQL is unreachable: {_one_line(exc)}") from exc

    def read(
        self,
        keys: Iterable[DocKey],
        members: Iterable[str] | Mapping[DocKey, Iterable[str] | None] | None = None,
        *,
        outlines: Iterable[str] = (),
    ) -> dict[DocKey, Document]:
        """Whole documents in one statement (one round trip, one snapshot); anything else
        through the member cache.

        Bodies read or written here are remembered with their revision. When every asked
        document was seen before, the statement asks only for the current revisions (a cheaper
        query, nothing to decode) and the bodies come from memory; a revision that moved on
        means one more round trip for the full read."""
        keys = doc_keys(keys, "read")
        outline_names = list(outlines)
        if members is not None or outline_names or not keys or len(keys) > ROWS_PER_QUERY:
            return super().read(keys, members, outlines=outline_names)  # (more keys: in parts)
        self.check_schema()
        where, params = key_filter(keys)
        if all(key in self._seen for key in keys):
            out = {key: Document(key, 0, None) for key in keys}
            ids: dict[int, DocKey] | None = None  # (the keys by the ids of their rows known here)
            for doc_id, revision in self._query(_REVISIONS.format(where=where), params):
                known = self._bodies.get(doc_id, revision)
                if known is None:
                    if ids is None:
                        ids = {}
                        for key in keys:
                            row = self._rows_known.get(key)
                            if row is not None:
                                ids[row.doc_id] = key
                    known = self._written(doc_id, revision, ids.get(doc_id))
                if known is None:
                    break
                out[known.key] = known
            else:
                return out
        rows = self._query(_WHOLE_READ.format(where=where), params)
        out = {key: Document(key, 0, None) for key in keys}
        if any(row[-1] for row in rows):
            return super().read(keys)
        for state, subject, doc_id, revision, present, seq, at, raw, _ in rows:
            key = DocKey(state, subject)
            try:
                body = decode_stored(raw, f"{key} body") if present else None
            except CorruptData:
                return super().read(keys)  # member by member: the error names the damaged one
            out[key] = self._keep(doc_id, Document(key, revision, body, seq, {}, at), len(raw or b""))
        if len(self._seen) >= SEEN_KEYS_MAX:
            self._seen.clear()  # bounded (keys of absent documents add up too)
        for key in keys:
            self._seen.setdefault(key, None)
        return out

    def read_under(
        self, state: str, prefix: str, *, limit: int | None = None, descending: bool = False
    ) -> list[Document]:
        # one statement lists the revisions (its own snapshot, no transaction around it); the
        # bodies come from memory by revision, and only those not held there are read (again
        # in one statement)
        self.check_schema()
        where, bounds, order = subjects_sql(None, prefix, descending)
        found = self._query(
            "SELECT d.doc_id, d.revision, d.subject FROM documents d "
            f"WHERE d.state = ? AND d.present = 1 AND {where} ORDER BY d.subject{order}"
            + ("" if limit is None else f" LIMIT {int(limit)}"),
            [state, *bounds],
        )
        listed = []
        for doc_id, revision, subject in found:
            key = DocKey(state, subject)
            doc = self._bodies.get(doc_id, revision)
            listed.append((key, doc if doc is not None else self._written(doc_id, revision, key)))
        missing = [key for key, doc in listed if doc is None]
        read = self.read(missing) if missing else {}
        docs = [doc if doc is not None else read[key] for key, doc in listed]
        return [doc for doc in docs if doc.body is not None]

    def read_first_under(
        self, state: str, prefixes: Sequence[str], *, descending: bool = False
    ) -> list[Document | None]:
        # the first revision under every prefix in one statement (a saver's newest checkpoint
        # and the newest pending writes of its thread in one round trip); bodies as read_under
        self.check_schema()
        if not prefixes:
            return []
        parts, params = [], []
        for n, prefix in enumerate(prefixes):
            where, bounds, order = subjects_sql(None, prefix, descending)
            params += [state, *bounds]
            parts.append(
                f"(SELECT {n}, d.doc_id, d.revision, d.subject FROM documents d "
                f"WHERE d.state = ? AND d.present = 1 AND {where} ORDER BY d.subject{order} LIMIT 1)"
            )
        found: dict[int, tuple[DocKey, Document | None]] = {}
        for n, doc_id, revision, subject in self._query(" UNION ALL ".join(parts), params):
            listed = DocKey(state, subject)
            doc = self._bodies.get(doc_id, revision)
            found[int(n)] = (listed, doc if doc is not None else self._written(doc_id, revision, listed))
        missing = [key for key, doc in found.values() if doc is None]
        read = self.read(missing) if missing else {}
        out: list[Document | None] = []
        for n in range(len(prefixes)):
            key, doc = found.get(n, (None, None))
            doc = doc if doc is not None or key is None else read[key]
            out.append(doc if doc is not None and doc.body is not None else None)
        return out

    def _query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        pinned: Tx | None = getattr(self._pinned, "tx", None)
        if pinned is not None:  # (inside ``snapshot``)
            return pinned.all(sql, params)
        try:
            with self._pool.connection() as conn:
                return _PgTx(conn, None, self.url).all(sql, params)
        except PoolTimeout as exc:
            raise StoreUnavailable(f"no database connection available: {exc}") from exc

    def _keep(self, doc_id: int, doc: Document, size: int) -> Document:
        self._bodies.put(doc_id, doc.revision, doc, size)
        return doc

    def _remember(self, fresh: Fresh) -> None:
        super()._remember(fresh)
        if fresh.seq is not None:  # (every write's, once committed: locked, alone, in a group)
            self._fold_after(fresh.seq)
        # a body kept whole is read back from memory (a saver's newest checkpoint, say): the head
        # cache holds it, and the row this write left its seq and time — made into a
        # ``Document`` by its first read (``_written``), not by every write (most are written
        # again before they are read: ~15,000 client instructions a write)
        bodies = fresh.bodies
        if bodies:
            seen = self._seen
            for key, row in fresh.rows.items():
                if row.doc_id in bodies:
                    if len(seen) >= SEEN_KEYS_MAX:
                        seen.clear()
                    seen.setdefault(key, None)

    def _subjects_moved(self, keys: Sequence[DocKey]) -> None:
        # (the bodies held here are documents by id, each naming its key: all dropped, once)
        self._bodies.clear()
        self._seen.clear()

    def _forgotten(self, key: DocKey, doc_id: int, revision: int) -> None:
        self._bodies.drop(doc_id, revision)
        self._seen.pop(key, None)  # (read again whole, as a key never read here)

    def _written(self, doc_id: int, revision: int, key: DocKey | None) -> Document | None:
        """Document ``doc_id`` (``key``, where known) at ``revision`` as a write here left it,
        else None (for a body not in ``_bodies``): its body the head cache's, its seq and time
        those of the row the write stamped (``_remember``) — kept in ``_bodies`` from then on."""
        if key is None:
            return None
        row = self._rows_known.get(key)
        if (
            row is None
            or row.doc_id != doc_id
            or row.revision != revision
            or row.updated_seq is None
            or row.at is None
        ):
            return None
        body, size = None, 0
        if row.present:
            entry = self._heads.entry(doc_id, revision)
            if entry is None or entry[2] is None:  # (not held assembled)
                return None
            body, size = entry[2], entry[3]
        doc = made_document(key, revision, body, row.updated_seq, {}, row.at)
        self._bodies.put_many(((doc_id, revision, doc, size),))
        return doc

    def _read_tx(self) -> AbstractContextManager[Tx]:
        pinned: Tx | None = getattr(self._pinned, "tx", None)
        return self._tx(True) if pinned is None else nullcontext(pinned)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        # each read is a transaction (or a statement) of its own, from the pool: inside, this
        # thread's reads all go through one REPEATABLE READ READ ONLY transaction instead
        if getattr(self._pinned, "tx", None) is not None:
            yield
            return
        with self._tx(True) as tx:
            self._pinned.tx = tx
            try:
                yield
            finally:
                self._pinned.tx = None

    statement_snapshots = True

    @contextmanager
    def _statement_tx(self) -> Iterator[Tx]:
        pinned: Tx | None = getattr(self._pinned, "tx", None)
        if pinned is not None:  # (inside ``snapshot``)
            yield pinned
            return
        # autocommit: each statement reads a snapshot of its own, with no BEGIN and COMMIT
        with self._connection() as conn:
            yield _PgTx(conn, None, self.url)

    def _write_tx(self) -> AbstractContextManager[Tx]:
        self._writable()
        return self._tx(False)

    def _writable(self) -> None:
        if self.read_only:
            raise StoreReadOnly(f"{self.url} is open read-only (mode=ro): nothing can be written")

    current_seq_sql = "currval(pg_get_serial_sequence('transitions', 'seq'))"
    served_patches = True
    """Whether ``patch_on_server`` may merge memory patches in the server (False: never)."""
    keeps_bodies = True
    reads_before_locking = True

    def _insert_transition(
        self, tx: Tx, at: str, origin: dict[str, Any], changed: str | None, counted: str | None = None
    ) -> Callable[[], int]:
        # (``counted`` is always None here: the writers append ``count_deltas``)
        # The advisory lock (held to commit) makes seq values visible in commit order; taking it
        # in the same statement as the insert saves a round trip, and the rows that follow name
        # the seq by `currval`, so the value is only read back after the commit.
        rows = tx.later(
            "INSERT INTO transitions (at, origin) SELECT ?, ? "
            f"FROM (SELECT pg_advisory_xact_lock({_SEQ_LOCK_KEY})) l "
            "RETURNING seq",
            (at, encode_trusted(origin), _SEQ_LOCK),
        )
        return lambda: int(rows()[0][0])

    def _emit(self, tx: Tx, plans: Sequence[WritePlan], seq: SeqRef) -> None:
        # Every row of every document in one call of the write function: the client's cost is
        # per statement (psycopg spends more CPU on a statement than the server does on these).
        assert not seq.params  # here seq is named by `currval`, never sent as a value
        fields, beside = _rows(plans)
        tx.run(_WRITE_ROWS.format(seq=seq.sql), (_payload(fields), *beside))

    def _absent_rows(self, keys: Sequence[DocKey]) -> dict[DocKey, DocRow]:
        # No round trip: the rows get ids taken from the sequence ahead (a block at a time) and
        # are created by the commit that writes them, in its transaction (``_commit_planned``).
        # A key that had a row after all makes that commit's check fail (nothing written), and
        # the caller reads the document as it is.
        ids = self._reserve(len(keys))
        unborn = self._unborn
        if len(unborn) > UNBORN_MAX:
            unborn.clear()  # ids handed out for writes that never committed (a commit still
            # holding one of them fails its check and is read again: nothing is lost)
        rows = {}
        for key, doc_id in zip(keys, ids, strict=True):
            unborn[doc_id] = key
            rows[key] = DocRow(doc_id, 0, False, None, 0, 0, 0, 0)
        return rows

    def _reserve(self, n: int) -> list[int]:
        ids = self._spare_ids.take(n, self._reserve_block)
        assert ids is not None  # (a sequence always has ids to give)
        return ids

    def _reserve_block(self, size: int) -> list[int]:
        self._writable()  # ids for new rows are a write's first step: refused before it is sent
        with self._pool.connection() as conn, _mapped_errors(self.url):
            return [int(r[0]) for r in conn.execute(_RESERVE_IDS, (size,)).fetchall()]

    def _create(self, creates: Sequence[tuple[DocKey, int]]) -> None:
        """Create absent rows with the ids handed out for them, in their own transaction
        (committed without waiting for its flush: an absent row is no write anybody was told
        about; one lost is created again by the next writer). A key that has a row keeps it.

        The rows are then known here (absent, revision 0): should the commit that wanted them
        write nothing (a moved document, a claim taken), the call's next attempt locks them
        instead of planning to create them again — an insert that, refused on the key after it
        took its seq (``pg_fast``), would leave a gap no other writer caused. Where another
        writer's row kept the key, the id is wrong and that attempt's check fails (no seq taken)."""
        with self._pool.connection() as conn, _mapped_errors(self.url), _PgTx(conn)._pipelined():
            conn.execute("BEGIN")
            conn.execute("SET LOCAL synchronous_commit TO off")
            conn.execute(_CREATE_ROWS, _create_arrays(creates))
            conn.execute("COMMIT")
        known = self._rows_known
        for key, doc_id in creates:
            known[key] = DocRow(doc_id, 0, False, None, 0, 0, 0, 0)

    @staticmethod
    def _lock_query(key: DocKey) -> tuple[str, tuple[str, ...]]:
        # An existing row is locked by FOR NO KEY UPDATE (the lock the upsert's update took),
        # whose waiters queue on the row and are woken one at a time as each holder commits; an
        # upsert's waiters (ON CONFLICT DO UPDATE) all wake at every commit and race to try
        # again, and its update writes a new row version each time. Only a key without a row
        # takes the upsert, which creates it.
        return _LOCK_ROW, (key.state, key.subject, key.state, key.subject)

    def _lock_many(self, tx: Tx, keys: Sequence[DocKey]) -> dict[DocKey, DocRow]:
        if len(keys) == 1:
            return super()._lock_many(tx, keys)
        # one upsert for all of them (a bulk load sends hundreds), locking in key order as the
        # one-at-a-time path does
        rows = tx.all(
            "INSERT INTO documents (state, subject) SELECT s, k FROM unnest(?::text[], ?::text[]) "
            "WITH ORDINALITY AS x(s, k, i) ORDER BY i ON CONFLICT (state, subject) "
            f"DO UPDATE SET revision = documents.revision RETURNING {ROW_COLUMNS}, state, subject",
            (_array(k.state for k in keys), _array(k.subject for k in keys)),
        )
        return {DocKey(r[-2], r[-1]): to_row(r) for r in rows}

    def _commit_planned(
        self,
        locked: Sequence[tuple[DocKey, DocRow]],
        shared: Sequence[tuple[DocKey, DocRow]],
        claims: Sequence[tuple[str, str]],
        origin: dict[str, Any],
        plans: Sequence[WritePlan],
    ) -> tuple[int, str] | None:
        # One statement on an autocommit connection: its own transaction, one round trip (the
        # function checks and locks as the locked path does, in the same order; the time is
        # taken before the seq lock, as on the locked path). Commits of this process's other
        # callers that are ready at the same time share the transaction (``_send_group``).
        self._writable()
        at = ""
        unborn = self._unborn
        # (no id taken ahead and not yet committed, as in most writes: nothing to look up)
        creates = (
            [(key, row.doc_id) for key, row in locked if unborn.pop(row.doc_id, None) is not None]
            if unborn
            else []
        )
        if creates and (len(creates) < len(locked) or (self._groups is not None and self._groups.busy)):
            # created first, in a transaction of their own: a commit that creates rows and
            # then waits for other rows' locks could deadlock with a writer holding those and
            # creating the same row; and a group locks its rows before any member's commit
            self._create(creates)
            creates = []
        # the rows of new documents are created by the commit function (``stateflow_commit``)
        # after the shared rows are locked and before the written ones are: in the lock order
        # (``rows.lock_order``), as a new row's insert waits for whoever is creating the same
        # row (the fast statement's, after the seq lock, waits only briefly: ``pg_fast``)
        if len(creates) > 1:
            creates.sort(key=lambda c: lock_order(c[0]))

        def build() -> _Planned:
            nonlocal at
            at = utc_now()  # taken in the order commits join groups: times follow seq
            encoded_origin = encode_trusted(origin)
            # the common shapes as one plain statement of their own (``pg_fast``: sent on the
            # kept connection only), the rest through the commit function; decided here, once
            fast = (
                None
                if claims or not self._keeps
                else fast_values(locked, shared, plans, at, encoded_origin, _SEQ_LOCK_TEXT, creates)
            )
            if fast is None:
                return function_params(at, encoded_origin)
            when = at

            def slow() -> list[Any]:
                return function_params(when, encoded_origin)[2]

            shape, values = fast
            return (
                [key for key, row in shared if row.doc_id],
                [key for key, _ in locked],
                FastCommit(shape, values, slow),
            )

        def function_params(at: str, encoded_origin: bytes) -> tuple[list[DocKey], list[DocKey], list[Any]]:
            """The commit as the commit function's call (``_COMMIT``)."""
            # A shared document without a row when computed on is checked to have none still,
            # with no lock (there is no row to lock): found by the locking function instead, a
            # row created meanwhile — after a group took its locks, or while the function
            # waited for an earlier row — would be locked out of order. The check is made on the
            # statement's snapshot: a row committed while the statement waits for a shared lock
            # is not seen, so a writer that must hold its readers back makes the row first, in a
            # commit of its own (a fold, the states' aliases: ``StatesService.fold``).
            # (the keys in one loop over each list, not a comprehension per field: a commit
            # names a few documents, and each comprehension is a call)
            present: list[DocKey] = []
            share_keys: list[tuple[str, str, int, int]] = []
            absent_keys: list[tuple[str, str]] = []
            for key, row in shared:
                if row.doc_id:
                    present.append(key)
                    share_keys.append((key.state, key.subject, row.doc_id, row.revision))
                else:
                    absent_keys.append((key.state, key.subject))
            written: list[DocKey] = []
            lock_keys: list[tuple[str, str, int, int]] = []
            for key, row in locked:
                written.append(key)
                lock_keys.append((key.state, key.subject, row.doc_id, row.revision))
            fields, beside = _rows(plans)
            if absent_keys:
                fields["absent_keys"] = absent_keys
            if claims:
                fields["claim_keys"] = claims
            if share_keys:
                fields["share_keys"] = share_keys
            if creates:  # then every row it writes: created by the function, locked by their insert
                fields["new_keys"] = [(k.state, k.subject, doc_id) for k, doc_id in creates]
            elif lock_keys:
                fields["lock_keys"] = lock_keys
            return (
                present,
                written,
                # in the order of the statement's placeholders
                [_payload(fields), at, encoded_origin, _SEQ_LOCK, *beside],
            )

        # a commit creating rows writes only new documents and found no group on its way: alone
        groups = self._groups
        seq = self._send_alone(build()[2]) if creates or groups is None else groups.submit(build)
        return None if seq is None else (seq, at)

    def _fold_after(self, seq: int) -> None:
        """Fold the counters' deltas after a commit whose seq is a multiple of ``FOLD_EVERY``:
        each seq is one commit's, so whatever writes — this process or others, locked or alone,
        in groups, merged by the server, from the async store — one commit in every
        ``FOLD_EVERY`` folds (a seq left unused skips one), and the deltas stay a few per commit
        times that. In a transaction of its own, after the commit (off the seq lock); a failed
        fold leaves the commit standing and its deltas to the next."""
        if seq % FOLD_EVERY:
            return
        try:
            with self._pool.connection() as conn:
                conn.execute(_FOLD_AFTER_COMMITS)
        except (psycopg.Error, PoolTimeout, StoreUnavailable):  # (closed meanwhile)
            pass

    def contended(self, keys: Sequence[DocKey]) -> bool:
        """Whether ``patch_on_server`` would merge a patch of ``keys`` now: another writer's
        commit beat one of this store's a moment ago (a read-only store never: ``update`` says
        so where it would write; nor the async store, whose callers must not block)."""
        return (
            not self.read_only and self.served_patches and not self.runs_on_loop and self._is_contended(keys)
        )

    def patch_on_server(
        self,
        keys: Sequence[DocKey],
        patches: Mapping[DocKey, bytes],
        members: Sequence[str],
        outlines: Sequence[str],
        origin: dict[str, Any],
    ) -> served_patch.Served | None:
        """Commit memory patches (``patches``: each written document's merge patch, encoded;
        ``memory.served`` says which patches qualify) merged by the server in one statement,
        locking ``keys`` as ``update`` would; None where that does not apply (nothing written:
        the caller runs ``update``). Taken only while the documents are contended — where
        ``update`` would wait for the row locks and hold them across its own reads and CPU."""
        locked = sorted(set(keys), key=lock_order)
        if not self.contended(locked):
            return None
        self.check_schema()
        walked = served_patch.arrays(locked, patches)
        if walked is None:
            return None
        params = [
            *map(_array, walked),
            _array(members),
            _array(outlines),
            restored_at(),
            encode_trusted(origin),
            _SEQ_LOCK,
        ]
        try:
            with self._pool.connection() as conn:
                try:
                    rows = conn.execute(_PATCH_COMMIT, params, prepare=True).fetchall()
                    committed()  # (merged and committed: the call runs to its end)
                except psycopg.Error as exc:
                    state = exc.sqlstate or ""
                    # not the common case, a value json cannot take, or ended to break a lock
                    # cycle: nothing was written, and the locked path decides
                    gave_up = state in (served_patch.NOT_COVERED, _DEADLOCK, _SERIALIZATION)
                    if gave_up or state.startswith("22"):
                        return None
                    raise
                # The merge committed without waiting for its flush (schema 23: its locks went
                # to the next writer as soon as its commit record was in the WAL). A transaction
                # of our own, committed as the session commits, flushes the WAL past that record
                # before the caller is answered. Should it fail, the merge may be committed: the
                # call raises, and no other path writes the patch again.
                conn.execute(_FLUSHED, prepare=True)
        except PoolTimeout as exc:
            raise StoreUnavailable(f"no database connection available: {exc}") from exc
        except psycopg.Error:
            with _mapped_errors(self.url):
                raise
        done = served_patch.served(rows, locked, outlines)
        self._served_contended(done)
        if done is not None and done.commit.seq is not None:
            self._fold_after(done.commit.seq)
        return done

    def _send_planned(self, planned: _Planned) -> int | None:
        return self._send_alone(planned[2])

    def _send_alone(self, params: Sequence[Any] | FastCommit) -> int | None:
        """One planned commit in its own transaction: its seq, or None (nothing written)."""
        try:
            seq = self._commit_pooled(params)
        except PoolTimeout as exc:
            raise StoreUnavailable(f"no database connection available: {exc}") from exc
        except psycopg.Error as exc:
            # claimed meanwhile, or ended to break a lock cycle: nothing was written either way,
            # and the locked path decides; so too a creating statement that found a new key held
            # by another writer, or some of its keys created meanwhile (``pg_fast``)
            if exc.sqlstate in (_CLAIMED_MEANWHILE, _DEADLOCK, _SERIALIZATION):
                return None
            if isinstance(params, FastCommit) and params.shape[3] and _creating_gave_up(exc):
                return None
            with _mapped_errors(self.url):
                raise
        return seq

    def _commit_pooled(self, params: Sequence[Any] | FastCommit) -> int | None:
        """``_commit_alone`` on the connection kept for commits sent alone (``_commit_kept``), else
        on one of the pool taken and given back without the pool's context manager: on an
        autocommit connection its ``with`` commits no transaction, and the pool's usage timing is
        read by nothing here (~120 bytecodes a commit). The async store's bridge pool lends its
        connections only through its context manager."""
        pool = self._pool
        if self.runs_on_loop:
            with pool.connection() as conn:
                return _commit_alone(conn, _function_params(params))
        if self._keeps and self._kept_lock.acquire(False):  # (another thread's commit uses it: the pool)
            try:
                if self._keeps:  # (still: ``close`` clears it under the lock, then closes the pool)
                    return self._commit_kept(params)
            finally:
                self._kept_lock.release()
        conn = pool.getconn()
        try:
            # (a fast statement only on the kept connection: its plans are made without
            # sequential scans, see ``_commit_kept``)
            return _commit_alone(conn, _function_params(params))
        finally:
            pool.putconn(conn)

    def _commit_kept(self, params: Sequence[Any] | FastCommit) -> int | None:
        """``_commit_alone`` on the connection kept for commits sent alone (under ``_kept_lock``):
        taken from the pool once and given back every ``KEPT_FOR`` seconds, and at once after a
        failed commit (the pool replaces it if broken) — not taken and given back on every commit
        (the pool's ``getconn`` and ``putconn``, ~350 bytecodes and three log calls a commit).
        The pool's bound holds: the kept connection is one of its own.

        While kept, the connection plans with ``enable_seqscan`` off, as the commit function
        does: the fast statements (``pg_fast``) are plain statements whose generic plans it
        keeps, and on a small analyzed table a plan of sequential scans looks cheapest — kept
        until the table's statistics change, however large it grew meanwhile. Every row they
        look up has its unique index. Reset before the connection goes back to the pool."""
        pool = self._pool
        if self._opened_in != this_process():  # (the kept connection is not taken from the pool)
            refuse_if_forked(self._opened_in, self.url)
        conn = self._kept
        # a kept connection the server ended meanwhile is given back (closed: the pool replaces
        # it) before anything is sent on it, as the pool skips one (``pg_pool``): one poll
        if conn is None or monotonic() >= self._kept_until or ended(conn):
            if conn is not None:
                self._kept = None
                _give_back(pool, conn)
            with uncancellable():  # (kept for many calls: registered with a call's cancel per commit)
                conn = pool.getconn()
            try:
                conn.execute(_NO_SEQSCAN)
            except BaseException:
                pool.putconn(conn)
                raise
            self._kept, self._kept_until = conn, monotonic() + KEPT_FOR
        cancel = current()
        if cancel is not None:
            cancel.enter(conn, conn.cancel_safe)
        try:
            return _commit_alone(conn, params)
        except BaseException:
            self._kept = None
            if cancel is not None and cancel.leave(conn):
                conn.close()  # (a cancel may still be on its way to it: never used again)
            _give_back(pool, conn)
            raise
        finally:
            if cancel is not None and cancel.leave(conn):  # (committed, the cancel too late)
                self._kept = None
                conn.close()
                pool.putconn(conn)

    def _send_group(self, group: Sequence[Member[_Planned, int]]) -> None:
        """Commit a group of planned commits in one transaction (one round trip, one flush);
        answer each member only after the commit. When a member's statement fails, the
        transaction ends without a commit, nothing of the group is written, and each member is
        sent again on its own: the failure stays with the member it belongs to.

        Every document of the group is locked first, in the lock order (``rows.lock_order``),
        exclusively where a member writes it and shared where members only read it — what a
        commit alone takes, in the same one pass: a commit alone locks its documents and then
        takes the seq lock, and a group that took the seq lock for its first member and then
        waited for a row of its second could deadlock with such a commit."""
        if len(group) == 1:  # (this caller's own commit)
            _answer(group[0], partial(self._send_alone, group[0].params[2]))
            return
        # other callers' commits too: the sender's going away cancels none of them
        with uncancellable():
            self._send_together(group)

    def _send_together(self, group: Sequence[Member[_Planned, int]]) -> None:
        written = {key for member in group for key in member.params[1]}
        keys = sorted(
            {key for member in group for key in (*member.params[0], *member.params[1])}, key=lock_order
        )
        runs: list[tuple[bool, list[DocKey]]] = []  # (exclusive, keys): a statement each
        for key in keys:
            if runs and runs[-1][0] == (key in written):
                runs[-1][1].append(key)
            else:
                runs.append((key in written, [key]))
        try:
            with self._pool.connection() as conn:
                try:
                    with conn.pipeline():  # its end sends the Sync and waits: one round trip
                        conn.execute("BEGIN")
                        for exclusive, run in runs:
                            conn.execute(
                                _LOCK_GROUP,
                                (exclusive, _array(k.state for k in run), _array(k.subject for k in run)),
                            )
                        # (through the commit function: a group's statements are sent unprepared)
                        cursors = [
                            _execute_raw(conn, _COMMIT_RAW, _function_params(m.params[2])) for m in group
                        ]
                        conn.execute("COMMIT")
                    rows = [cur.fetchone() for cur in cursors]
                except psycopg.Error as exc:
                    if isinstance(exc.__context__, KeyboardInterrupt):
                        # a Ctrl-C in the sending thread as the results came back (psycopg's
                        # failure to leave pipeline mode stands in for it): whether the group
                        # committed is unknown — never sent again, and not the other members'
                        # Ctrl-C: a store error for each
                        conn.close()
                        raise StoreUnavailable(
                            "the group's commit was interrupted as its results came back: whether "
                            "it was written is unknown"
                        ) from exc
                    if conn.broken:
                        raise  # the commit's outcome is unknown: every member says so
                    # a statement failed: the transaction ended, nothing was committed
                    conn.close()  # (after a failed pipeline; the pool replaces it)
                    rows = None
        except PoolTimeout as exc:
            raise StoreUnavailable(f"no database connection available: {exc}") from exc
        except psycopg.Error as exc:
            with _mapped_errors(self.url):
                raise exc from None
        if rows is None:
            for member in group:
                _answer(member, partial(self._send_alone, member.params[2]))
            return
        for member, row in zip(group, rows, strict=True):
            member.answered(None if row is None or row[0] is None else int(row[0]))

    def _migrations(self) -> dict[int, str]:
        return POSTGRES

    def _table_names(self, tx: Tx) -> set[str]:
        rows = tx.all(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
        return {r[0] for r in rows}

    def _candidate_sql(
        self,
        tx: Tx,
        filters: dict[str, Any],
        bounds: Sequence[tuple[str, str, Any]] = (),
        probe: int = 4096,
        whole: bool = False,  # (never: PostgreSQL keeps member form, ``whole_form``)
    ) -> Candidates:
        # One EXISTS per filter member, answered by the GIN index (scalar members) for a scalar
        # pattern and checked on the member found by its key for others, for members jsonb can
        # hold (``INDEXABLE``); other members (and patterns jsonb cannot hold) pass here and are
        # checked by _verify — except where the pattern is a small scalar, which no unindexable
        # member can equal. The member the search starts from (``via``) holds the value already.
        via = self._selective(tx, filters, probe)
        clauses: list[str] = []
        params: list[Any] = []
        for name, pattern in filters.items():
            raw = encode_trusted(pattern).decode()
            if not _jsonb_safe(raw) or (via is not None and via[0] == name):
                continue
            typed = type(pattern) not in (dict, list)
            if not _numbers_exact(pattern):  # matched in SQL as a superset, checked in Python
                match = self._value_match(name, pattern) if typed else None
                if match is not None:
                    clauses.append(
                        f"AND EXISTS (SELECT 1 FROM members m WHERE m.doc_id = d.doc_id AND {match[0]})"
                    )
                    params.extend(match[1])
                continue
            # a scalar's check reads ``scalar`` (the body of a member the index holds), as the
            # index's expression does, so that the index can answer it
            check = (
                "stateflow_jsonb(m.scalar) @> ?::jsonb AND jsonb_typeof(stateflow_jsonb(m.scalar)) = jsonb_typeof(?::jsonb)"
                if typed
                else "stateflow_jsonb(m.body) @> ?::jsonb"
            )
            unindexed = "" if self._value_match(name, pattern) else f"NOT ({INDEXABLE}) OR "
            # a scalar pattern matches only a scalar member: the containment index's predicate
            # (its members), so that the index can answer it
            indexed = _SCALAR_INDEXABLE if typed else INDEXABLE
            clauses.append(
                "AND EXISTS (SELECT 1 FROM members m WHERE m.doc_id = d.doc_id AND m.name = ? AND "
                f"({unindexed}(({indexed}) AND {check})))"
            )
            params.extend([name, raw, raw] if typed else [name, raw])
        for name, op, operand in bounds:
            check, value = _bound_check(op, operand)
            clauses.append(
                "AND EXISTS (SELECT 1 FROM members m WHERE m.doc_id = d.doc_id AND m.name = ? "
                f"AND (m.scalar IS NULL OR {check}))"
            )
            params.extend([name, value])
        return " ".join(clauses), params, via

    def _sort_sql(self, inner: tuple[str, ...]) -> SortSql | None:
        return _postgres_sort(inner) if inner else _POSTGRES_SORT

    def _sort_number(self, value: int | float) -> Any:
        # the value as ``numeric`` reads the member's text: a float by its shortest repr (the
        # text the store writes), not its binary expansion, so that an equal member ties
        return Decimal(repr(value)) if type(value) is float else value

    def _checked_in_sql(self, filters: dict[str, Any]) -> bool:
        return all(
            _numbers_exact(pattern) and self._value_match(name, pattern) is not None
            for name, pattern in filters.items()
        )

    def _value_match(self, name: str, pattern: Any) -> tuple[str, Sequence[Any]] | None:
        # jsonb equality is typed (a string never equals a number) and compares numbers by value
        if type(pattern) not in (str, int, float, bool) and pattern is not None:
            return None
        texts = [encode_trusted(v).decode() for v in _equal_numbers(pattern)]
        if not _jsonb_safe(texts[0]) or 6 * len(texts[0].encode()) > VALUE_INDEX_MAX:
            return None
        # the index finds the members by the hash of name and value; the row rechecks both —
        # by its bytes first (the store writes one encoding, so a match is nearly always equal
        # bytes), parsing it as jsonb only when they differ (1.0 for 1, a hash collision)
        one = (
            f"{POSTGRES_SCALAR_VALUE_KEY.format(m='m.')} = jsonb_hash_extended(?::jsonb, hashtext(?)) "
            f"AND {POSTGRES_SCALAR_VALUE_WHERE.format(m='m.')} AND m.name = ? "
            "AND CASE WHEN m.scalar = ? THEN true ELSE stateflow_jsonb(m.scalar) = ?::jsonb END"
        )
        if len(texts) == 1:
            return one, [texts[0], name, name, texts[0].encode(), texts[0]]
        return (
            "(" + " OR ".join(f"({one})" for _ in texts) + ")",
            [p for raw in texts for p in (raw, name, name, raw.encode(), raw)],
        )

    def _kind_sql(self) -> str:
        return "stateflow_subject_kind(subject)"

    def _stale_scalars(self, tx: Tx, limit: int) -> list[tuple[int, str]]:
        rows = tx.all(
            "SELECT doc_id, name FROM members WHERE scalar IS DISTINCT FROM stateflow_scalar(body, size) "
            "ORDER BY doc_id, name LIMIT ?",
            (limit,),
        )
        return [(int(d), str(n)) for d, n in rows]

    def _unchecked(self, tx: Tx, doc_id: int, filters: dict[str, Any]) -> list[str]:
        return self._unchecked_many(tx, [doc_id], filters)[doc_id]

    def _unchecked_many(
        self, tx: Tx, doc_ids: Sequence[int], filters: dict[str, Any]
    ) -> dict[int, list[str]]:
        # one query for a page of candidates: which filter members SQL could not check as jsonb
        names = list(filters)
        rows = tx.all(
            "SELECT m.doc_id, m.name FROM members m WHERE m.doc_id = ANY(?::bigint[]) "
            f"AND m.name IN ({','.join('?' * len(names))}) AND NOT ({INDEXABLE})",
            (_array(doc_ids), *names),
        )
        skipped = {
            n
            for n, p in filters.items()
            if not _jsonb_safe(encode_trusted(p).decode()) or not _numbers_exact(p)
        }
        out: dict[int, set[str]] = {doc_id: set(skipped) for doc_id in doc_ids}
        for doc_id, name in rows:
            out[int(doc_id)].add(name)
        return {doc_id: sorted(found) for doc_id, found in out.items()}

    def _revisions_before(self, tx: Tx, tops: dict[int, int], before_seq: int) -> dict[int, int]:
        # the same binary search, server-side: one round trip instead of one per probe (a seq
        # past bigint's range is past every seq: the function takes a bigint)
        rows = tx.all(
            "SELECT x.d, stateflow_revision_before(x.d, x.t, ?) "
            "FROM unnest(?::bigint[], ?::bigint[]) AS x(d, t)",
            (min(before_seq, SQL_INT_MAX), _array(tops), _array(tops.values())),
        )
        return {int(d): int(r) for d, r in rows}

    def _lock_state(self, tx: Tx, state: str) -> list[int]:
        # As a writer takes its locks: the documents' rows in the lock order, then the seq lock.
        # A writer holding one of the rows finishes first; one that comes after waits, then finds
        # the document gone. The seq lock keeps out a writer of a document created meanwhile (not
        # in ``ids``, so not deleted): every writer takes it before it writes a row, counters
        # included, so the purge's deletes and counters never wait for a writer holding it.
        ids = [
            int(r[0])
            for r in tx.all(
                f"SELECT d.doc_id FROM documents d WHERE d.state = ? ORDER BY {LOCK_ORDER_SQL} FOR UPDATE",
                (state,),
            )
        ]
        tx.all(f"SELECT pg_advisory_xact_lock({_SEQ_LOCK_KEY})", (_SEQ_LOCK,))
        return ids

    def _fold_counts(self, tx: Tx) -> None:
        # (no JIT for the rest of the transaction: planned with sequential scans off, as the
        # store's connections plan, the scan of ``count_deltas`` — no index — is priced past
        # ``jit_above_cost`` and would be compiled, ~200 ms)
        tx.run("SET LOCAL jit = off")
        tx.run(_FOLD_IN_TX)

    def _lock_nodes(self, tx: Tx) -> None:
        # conflicts with the row-exclusive lock of every writer that inserts nodes
        tx.run("LOCK TABLE nodes IN SHARE ROW EXCLUSIVE MODE")

    def _lock_migration(self, tx: Tx) -> None:
        # A migration rebuilds tables the size of the store: not bounded by the statement timeout
        # meant for calls (the setting ends with the transaction).
        tx.run("SET LOCAL statement_timeout = 0")
        # The schema's functions use SQL-standard bodies (``RETURN …``, PostgreSQL 14): an older
        # server is refused by name here, not by a syntax error half way through the scripts.
        row = tx.one("SELECT current_setting('server_version_num')")
        number = int(row[0]) if row is not None else MIN_SERVER_VERSION
        if number < MIN_SERVER_VERSION:
            raise StoreError(
                f"{self.url} runs PostgreSQL {number // 10000}.{number % 10000}; stateflow needs "
                f"PostgreSQL {MIN_SERVER_VERSION // 10000} or later — nothing was migrated"
            )
        # Serialize concurrent migrators (several processes starting at once).
        tx.all("SELECT pg_advisory_xact_lock(?)", (_SEQ_LOCK + 1,))

    def close(self) -> None:
        if self._opened_in != this_process():
            # a forked child's copy: closing would end the parent's sessions (a close message on
            # each of its sockets); dropped here instead, every later call refused
            self._keeps, self._kept = False, None
            return
        with self._kept_lock:  # (after a commit on it ends) the kept connection back to its pool
            self._keeps = False
            conn, self._kept = self._kept, None
            if conn is not None:
                _give_back(self._pool, conn)
        self._pool.close()


def _give_back(pool: ConnectionPool[Any], conn: psycopg.Connection[Any]) -> None:
    """The kept connection back to the pool, planning as the pool's others do (``_commit_kept``);
    a connection that cannot take the reset is closed (the pool replaces it)."""
    if not conn.closed:
        try:
            conn.execute(_PLAN_AS_POOL)
        except psycopg.Error:
            conn.close()
    pool.putconn(conn)


def _execute_raw(conn: Any, sql: str, params: Sequence[Any]) -> Any:
    """Execute ``sql`` written with ``$n`` placeholders on a pooled connection (psycopg's, or
    the async bridge's)."""
    if isinstance(conn, psycopg.Connection):
        return psycopg.RawCursor(conn).execute(sql, params)
    return conn.execute_raw(sql, params)


def _function_params(params: Sequence[Any] | FastCommit) -> Sequence[Any]:
    """The commit as ``_COMMIT``'s parameters (a fast commit's, made now)."""
    return params.slow() if isinstance(params, FastCommit) else params


def _commit_alone(conn: Any, params: Sequence[Any] | FastCommit) -> int | None:
    """Run the commit — its fast statement (``pg_fast``), or ``_COMMIT`` — on an idle autocommit
    connection: its seq, or None (nothing written)."""
    if not isinstance(conn, psycopg.Connection):  # (the async bridge's connection)
        row = conn.execute_raw(_COMMIT_RAW, _function_params(params)).fetchone()
        return None if row is None or row[0] is None else int(row[0])
    # Straight through libpq, as a statement prepared once per connection under a name of our
    # own: a cursor's execute costs more client CPU than the rest of sending a commit (cursor
    # set-up, its prepared-statement bookkeeping, adapting the parameters, reading the result's
    # description). Sent and answered by libpq's blocking call, which lets go of the GIL while
    # it waits, as psycopg's wait loop does: that loop's generators, polls and result list cost
    # ~10,000 instructions a commit. (It also lets a Ctrl-C cancel the statement; a commit's
    # interruption lands instead when its one statement returns — written or not, as an
    # interruption that comes as its answer is on its way.)
    pgconn = conn.pgconn
    if isinstance(params, FastCommit):
        name, sql, formats = fast_statement(params.shape)
        values = params.values
    else:
        # each parameter's wire value by its place in ``_COMMIT``: the payload and the time as
        # text, the seq lock's id (always ``_SEQ_LOCK``) as its text, the origin and the arrays —
        # bytes, or NULL — as they are, in binary (``_COMMIT_FORMATS``); not told apart by type,
        # value by value
        payload, at, origin, _, *beside = params
        name, sql, formats = _COMMIT_NAME, _COMMIT_RAW_BYTES, _COMMIT_FORMATS
        values = [payload.encode(), at.encode(), origin, _SEQ_LOCK_TEXT, *beside]
    with conn.lock:
        prepared = _prepared(conn)
        if name not in prepared:
            _prepare(conn, prepared, name, sql)
        # (a None is sent as NULL by both of psycopg's libpq wrappers, as ``send_query_prepared``
        # declares; ``exec_prepared``'s stub leaves it out)
        result = pgconn.exec_prepared(name, values, formats)  # type: ignore[arg-type]
        if result.status == _FAILED:
            # psycopg deallocates every prepared statement of a connection after a ROLLBACK or
            # a DROP it ran (ours too): prepared again, and sent again (it never ran). Only this
            # name is known gone: ours prepared since the deallocation are still on the server,
            # and each other one gone answers the same when next sent.
            if result.error_field(_SQLSTATE) == _NO_SUCH_STATEMENT:
                prepared.discard(name)
                _prepare(conn, prepared, name, sql)
                result = pgconn.exec_prepared(name, values, formats)  # type: ignore[arg-type]
            _raise_failed(conn, result)
    if result.ntuples == 0:  # (the commit's seq: None where it returned none)
        return None
    seq = result.get_value(0, 0)
    return None if seq is None else int(seq)


def _prepared(conn: psycopg.Connection[Any]) -> set[bytes]:
    """The names of our statements prepared on ``conn``."""
    prepared = _PREPARED.get(conn)
    if prepared is None:
        prepared = _PREPARED[conn] = set()
    return prepared


def _prepare(conn: psycopg.Connection[Any], prepared: set[bytes], name: bytes, sql: bytes) -> None:
    """Prepare ``sql`` as ``name`` on ``conn`` (a round trip, once per connection)."""
    result = conn.pgconn.prepare(name, sql, None)
    # already there: ours, with this text (a name stands for one text), which the record missed
    # (e.g. an interruption between the prepare and its recording): used as it is
    if result.error_field(_SQLSTATE) != _ALREADY_PREPARED:
        _raise_failed(conn, result)
    prepared.add(name)


_COMMIT_NAME: Final = b"stateflow_commit"
_COMMIT_FORMATS: Final = (0, 0, 1, 0, 1, 1, 1)
"""``_COMMIT``'s parameters' formats on the wire, in order: text (the payload, the time, the seq
lock's id) or binary (the origin, the three ``bytea[]``; a NULL's format is not read)."""
_SEQ_LOCK_TEXT: Final = str(_SEQ_LOCK).encode()
_SQLSTATE: Final = pq.DiagnosticField.SQLSTATE
_NO_SUCH_STATEMENT: Final = b"26000"
_ALREADY_PREPARED: Final = b"42P05"
_PREPARED: Final[weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]]] = weakref.WeakKeyDictionary()
"""The names of the commit statements prepared on each connection (``_COMMIT_NAME`` and the fast
statements': a connection the pool replaces is a new object, and prepares them again). A name
leaves it only when the server answers that it has no such statement (``_commit_alone``): a
deallocation the record did not see is found name by name, and a name the record lost is
prepared on top of itself harmlessly (``_prepare``)."""


_FAILED: Final = pq.ExecStatus.FATAL_ERROR


def _raise_failed(conn: psycopg.Connection[Any], result: Any) -> None:
    """A statement's failed result raised as psycopg raises it. libpq's blocking call answers a
    connection that failed under it (the server ended it, the socket was reset) with a result
    of its own, which has no SQLSTATE (only the server sends one) and would be raised as a bare
    ``DatabaseError``; psycopg's wait loop raises that failure as ``OperationalError``, and so
    does this, so it is mapped as the store being unavailable, not as an error of the store."""
    if result.status == _FAILED:
        error = pg_errors.error_from_result(result, encoding=conn.info.encoding)
        if error.sqlstate is None and conn.closed:
            raise psycopg.OperationalError(str(error)) from error
        raise error


def _numbered(sql: str) -> str:
    """Our ``?`` placeholders as PostgreSQL's own ``$1, $2, …`` (for a raw cursor)."""
    parts = sql.split("?")
    return parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))


_WRITE_ROWS: Final = "SELECT stateflow_write_rows({seq}, ?::json, ?::bytea[], ?::bytea[], ?::bytea[])"
"""A commit's document rows in one call of the write function (one payload and the bytes beside
it: ``_rows``)."""


_COMMIT: Final = (
    "SELECT stateflow_commit(?::json, ?::text, ?::bytea, "
    + _SEQ_LOCK_KEY
    + ", ?::bytea[], ?::bytea[], ?::bytea[])"
)
"""A commit computed against known revisions, in one statement (see ``update(optimistic=True)``):
checks, locks (creating the rows of new documents before locking them), transition, claims and
rows in one call of ``stateflow_commit``; its seq, or NULL (nothing written). Its rows and keys
travel as one payload (``_rows``, ``_payload``), the time, origin and seq lock beside, then the
bodies and edits the rows write (three ``bytea[]`` in binary: ``_ByteaArray``). It names no
table, so one generic plan serves every commit (a join in it made its plan depend on the number
of keys, and it was planned again on every call once a custom plan looked cheaper)."""
_COMMIT_RAW: Final = _numbered(_COMMIT)
"""``_COMMIT`` as sent through libpq or a raw cursor (``_commit_alone``, ``_send_group``)."""
_COMMIT_RAW_BYTES: Final = _COMMIT_RAW.encode()
_NO_SEQSCAN: Final = "SET enable_seqscan = off"
_FOLD_IN_TX: Final = waited(_SEQ_LOCK_KEY.replace("?", str(_FOLD_LOCK)))
"""The fold in a transaction that may delete transitions after it (a purge, history retention):
once any fold under way has ended, so that every transition it may delete is folded first."""
_FOLD_TRIED: Final = tried(_SEQ_LOCK_KEY.replace("?", str(_FOLD_LOCK)))
"""The fold where no other is under way (else nothing)."""
_FOLD_AFTER_COMMITS: Final = (
    "BEGIN; SET LOCAL enable_seqscan = on; SET LOCAL jit = off; SET LOCAL synchronous_commit = off; "
    f"{_FOLD_TRIED}; COMMIT"
)
"""The fold sent after a commit whose seq is a multiple of ``FOLD_EVERY`` (``_fold_after``), in a
transaction of its own (one simple query: one round trip), off the seq lock. With sequential
scans on and no JIT, whatever the connection's own settings: planned with sequential scans off
(as the kept connection plans), the scan of ``count_deltas`` (a table with no index) was priced
so high that the fold was compiled, ~200 ms a fold. Committed without waiting for its flush:
lost in a crash, it is lost whole — its deltas are then still there to fold."""
_PLAN_AS_POOL: Final = "RESET enable_seqscan"
_PATCH_COMMIT: Final = served_patch.statement(_SEQ_LOCK_KEY.replace("?", "%s"))
"""A memory patch merged by the server in one statement (``patch_on_server``)."""
_FLUSHED: Final = "SELECT pg_logical_emit_message(true, 'stateflow', '')"
"""A transaction of its own whose commit waits (at the session's ``synchronous_commit``, on by
default) until the WAL is flushed past its commit record — and so past every commit this
connection made before it (``patch_on_server``). It must write a record and take a transaction
id for that: a commit that wrote nothing, or has no id, does not wait for a flush (a transactional
logical message does both in one call: ~60 bytes of WAL, ignored by anything that does not
decode messages prefixed ``stateflow``)."""
_LOCK_GROUP: Final = "SELECT stateflow_lock_rows(%s, %s::text[], %s::text[])"
"""Locks some of a group's documents (given in lock order; exclusively or shared), before any
commit of the group takes the seq lock. (A join of ``documents`` with the arrays was planned
again on every call: a custom plan of one row always looked cheaper than the generic one.)"""
_RESERVE_IDS: Final = (
    "SELECT nextval(pg_get_serial_sequence('documents', 'doc_id')) FROM generate_series(1, %s)"
)
_LOCK_ROW: Final = (
    f"WITH f AS (SELECT {ROW_COLUMNS} FROM documents WHERE state = ? AND subject = ? FOR NO KEY UPDATE), "
    "c AS (INSERT INTO documents (state, subject) SELECT ?, ? WHERE NOT EXISTS (SELECT FROM f) "
    f"ON CONFLICT (state, subject) DO UPDATE SET revision = documents.revision RETURNING {ROW_COLUMNS}) "
    "SELECT * FROM f UNION ALL SELECT * FROM c"
)
"""One document's row, locked to commit (created first when it has none)."""
UNBORN_MAX: Final = 4096
_CREATE_ROWS: Final = (
    "INSERT INTO documents (doc_id, state, subject) "
    "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[]) ON CONFLICT (state, subject) DO NOTHING"
)


def _create_arrays(creates: Sequence[tuple[DocKey, int]]) -> list[str | None]:
    if not creates:
        return _NULLS[:3]
    return [
        _array(doc_id for _, doc_id in creates),
        _array(key.state for key, _ in creates),
        _array(key.subject for key, _ in creates),
    ]


_Planned = tuple[list[DocKey], list[DocKey], list[Any] | FastCommit]
"""A planned commit: the documents it shares and those it writes (in a group, locked first), and
its statement's parameters."""
_CLAIMED_MEANWHILE: Final = "SF409"
"""Raised by ``stateflow_commit`` when an op id was claimed between its check and its insert."""
_DEADLOCK: Final = "40P01"
_SERIALIZATION: Final = "40001"
_CREATING_GAVE_UP: Final = (LOCK_NOT_AVAILABLE, TAKEN_MEANWHILE)


def _creating_gave_up(exc: psycopg.Error) -> bool:
    """A creating statement (``pg_fast``) that wrote nothing because a new key was held or taken
    by another writer: the locked path decides."""
    if exc.sqlstate in _CREATING_GAVE_UP:
        return True
    return (exc.sqlstate, exc.diag.constraint_name) == KEY_TAKEN


def _answer(member: Member[_Planned, int], send: Callable[[], int | None]) -> None:
    try:
        member.answered(send())
    except Exception as exc:
        member.failed(exc)


def _rows(plans: Sequence[WritePlan]) -> tuple[dict[str, Any], list[_ByteaArray | None]]:
    """The rows of these plans as ``stateflow_rows``' fields — each a list of the rows as the
    plans hold them (tuples, which the payload's encoder writes as arrays), gathered in one pass
    over the plans; a table without rows left out — and, beside them, the bytes those rows
    write whole: the inserted and the rewritten members' bodies and the changes' inline edits,
    each kind as one ``bytea[]`` in binary (NULL where there are none), its n-th element the n-th
    row's, whose own column in the payload is then NULL (schema 29: copied by the server, not
    read three times by its JSON parser with every quote in a body escaped)."""
    deletes: list[tuple[int, str]] = []
    gone: list[int] = []
    updates: list[tuple[Any, ...]] = []
    inserts: list[tuple[Any, ...]] = []
    nodes: list[tuple[bytes, bytes]] = []
    edits: list[tuple[Any, ...]] = []
    documents: list[tuple[Any, ...]] = []
    snapshots: list[tuple[int, int, int]] = []
    ins_bodies: list[bytes | None] = []
    upd_bodies: list[bytes | None] = []
    inline: list[bytes | None] = []
    for p in plans:
        if p.present:
            deletes += p.deletes
        else:
            gone.append(p.doc_id)
        for u in p.updates:  # (body, revision, size, outline, root, doc_id, name)
            upd_bodies.append(u[0])
            updates.append((None, *u[1:]))
        for ins in p.inserts:  # (doc_id, name, position, revision, size, outline, body, root)
            ins_bodies.append(ins[6])
            inserts.append((*ins[:6], None, ins[7]))
        if p.nodes:
            nodes += p.nodes.items()
        edits += p.edits
        d = p.document  # (the field, not ``row``'s call)
        assert d is not None
        whole = _whole_from_inserts(p, p.inline) if p.inserts and p.inline is not None else 0
        inline.append(None if whole else p.inline)
        documents.append(  # its change row (its edits beside), then its document row
            (
                p.doc_id,
                p.revision,
                p.paths,
                None,
                d.revision,
                # NULL where it does not move: the function's update then leaves the column
                # out, and its counter's trigger is not even considered (schema 33)
                None if p.present == p.was_present else int(d.present),
                d.snapshot_revision,
                d.bytes_since_snapshot,
                d.body_size,
                d.next_position,
                whole,
            )
        )
        if p.snapshot:
            snapshots.append((p.doc_id, p.revision, 1 if p.present else 0))
    out: dict[str, Any] = {"doc_rows": documents}
    if deletes:
        out["del_rows"] = deletes
    if gone:
        out["gone"] = gone
    if updates:
        out["upd_rows"] = updates
    if inserts:
        out["ins_rows"] = inserts
    if nodes:
        out["node_rows"] = nodes
    if edits:
        out["ed_rows"] = edits
    if snapshots:
        out["snap_rows"] = snapshots
    beside = _bytea_array(inline) if inline.count(None) < len(inline) else None  # (all whole: none)
    return out, [_bytea_array(ins_bodies), _bytea_array(upd_bodies), beside]


class _ByteaArray(bytes):
    """A ``bytea[]`` in PostgreSQL's binary format (``array_recv``'s input), sent as it is."""


class _ByteaArrayDumper(Dumper):
    format = pq.Format.BINARY
    oid = 1001  # bytea[]

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


psycopg.adapters.register_dumper(_ByteaArray, _ByteaArrayDumper)

_ARRAY_HEAD: Final = struct.Struct("!iiIii").pack
"""A one-dimensional array's header: dimensions, flags, element type, length, lower bound."""
_BYTEA_OID: Final = 17
_LENGTH: Final = struct.Struct("!i").pack
_NULL_ELEMENT: Final = _LENGTH(-1)


def _bytea_array(values: Sequence[bytes | None]) -> _ByteaArray | None:
    """``values`` as one binary ``bytea[]`` parameter; None (NULL) where there are none."""
    if not values:
        return None
    head = _ARRAY_HEAD(1, 0, _BYTEA_OID, len(values), 1)
    return _ByteaArray(head + b"".join([_NULL_ELEMENT if v is None else _LENGTH(len(v)) + v for v in values]))


def _whole_from_inserts(p: WritePlan, inline: bytes) -> int:
    """1 where the plan's inline edits are the whole body set, made of exactly the bytes of the
    member rows it inserts, in their order — as the write functions build them from those rows
    (schema 27; each name by ``to_json``, here one that needs no escape, as both encoders write
    it): the body then travels once, in the member rows, not again as the change's edits.
    Else 0 (the edits travel as they are). Called for a plan that inserts, with its inline
    edits (``p.inline``)."""
    if p.deletes or p.updates or not inline.startswith(_WHOLE_HEAD):
        return 0
    parts = []
    for ins in p.inserts:
        name, body = ins[1], ins[6]
        if ins[7] is not None or ins[0] != p.doc_id or not _PLAIN_NAME(name):
            return 0
        parts.append(b'"' + name.encode() + b'":' + body)
    if inline != _WHOLE_HEAD + b",".join(parts) + _WHOLE_TAIL:
        return 0
    return 1


_WHOLE_HEAD: Final = b'[["",[[[],{'
_WHOLE_TAIL: Final = b"}]]]]"
_PLAIN_NAME: Final = re.compile(r'[^"\\\x00-\x1f]*').fullmatch
"""A name ``to_json`` and the store's encoder write alike, as its characters between quotes."""


def _payload(fields: dict[str, Any]) -> str:
    """The write functions' one ``json`` argument (see ``stateflow_rows``): encoded in C, bytes
    as ``bytea`` input text (``_bytea_text``). (Each column was an array literal built element by
    element here, ~40% of the client's Python per write.)"""
    return orjson.dumps(fields, default=_bytea_text).decode()


def _bytea_text(value: Any) -> str:
    """Bytes as text the functions' ``::bytea`` casts read back to the same bytes: ASCII bytes —
    every JSON body, path and edit the store writes, unless it holds a non-ASCII character — in
    ``bytea``'s escape format (the text itself, each backslash doubled, NUL as ``\\000``: a text
    cannot hold it), others in its hex format. The server's JSON parser reads the payload three
    times (``json``'s check, the object, each field's array): a body travels as half the
    characters it takes in hex. (Non-ASCII bytes as escape text would be converted to the
    database's encoding on the way: only ASCII passes through every encoding unchanged.)"""
    if type(value) is bytes:
        if value.isascii():
            return value.decode("ascii").replace("\\", "\\\\").replace("\x00", "\\000")
        return "\\x" + value.hex()
    raise TypeError(f"no payload element for {type(value).__name__}")


_NULLS: Final[list[str | None]] = [None] * 3
"""No rows to create, as NULL arrays (``unnest`` of NULL gives no rows)."""


def _array(values: Iterable[Any]) -> str:
    """A PostgreSQL array literal of ints, strings, bytes and NULLs. Sent as text and cast in
    the statement: psycopg adapting a list inspects every element (~9 µs per list here). (A
    commit's rows travel as one payload instead: ``_payload``.)"""
    out = []
    for value in values:
        kind = type(value)
        if kind is int:
            out.append(str(value))
        elif kind is bytes:
            out.append('"\\\\x' + value.hex() + '"')
        elif kind is str:
            out.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
        elif value is None:
            out.append("NULL")
        else:
            raise TypeError(f"no array element for {kind.__name__}")
    return "{" + ",".join(out) + "}"


def _rows_of(cur: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    """The cursor's rows, if its statement returned any (checked on the raw result: building
    ``description`` costs more than many a query)."""
    result = cur.pgresult
    return cur.fetchall() if result is not None and result.status == pq.ExecStatus.TUPLES_OK else []


@lru_cache(maxsize=1024)
def _pg(sql: str) -> str:
    """Our ``?`` placeholders in psycopg's spelling (our SQL holds no literal ``?``)."""
    return sql.replace("?", "%s")


def _bound_check(op: str, operand: Any) -> tuple[str, str]:
    """SQL holding for a ``scalar`` member that may be on ``operand``'s side (``listing.Bound``),
    and its parameter; a member without ``scalar`` (an object, an array, a string jsonb cannot
    hold) passes, to be checked by the caller. Numbers compare as ``numeric``, exactly, with a
    float operand, or an integer one of magnitude 2**53 or more, moved one double outward: a
    stored float's text is within half a step of the double the caller compares, so a float equal
    to the operand (9.223372036854776e18 is 2**63) may read past it. Strings compare by code point (``COLLATE "C"``: UTF-8 bytes).
    A text cannot hold NUL, so a string operand is cut before its first one: a ``scalar`` string
    holds none, so it is above the operand exactly when above that prefix, and below or equal
    to it exactly when below or equal to the prefix (the superset the caller rechecks)."""
    side = ">=" if op in ("$gt", "$gte") else "<="
    j = "stateflow_jsonb(m.scalar)"
    if isinstance(operand, str):
        prefix = operand.partition("\x00")[0]
        return f"jsonb_typeof({j}) = 'string' AND ({j} #>> '{{}}') COLLATE \"C\" {side} ?::text", prefix
    if type(operand) is float or (type(operand) is int and abs(operand) >= _EXACT_BELOW):
        # (an integer past every double has no float beyond it: it stays as it is)
        with suppress(OverflowError):
            operand = math.nextafter(float(operand), -math.inf if side == ">=" else math.inf)
    value = str(Decimal(operand))
    return (
        f"CASE WHEN jsonb_typeof({j}) = 'number' THEN ({j})::numeric {side} ?::numeric ELSE false END",
        value,
    )


_POSTGRES_SORT: Final = SortSql(
    # ``scalar`` holds every inline scalar jsonb can hold; without it, an empty body is a tree
    # and '[' or '{' an inline object or array — anything else is a string jsonb cannot hold
    rank="CASE WHEN {s}.doc_id IS NULL THEN 9 WHEN {s}.scalar IS NULL THEN "
    "CASE WHEN octet_length({s}.body) = 0 OR get_byte({s}.body, 0) | 32 = 123 THEN 8 ELSE -1 END "
    "ELSE CASE get_byte({s}.scalar, 0) WHEN 34 THEN 1 WHEN 116 THEN 2 WHEN 102 THEN 2 "
    "WHEN 110 THEN 9 ELSE 0 END END",
    # (a JSON number's text is numeric's input; inline, not through a function call per row)
    number="convert_from({s}.scalar, 'UTF8')::numeric",
    boolean="(get_byte({s}.scalar, 0) = 116)::int",
    text="(convert_from({s}.scalar, 'UTF8')::jsonb #>> '{{}}')",
    # numeric reads a float's text, not its binary value (:data:`_EXACT_BELOW`); a CASE, so
    # that no string is cast to numeric
    unsure="CASE WHEN {s}.doc_id IS NULL THEN false WHEN {s}.scalar IS NULL THEN "
    "octet_length({s}.body) > 0 AND get_byte({s}.body, 0) | 32 <> 123 "
    "WHEN get_byte({s}.scalar, 0) IN (34, 116, 102, 110) THEN false "
    "ELSE abs(convert_from({s}.scalar, 'UTF8')::numeric) >= 9007199254740992 END",
    collate=' COLLATE "C"',
)
"""PostgreSQL: a sorted search's order by a member's value (``backend.SortSql``)."""

_ARRAY_INDEX: Final = re.compile(r"[ \t\n\r\f\v]*[+-]?[0-9]+")
"""A path element ``#>`` reads as an index into an array (``strtol``'s syntax)."""


def _postgres_sort(inner: tuple[str, ...]) -> SortSql | None:
    """A sorted search's order by the value at ``inner`` inside a member: ``#>`` on an inline
    object's ``jsonb``. ``#>`` indexes an array by a name that reads as an integer, where the
    search reaches nothing (an array has no members): such a path has no SQL here (None), nor
    one with a NUL. A tree, or a body jsonb cannot hold (an escaped NUL), is unsure."""
    if any(_ARRAY_INDEX.fullmatch(name) or "\x00" in name for name in inner):
        return None
    names = ", ".join("'" + name.replace("'", "''") + "'" for name in inner)
    path = f"ARRAY[{names}]::text[]".replace("{", "{{").replace("}", "}}")
    doc = "convert_from({s}.body, 'UTF8')::jsonb"
    kind, text = f"jsonb_typeof({doc} #> {path})", f"({doc} #>> {path})"
    unreadable = "octet_length({s}.body) = 0 OR position('\\x5c7530303030'::bytea IN {s}.body) > 0"
    return SortSql(
        rank=f"CASE WHEN {{s}}.doc_id IS NULL THEN 9 WHEN {unreadable} THEN -1 "
        f"WHEN get_byte({{s}}.body, 0) <> 123 THEN 9 ELSE CASE {kind} WHEN 'number' THEN 0 "
        "WHEN 'string' THEN 1 WHEN 'boolean' THEN 2 WHEN 'object' THEN 8 WHEN 'array' THEN 8 "
        "ELSE 9 END END",
        number=f"{text}::numeric",
        boolean=f"({text} = 'true')::int",
        text=text,
        unsure=f"CASE WHEN {{s}}.doc_id IS NULL THEN false WHEN {unreadable} THEN true "
        f"WHEN get_byte({{s}}.body, 0) <> 123 THEN false WHEN {kind} = 'number' "
        f"THEN abs({text}::numeric) >= 9007199254740992 ELSE false END",
        collate=' COLLATE "C"',
    )


def _jsonb_safe(raw: str) -> bool:
    """jsonb cannot hold an escaped NUL character."""
    return "\\u0000" not in raw


_EXACT_BELOW: Final = 2**53
"""jsonb compares numbers as decimals, the store as the numbers JSON holds (a float by its binary
value): 2**60 and the float 2.0**60 (written 1.152921504606847e+18) are equal, and that float and
1152921504606847000 are not. Below this magnitude every integral float's text is the integer's."""


def _numbers_exact(pattern: Any) -> bool:
    """Whether jsonb compares every number in ``pattern`` as the store does (:data:`_EXACT_BELOW`);
    a pattern with a larger one is checked in Python, on members SQL found as a superset."""
    t = type(pattern)
    if t is int or t is float:
        return bool(-_EXACT_BELOW < pattern < _EXACT_BELOW)
    if t is dict:
        return all(_numbers_exact(v) for v in pattern.values())
    if t is list:
        return all(_numbers_exact(v) for v in pattern)
    return True


def _equal_numbers(pattern: Any) -> list[Any]:
    """``pattern`` and, for a number :func:`_numbers_exact` refuses, its other spelling that a
    member equal to it can be stored as (the integer of an integral float, the float an integer
    is exactly): every member equal to it has one of their texts."""
    t = type(pattern)
    if (t is not int and t is not float) or _numbers_exact(pattern):
        return [pattern]
    if t is float:
        whole = int(pattern) if pattern.is_integer() else None
        return [pattern] if whole is None or not plain_number(whole) else [pattern, whole]
    other = float(pattern)
    return [pattern, other] if other == pattern else [pattern]


DEFAULT_WAIT: Final = 10.0
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_STATEMENT_TIMEOUT: Final = 60.0
_WHOLE_NUMBER: Final = re.compile(r"\s*[-+]?[0-9]+\s*")
"""A value libpq reads as an integer option (``connect_timeout``): digits, a sign, spaces around."""
_SETS_STATEMENT_TIMEOUT: Final = re.compile(r"(?:^|\s)(?:-c\s*|--)statement[-_]timeout=", re.IGNORECASE)
"""A URL's ``options`` setting the statement timeout, in each spelling the server reads
(``-c name=``, ``-cname=``, ``--name=``; a name's case and ``-`` for ``_`` are its own)."""
"""Seconds one statement may run: far above any call's (a read or a commit takes milliseconds;
a search over a large state, seconds), so only a runaway query or a lock held that long ends."""


def _quiet_pool_log() -> None:
    """The pool retries in the background and logs every failed attempt, which Python prints on
    stderr when the program configured no logging; our refusals already name the cause
    (``store-unavailable``). A program that configured logging keeps the pool's lines."""
    if not logging.getLogger().handlers:
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def _one_line(exc: Exception) -> str:
    """libpq's multi-line message as one line: the server's message with its detail and hint,
    not its CONTEXT lines (the statements inside our own SQL functions) nor the statement's
    text at the error's position (``LINE 1: …``), nothing the caller can act on (the chained
    psycopg error keeps them for a traceback); libpq's own message (no server's) whole."""
    diag = exc.diag if isinstance(exc, psycopg.Error) else None
    if diag is not None and diag.message_primary:
        text = diag.message_primary
        for label, part in (("DETAIL", diag.message_detail), ("HINT", diag.message_hint)):
            if part:
                text += f" {label}: {part}"
    else:
        text = str(exc)
    return " ".join(text.split())


def interrupt_behind(exc: psycopg.Error) -> None:
    """Raise the Ctrl-C (KeyboardInterrupt) ``exc`` was raised in place of, if any. A pipeline
    stopped as it waits for its results fails to leave pipeline mode, and psycopg raises that
    failure ("cannot exit pipeline mode while busy") instead of the Ctrl-C: the command would
    report a store error and exit 1, not say what it left and exit 130."""
    if isinstance(exc.__context__, KeyboardInterrupt):
        raise exc.__context__


@contextmanager
def _mapped_errors(where: str) -> Iterator[None]:
    """psycopg's errors as ours; ``where`` names the store (its ``url``, the password masked)."""
    try:
        try:
            yield
        except psycopg.Error as exc:
            interrupt_behind(exc)
            raise
    except pg_errors.UndefinedTable as exc:
        raise StoreNotMigrated(
            f"the store schema is missing ({_one_line(exc)}); run `stateflow migrate`"
        ) from exc
    except pg_errors.ReadOnlySqlTransaction as exc:
        raise StoreReadOnly(f"PostgreSQL refused a write in a read-only session: {_one_line(exc)}") from exc
    except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure) as exc:
        raise WriteAborted(f"PostgreSQL ended the write: {_one_line(exc)}") from exc
    except pg_errors.QueryCanceled as exc:  # (an OperationalError: before that clause)
        cancel = current()
        if cancel is not None and cancel.cancelled:  # (not the statement timeout: the caller left)
            raise CallCancelled(CANCELLED) from exc
        raise StoreTimeout(
            f"PostgreSQL cancelled a statement: {_one_line(exc)}; its transaction was rolled back, "
            "nothing of it was written (the store's statement_timeout_seconds bounds one statement)"
        ) from exc
    except pg_errors.ProgramLimitExceeded as exc:  # (an OperationalError, yet no retry helps)
        raise StoreError(f"PostgreSQL refused it as over one of its limits: {_one_line(exc)}") from exc
    except psycopg.OperationalError as exc:  # (a connection lost part way too: ``_raise_failed``)
        raise StoreUnavailable(f"PostgreSQL error: {_one_line(exc)}") from exc
    except pg_errors.InvalidTextRepresentation as exc:
        text = str(exc)
        if FENCE_MARK in text:  # (``fenced``: a newer release migrated the store meanwhile)
            version = text.split(FENCE_MARK, 1)[1].split('"', 1)[0]
            raise StoreTooNew(
                f"{where} has schema version {version}, newer than this stateflow knows "
                f"({SCHEMA_VERSION}): a newer release migrated it; nothing was written — upgrade stateflow"
            ) from exc
        raise StoreError(f"PostgreSQL error: {_one_line(exc)}") from exc
    except psycopg.DatabaseError as exc:
        raise StoreError(f"PostgreSQL error: {_one_line(exc)}") from exc
