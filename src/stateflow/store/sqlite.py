"""The embedded default: one SQLite file, WAL, durable commits, safe across processes.

Writers take SQLite's write lock up front (``BEGIN IMMEDIATE``), which serializes them per
database file across threads and processes; readers see one consistent WAL snapshot per
transaction and never block writers. ``synchronous=FULL`` (the default) makes an acknowledged
commit survive power loss; ``synchronous=NORMAL`` is faster and survives a process crash but
may lose the last commits on power loss.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from stateflow.errors import (
    CorruptData,
    StateflowError,
    StoreError,
    StoreNotMigrated,
    StoreUnavailable,
    UnsupportedStore,
)
from stateflow.store.base import SqlStore, Tx
from stateflow.store.migrations import SQLITE
from stateflow.store.model import DocKey, Document

SYNCHRONOUS_MODES: Final = ("full", "normal", "extra", "off")
DEFAULT_BUSY_TIMEOUT_MS: Final = 30_000


class _SqliteTx(Tx):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    # try/except rather than a context manager: these run ~15 times per commit
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise _mapped(exc) from exc

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        try:
            return self.conn.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            raise _mapped(exc) from exc

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            self.conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise _mapped(exc) from exc


SNAPSHOT_CACHE_DOCS: Final = 10_000


@dataclass
class _Snapshot:
    version: int
    docs: dict[DocKey, Document] = field(default_factory=dict)


class SqliteStore(SqlStore):
    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        auto_migrate: bool = True,
    ) -> None:
        super().__init__()
        if synchronous.lower() not in SYNCHRONOUS_MODES:
            raise UnsupportedStore(
                f"synchronous={synchronous!r} is not supported; use one of {SYNCHRONOUS_MODES}"
            )
        self.path = Path(path).expanduser()
        self.url = f"sqlite:///{self.path}"
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        if auto_migrate:
            self.migrate()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                timeout=self.busy_timeout_ms / 1000,
                check_same_thread=False,  # each thread still uses only its own connection
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
        with _mapped_errors():
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreUnavailable(f"{self.path}: cannot switch to WAL mode (got {mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
        self._local.conn = conn
        with self._guard:
            self._all.append(conn)
        return conn

    @contextmanager
    def _tx(self, begin: str) -> Iterator[Tx]:
        conn = self._connection()
        if conn.in_transaction:  # nested use inside one of our transactions: join it
            yield _SqliteTx(conn)
            return
        with _mapped_errors():
            conn.execute(begin)
        try:
            yield _SqliteTx(conn)
        except BaseException:
            with suppress(sqlite3.Error):  # the failure may already have ended the transaction
                conn.execute("ROLLBACK")
            raise
        with _mapped_errors():
            conn.execute("COMMIT")
        if begin != "BEGIN":
            self._local.snapshot = None  # this connection wrote: its cached documents are stale

    # -------------------------------------------------------------- whole-document read cache

    def read(
        self,
        keys: Iterable[DocKey],
        members: Iterable[str] | Mapping[DocKey, Iterable[str] | None] | None = None,
        *,
        outlines: Iterable[str] = (),
    ) -> dict[DocKey, Document]:
        """Whole-document reads are served from a per-connection cache while SQLite's
        ``PRAGMA data_version`` says no other connection committed since it was filled (and
        this connection wrote nothing); anything else reads the database."""
        keys = list(keys)
        outline_names = list(outlines)
        if members is not None or outline_names:
            return super().read(keys, members, outlines=outline_names)
        conn = self._connection()
        if conn.in_transaction:
            return super().read(keys)
        snapshot = self._snapshot(conn)
        missing = [k for k in keys if k not in snapshot.docs]
        if missing:
            fresh = super().read(missing)
            if (
                self._snapshot(conn) is not snapshot
            ):  # something committed meanwhile: one more consistent read
                return super().read(keys)
            snapshot.docs.update(fresh)
        return {k: snapshot.docs[k] for k in keys}

    def _snapshot(self, conn: sqlite3.Connection) -> _Snapshot:
        try:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise _mapped(exc) from exc
        snapshot: _Snapshot | None = getattr(self._local, "snapshot", None)
        if snapshot is None or snapshot.version != version or len(snapshot.docs) > SNAPSHOT_CACHE_DOCS:
            snapshot = self._local.snapshot = _Snapshot(version)
        return snapshot

    def _read_tx(self) -> Any:
        return self._tx("BEGIN")

    def _write_tx(self) -> Any:
        return self._tx("BEGIN IMMEDIATE")

    def _migrations(self) -> dict[int, str]:
        return SQLITE

    def _table_names(self, tx: Tx) -> set[str]:
        return {r[0] for r in tx.all("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def close(self) -> None:
        with self._guard:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise _mapped(exc) from exc


def _mapped(exc: sqlite3.Error) -> StateflowError:
    """Our error for a SQLite error: missing schema, busy, damaged file, or other."""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError):
        if "no such table" in text:
            return StoreNotMigrated(f"the store schema is missing ({text}); run `stateflow migrate`")
        if "locked" in text or "busy" in text:
            return StoreUnavailable(f"the store stayed busy past the timeout: {text}")
        return StoreUnavailable(f"SQLite error: {text}")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreError(f"SQLite integrity error: {text}")
    if isinstance(exc, sqlite3.DatabaseError):
        return CorruptData(f"the SQLite file is damaged or not a database: {text}")
    return StoreError(f"SQLite error: {text}")
