"""The embedded default: one SQLite file, WAL, durable commits, safe across processes.

Writers take SQLite's write lock up front (``BEGIN IMMEDIATE``), which serializes them per
database file across threads and processes; within one process they share group commits on
one writer connection. Readers see one consistent WAL snapshot per transaction, never block
writers, and are served from a cache that any commit (seen in the WAL-index header) retires.
``synchronous=FULL`` (the default) makes an acknowledged commit survive power loss;
``synchronous=NORMAL`` is faster and survives a process crash but may lose the last commits on
power loss.
"""

from __future__ import annotations

import copy
import fcntl
import math
import mmap
import os
import re
import shutil
import sqlite3
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar, Final, NamedTuple, TypeVar, cast

from stateflow.doc.canonical import decode_trusted, encode_trusted
from stateflow.errors import (
    CorruptStore,
    StateflowError,
    StoreBusy,
    StoreError,
    StoreNotFound,
    StoreNotMigrated,
    StorePermissionDenied,
    StoreReadOnly,
    StoreUnavailable,
    UnsupportedStore,
    WriteOutcomeUnknown,
)
from stateflow.files import make_private_dirs, missing_folders
from stateflow.store import writer_queue, writer_requests
from stateflow.store.backend import Candidates, SortSql
from stateflow.store.base import SqlStore
from stateflow.store.clock import utc_now
from stateflow.store.core import ROWS_PER_QUERY
from stateflow.store.counting import (
    SQLITE_ALL_COUNTER_ROWS,
    SQLITE_COUNTER_ROWS,
    SQLITE_FOLD,
    SQLITE_FOLDED,
    SQLITE_UNFOLDED,
    folded,
    quoted,
    summed,
)
from stateflow.store.id_blocks import RESERVED_IDS, IdBlocks
from stateflow.store.ledger import OpIdTaken, claims_query
from stateflow.store.migrations import (
    CHANGE_ROW_MAX,
    SCHEMA_VERSION,
    SQLITE,
    SQLITE_SUBJECT_KIND,
    SQLITE_VALUE,
    SQLITE_VALUE_WHERE,
    VALUE_INDEX_MAX,
)
from stateflow.store.model import Commit, DocKey, Document, Write, doc_keys
from stateflow.store.plan import Fresh, WritePlan, validate_writes
from stateflow.store.rows import NO_ROW, DocRow, lock_order, outline_of, whole_heads
from stateflow.store.served_patch import Served
from stateflow.store.sqlite_file import (
    WAL_PAGES,
    connect_read_only,
    hold,
    keep_wal_bounded,
    preflight,
    release,
)
from stateflow.store.tx import Tx
from stateflow.store.writer_queue import Answered, RequestTaken, WriterQueue
from stateflow.store.writer_requests import NotMerged, Request

R = TypeVar("R")
_get_ident: Final = threading.get_ident  # (a global: a turn sets and every write reads it)
SYNCHRONOUS_MODES: Final = ("full", "normal", "extra", "off")
DEFAULT_BUSY_TIMEOUT_MS: Final = 30_000
WAIT_SLICE_MS: Final = 50
"""The writer connection's busy timeout. SQLite's busy handler sleeps inside one C call, where a
Ctrl-C is not acted on until the call returns: a write lock held by another program (a
``sqlite3`` shell, a backup tool) is waited for in slices of this long instead, the rest of
the store's wait in Python between them (``_begin_waiting``), so a Ctrl-C stops the wait
within a slice."""
UNBORN_MAX: Final = 4096
REFILL_BELOW: Final = RESERVED_IDS // 4
"""ids on hand under which a creating commit reserves the next block in its own transaction"""


def _as_is(value: None) -> None:
    return value


def _bind_bytes_and_null_as_is() -> None:
    """Register adapters that hand ``bytes`` and ``None`` to SQLite unchanged, unless the
    process registered its own. The sqlite3 module binds only ``int``, ``float``, ``str`` and
    ``bytearray`` without asking its adapters; for any other value (our blobs and NULLs) it
    looks for an adapter and, finding none, asks the protocol type for ``__adapt__``, whose
    ``AttributeError`` is built and dropped, ~2,000 instructions a value (a memory patch binds 19
    of them). A registered adapter that returns the value is one lookup and one call; the value
    bound is the same object, so what is stored does not change."""
    if (bytes, sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(bytes, bytes.__bytes__)
    if (type(None), sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(type(None), _as_is)


_bind_bytes_and_null_as_is()


class _SqliteTx(Tx):
    """Every statement of the transaction runs on one cursor. ``Connection.execute`` makes a
    cursor per statement, and with it a weak reference the connection keeps in its list of
    cursors: ~1,100 instructions a statement (an ``apply`` sends seven). Each statement's rows
    are fetched, or its counts read, before the next one runs, so none needs a cursor of its
    own."""

    __slots__ = ("conn", "cursor")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.cursor = conn.cursor()

    # try/except rather than a context manager: these run ~15 times per commit
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.cursor.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise _mapped(exc) from exc

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        try:
            return self.cursor.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            raise _mapped(exc) from exc

    def insert_one(self, sql: str, params: Sequence[Any], key: str) -> int | None:
        # the row's rowid (``key`` is its alias), not RETURNING: SQLite buffers a RETURNING
        # statement's rows in a temporary table it opens and closes for each run of the
        # statement, ~43,000 instructions
        try:
            cursor = self.cursor.execute(sql, params)
        except sqlite3.Error as exc:
            raise _mapped(exc) from exc
        return cursor.lastrowid if cursor.rowcount == 1 else None

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            if len(rows) == 1:  # (one row: the common case, and `execute` costs less)
                self.cursor.execute(sql, rows[0])
            else:
                self.cursor.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise _mapped(exc) from exc


SNAPSHOT_CACHE_DOCS: Final = 10_000
DEFAULT_MAX_GROUP: Final = 64
"""At most this many writes share one commit, so a steady stream of writers cannot hold the
first one's answer back for long."""


class _Group:
    """Writers sharing one commit; each waits for it (``wait``) and then reads ``error``."""

    __slots__ = ("_done", "attempts", "error", "members")

    def __init__(self) -> None:
        # Held until the commit is done; each waiter takes it and hands it on. A bare lock: an
        # Event (a condition over a lock) costs several µs per commit to make and to set.
        self._done = threading.Lock()
        self._done.acquire()
        self.error: StateflowError | None = None
        self.members = 0
        """writers whose work is in the group's transaction"""
        self.attempts = 0
        """writers that ran in the group, whether their work stayed or was rolled back"""

    def finish(self) -> None:
        self._done.release()

    def wait(self) -> None:
        with self._done:  # free once the commit is done; each waiter takes it and hands it on
            pass


class _Member:
    """One writer's turn in a group commit: ``__enter__`` waits for the turn and opens the
    writer's part of the group's transaction (the first of a group begins it, the others run
    in a savepoint, so a failing writer rolls back only its own work); ``__exit__`` keeps or
    rolls back that part, hands the turn on (the last of a group commits for all) and, when
    the work stayed, returns once the group's commit is done. (A class, not a generator
    context manager: this runs on every commit, and ``contextlib`` costs more than the few
    lines it would save.)"""

    __slots__ = ("__weakref__", "_commit", "_conn", "_first", "_group", "_ref")
    _request: Request | None = None
    """a memory patch to publish while waiting for the turn (``_Requesting``)"""

    def __init__(self, commit: _GroupCommit) -> None:
        self._commit = commit
        self._conn: sqlite3.Connection | None = None
        """the writer connection once this writer's part of the transaction may have begun"""
        self._ref = weakref.ref(self)
        """this member as ``_GroupCommit.owner`` names it: made once, as the member is kept
        for the next writes (``_GroupCommit.spare``), not made and dropped on every turn"""

    def __enter__(self) -> _SqliteTx:
        commit = self._commit
        left = wait = commit.wait  # (of the whole wait: what is left for the other processes')
        turn = False
        # Anything may stop this writer — a KeyboardInterrupt lands between any two statements —:
        # whatever it leaves, the turn is let go (a turn kept would stop every later writer, and
        # ``close``) and no transaction stays open (it would hold SQLite's write lock against every
        # process, and serve this thread writes that never committed).
        try:
            turn = commit.lock.acquire(False)  # free: nobody is in a turn, so nobody to tell we wait
            if not turn and commit.orphaned():  # held for a writer stopped on its way out
                commit.recover()
                turn = commit.lock.acquire(False)
            if not turn:
                deadline = time.monotonic() + wait
                with commit._queued_lock:
                    commit._queued += 1
                try:
                    turn = commit.lock.acquire(timeout=wait)
                finally:
                    with commit._queued_lock:
                        commit._queued -= 1
                if not turn:
                    raise StoreBusy(
                        f"this process's writers held the store for over {wait:g} s; nothing was written",
                        retry_after=max(1, round(wait)),
                    )
                left = max(0.0, deadline - time.monotonic())
            me = _get_ident()
            commit.owner = (self._ref, sys._getframe(1), me)
            self._group = commit._group
            tx = commit._tx  # (kept with its connection from one group to the next)
            if tx is None:  # the first write, or the first since a close: the connection opened
                tx = commit.tx(commit._connect())
            conn = commit._conn = tx.conn
            first = self._first = not conn.in_transaction  # the first of a group needs no savepoint
            if first:
                # other processes' writers: wait for our turn, not poll, and not forever
                # (raises ``Answered`` where an earlier turn committed the request: no turn of ours)
                commit.queue.acquire(left, wait, self._request)
            if commit.replaced is not None:
                # a file put in place of the store's (a restore under a running server) is not
                # seen by connections already open: they would write to the old, unlinked file,
                # every acknowledged write lost with it. (Found by the readiness probe, not
                # here: a stat per commit costs ~1% of a write's instructions)
                raise copy.copy(commit.replaced).with_traceback(None)
            self._conn = conn  # (its part begun from here on, for ``_undo`` to end)
            try:  # (not `_mapped_errors()`: a context manager costs more than this statement's Python)
                try:
                    tx.cursor.execute("BEGIN IMMEDIATE" if first else "SAVEPOINT member")
                except sqlite3.OperationalError as busy:
                    if not first or not _is_busy(busy):
                        raise
                    # another program holds SQLite's write lock (our other processes' writers
                    # wait in the queue, not here): waited for slice by slice, the first one gone
                    _begin_waiting(tx.cursor, busy, commit.wait)
                # a store migrated past this version since it was checked (``stateflow migrate``
                # of a newer release while this process runs) is not written: the version is
                # read under the write lock (one indexed row) — unless the WAL-index header's
                # change counter is the one our last group's commit made: then no other
                # connection has committed since, and a migration is a commit
                if first and commit.too_new is not None:
                    watch = commit.watch
                    count = None if watch is None else watch.change_count()
                    if count is None or count != commit.checked:
                        version = tx.cursor.execute(_VERSION_SQL).fetchone()
                        if version is not None and int(version[0]) > SCHEMA_VERSION:
                            raise commit.too_new(int(version[0]))
                    # (the counter once this group commits; a group rolled back reads again)
                    commit.checked = None if count is None else (count + 1) & 0xFFFFFFFF
            except sqlite3.Error as exc:
                raise _mapped(exc) from exc
            commit.holder = me
            return tx  # (inside the ``try``: ``__exit__`` runs only once this has returned)
        except BaseException:
            if turn:
                try:
                    self._undo()
                finally:
                    commit.holder = None
                    commit._settle(commit._group, False)
            raise

    def __del__(self) -> None:
        # Dropped while still holding the turn: its ``__exit__`` was stopped before any of it ran
        # (a KeyboardInterrupt as it was called). The ``with`` it served is over — this runs as
        # the exception leaves that frame —, so the turn is ended now, not at the store's next
        # use: other writers, in every process, would wait for it until then.
        commit = getattr(self, "_commit", None)  # (None: stopped before ``__init__`` ran)
        owner = None if commit is None else commit.owner
        if owner is not None and owner[0]() is self:
            cast(_GroupCommit, commit).recover(self)

    def _undo(self) -> None:
        """Roll back this writer's part of the group's transaction (the whole transaction for
        the first of a group, which no other writer is in yet); a no-op before it began."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        with suppress(sqlite3.Error):  # the error may have ended the whole transaction
            if self._first:
                self._commit.pending = None  # (what waited for this commit: rolled back)
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            else:
                conn.execute("ROLLBACK TO member")
                conn.execute("RELEASE member")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        commit, group, ok = self._commit, self._group, False
        try:
            commit.holder = None  # (still in the turn: only its holder writes this)
            if exc_type is None:
                if not self._first:
                    with _mapped_errors():
                        commit.tx(cast(sqlite3.Connection, self._conn)).cursor.execute("RELEASE member")
                self._conn = None  # (kept: nothing of it to undo)
                group.members += 1
                ok = True
        finally:
            try:
                if not ok:  # failed, or stopped on its way out (the exception goes on)
                    self._undo()
            finally:
                shared = commit._settle(group, ok)  # (a group of this writer alone: committed, or raised)
        if shared:
            group.wait()
            if group.error is not None:  # each waiter raises its own copy (own traceback)
                raise copy.copy(group.error).with_traceback(None) from group.error
        spare = commit.spare
        if len(spare) < _SPARE_MEMBERS and self._request is None:  # (done with: the next write's)
            spare.append(self)


_SPARE_MEMBERS: Final = 8
"""members kept for the next writes (``_GroupCommit.spare``): a writer's turn that ended well
leaves its member there, so a write makes and drops none — each drop a call of ``__del__``"""


class _Requesting(_Member):
    """The turn of a writer with a memory patch (``SqliteStore.patch_on_server``)."""

    __slots__ = ("_request",)

    def __init__(self, commit: _GroupCommit, request: Request) -> None:
        super().__init__(commit)
        self._request = request


class _Pending:
    """What waits for a transaction's commit: answers to the requests of other processes it
    wrote (ticket, request id, answer, the short answer sent where it does not fit — None: none
    then), sent before the turn is let go; then what else waits (the caches
    fed with what the requests wrote, their files removed). Dropped if it does not commit."""

    __slots__ = ("after", "answers", "before", "folded", "held", "written")

    def __init__(self) -> None:
        self.before: bytes | None = None
        """the WAL-index header under the write lock, before the commit, where a requesting
        turn's documents are to be handed on (``SqliteStore._in_turn``)"""
        self.answers: list[tuple[int, str, bytes, bytes | None]] = []
        self.after: list[Callable[[], None]] = []
        self.written: list[Fresh] = []
        """what each write of the transaction left, in order"""
        self.held: writer_requests.Held = {}
        """the documents as the first ``folded`` of those writes left them, where planned whole
        (built only once a request follows: ``SqliteStore._held``)"""
        self.folded = 0


class _GroupCommit:
    """Group commit on the shared writer connection.

    Writers take ``lock`` in turn. The first of a group begins the transaction; each runs its
    statements in a savepoint (a failing writer rolls back only its own work); the writer that
    finds nobody queued behind it — or fills the group — commits for all and wakes them.
    """

    def __init__(
        self, connect: Callable[[], sqlite3.Connection], max_group: int, queue: WriterQueue, wait: float
    ) -> None:
        self.lock = threading.Lock()
        self.wait = wait
        """seconds a writer waits for its turn (this process's and the other processes' writers)"""
        self.queue = queue
        self._connect = connect
        self._conn: sqlite3.Connection | None = None
        self._tx: _SqliteTx | None = None
        self._max = max(1, max_group)
        self._queued = 0
        self._queued_lock = threading.Lock()
        self._group = _Group()
        self._recovering = threading.Lock()
        self.owner: tuple[weakref.ref[_Member], FrameType, int] | None = None
        """the writer whose turn it is, the frame of its ``with`` and its thread, from the turn
        taken to the turn let go (``orphaned``)"""
        self.holder: int | None = None
        """the thread whose turn it is, from its transaction's begin to its ``__exit__`` (a
        thread inside one of our writes: ``holder == _get_ident()``; a plain attribute, not a
        ``threading.local``'s, whose every set and get looks up the thread's dict)"""
        self.pending: _Pending | None = None
        """what waits for the open transaction's commit (requests of other processes it wrote)"""
        self.watch: _CommitWatch | None = None
        """the database's WAL-index header (``SqliteStore`` sets it): what a turn hands on is
        current while it stays the one the turn's commit left"""
        self.too_new: Callable[[int], StateflowError] | None = None
        """once the store is found migrated: the refusal of a schema version past this
        release's (each group checks the version under the write lock)"""
        self.replaced: StateflowError | None = None
        """set once the store's path was found to name another file than the one this process's
        connections have open (``SqliteStore._refuse_if_replaced``): every group refuses then"""
        self.checked: int | None = None
        """the WAL-index change counter (``iChange``, see ``_after``) the last group's commit
        made, its schema version found current: a group that finds it reads no version"""
        self.spare: list[_Member] = []
        """members whose turn ended well, each taken again by a write (``SqliteStore._write_tx``)"""
        self.commits = 0
        """groups committed so far (for tests and benchmarks)"""
        self.largest = 0
        """the most writers one committed group carried"""

    def tx(self, conn: sqlite3.Connection) -> _SqliteTx:
        """The writer connection's transaction facade, kept from one group to the next (its
        cursor with it), for the thread whose turn it is."""
        tx = self._tx
        if tx is None or tx.conn is not conn:
            tx = self._tx = _SqliteTx(conn)
        return tx

    def orphaned(self) -> bool:
        """Whether the turn is held for a writer no longer running: stopped (a
        KeyboardInterrupt) as its ``__exit__``, or the ``_settle`` that lets the turn go, was
        called, before any of it ran — where no ``finally`` reaches. The frame of its ``with`` is
        then no longer on its thread's stack (its thread may be gone too). A writer still in its
        turn has it there from the turn taken to the turn let go, and a turn held for none can
        be taken again only through ``recover``: what is seen cannot change under the caller."""
        owner = self.owner
        if owner is None or owner[2] != _get_ident():
            # another thread's turn is never judged from here: reading its stack takes
            # ``sys._current_frames()``, which holds the interpreter's thread list locked while it
            # allocates — a collection then running a finalizer that lets the GIL go deadlocks
            # every thread (seen with writers in several threads). A KeyboardInterrupt lands in the
            # main thread, whose own next call (or the writer's ``__del__``) ends such a turn
            return False
        frame: FrameType | None = sys._getframe()
        while frame is not None:
            if frame is owner[1]:
                return False
            frame = frame.f_back
        return True

    def recover(self, member: _Member | None = None) -> None:
        """End an ``orphaned`` turn — or ``member``'s, which is being dropped while it holds
        the turn — as its writer's ``__exit__`` would have, had it failed: its own work rolled
        back, what other writers of its group kept committed, the turn let go."""
        with self._recovering:
            owner = self.owner
            if owner is None:  # (recovered meanwhile)
                return
            if member is None:
                if not self.orphaned():
                    return
                member = owner[0]()
            elif owner[0]() is not member:
                return
            self.holder = None
            try:
                if member is not None:
                    member._undo()
            finally:
                self._settle(self._group, False)

    def forget(self) -> None:
        """Drop the kept transaction facade (its cursor with it): the connection is closing."""
        self._tx = self._conn = None

    def take_last_turn(self) -> None:
        """Take the turn and keep it (a store closing). A group left open for writers queued
        behind it — its members' work uncommitted, each waiting for a later writer to commit it —
        is committed for them first: closing its connection would roll back writes that their
        writers are then told were made."""
        while True:
            if self.orphaned():
                self.recover()
            self.lock.acquire()
            conn = self._conn
            if conn is None or not conn.in_transaction:
                return
            if not self._group.members:  # (no writer's work in it: nothing to keep)
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                return
            self._settle(self._group, False)  # commits what the group holds, lets the lock go

    def waiting(self) -> _Pending:
        """What waits for the open transaction's commit (made on first use)."""
        pending = self.pending
        if pending is None:
            pending = self.pending = _Pending()
        return pending

    def _settled(self, pending: _Pending, committed: bool, lone: bool) -> None:
        """Let the turn go, answering first and running what waited afterwards — only if the
        transaction committed (else its requests' writers write them themselves)."""
        self.pending = None
        try:
            self._answer(pending, committed, lone)
        finally:  # (even if stopped midway: a turn kept would stop every other process's writers)
            self.queue.release()
        if committed:
            for then in pending.after:
                then()

    def _answer(self, pending: _Pending, committed: bool, lone: bool) -> None:
        """Hand on and answer what a committed transaction wrote for other processes."""
        if committed:  # (before the turn goes: an answered writer then needs no turn)
            # the documents as the commit left them, for the next turn's own patch (no read):
            # before the answers, while no other turn can begin (an answered writer lets its
            # ticket go at once, and the queue goes on past this turn's); only from a turn alone
            # in its group (what other writers of this process wrote is not among its written)
            before, watch, data = pending.before, self.watch, None
            header = None if before is None or watch is None or not lone else _after(before, watch.version())
            if header is not None and pending.written:
                data = writer_requests.handed_on(SqliteStore._held(pending), writer_queue.HANDED_MAX)
            self.queue.hand_on(None if data is None else header, data or b"")
            # the last ticket first: an answered writer lets its ticket go at once, and the one
            # behind it must find its own answer there by then, not only the wake-up
            for ticket, request, answer, fallback in reversed(pending.answers):
                self.queue.answer(ticket, request, answer, fallback)

    def _settle(self, group: _Group, ok: bool) -> bool:
        """A writer is done with its turn, its work kept in the group (``ok``) or not: called
        under ``lock``, which it lets go. Commit the group unless more are queued. True: the
        writer waits for the group's commit (``group.wait``) and then reads its ``error``;
        False: the group was this writer's alone and its commit is done (its error raised here,
        to a writer whose work stayed). (One method, not a second one that only counts and lets
        ``lock`` go around it: this runs on every commit.)

        A writer that failed while the group holds work commits it at once: the failure is most
        likely a conflict with that uncommitted work, and a retry must see it committed (else
        retrying writers could keep the group open, and each other waiting, forever).

        Stopped anywhere in here (a KeyboardInterrupt), it still ends the transaction — committed
        or rolled back, never left open —, lets the queue and ``lock`` go and wakes the group's
        waiters (told so where their work was rolled back)."""
        try:
            group.attempts += 1
            # (read without its lock: a writer counting itself in just now is missed at worst, and
            # then begins the next group; a count going down needs ``lock``, which we hold)
            conn = self._conn
            if (
                self._queued > 0
                and group.attempts < self._max
                and conn is not None
                and (conn.in_transaction or not group.members)  # (the group can still be joined)
                and (ok or not group.members)  # (a failed writer commits what the group holds)
            ):
                return True  # the next writer joins this group
            # A group only this writer ran in (the common case of a writer alone) was seen by
            # nobody else — a writer takes ``_group`` under ``lock`` and counts itself in before
            # letting go — so it stays the next group's, with no lock made, released or waited on,
            # and its error goes to this writer directly.
            lone = group.attempts == 1
            if not lone:
                self._group = _Group()
            error: StateflowError | None = None
            try:
                try:
                    if conn is None:
                        raise StoreUnavailable("the writer connection could not be opened")
                    if group.members and not conn.in_transaction:
                        raise StoreUnavailable("SQLite rolled the shared write transaction back")
                    if conn.in_transaction:
                        if not group.members:  # (no writer's work kept in it: a failed writer's)
                            conn.execute("ROLLBACK")
                        else:
                            (self._tx or self.tx(conn)).cursor.execute("COMMIT")
                            self.commits += 1
                            if group.members > self.largest:
                                self.largest = group.members
                except (sqlite3.Error, StateflowError) as exc:
                    if conn is not None:
                        with suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                    error = exc if isinstance(exc, StateflowError) else _mapped(exc)
                    if lone and ok:  # (a failed writer's own exception goes on instead)
                        if error is exc:
                            raise
                        raise error from exc
                except BaseException:  # stopped (KeyboardInterrupt): what is not committed is not kept
                    if conn is not None and conn.in_transaction:
                        with suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                        error = StoreUnavailable(
                            "the commit was interrupted in another thread of this process; nothing was written"
                        )
                    raise
            finally:
                try:
                    try:
                        if self.pending is None:
                            self.queue.release()
                        else:  # (it waits on work in the transaction: committed if none is left open, unfailed)
                            self._settled(
                                self.pending,
                                error is None and conn is not None and not conn.in_transaction,
                                lone,
                            )
                    except BaseException:  # (not a ``finally``: a turn let go holds nothing to ask of)
                        if self.queue.held:  # (stopped in there before it let the turn go: once more)
                            self.queue.release()
                        raise
                finally:
                    if lone:
                        group.attempts = group.members = 0
                    else:
                        group.error = error
                        group._done.release()  # (``finish``, inline: no call to be stopped at)
            return not lone
        finally:
            self.owner = None
            self.lock.release()


def _after(before: bytes, after: bytes | None) -> bytes | None:
    """``after``, the WAL-index header read just after a commit, if it is that commit's: its
    change counter (``iChange``, bytes 8–11 in the machine's order, bumped by every commit and
    nothing else) one past ``before``'s, read under the write lock just before it — not
    another process's commit that came in between."""
    if after is None:
        return None
    counted = int.from_bytes(before[8:12], sys.byteorder)
    return after if int.from_bytes(after[8:12], sys.byteorder) == (counted + 1) & 0xFFFFFFFF else None


@dataclass
class _Snapshot:
    version: object
    docs: dict[DocKey, Document] = field(default_factory=dict)
    derived: dict[Hashable, Any] = field(default_factory=dict)


def _current(snapshot: _Snapshot | None, version: object) -> _Snapshot:
    """``snapshot`` if it still holds the data at ``version`` (and is not full), else a new one."""
    if (
        snapshot is None
        or snapshot.version != version
        or len(snapshot.docs) + len(snapshot.derived) > SNAPSHOT_CACHE_DOCS
    ):
        return _Snapshot(version)
    return snapshot


_GETLK: Final[int | None] = getattr(fcntl, "F_OFD_GETLK", None)
_FLOCK = struct.Struct("hhqqi4x")
"""``struct flock`` of 64-bit Linux: type, whence, start, length, pid"""
_WRITE_LOCK: Final = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 120, 1, 0)
"""a write lock on the WAL write lock's byte of the ``-shm`` file (``WALINDEX_LOCK_OFFSET``)"""
_UNLOCKED: Final = _FLOCK.pack(fcntl.F_UNLCK, 0, 0, 0, 0)[:2]


class _CommitWatch:
    """Tells commits apart by the WAL-index header in the database's ``-shm`` file.

    Every commit — by any connection of any process — rewrites that 48-byte header (its change
    counter, last frame, checksums), and SQLite keeps two copies of it to detect a torn read:
    this is the WAL-index format SQLite documents for its unix and windows VFSes. Reading the
    mapped header is a memory read — no system call, no lock, no GIL hand-off, unlike asking
    ``PRAGMA data_version``, which is what callers fall back to whenever this answers None
    (no ``-shm`` file yet, or the two copies differ mid-update).
    """

    def __init__(self, path: Path) -> None:
        self._path = Path(f"{path}-shm")
        self._map: mmap.mmap | None = None
        self._words: memoryview | None = None
        """the header's 32-bit fields, native order as SQLite writes them (``change_count``)"""
        self._fd: int | None = None
        """Kept open until the store closes, after its connections: closing any descriptor of
        a file drops every POSIX lock this process holds on it — here SQLite's own locks on the
        ``-shm`` file, which let another process truncate it under our connections (SIGBUS in
        a mapping) or recover the WAL index while we use it (``locking protocol``)."""

    def version(self) -> bytes | None:
        header = self._map
        if header is None:
            try:
                if self._fd is None:
                    self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
                header = self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # not there yet, or still empty
                return None
        if len(header) < 96:
            return None
        first = header[:48]
        return first if first == header[48:96] else None

    def change_count(self) -> int | None:
        """The header's change counter (``iChange``, see ``_after``) where both copies agree;
        None where ``version`` would answer None. Two items of a view of the mapped header,
        where ``version`` copies it twice and an ``int.from_bytes`` of a slice parses the
        order's name (~3,300 instructions, on every group's begin)."""
        words = self._words
        if words is None:
            if self.version() is None:  # (maps the file: not there yet, or torn)
                return None
            header = self._map
            if header is None:
                return None
            words = self._words = memoryview(header)[:96].cast("I")
        count = words[2]
        return count if count == words[14] else None

    def write_locked(self) -> bool:
        """Whether a connection — of this process or another — holds SQLite's WAL write lock
        (byte 120 of the ``-shm`` file, the lock SQLite documents for its unix VFS): asked
        with one system call on the descriptor kept here, never one opened and closed (a
        close would drop this process's locks on the file). False where it cannot be told
        (no ``-shm`` file yet, no open-file-description locks)."""
        if _GETLK is None:
            return False
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return False
        try:
            answer = fcntl.fcntl(self._fd, _GETLK, _WRITE_LOCK)
        except OSError:
            return False
        return answer[:2] != _UNLOCKED

    def close(self) -> None:
        """Only once the store's connections are closed (see ``_fd``)."""
        if self._words is not None:
            self._words.release()  # (a mapping with a view of it cannot be closed)
            self._words = None
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _Reader:
    """A thread's reading connection, and how many of that thread's calls are using it now.

    Only the owning thread changes ``busy`` (no lock on the read path); :meth:`SqliteStore.close`
    reads it: closing a connection while another thread runs a statement on it crashes
    CPython's ``sqlite3`` module.
    """

    __slots__ = ("busy", "conn", "thread")

    def __init__(self, conn: sqlite3.Connection, busy: int = 0) -> None:
        self.conn = conn
        self.busy = busy
        self.thread = _get_ident()


class SqliteStore(SqlStore):
    holds_sql: ClassVar[str | None] = "instr(body, ?) > 0"
    times_as_micros: ClassVar[bool] = True
    transition_keys: ClassVar[bool] = True
    whole_form: ClassVar[bool] = True
    counts_in_transitions: ClassVar[bool] = True
    change_row_max: ClassVar[int | None] = CHANGE_ROW_MAX
    # the optimistic commit checks that no document moved in its one statement, two parameters
    # a document (``ledger.checked_transition``): within SQLite's 32,766 as every other statement
    optimistic_documents_max: ClassVar[int | None] = ROWS_PER_QUERY

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        auto_migrate: bool = True,
        max_group: int = DEFAULT_MAX_GROUP,
        create: bool = True,
        read_only: bool = False,
        wal_pages: int = WAL_PAGES,
    ) -> None:
        """``create=False`` refuses a missing file instead of creating it (and its directory);
        ``read_only=True`` never writes (a read-only file or directory is opened that way by
        itself); ``wal_pages``: the WAL frames at which a commit checkpoints the log
        (``sqlite_file.keep_wal_bounded``)."""
        super().__init__()
        if synchronous.lower() not in SYNCHRONOUS_MODES:
            raise UnsupportedStore(
                f"synchronous={synchronous!r} is not supported; use one of {SYNCHRONOUS_MODES}"
            )
        self.path = Path(path).expanduser()
        # absolute: ``sqlite:///team.db`` would name /team.db, not the file opened here
        self.url = f"sqlite:///{os.path.abspath(self.path)}"
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = busy_timeout_ms
        if wal_pages < 1:
            raise UnsupportedStore(f"wal_pages={wal_pages!r}: a checkpoint threshold of at least 1 page")
        self.wal_pages = wal_pages
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._readers: list[_Reader] = []
        """every thread's reading connection (``_enter``), for :meth:`close` to wait for"""
        self._kept: list[_Reader] = []
        """readers still in a call when :meth:`close` stopped waiting: each call closes its
        connection as it ends (``_left``), the last one the files' holds"""
        self._guard = threading.Lock()
        self._writer_conn: sqlite3.Connection | None = None
        self._watch = _CommitWatch(self.path)
        self._shared: _Snapshot | None = None
        self._group = _GroupCommit(self._writer, max_group, WriterQueue(self.path), busy_timeout_ms / 1000)
        self._group.watch = self._watch
        # once the store is found migrated, each group commit checks that no newer release
        # migrated it since (``_Member``)
        self.when_migrated(partial(setattr, self._group, "too_new", self._too_new))
        self._spares = writer_requests.SpareFiles(self.path)
        weakref.finalize(self, self._spares.drop)  # (at exit too: a store left open)
        self._swept = -writer_requests.SWEEP_EVERY
        """the ticket of this store's last sweep of request files left behind"""
        self._spare_ids = IdBlocks()
        """document ids reserved ahead (``_absent_rows``), for rows a commit creates"""
        self._unborn: dict[int, DocKey] = {}
        """ids handed out by ``_absent_rows`` whose rows the commit writing them creates"""
        self._file_hold: tuple[int, int] | None = None
        """the file as marked held by this process's connections (``sqlite_file.hold``)"""
        self._closed = False
        """set by :meth:`close`: no connection is opened again"""
        self.create = create and not read_only
        self.read_only = read_only
        self.asked_read_only = read_only
        """opened read-only by request (``read_only``), not for want of permission"""
        if auto_migrate and not read_only and (not self.path.exists() or _writable(self.path)):
            self._auto_migrate()

    def _enter(self) -> _Reader:
        """This thread's connection, marked in use until :meth:`_leave` (which every caller
        runs in a ``finally``) — or the writer's, inside one of our write transactions (the
        turn keeps :meth:`close` away from it). Refused once the store is closing: marked
        first, then checked, so a close that found the mark unset finds no call using the
        connection after."""
        group, me = self._group, _get_ident()
        if group.holder == me:
            if not group.orphaned():
                return _Reader(self._writer(), 1)
            group.recover()
        owner = group.owner
        if owner is not None and owner[2] == me and group.orphaned():  # (see ``_GroupCommit.orphaned``)
            group.recover()
        reader: _Reader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._local.reader = self._new_reader()
        reader.busy += 1
        if self._closed:
            self._leave(reader)
            raise self._closed_error()
        return reader

    def _leave(self, reader: _Reader) -> None:
        reader.busy -= 1
        if self._closed:  # (a close began: it may have left this connection to this call)
            self._left(reader)

    def _new_reader(self) -> _Reader:
        reader = _Reader(self._open())
        with self._guard:
            if self._closed:  # (a close under way did not see it: nothing uses it)
                reader.conn.close()
                raise self._closed_error()
            self._readers.append(reader)
        return reader

    def _refuse_if_replaced(self) -> None:
        """Refuse (``store-unavailable``) once the store's path names another file than the one
        this process's connections opened, or none: a copy renamed over it, as a restore does,
        while this process runs. The open connections would go on writing to the unlinked old
        file, and new ones read the new file. Once found, every write is refused too."""
        held = self._file_hold
        if held is None:
            return
        # (no attribute of its own: one more on the store slows every attribute read of it)
        where = self.url.removeprefix("sqlite:///")  # absolute, as first opened
        if self._group.replaced is None:
            try:
                now = os.stat(where)
            except FileNotFoundError:
                pass
            else:
                if (now.st_dev, now.st_ino) == held:
                    return
            self._group.replaced = StoreUnavailable(
                f"the store file {where} was replaced or removed while this process had it "
                "open (a restore must stop every process that uses the store first); nothing was "
                "written: restart this process to use the file now in place"
            )
        raise copy.copy(self._group.replaced).with_traceback(None)

    def unwritable(self) -> str | None:
        if self.asked_read_only:
            return "it is opened read-only (mode=ro)"
        if self.path.exists() and not _writable(self.path):
            return f"{self.path} or its directory is not writable by this process"
        return None

    def schema_version(self) -> int | None:
        # (what a readiness probe asks: a server whose file was replaced is not ready)
        self._refuse_if_replaced()
        return super().schema_version()

    def _closed_error(self) -> StoreUnavailable:
        return StoreUnavailable(f"the store at {self.path} was closed: open it again to use it")

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _open(self, *, writer: bool = False) -> sqlite3.Connection:
        """A connection to the file: the ``writer``'s puts the file in WAL mode (and its
        durability and checkpoint settings), a reader's changes nothing — a store only read
        (``check``, ``dump``, a read) leaves the file as it found it, so a backup (a
        rollback-journal file) checked before it is put back is still refused beside a stale
        ``-wal`` (``docs/operations.md``)."""
        self._refuse_if_closed()
        exists = preflight(self.path)
        if not exists and not self.create:
            raise StoreNotFound(f"no store at {self.url} (nothing was created; check --store)")
        if not exists:
            _create(self.path)
        if self._file_hold is None:  # before the first connection takes its locks (``preflight``)
            self._file_hold = hold(self.path)
        read_only = self.read_only or not _writable(self.path)
        with _mapped_errors():
            if read_only:
                try:
                    conn = connect_read_only(self.path, timeout=self.busy_timeout_ms / 1000)
                except sqlite3.OperationalError as exc:
                    raise _denied(self.path) or _mapped(exc) from exc
                self.read_only = True
            else:
                conn = self._connect()
                conn.execute("PRAGMA schema_version").fetchone()  # reads the header: damage shows here
                if writer:
                    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                    if str(mode).lower() != "wal":
                        raise StoreUnavailable(f"{self.path}: cannot switch to WAL mode (got {mode})")
                    conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                    keep_wal_bounded(conn, self.wal_pages)
            # (the writer's: a slice, its ``BEGIN IMMEDIATE`` waiting out the rest in Python —
            # the only statement of its that meets a lock: in WAL mode a commit, and the
            # checkpoint a commit may run, wait for none)
            busy_ms = min(int(self.busy_timeout_ms), WAIT_SLICE_MS) if writer else int(self.busy_timeout_ms)
            conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
            conn.execute("PRAGMA foreign_keys = ON")
            # each b-tree page's cells are checked as the page is read, so a write that runs into
            # mid-file damage fails (corrupt-store) instead of building on it; costs a few
            # percent at most (benchmarks/bench_damage_checks.py), unlike a whole-file check
            conn.execute("PRAGMA cell_size_check = ON")
        with self._guard:
            if self._closed:  # (a close under way did not see it: nothing uses it)
                conn.close()
                raise self._closed_error()
            self._all.append(conn)
        return conn

    def _connect(self) -> sqlite3.Connection:
        try:
            return sqlite3.connect(
                self.path,
                isolation_level=None,
                timeout=self.busy_timeout_ms / 1000,
                check_same_thread=False,  # the writer is shared; the group lock serializes it
            )
        except sqlite3.Error as exc:
            raise _denied(self.path) or StoreUnavailable(f"cannot open {self.path}: {exc}") from exc

    @contextmanager
    def _read_tx(self) -> Iterator[Tx]:
        reader = self._enter()
        try:
            conn = reader.conn
            if conn.in_transaction:  # nested use inside one of our transactions: join it
                yield _SqliteTx(conn)
                return
            tx = _SqliteTx(conn)
            try:  # (BEGIN inside: a read stopped right after it must not keep its snapshot open)
                with _mapped_errors():
                    tx.cursor.execute("BEGIN")
                yield tx
            finally:
                with suppress(sqlite3.Error):  # a read transaction has nothing to keep
                    tx.cursor.execute("ROLLBACK")
        finally:
            reader.busy -= 1  # (``_leave``, inline: the read path is hot)
            if self._closed:
                self._left(reader)

    def _write_tx(self) -> AbstractContextManager[Tx]:
        """A write joins the current group: its statements run in a savepoint of the shared
        writer transaction; the last writer of a group commits it, and every writer returns
        once that commit (and its fsync) is done. One fsync serves every writer that queued
        while the previous group was committing."""
        if self._group.holder == _get_ident():  # nested inside our own write: join it
            if not self._group.orphaned():
                return nullcontext(self._group.tx(self._writer()))
            self._group.recover()
        try:  # (a member whose turn ended well: no member made and dropped for each write)
            return self._group.spare.pop()
        except IndexError:
            return _Member(self._group)  # (the group's ``holder`` while inside)

    def write_lock_held(self) -> bool:
        """Whether a write begun now would wait for its turn: this process's writers are in
        one, or another connection (any process's: a writer, ``sqlite3``, a backup) holds the
        file's write lock. A look, not a claim — a moment later it may differ; an edge asks
        it to keep a lone write that would wait off its event loop's thread."""
        return self._group.lock.locked() or self._watch.write_locked()

    def _writer(self) -> sqlite3.Connection:
        if self.read_only:
            raise StoreReadOnly(f"{self.url} is open read-only: nothing can be written")
        if self._writer_conn is None:
            self._writer_conn = self._open(writer=True)
        return self._writer_conn

    def _claim(
        self,
        tx: Tx,
        shared: Sequence[DocKey],
        locked: Sequence[DocKey],
        claims: Sequence[tuple[str, str]] = (),
    ) -> tuple[dict[DocKey, DocRow], dict[DocKey, DocRow]]:
        # The write transaction already excludes every other writer: one query reads all rows;
        # only documents seen for the first time need an insert.
        if claims and (taken := tx.all(*claims_query(claims))):
            raise OpIdTaken({(r[0], r[1]) for r in taken})
        found = self._rows(tx, [*shared, *locked])
        rows = {key: found[key] for key in shared if key in found}
        mine = {key: found.get(key) or SqlStore._lock(self, tx, key) for key in locked}
        return rows, mine

    def _lock(self, tx: Tx, key: DocKey) -> DocRow:
        # Here too the write transaction is the lock: an existing row is only read. (The upsert
        # that creates a row would draw a new AUTOINCREMENT id, and write sqlite_sequence's
        # page, on every call — even when the row exists.)
        return self._row(tx, key) or super()._lock(tx, key)

    def _absent_rows(self, keys: Sequence[DocKey]) -> dict[DocKey, DocRow] | None:
        # The rows get ids from a block reserved ahead and are created whole by the commit that
        # writes them (``_commit_planned``): no statement reads or creates them first, and the
        # row is written once (present, at its revision) instead of inserted, then updated.
        if self._group.holder == _get_ident():
            return None  # inside a write of our own: its row locks decide (the locked path)
        ids = self._reserve(len(keys))
        if ids is None:
            return None
        unborn = self._unborn
        if len(unborn) > UNBORN_MAX:
            unborn.clear()  # ids of writes that never committed: only spent
        rows = {}
        for key, doc_id in zip(keys, ids, strict=True):
            unborn[doc_id] = key
            rows[key] = DocRow(doc_id, 0, False, None, 0, 0, 0, 0)
        return rows

    def _reserve(self, n: int) -> list[int] | None:
        """``n`` document ids nobody else will take (:meth:`_reserve_block`); None before the
        first document exists."""
        return self._spare_ids.take(n, self._reserve_block)

    def _reserve_block(self, size: int) -> range | None:
        """A block of ids reserved in a transaction of its own (only when none is on hand: a
        creating commit reserves the next block in its own transaction, ``_commit_planned``)."""
        with self._write_tx() as tx:
            return _reserved(tx, size)

    def _commit_planned(
        self,
        locked: Sequence[tuple[DocKey, DocRow]],
        shared: Sequence[tuple[DocKey, DocRow]],
        claims: Sequence[tuple[str, str]],
        origin: dict[str, Any],
        plans: Sequence[WritePlan],
    ) -> tuple[int, str] | None:
        unborn = self._unborn
        # (no id reserved ahead and not yet committed, as in most writes: nothing to look up)
        created = (
            {row.doc_id: key for key, row in locked if unborn.pop(row.doc_id, None) is not None}
            if unborn
            else None
        )
        if not created:
            return super()._commit_planned(locked, shared, claims, origin, plans)
        inserted = set()
        for plan in plans:
            plan.created = key = created.get(plan.doc_id)
            if key is not None:
                inserted.add(plan.doc_id)
        if self._group.holder == _get_ident():  # (inside a write of our own: never, in the product)
            # checked to have no row still, in the transition's insert: a failing insert of the
            # row would end the enclosing write, which is not this commit's to end
            locked = [(key, NO_ROW if row.doc_id in created else row) for key, row in locked]
            return super()._commit_planned(locked, shared, claims, origin, plans)
        # a created row is checked by its own insert, not by the transition's: the documents'
        # UNIQUE (state, subject) refuses a key that has a row by now (another store created it),
        # and that refusal ends this commit's turn rolled back — its transition with it, nothing
        # written —, where a NOT EXISTS in the transition's insert sought the key in the index
        # once more on every creating commit. A row found absent that no plan writes (a scope a
        # memory patch reads but leaves alone) is still checked to have none: nothing inserts it
        locked = [
            (key, row if row.doc_id not in created else NO_ROW)
            for key, row in locked
            if row.doc_id not in inserted
        ]
        try:
            if self._spare_ids.left() < REFILL_BELOW:
                return self._commit_refilling(locked, shared, claims, origin, plans)
            return super()._commit_planned(locked, shared, claims, origin, plans)
        except StoreError as exc:
            if _created_elsewhere(exc):
                return None  # (nothing written: the locked path decides, on the row that exists)
            raise

    def _commit_refilling(
        self,
        locked: Sequence[tuple[DocKey, DocRow]],
        shared: Sequence[tuple[DocKey, DocRow]],
        claims: Sequence[tuple[str, str]],
        origin: dict[str, Any],
        plans: Sequence[WritePlan],
    ) -> tuple[int, str] | None:
        """A creating commit that also reserves the next block of ids, in its own transaction:
        a block reserved apart costs a transaction of its own — a turn, SQLite's locks, a frame
        and an ``fsync`` every block of new documents. The ids are taken only once the
        transaction has committed (rolled back, they were never reserved)."""
        block: range | None = None
        with self._write_tx() as tx:  # (the commit's own ``_write_tx`` joins it)
            done = super()._commit_planned(locked, shared, claims, origin, plans)
            if done is not None:
                block = _reserved(tx, self._spare_ids.next_size())
        if block is not None:
            self._spare_ids.add(block)
        return done

    # ------------------------------------------------- memory patches merged by one turn for all

    def contended(self, keys: Sequence[DocKey]) -> bool:
        """Whether ``patch_on_server`` would take a patch of ``keys`` now: another writer's
        commit beat one of this store's a moment ago, and the writer queue works here."""
        return not self.read_only and not self._group.queue.unusable and self._is_contended(keys)

    def patch_on_server(
        self,
        keys: Sequence[DocKey],
        patches: Mapping[DocKey, bytes],
        members: Sequence[str],
        outlines: Sequence[str],
        origin: dict[str, Any],
    ) -> Served | None:
        """A memory patch of ``memory.served``'s case, merged by the writer whose turn comes
        first (``writer_requests``): published while this writer waits for its turn; answered
        by an earlier turn that committed it, or written in this writer's own turn (taking the
        requests queued right behind it into the same commit). None: not done so, nothing
        written (the caller runs ``update``)."""
        locked = sorted(set(keys), key=lock_order)
        if not self.contended(locked) or self._group.holder == _get_ident():
            return None
        self.check_schema()
        request = Request.new(self._spares, locked, patches, members, outlines, origin)
        try:
            member = _Requesting(self._group, request)
            with member as tx:
                done = self._in_turn(tx, request, member._first)
        except Answered as answered:
            request.forget()  # (its file: this writer's next spare)
            done = None
            decoded = writer_requests.answered(answered.answer, locked)
            if decoded is not None:
                seq, at, revisions, docs, paths = decoded
                done = Served(Commit(applied=True, seq=seq, at=at, revisions=revisions), docs, paths)
        except RequestTaken:
            done = self._taken_outcome(request)
        except StoreBusy:
            # (SQLite's write lock not had in this writer's turn) a request taken by an earlier
            # turn is that turn's: committed or not, once its transaction is over
            if request.withdraw():
                raise
            done = self._taken_outcome(request)
        except NotMerged:  # not the common case after all: nothing written, the caller's ``update``
            return None
        if done is None:  # committed, with the basis too large to send: read back
            done = self._read_back(request)
        self._served_contended(done)
        return done

    def _in_turn(self, tx: _SqliteTx, request: Request, first: bool) -> Served | None:
        """This writer's turn, with its request: taken by an earlier turn that committed it
        (found claimed: None, read back), or written here; then the requests queued right behind
        this turn written into the same transaction (``_take_behind``)."""
        if not request.withdraw():  # taken: that turn's commit, if any, is in the database now
            claimed = _claim_of(tx, request)
            request.forget()
            if claimed is not None:
                return None
        patches = {k: decode_trusted(p) for k, p in request.patches.items()}
        own = None
        data = self._group.queue.handed(self._watch.version()) if first else None
        if data is not None:  # nothing committed since the turn before handed its documents on
            own = self._merge_held(
                tx,
                writer_requests.held_of(data),
                writer_requests.Taken(
                    -1, "", request.keys, patches, request.members, request.outlines, request.origin
                ),
                (),
            )
        if own is None:
            own = self._merge(request.keys, patches, request.members, request.outlines, request.origin, ())
        if first:
            self._take_behind(tx)
            pending = self._group.pending
            if pending is not None:  # (under the write lock: the header until this commit)
                pending.before = self._watch.version()
        return own

    def _sweep(self, ticket: int) -> None:
        """In this store's turn, now and then (its first, then every ``SWEEP_EVERY`` tickets):
        the request files of earlier tickets, left behind by writers that died."""
        self._swept = ticket
        writer_requests.sweep(self.path, ticket)

    def _merge(
        self,
        keys: list[DocKey],
        patches: Mapping[DocKey, Any],
        members: list[str],
        outlines: list[str],
        origin: dict[str, Any],
        claims: Sequence[tuple[str, str]],
    ) -> Served:
        """One request written in the open transaction: its own transition."""
        merged: list[tuple[dict[DocKey, Document], dict[DocKey, bytes]]] = []

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            writes, paths = writer_requests.merged(docs, patches)
            merged[:] = [(docs, paths)]
            return writes, None

        # (swapped on this object, not checked on every write: one turn at a time holds it;
        # another thread's cache fill meanwhile is told apart in ``_after_commit``)
        self._remember = self._after_commit  # type: ignore[method-assign]
        try:
            commit, _ = self.update(
                keys, compute, origin, members=members, outlines=outlines, claims=claims, checked=True
            )
        finally:
            del self._remember
        [(docs, paths)] = merged
        return Served(commit, docs, paths)

    def _take_behind(self, tx: _SqliteTx) -> None:
        """Write the requests published right behind this turn, each in a savepoint (a failing
        one rolls back alone, gets no answer and is written by its own writer in its turn)."""
        behind = self._group.queue.behind()
        if behind is None:
            return
        if behind[0] >= self._swept + writer_requests.SWEEP_EVERY:
            self._sweep(behind[0])
        if behind[1] <= behind[0] + 1:
            return
        commit = self._group
        cursor = tx.cursor
        for taken in writer_requests.take(self.path, *behind):
            pending = commit.waiting()
            held = self._held(pending)
            after, answers, written = len(pending.after), len(pending.answers), pending.folded
            claims = [(writer_requests.SCOPE, taken.id)]
            cursor.execute("SAVEPOINT request")
            try:
                served = self._merge_held(tx, held, taken, claims) or self._merge(
                    taken.keys, taken.patches, taken.members, taken.outlines, taken.origin, claims
                )
            except Exception as exc:  # (whatever it is, it stays with the request: its writer writes it)
                if not tx.conn.in_transaction:  # it ended the whole transaction (SQLITE_FULL, IOERR)
                    if isinstance(exc, sqlite3.Error):
                        raise _mapped(exc) from exc
                    raise  # (the turn's own write is gone too: its caller gets the cause)
                served = None
            done = None if served is None else served.commit
            if done is None or done.seq is None:
                # failed, or it changes nothing: rolled back, claim and all (no transition to
                # claim); its held documents folded again from what stays
                del pending.after[after:], pending.answers[answers:], pending.written[written:]
                pending.held, pending.folded = {}, 0
                cursor.execute("ROLLBACK TO request")
            cursor.execute("RELEASE request")
            if served is None or done is None:
                continue
            # a request that changes nothing is answered whole or not at all (its writer then
            # merges it in its own turn): it has no claim for a short answer to point to
            pending.answers.append(
                (
                    taken.ticket,
                    taken.id,
                    writer_requests.answer(
                        taken.keys, served.docs, served.paths, done.seq, done.at, done.revisions
                    ),
                    None if done.seq is None else writer_requests.COMMITTED,
                )
            )

    def _merge_held(
        self,
        tx: _SqliteTx,
        held: writer_requests.Held,
        taken: writer_requests.Taken,
        claims: Sequence[tuple[str, str]],
    ) -> Served | None:
        """A request merged on its documents as the writes before it in this transaction left
        them (``held``: no read, no lock query — the turn holds SQLite's write lock) and planned
        as the locked path's common case plans it (``_plan_made``): its claim, its own
        transition. None where a document is not held so or the plan declines (nothing
        written: the locked path, ``_merge``, decides)."""
        entries = {}
        for key in taken.keys:
            entry = held.get(key)
            if entry is None:
                return None
            entries[key] = entry
        docs = writer_requests.handed(entries, taken.members, taken.outlines)
        writes, paths = writer_requests.merged(docs, taken.patches)
        validate_writes(writes, taken.origin, values=False)  # (values: plain JSON, decoded)
        fresh = Fresh()
        fresh.rows.update((key, entry[0]) for key, entry in entries.items())
        fresh.at = utc_now()
        made = self._plan_made(writes, entries, (), fresh)
        if made is None:
            return None
        keys, plans = made
        self._record_claims(tx, claims, fresh.at)
        revisions = {w.key: entries[w.key][0].revision for w in writes}
        commit = self._commit_plans(tx, keys, plans, taken.origin, claims, revisions, fresh)
        self._after_commit(fresh)
        return Served(commit, docs, paths)

    def _taken_outcome(self, request: Request) -> Served | None:
        """The turn did not come (or SQLite's write lock did not) after an earlier turn took
        this request: that turn's transaction decides — once SQLite's write lock is free, the
        request is claimed (committed: None, read back) or not (nothing written: ``StoreBusy``).
        Still not free: :class:`WriteOutcomeUnknown` (that transaction may yet commit it)."""
        reader = self._enter()
        conn = reader.conn
        try:
            try:
                # waits for the holder's transaction to end: slice by slice, as a writer waits
                # (this connection's own busy timeout is the whole wait, in one C call where a
                # Ctrl-C is not acted on)
                conn.execute(f"PRAGMA busy_timeout = {min(int(self.busy_timeout_ms), WAIT_SLICE_MS)}")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as busy:
                    if not _is_busy(busy):
                        raise
                    _begin_waiting(conn.cursor(), busy, self._group.wait)
            except sqlite3.Error as exc:
                error = _mapped(exc)
                if not isinstance(error, StoreBusy):
                    raise error from exc
                raise WriteOutcomeUnknown(
                    f"another process's writer took this patch into its transaction and has held "
                    f"the write lock of {self.path.name} for over {self._group.wait:g} s since: "
                    "whether the patch is written is unknown — read the state before writing it again"
                ) from exc
            with _mapped_errors():
                claimed = _claim_of(_SqliteTx(conn), request)
        finally:
            try:
                # (stopped too — a Ctrl-C — just as the lock came: a reader keeps no write
                # transaction, and reads on with its own busy timeout)
                with suppress(sqlite3.Error):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            finally:
                reader.busy -= 1  # (``_leave``, inline: the read path is hot)
                if self._closed:
                    self._left(reader)
        request.forget()
        if claimed is None:
            raise StoreBusy(
                f"another process has held the write lock of {self.path.name} for over "
                f"{self._group.wait:g} s; nothing was written",
                retry_after=max(1, round(self._group.wait)),
            )
        return None

    def _read_back(self, request: Request) -> Served:
        """A request committed by another writer's turn, whose answer did not come whole: its
        transition found by its claim, the basis read as of the transition before."""
        with self._read_tx() as tx:
            row = _claim_of(tx, request)
        if row is None or row[0] is None:  # (a request that changes nothing is not claimed)
            raise StoreError(f"request {request.id} was answered but is not recorded")
        seq = int(row[0])
        names = [*request.members, *(n for n in request.outlines if n not in request.members)]
        docs: dict[DocKey, Document] = {}
        for key in request.keys:
            doc = self.read_at(key, seq=seq - 1, members=names)
            body = doc.body
            shapes = {}
            if body is not None:
                for name in request.outlines:
                    if name in body:
                        value = body[name]
                        shapes[name] = outline_of(value) if type(value) is dict else None
                body = {n: v for n, v in body.items() if n in request.members}
            docs[key] = Document(key, doc.revision, body, doc.seq, shapes)
        writes, paths = writer_requests.merged(
            docs, {k: decode_trusted(p) for k, p in request.patches.items()}
        )
        revisions = {w.key: docs[w.key].revision + 1 for w in writes}
        return Served(Commit(applied=True, seq=seq if writes else None, revisions=revisions), docs, paths)

    def _after_commit(self, fresh: Fresh) -> None:
        """``_remember`` while a request is merged: the caches take only committed data, and
        this transaction commits later, for every request it writes. (Swapped on the shared
        store: another thread's write, committed already, is remembered at once.)"""
        if self._group.holder != _get_ident():
            SqlStore._remember(self, fresh)
            return
        pending = self._group.waiting()
        pending.after.append(partial(SqlStore._remember, self, fresh))
        pending.written.append(fresh)

    @staticmethod
    def _held(pending: _Pending) -> writer_requests.Held:
        """The documents as the transaction's writes have left them, for the next request's
        merge (``_merge_held``): each as the last write planned it whole; one written otherwise,
        or holding a tree, is not held (the locked path reads it)."""
        held, written = pending.held, pending.written
        for fresh in written[pending.folded :]:
            heads = fresh.heads
            for key, row in fresh.rows.items():
                if not row.present:  # (no members: nothing to read)
                    held[key] = (row, None, {})
                    continue
                entry = heads.get(row.doc_id)
                if entry is not None and entry[0] == row.revision and entry[2] is not None:
                    if row.doc_id in fresh.roots:
                        held.pop(key, None)
                    else:  # (heads not made by the write: the body's, made now)
                        made = entry[1]
                        if made is None:
                            made = whole_heads(row.doc_id, row.revision, entry[2])
                        held[key] = (row, entry[2], made)
                    continue
                was = held.get(key)
                if was is None or was[0].doc_id != row.doc_id or was[0].revision != row.revision:
                    held.pop(key, None)  # (read only, at a revision held already: kept)
        pending.folded = len(written)
        return held

    # -------------------------------------------------------------- whole-document read cache

    def read(
        self,
        keys: Iterable[DocKey],
        members: Iterable[str] | Mapping[DocKey, Iterable[str] | None] | None = None,
        *,
        outlines: Iterable[str] = (),
    ) -> dict[DocKey, Document]:
        """Whole-document reads are served from the cache of the data as committed now (see
        ``_snapshot``); anything else — and every cache miss — reads the database."""
        keys = doc_keys(keys, "read")
        outline_names = list(outlines)
        if members is not None or outline_names:
            return super().read(keys, members, outlines=outline_names)
        reader = self._enter()
        try:
            conn = reader.conn
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
        finally:
            reader.busy -= 1  # (``_leave``, inline: the read path is hot)
            if self._closed:
                self._left(reader)

    def cached(self, key: Hashable, build: Callable[[], R]) -> R:
        """Values derived from the data are kept with the whole-document cache and dropped with
        it, as soon as anything commits."""
        reader = self._enter()
        try:
            conn = reader.conn
            if conn.in_transaction:
                return build()
            snapshot = self._snapshot(conn)
            try:
                return cast(R, snapshot.derived[key])
            except KeyError:
                pass
            value = build()
            # had something committed meanwhile, `snapshot` is already retired: storing is harmless
            snapshot.derived[key] = value
            return value
        finally:
            reader.busy -= 1  # (``_leave``, inline: the read path is hot)
            if self._closed:
                self._left(reader)

    def _snapshot(self, conn: sqlite3.Connection) -> _Snapshot:
        """The cache for the data as committed now: shared by every thread while the WAL-index
        header tells commits apart; per thread (by ``PRAGMA data_version``) otherwise."""
        header = self._watch.version()
        if header is not None:
            shared = self._shared = _current(self._shared, header)
            return shared
        try:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise _mapped(exc) from exc
        snapshot = self._local.snapshot = _current(getattr(self._local, "snapshot", None), version)
        return snapshot

    def _candidate_sql(
        self,
        tx: Tx,
        filters: dict[str, Any],
        bounds: Sequence[tuple[str, str, Any]] = (),
        probe: int = 4096,
        whole: bool = False,
    ) -> Candidates:
        # Scalar filter members (containment of a scalar is JSON equality) are checked in SQL,
        # one EXISTS on the member's primary key per document: no row leaves SQLite to be
        # decoded and compared in Python. Objects and arrays pass here and go to _verify. A
        # whole-form document (``whole``: the state may hold some) has no member rows: the same
        # check reads its member from its body, and no search starts from the value index.
        via = None if whole else self._selective(tx, filters, probe)
        clauses, params = [], []
        for name, pattern in filters.items():
            check = _scalar_check(pattern)
            if check is None or (via is not None and via[0] == name):
                continue  # (the members the search starts from hold the value: no check)
            member = (
                f"EXISTS (SELECT 1 FROM members m WHERE m.doc_id = d.doc_id AND m.name = ? AND {check[0]})"
            )
            params.extend([name, *check[1]])
            at = _in_body(name) if whole else None
            if at is None:
                # (a name no path spells: ``_checks_in_body`` leaves it to _verify)
                clauses.append(f"AND {member}" if not whole else f"AND (d.body IS NOT NULL OR {member})")
                continue
            in_body = _scalar_check(pattern, at)
            assert in_body is not None, "a scalar is checked in a body as in a member"
            clauses.append(f"AND CASE WHEN d.body IS NULL THEN {member} ELSE {in_body[0]} END")
            params.extend(in_body[1])
        # a bound keeps the members SQL reads a number or a string of (SQLITE_VALUE) on its
        # side, compared as SQLite orders them (numbers before text; text bytewise, which is
        # code point order), and every member it reads no value of; never strict: a number
        # SQLite reads rounded (from 2**63 up) may equal the operand rounded
        value = SQLITE_VALUE.format(m="m.")
        for name, op, operand in bounds:
            side = ">=" if op in ("$gt", "$gte") else "<="
            member = (
                "EXISTS (SELECT 1 FROM members m WHERE m.doc_id = d.doc_id AND m.name = ? "
                f"AND ({value} IS NULL OR {value} {side} ?))"
            )
            params.extend([name, _bound_operand(operand)])
            at = _in_body(name) if whole else None
            if not whole:
                clauses.append(f"AND {member}")
            elif at is None:
                clauses.append(f"AND (d.body IS NOT NULL OR {member})")
            else:
                kept = _value_sql(at)
                clauses.append(
                    f"AND CASE WHEN d.body IS NULL THEN {member} "
                    f"ELSE {at.kind} IS NOT NULL AND ({kept} IS NULL OR {kept} {side} ?) END"
                )
                params.append(_bound_operand(operand))
        return " ".join(clauses), params, via

    def _checks_in_body(self, name: str) -> bool:
        return _in_body(name) is not None

    def _sort_sql_whole(self, path: tuple[str, ...]) -> SortSql | None:
        member = self._sort_sql(path[1:])
        body = _body_sort(path)
        if member is None or body is None:
            return None
        # (a whole-form document joins no member row: its value is its body's)
        rank, number, boolean, text = (
            f"CASE WHEN d.body IS NULL THEN ({m}) ELSE ({b}) END"
            for m, b in zip(member[:4], body[:4], strict=True)
        )
        # a condition, not a CASE's value: SQLite evaluates both sides of an AND it computes as a
        # value, and the member's "not a tree" would no longer keep a tree's empty body from JSON
        unsure = f"(d.body IS NULL AND ({member.unsure})) OR (d.body IS NOT NULL AND ({body.unsure}))"
        return SortSql(rank, number, boolean, text, unsure, collate="")

    def _sort_sql(self, inner: tuple[str, ...]) -> SortSql | None:
        return _sqlite_sort(inner) if inner else _SQLITE_SORT

    def _sort_number(self, value: int | float) -> Any:
        return value

    def _checked_in_sql(self, filters: dict[str, Any]) -> bool:
        return all(_decided_in_sql(pattern) for pattern in filters.values())

    def _unchecked(self, tx: Tx, doc_id: int, filters: dict[str, Any]) -> list[str]:
        return [name for name, pattern in filters.items() if not _decided_in_sql(pattern)]

    def _value_match(self, name: str, pattern: Any) -> tuple[str, Sequence[Any]] | None:
        if not _indexed_scalar(pattern) or (isinstance(pattern, str) and not _text_checkable(pattern)):
            return None
        return (
            f"m.name = ? AND {SQLITE_VALUE_WHERE.format(m='m.')} AND {SQLITE_VALUE.format(m='m.')} = ?",
            [name, _bound(pattern)],
        )

    def _kind_sql(self) -> str:
        return SQLITE_SUBJECT_KIND.format(s="subject")

    def _counter_rows(self, tx: Tx, state: str | None) -> list[tuple[str, str, str, int]]:
        if state is None:
            moved = summed(tx.all(SQLITE_ALL_COUNTER_ROWS))
        else:
            moved = summed(tx.all(SQLITE_COUNTER_ROWS, (state, quoted(state))), state)
        return [(*counter, n) for counter, n in moved.items()]

    def _fold_counts(self, tx: Tx) -> None:
        # (one writer at a time holds the database: no other fold can be under way)
        newest = None
        texts = []
        for first, counted in tx.all(SQLITE_UNFOLDED):
            if counted is None:  # (the newest unfolded seq's row)
                newest = first
            else:
                texts.append((first, counted))
        if newest is None:
            return
        moved = folded(texts)
        if moved:  # (in key order, as any reader of the rows takes them)
            tx.many(SQLITE_FOLD, [(*counter, n) for counter, n in sorted(moved.items())])
        tx.run(SQLITE_FOLDED, (str(int(newest)),))

    def _migrations(self) -> dict[int, str]:
        return SQLITE

    def _table_names(self, tx: Tx) -> set[str]:
        return {r[0] for r in tx.all("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def close(self) -> None:
        """Let the calls in flight finish, then close; a call made once the close began is
        refused (``StoreUnavailable``). Writers are waited for through their turns (an open
        group is committed for its members); other threads' reads under way are waited for up
        to the busy timeout. A read still under way then (a slow query, a dump not read to its
        end) keeps its connection, which that call closes as it ends — the last such call
        lets the store's file go; this thread's own reads, not running a statement while it
        closes, are closed under it (they fail ``store-unavailable``)."""
        self._closed = True  # (before the wait: a call that enters from here on is refused)
        self._group.take_last_turn()
        try:
            deadline = time.monotonic() + self.busy_timeout_ms / 1000
            me = _get_ident()
            with self._guard:
                conns, self._all = self._all, []
                readers, self._readers = self._readers, []
            while any(r.busy and r.thread != me for r in readers) and time.monotonic() < deadline:
                time.sleep(0.001)  # (a read under way: ours leave their connections within a call)
            self._writer_conn = self._shared = None
            self._group.forget()
            with self._guard:  # (against ``_left``: each connection is closed once, when unused)
                self._kept += [r for r in readers if r.busy and r.thread != me]
                kept = {id(r.conn) for r in self._kept}
                for conn in conns:
                    if id(conn) not in kept:
                        conn.close()
                if not self._kept:
                    self._let_files_go()
            self._group.queue.close()
            self._spares.drop()
        finally:
            self._group.lock.release()
        self._local = threading.local()

    def _left(self, reader: _Reader) -> None:
        """A call ended after a close began: a connection the close left to it is closed once
        unused — then, the last of them gone, the files."""
        with self._guard:
            if reader.busy or reader not in self._kept:
                return
            self._kept.remove(reader)
            reader.conn.close()
            if not self._kept:
                self._let_files_go()

    def _let_files_go(self) -> None:
        """Once every connection is closed: closing the ``-shm`` descriptor drops every lock
        this process holds on that file, so it comes after them."""
        self._watch.close()
        release(self._file_hold)
        self._file_hold = None


def _reserved(tx: Tx, size: int) -> range | None:
    """A block of ``size`` document ids reserved by moving the table's AUTOINCREMENT counter
    past it (every writer, in any process, draws ids above the counter); None before the first
    document exists. Reserved once the transaction commits."""
    top = tx.one("UPDATE sqlite_sequence SET seq = seq + ? WHERE name = 'documents' RETURNING seq", (size,))
    return None if top is None else range(int(top[0]) - size + 1, int(top[0]) + 1)


def _claim_of(tx: Tx, request: Request) -> tuple[Any, ...] | None:
    """The claim of a request another writer's turn took (its seq), if that turn committed it."""
    return tx.one(
        "SELECT seq FROM applied_ops WHERE scope = ? AND op_id = ?", (writer_requests.SCOPE, request.id)
    )


def _created_elsewhere(exc: StoreError) -> bool:
    """Whether ``exc`` is the documents' UNIQUE (state, subject) refusing a row a commit
    creates: another store created the document since this one found it absent."""
    cause = exc.__cause__
    return (
        isinstance(cause, sqlite3.IntegrityError)
        and getattr(cause, "sqlite_errorname", "") == "SQLITE_CONSTRAINT_UNIQUE"
        and "documents.state, documents.subject" in str(cause)
    )


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite gave up waiting for a lock (``SQLITE_BUSY``, any of its variants)."""
    return exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


def _begin_waiting(cursor: sqlite3.Cursor, busy: sqlite3.OperationalError, wait: float) -> None:
    """``BEGIN IMMEDIATE`` tried again, after a first try that waited one slice and met ``busy``,
    until it takes the write lock or ``wait`` seconds (the store's wait) have passed since that
    first try — then the last ``busy`` is raised, as the single wait raised it. Each try waits
    in SQLite's busy handler (its connection's busy timeout: a slice); between tries, Python
    acts on a signal (a Ctrl-C)."""
    piece = min(wait, WAIT_SLICE_MS / 1000)
    deadline = time.monotonic() + wait - piece
    while (began := time.monotonic()) < deadline:
        try:
            cursor.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
            busy = exc
        # a try that did not sleep its slice (a SQLite built without usleep sleeps whole
        # seconds, so not at all within a slice) sleeps the rest here: no busy loop
        rest = min(began + piece, deadline) - time.monotonic()
        if rest > 0.001:
            time.sleep(rest)
    raise busy


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise _mapped(exc) from exc


def _mapped(exc: sqlite3.Error) -> StateflowError:
    """Our error for a SQLite error: missing schema, busy, damaged file, or other."""
    text = str(exc)
    if "malformed" in text or "not a database" in text or "corrupt" in text:
        return CorruptStore(
            f"the SQLite file is damaged ({text}); run `stateflow check` and restore from a backup"
        )
    if isinstance(exc, sqlite3.OperationalError):
        if "no such table" in text:
            return StoreNotMigrated(f"the store schema is missing ({text}); run `stateflow migrate`")
        if "locked" in text or "busy" in text:
            return StoreBusy(f"the store stayed busy past the timeout: {text}")
        if "readonly" in text or "read-only" in text:
            return StoreReadOnly(f"the store is read-only here: {text}")
        return StoreUnavailable(f"SQLite error: {text}")
    if isinstance(exc, sqlite3.ProgrammingError) and "closed database" in text:
        # (a read of the thread that closed the store, resumed after: ``SqliteStore.close``)
        return StoreUnavailable("the store was closed: open it again to use it")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreError(f"SQLite integrity error: {text}")
    if isinstance(exc, sqlite3.ProgrammingError):  # (a statement misused: our fault, not the file's)
        return StoreError(f"SQLite refused a statement: {text}")
    if isinstance(exc, sqlite3.DatabaseError):
        return CorruptStore(f"the SQLite file is damaged or not a database: {text}")
    return StoreError(f"SQLite error: {text}")


FILE_MODE: Final = 0o600


def _create(path: Path) -> None:
    """The store file and each folder it needs, private to the owner (SQLite gives the -wal and
    -shm files the mode of the database file)."""
    try:
        make_private_dirs(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
        os.close(fd)
    except PermissionError:
        raise StorePermissionDenied(f"permission denied: cannot create {path}") from None
    except OSError as exc:
        raise StoreUnavailable(f"cannot create {path}: {exc.strerror or exc}") from None


def first_missing_folder(path: Path) -> Path | None:
    """The topmost folder above the store file ``path`` that does not exist yet (None: its
    folder exists): the folders creating the store there would make."""
    missing = missing_folders(path.parent)
    return missing[-1] if missing else None


def store_files(path: Path) -> list[Path]:
    """The store file ``path`` and the files SQLite and the writer queue keep beside it."""
    return [path, *(Path(f"{path}{end}") for end in ("-wal", "-shm", "-writer"))]


def remove_created(path: Path, top: Path | None) -> None:
    """Take back a store this command created and closed (a refused load): the file, its -wal,
    -shm and -writer files, its request folder, and the folders made for it up to ``top``
    (each only when empty). Never raises: it runs after a refusal, which is what the caller
    must see (on a read-only file system, say, the file was never made and ``unlink`` fails)."""
    for name in store_files(path):
        with suppress(OSError):
            os.unlink(name)
    shutil.rmtree(f"{path}-requests", ignore_errors=True)
    folder = path.parent
    while top is not None:
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == top:
            return
        folder = folder.parent


def _writable(path: Path) -> bool:
    """Whether this process may write the file and create its -wal/-shm files next to it."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


def _denied(path: Path) -> StorePermissionDenied | None:
    if not os.access(path.parent, os.X_OK) or (path.exists() and not os.access(path, os.R_OK)):
        return StorePermissionDenied(f"permission denied: cannot open {path}")
    return None


_VERSION_SQL: Final = "SELECT value FROM stateflow_meta WHERE key = 'schema_version'"


def _big(value: str) -> str:
    """SQL that holds when the number ``value`` has magnitude 2**53 or more, so SQL cannot order
    it exactly. Two comparisons rather than ``abs()``: SQLite's ``abs(-2**63)`` raises "integer
    overflow" (it has no positive 2**63)."""
    return f"({value} >= 9007199254740992.0 OR {value} <= -9007199254740992.0)"


_SQLITE_MEMBER: Final = "json_extract(CAST({s}.body AS TEXT), '$')"
_SQLITE_SORT: Final = SortSql(
    # the kind by the body's first byte (canonical JSON); a tree (``root``) is an object or array
    rank="CASE WHEN {s}.doc_id IS NULL THEN 9 WHEN {s}.root IS NOT NULL THEN 8 ELSE "
    "CASE substr({s}.body, 1, 1) WHEN x'22' THEN 1 WHEN x'74' THEN 2 WHEN x'66' THEN 2 "
    "WHEN x'6e' THEN 9 WHEN x'7b' THEN 8 WHEN x'5b' THEN 8 ELSE 0 END END",
    number=_SQLITE_MEMBER,
    boolean="substr({s}.body, 1, 1) = x'74'",
    # text compares bytewise (BINARY): UTF-8 bytes are in code point order
    text=_SQLITE_MEMBER,
    # an integer from 2**63 up reads as a rounded double, and a string with \u0000 may end at it
    unsure="{s}.root IS NULL AND ((substr({s}.body, 1, 1) BETWEEN x'2d' AND x'39' "
    f"AND {_big(_SQLITE_MEMBER)}) "
    "OR (substr({s}.body, 1, 1) = x'22' AND instr({s}.body, x'5c7530303030') > 0))",
    collate="",
)
"""SQLite: a sorted search's order by a member's value (``backend.SortSql``)."""


def _sqlite_sort(inner: tuple[str, ...]) -> SortSql | None:
    """A sorted search's order by the value at ``inner`` inside a member: read from an inline
    object by a JSON path of quoted names (None where a name has none, :func:`_json_path`);
    inside a tree, SQL reads nothing (unsure)."""
    path = _json_path(inner)
    if path is None:
        return None
    literal = path.replace("{", "{{").replace("}", "}}")
    body = "CAST({s}.body AS TEXT)"
    kind, value = f"json_type({body}, {literal})", f"json_extract({body}, {literal})"
    return SortSql(
        rank="CASE WHEN {s}.doc_id IS NULL THEN 9 WHEN {s}.root IS NOT NULL THEN -1 "
        f"WHEN substr({{s}}.body, 1, 1) <> x'7b' THEN 9 ELSE CASE {kind} WHEN 'integer' THEN 0 "
        "WHEN 'real' THEN 0 WHEN 'text' THEN 1 WHEN 'true' THEN 2 WHEN 'false' THEN 2 "
        "WHEN 'object' THEN 8 WHEN 'array' THEN 8 ELSE 9 END END",
        number=value,
        boolean=f"{kind} = 'true'",
        text=value,
        unsure="{s}.root IS NOT NULL OR (substr({s}.body, 1, 1) = x'7b' AND "
        f"(({kind} IN ('integer', 'real') AND {_big(value)}) "
        f"OR ({kind} = 'text' AND instr({{s}}.body, x'5c7530303030') > 0)))",
        collate="",
    )


def _body_sort(path: tuple[str, ...]) -> SortSql | None:
    """A sorted search's order by the value at ``path`` (a top-level member, then names inside
    it) of a whole-form document ``d``, read from its body by a JSON path: the templates use no
    ``{s}``; None where a name has no path."""
    literal = _json_path(path)
    if literal is None:
        return None
    literal = literal.replace("{", "{{").replace("}", "}}")
    body = "CAST(d.body AS TEXT)"
    kind, value = f"json_type({body}, {literal})", f"json_extract({body}, {literal})"
    return SortSql(
        rank=f"CASE {kind} WHEN 'integer' THEN 0 WHEN 'real' THEN 0 WHEN 'text' THEN 1 "
        "WHEN 'true' THEN 2 WHEN 'false' THEN 2 WHEN 'object' THEN 8 WHEN 'array' THEN 8 ELSE 9 END",
        number=value,
        boolean=f"{kind} = 'true'",
        text=value,
        # a number SQL reads rounded, and a string whose text holds \u0000 (it ends at the NUL)
        unsure=f"({kind} IN ('integer', 'real') AND {_big(value)}) "
        f"OR ({kind} = 'text' AND instr(({body} -> {literal}), '\\u0000') > 0)",
        collate="",
    )


def _indexed_scalar(pattern: Any) -> bool:
    """Whether every member equal to ``pattern`` is in the value index: a string or a number
    (not a boolean) whose encoding, even with every character escaped (6×), fits the index's
    size bound."""
    if type(pattern) is int:
        return True  # (bound as the double the index holds from 2**63 up: ``_bound``)
    if type(pattern) is float:
        return math.isfinite(pattern)
    return type(pattern) is str and 6 * len(encode_trusted(pattern)) <= VALUE_INDEX_MAX


class _Value(NamedTuple):
    """SQL reading one JSON value a search checks or sorts by: its JSON type (``json_type``'s
    name; NULL where there is none, or where SQL reads nothing: a member held as a tree), its
    SQL value (``json_extract``'s) and its JSON text as stored."""

    kind: str
    value: str
    text: str


_IN_MEMBER: Final = _Value(
    kind="CASE WHEN m.root IS NULL THEN json_type(CAST(m.body AS TEXT)) END",
    value="json_extract(CAST(m.body AS TEXT), '$')",
    text="CAST(m.body AS TEXT)",
)
"""The value of the member row ``m``."""

_UNSPELLED: Final = re.compile(r'["\\\x00-\x1f]')
"""Characters of a member name no JSON path of SQLite's reaches: it reads a quoted name up to the
next ``"`` and compares it with the stored name's text as written, where the encoding escapes a
quote, a backslash and each control character."""


def _json_path(names: Sequence[str]) -> str | None:
    """A JSON path through the objects named ``names``, as an SQL string literal; None where a
    name has no path (:data:`_UNSPELLED`)."""
    if any(_UNSPELLED.search(name) for name in names):
        return None
    path = "$" + "".join(f'."{name}"' for name in names)
    return "'" + path.replace("'", "''") + "'"


def _in_body(name: str) -> _Value | None:
    """The value of the top-level member ``name`` of a whole-form document ``d`` read from its
    body (``documents.body``); None where no path spells the name."""
    path = _json_path((name,))
    if path is None:
        return None
    body = "CAST(d.body AS TEXT)"
    return _Value(f"json_type({body}, {path})", f"json_extract({body}, {path})", f"({body} -> {path})")


def _value_sql(at: _Value) -> str:
    """:data:`SQLITE_VALUE` of a value read elsewhere than a member row: a number, or a string
    without NUL (SQLite text ends at one), else NULL."""
    return (
        f"CASE WHEN {at.kind} IN ('integer', 'real') OR ({at.kind} = 'text' "
        f"AND instr({at.text}, '\\u0000') = 0) THEN {at.value} END"
    )


def _scalar_check(pattern: Any, at: _Value = _IN_MEMBER) -> tuple[str, list[Any]] | None:
    """SQL that holds when a value (``at``: the member row ``m``'s, or a member in a whole-form
    body) equals the scalar ``pattern``, by JSON equality (numbers by
    value: 1 matches 1.0; strings by their decoded text, whatever escapes the stored text uses),
    with its parameters; None for objects and arrays, and for strings the stored text cannot be
    told apart by (``_text_checkable``). A number from 2**63 up also matches members that only
    round to it (``_bound``): :func:`_decided_in_sql` is false for it, and Python checks each
    match. A member held as a tree (``root``; only objects and arrays are) has no inline body and
    never equals a scalar: each step is a CASE so no JSON function sees anything but an inline
    body."""
    kind = at.kind
    if pattern is None:
        return f"{kind} = 'null'", []
    if pattern is True or pattern is False:
        return f"{kind} = ?", ["true" if pattern else "false"]
    if isinstance(pattern, str) and _text_checkable(pattern):
        # a stored string whose text holds \u0000 has a NUL or those six characters: the pattern
        # has neither, so it equals no such string
        value = f"CASE WHEN {kind} = 'text' AND instr({at.text}, '\\u0000') = 0 THEN {at.value} END"
        return f"{value} = ?", [pattern]
    if isinstance(pattern, int | float):
        value = f"CASE WHEN {kind} IN ('integer', 'real') THEN {at.value} END"
        return f"{value} = ?", [_bound(pattern)]
    return None


_ROUNDED_FROM: Final = 2**63
"""SQLite reads a stored integer from here up as the nearest double: comparing one in SQL can
find numbers that only round to the pattern (2**64 - 1 for 1.8446744073709552e19)."""


def _bound(pattern: Any) -> Any:
    """``pattern`` as SQL compares it: a number from 2**63 up as the double SQLite reads such
    integers as (an integer there cannot be bound at all), which every equal member reads as."""
    if type(pattern) in (int, float) and pattern >= _ROUNDED_FROM:
        return float(pattern)
    return pattern


def _bound_operand(operand: Any) -> Any:
    """A bound's operand as SQLite can bind it: an integer past 64 bits as the nearest double
    (rounding keeps order, and the comparison is not strict)."""
    if type(operand) is int and not -(2**63) <= operand < 2**63:
        return float(operand)
    return operand


def _decided_in_sql(pattern: Any) -> bool:
    """Whether :func:`_scalar_check`'s SQL decides ``pattern`` alone, with no check in Python."""
    if type(pattern) in (int, float):
        return bool(pattern < _ROUNDED_FROM)
    return _scalar_check(pattern) is not None


def _text_checkable(pattern: str) -> bool:
    """Whether SQL can compare a stored string with ``pattern``: SQLite text ends at a NUL, and
    a stored string whose text holds the six characters ``\\u0000`` (a NUL escaped, or a
    backslash before ``u0000``) is left out of the string checks and the value index alike."""
    return "\x00" not in pattern and "\\u0000" not in pattern
