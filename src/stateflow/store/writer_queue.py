"""The first-come, first-served queue that SQLite writers of every process wait in.

SQLite lets one writer in at a time and makes the others poll: a writer that finds the write
lock taken sleeps (1, 2, 5, 10 … up to 100 ms) and tries again, so under contention it often
sleeps long after the lock came free, and one that keeps missing the moment waits for seconds.
A single lock that wakes every waiter (``flock``) is no better at order: the first process to
run wins, often the one that just released it, so a call can be overtaken again and again.

So the writer that opens a group commit first takes a **ticket** and waits for the writer
before it. The companion file ``<database>-writer`` holds the next ticket number (its first 8
bytes, read and bumped under a lock on those bytes), and ticket ``t`` is the lock on byte
``8 + t``: a writer locks its own byte as it takes its ticket and keeps it until its commit is
done, and waits for the lock on the byte before it — which the kernel grants the moment that
writer lets go. Each writer waits for exactly one other, in the order the tickets were drawn.
A process whose last ticket is still the last one drawn (nobody came since it let go) takes
that ticket again — its byte locked anew, then the counter read again to be sure nobody drew
meanwhile — without drawing: a writer that comes later still draws the next ticket and waits
for that byte, and one that drew in between is let go first.
The locks are open-file-description locks (``F_OFD_SETLKW``): unlike ``lockf`` they belong to
one open file, not to the whole process, so tickets of two threads of one process queue too,
and a process that dies lets go of its byte with it.

Waiting in a helper thread costs a second wake-up at every hand-off (the kernel wakes the
helper, the helper wakes the writer), and on a busy machine each wake-up may wait for a CPU. So
a waiting writer sleeps in ``select`` on a datagram socket of its own (its **inbox**, bound once
per queue and process under a random name in the abstract namespace, and reused by every wait:
a socket made and bound per wait cost three system calls each time), and while it waits it
writes its ticket and its inbox's name into the ticket's **slot** in the file (slot
``t % 256`` of a table mapped at offset 4096), clearing it when the wait ends; a writer letting
go of its turn unlocks its byte and then, if a later ticket was drawn and its slot names that
ticket, sends one empty datagram to the inbox it names: one wake-up, of the writer itself. It then yields its CPU (``sched_yield``): the woken writer
would otherwise wait for a CPU until ours blocks, on a busy machine for as long as the
caller's own work after its commit, while every writer behind it waits too.
The lock stays the truth — a waiter checks it after writing its slot and after every wake (a
datagram left from an earlier wait is one wake more), and looks again every 50 ms, so a wake-up lost (a writer that died, another network namespace)
costs time, never order; a process whose wake-ups keep not arriving waits in the helper thread
instead.

A blocking lock has no timeout, and a writer that hangs holding its turn (stopped, or stuck in
its transaction) must not hold every other writer forever. So a writer whose predecessor is
not done hands the blocking wait to a helper thread (:class:`_Turn`) and waits for it at most
its time limit: a writer that gives up leaves its ticket to the helper, which keeps the place
in the line and passes it on the moment its own turn comes. Where these locks do not exist
(outside Linux), writers fall back on SQLite's busy timeout alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import select
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Final

from stateflow.errors import StoreBusy
from stateflow.store.writer_requests import ANSWER_MAX, TAKEN_MAX, Request

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
_SET: int | None = getattr(fcntl, "F_OFD_SETLK", None)
_SET_WAIT: int | None = getattr(fcntl, "F_OFD_SETLKW", None)
_GET: int | None = getattr(fcntl, "F_OFD_GETLK", None)
_FLOCK = struct.Struct("hhqqi4x")
"""``struct flock`` of 64-bit Linux: type, whence, start, length, pid (0 for these locks)."""
_COUNTER = 8
"""bytes 0–7: the next ticket; ticket ``t`` is the lock on byte ``_COUNTER + t``"""
_LOOK_AGAIN = 0.05
"""seconds a waiter sleeps before it looks at the lock again without being woken"""
_MISSES = 3
"""turns that came without a wake-up before a process stops relying on them"""
_WAKES = hasattr(socket, "AF_UNIX") and _SET is not None
_SLOTS_AT = mmap.ALLOCATIONGRANULARITY
"""where the slots begin in the file (a mapping's offset: a multiple of this)"""
_SLOTS: Final = 256
_SLOT: Final = 16
"""each slot: the ticket that waits (8 bytes) and its inbox's token (8 bytes); ticket 0 never
waits, so 0 is an empty slot"""
_EMPTY = bytes(8)
_HANDED_AT: Final = _SLOTS_AT + mmap.ALLOCATIONGRANULARITY
"""where the documents a turn hands on begin in the file (``hand_on``): after the slots"""
_HANDED: Final = 65_536
"""bytes of the file that hold them: the WAL-index header they are current at (48 bytes, zeros:
none), the length of what follows (4 bytes), that, and the header again (a record put together
from two turns' writes, were they ever to overlap, has two headers that differ)"""
_HEADER: Final = 48
HANDED_MAX: Final = _HANDED - 2 * _HEADER - 4
"""the most bytes a turn hands on"""
_NONE = bytes(_HEADER)
_INBOX = b"\0stateflow-writer-inbox-"
"""an inbox's abstract name is this and its token in hex (not the file's identity: one inbox
serves a queue whatever file it has open)"""
_DATAGRAM_OVERHEAD = 4096
"""bytes a datagram waiting to be read costs its sender's buffer beyond its own (its buffer
head, its last page's rest), at most"""
_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: None)
"""gives this thread's CPU to a runnable process (the writer just woken), where there is one"""


_COUNTER_LOCK = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, _COUNTER, 0)
_COUNTER_UNLOCK = _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, 0, _COUNTER, 0)
"""the counter's lock and unlock, packed once (taken and let go on every turn)"""
_pack = _FLOCK.pack
_fcntl = fcntl.fcntl
_SET_NOW: int = _SET if _SET is not None else -1
"""``_SET`` for the paths of every turn, which only run where it exists"""
_WRLCK, _UNLCK, _SEEK_SET = fcntl.F_WRLCK, fcntl.F_UNLCK, os.SEEK_SET
_NATIVE_COUNTER: Final = sys.byteorder == "little"
"""the counter (little-endian in the file) read and written as a native integer through a
view of its mapped bytes (``memoryview.cast``), where this machine's order is the file's:
``int.from_bytes`` of a mapped buffer copies it and parses its order's name, ~1,600
instructions, three times a turn; an item of the view ~270. Elsewhere it is not mapped
(``pread`` and ``pwrite``)."""


def _lock_of(ticket: int) -> bytes:
    """The lock of ``ticket``'s byte, packed."""
    return _pack(_WRLCK, _SEEK_SET, _COUNTER + ticket, 1, 0)


def _unlock_of(ticket: int) -> bytes:
    """The unlock of ``ticket``'s byte, packed."""
    return _pack(_UNLCK, _SEEK_SET, _COUNTER + ticket, 1, 0)


def _lock(fd: int, start: int, length: int = 1, *, wait: bool = False) -> bool:
    """Take the exclusive lock on ``length`` bytes at ``start``; False if another holds it."""
    assert _SET is not None and _SET_WAIT is not None
    packed = (
        _COUNTER_LOCK
        if start == 0 and length == _COUNTER
        else _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
    )
    try:
        fcntl.fcntl(fd, _SET_WAIT if wait else _SET, packed)
    except BlockingIOError:
        return False
    return True


def _free(fd: int, start: int) -> bool:
    """Whether nobody else holds the lock on the byte at ``start`` (one system call)."""
    assert _GET is not None
    answer = fcntl.fcntl(fd, _GET, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, start, 1, 0))
    return bool(_FLOCK.unpack(answer)[0] == fcntl.F_UNLCK)


def _unlock(fd: int, start: int, length: int = 1) -> None:
    assert _SET is not None
    packed = (
        _COUNTER_UNLOCK
        if start == 0 and length == _COUNTER
        else _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, start, length, 0)
    )
    fcntl.fcntl(fd, _SET, packed)


class Answered(Exception):
    """The writer's request was committed by an earlier turn while it waited: no turn of its own."""

    def __init__(self, answer: bytes) -> None:
        super().__init__(answer)  # (its args are its constructor's: it pickles)
        self.answer = answer


class RequestTaken(StoreBusy):
    """The wait for the turn ran out after a holder took this writer's request: whether it
    committed is decided by that holder's transaction (``SqliteStore`` looks it up)."""


class _Turn:
    """One blocking wait for the previous ticket, in a daemon thread, on the open file that
    holds this ticket's byte (the helper owns that file from now on)."""

    def __init__(self, fd: int, ticket: int, wake: Callable[[int], None]) -> None:
        self.fd = fd
        self._ticket = ticket
        self._wake = wake
        self._cond = threading.Condition()
        self._wanted = True  # until the writer stops waiting in ``take``
        self.granted = False
        """the turn came and belongs to the writer that waited for it"""
        self.over = False
        """the helper is done without a writer to hand the turn to (or failed)"""
        self.failed = False
        """the lock call itself failed"""
        threading.Thread(target=self._wait, name="stateflow-writer-queue", daemon=True).start()

    def _wait(self) -> None:
        before = _COUNTER + self._ticket - 1
        try:
            _lock(self.fd, before, wait=True)  # blocks without the GIL; granted on release
            _unlock(self.fd, before)
        except OSError:
            with self._cond:
                self.over = self.failed = True
                self._cond.notify_all()
            os.close(self.fd)
            return
        with self._cond:
            if self._wanted:
                self.granted = True
                self._cond.notify_all()
                return
            self.over = True  # the writer gave up: pass the turn on at once
        os.close(self.fd)  # lets go of this ticket's byte
        self._wake(self._ticket + 1)

    def take(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the turn; True: it came and is the caller's."""
        with self._cond:
            try:
                return self._cond.wait_for(lambda: self.granted or self.over, timeout) and self.granted
            finally:
                self._wanted = False


class WriterQueue:
    """A first-come, first-served turn across processes, held from a group's ``BEGIN`` to its
    ``COMMIT``.

    Callers are serialized by the group-commit lock of their process; this class is not
    meant for concurrent ``acquire`` calls."""

    def __init__(self, database: Path) -> None:
        self.path = Path(f"{database}-writer")
        self._fd: int | None = None
        self._ticket: int | None = None
        """the ticket whose turn this process holds"""
        self._unusable = _SET is None or _SET_WAIT is None or _GET is None
        self._name = b""
        """the file's identity in wake-up names (device and inode of ``FILE-writer``)"""
        self._waker: socket.socket | None = None
        self._answer_max = 0
        """the largest answer sent whole from ``_waker`` (set as it is made)"""
        self._misses = 0
        self._last: int | None = None
        """the ticket this process held last (on ``_fd``), whose byte it has let go"""
        self._counter: memoryview | None = None
        """the counter's 8 bytes mapped (of the file ``_fd`` was opened on), viewed as one
        native integer (``_NATIVE_COUNTER``): read and bumped under its lock as memory, not by
        a ``pread`` and a ``pwrite`` on every turn"""
        self._counter_map: mmap.mmap | None = None
        """the mapping ``_counter`` views (closed once the view is released)"""
        self._packed: tuple[int, bytes, bytes] = (-1, b"", b"")
        """a ticket and its byte's lock and unlock, packed: the ticket a process writing alone
        takes again and lets go on every turn (``struct.pack`` ~1,000 instructions a call)"""
        self._slots: mmap.mmap | None = None
        """the waiting tickets' slots mapped (of the same file; None: no wake-ups here)"""
        self._handed: mmap.mmap | None = None
        """what the last turn handed on (``hand_on``), mapped (of the same file)"""
        self._map_tried = False
        self._inbox: socket.socket | None = None
        """the socket this queue's waits sleep on, bound once (dropped in a forked child)"""
        self._token = b""
        self._answered = -1
        """the ticket after this turn's, if this turn answered it (``answer``)"""
        _QUEUES.add(self)

    @property
    def held(self) -> bool:
        return self._ticket is not None

    @property
    def unusable(self) -> bool:
        """Whether writers fall back on SQLite's busy timeout alone (no such locks here)."""
        return self._unusable

    def acquire(self, timeout: float, limit: float | None = None, request: Request | None = None) -> None:
        """Wait for this process's turn (a no-op while it already holds it); raise
        :class:`StoreBusy` when it has not come within ``timeout`` seconds. ``limit`` is the
        caller's whole wait, named in that message (``timeout`` may be what is left of it).

        ``request`` (a memory patch, ``writer_requests``): published for the holder of an
        earlier turn if this writer has to wait; when that holder answers, :class:`Answered`
        is raised with the answer (the ticket let go: the request is committed) instead of the
        turn coming. A request that was taken when the wait runs out raises
        :class:`RequestTaken`."""
        if self._ticket is not None or self._unusable:
            return
        last, counter = self._last, self._counter
        if last is not None and counter is not None and counter[0] == last + 1:
            # Nobody drew a ticket since this process let its last one go: take that one again
            # (its byte locked on the same open file), not a new one — two system calls a turn
            # fewer than drawing (the counter's lock taken and let go). The order holds: the
            # counter, read again once the byte is ours, still says nobody drew before we had
            # it, and whoever draws from now on draws the next ticket and waits for this byte.
            fd = self._fd
            assert fd is not None  # (``_last`` is forgotten whenever ``_fd`` is let go)
            packed = self._packed  # (``release`` packed the last ticket's lock and unlock)
            try:
                try:
                    _fcntl(fd, _SET_NOW, packed[1] if packed[0] == last else _lock_of(last))
                except OSError:  # (a waiter's helper thread holds it for a moment: draw)
                    pass
                else:
                    if counter[0] == last + 1:
                        self._ticket = last
                        return
                    # a ticket drawn meanwhile: its writer may have found the byte held and wait,
                    # so it is let go and the writer woken; this one draws, behind it
                    _fcntl(fd, _SET_NOW, _pack(_UNLCK, _SEEK_SET, _COUNTER + last, 1, 0))
                    self._wake(last + 1)
            except BaseException:  # stopped (KeyboardInterrupt) with the byte maybe locked: let go
                if self._ticket is None:
                    with contextlib.suppress(OSError):
                        _fcntl(fd, _SET_NOW, _pack(_UNLCK, _SEEK_SET, _COUNTER + last, 1, 0))
                    self._wake(last + 1)
                raise
        if self._fd is None:
            try:
                self._fd = os.open(self.path, _OPEN_FLAGS, 0o600)
                stat = os.fstat(self._fd)
            except OSError:  # e.g. a directory we may not create files in: SQLite's wait alone
                self._unusable = True
                return
            self._name = f"stateflow-writer-{stat.st_dev:x}-{stat.st_ino:x}-".encode()
            self._unmap()  # (of the file a previous descriptor was opened on)
            self._last = None  # (a ticket let go on another open file, if any)
        fd = self._fd
        deadline = time.monotonic() + timeout
        drawn: int | None = None  # this call's ticket, its byte locked, until the turn is taken
        turn: _Turn | None = None
        try:
            try:
                # The next ticket, with its byte locked on ``fd`` (the draw inline: a turn is a
                # handful of system calls, each a Python call). The counter's lock is held only
                # for a read and a write; a holder stopped inside them is waited for up to the
                # deadline. (Taken inside the ``try``: its ``finally`` lets it go even if this
                # writer is stopped right after taking it; letting go of a lock not held is a no-op.)
                try:
                    try:
                        _fcntl(fd, _SET_NOW, _COUNTER_LOCK)
                    except BlockingIOError:
                        self._wait_for_counter(fd, deadline, limit if limit is not None else timeout)
                    counter = self._counter
                    if counter is None and not self._map_tried:
                        counter = self._mapped(fd)
                    if counter is not None:
                        ticket = counter[0]
                        counter[0] = ticket + 1
                    else:
                        raw = os.pread(fd, _COUNTER, 0)
                        ticket = int.from_bytes(raw, "little") if len(raw) == _COUNTER else 0
                        os.pwrite(fd, (ticket + 1).to_bytes(_COUNTER, "little"), 0)
                    drawn = ticket  # (before its byte's lock: stopped right after it, it is let go)
                    # before the counter is let go: the next one waits for it
                    _fcntl(fd, _SET_NOW, _pack(_WRLCK, _SEEK_SET, _COUNTER + ticket, 1, 0))
                finally:
                    _fcntl(fd, _SET_NOW, _COUNTER_UNLOCK)
                # the one before is done: no wait (our own last one is: released, no system call)
                if ticket == 0 or ticket - 1 == self._last or _free(fd, _COUNTER + ticket - 1):
                    self._ticket = ticket
                    return
                if _WAKES and self._misses < _MISSES:
                    woken = self._woken(fd, ticket, deadline, request)
                    if woken is not False:
                        self._ticket = ticket
                        if woken is True:
                            return
                        drawn = None
                        self.release()  # answered: committed by the holder before us, nothing to hold
                        raise Answered(woken)
            except OSError:  # no such locks on this file system: SQLite's wait alone
                self._unusable = True
                return
            self._fd = None  # the helper holds this ticket's byte on ``fd`` until the turn is taken
            self._last = None
            turn = _Turn(fd, ticket, self._wake)
            if turn.take(max(0.0, deadline - time.monotonic())):
                self._fd = fd
                self._ticket = ticket
                return
        except BaseException:
            if drawn is not None and self._ticket is None:  # stopped (KeyboardInterrupt) while waiting
                self._abandon(fd, drawn, turn)
            raise
        busy = self._busy(limit if limit is not None else timeout)
        if request is not None and not request.withdraw():
            raise RequestTaken(str(busy), busy.retry_after)
        if turn.failed:
            self._unusable = True
            return
        raise busy

    def _abandon(self, fd: int, ticket: int, turn: _Turn | None) -> None:
        """A ticket drawn whose turn this writer will not take (it was stopped while waiting):
        passed on as soon as the one before lets go, by a helper that owns its file from now on
        — a ticket's byte left locked would stop every later writer, in every process."""
        if self._fd == fd:
            self._fd = None
        self._last = None  # (forgotten with the file it was let go on)
        # the maps hold the file open too (``mmap`` keeps a copy of the descriptor): while they
        # do, its locks outlive the helper's close (the next ``acquire`` maps the file again)
        self._unmap()
        if turn is None:
            turn = _Turn(fd, ticket, self._wake)
        if turn.take(0):  # (it had come already: ours to pass on)
            os.close(fd)
            self._wake(ticket + 1)

    def _woken(self, fd: int, ticket: int, deadline: float, request: Request | None) -> bool | bytes:
        """Sleep until the writer before ``ticket`` lets go (True), the deadline (False) or an
        answer to ``request`` (published here, once this writer can be told: the answer). An
        answer names its request (``answer``): a datagram naming another — left in the inbox
        from an earlier wait of this queue, or sent after a slot of a file made again since —
        is only a wake-up."""
        before = _COUNTER + ticket - 1
        size = 1
        mine = b""
        inbox, slots = self._inbox or self._bound(), self._slots
        if inbox is None or slots is None:  # no abstract names (or no slots) here: the helper thread waits
            self._misses = _MISSES
            return False
        at = (ticket % _SLOTS) * _SLOT
        slots[at + 8 : at + _SLOT] = self._token  # (the token first: a reader takes the ticket as the seal)
        own = slots[at : at + 8] = ticket.to_bytes(8, "little")
        try:
            if request is not None and request.publish(ticket, deadline):
                mine = request.id.encode()
                size = len(mine) + ANSWER_MAX + 1
            woken: bool | None = None  # None: it never slept
            while not _free(fd, before):  # looked at after the slot: a wake-up sent before is not lost
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                woken = bool(select.select([inbox], [], [], min(left, _LOOK_AGAIN))[0])
                if woken:
                    got = inbox.recv(size)
                    if mine and got.startswith(mine):
                        self._misses = 0
                        return got[len(mine) :]
            if mine:  # an answer is sent before the turn before ours is let go: here by now
                try:
                    while True:  # (behind a wake-up, maybe)
                        got = inbox.recv(size)
                        if got.startswith(mine):
                            return got[len(mine) :]
                except OSError:
                    pass
        finally:  # nobody is to be woken under this slot any more (unless a later ticket took it)
            with contextlib.suppress(ValueError):  # (the queue closed meanwhile)
                if slots[at : at + 8] == own:
                    slots[at : at + 8] = _EMPTY
        if woken is not None:
            self._misses = 0 if woken else self._misses + 1
        return True

    def behind(self) -> tuple[int, int] | None:
        """This process's ticket and how many have been drawn, while it holds its turn."""
        ticket = self._ticket
        if ticket is None or self._fd is None:
            return None
        counter = self._counter
        return ticket, counter[0] if counter is not None else self._drawn(self._fd)

    def answer(self, ticket: int, request: str, payload: bytes, fallback: bytes | None) -> None:
        """Send the answer to ``request`` to the writer holding ``ticket`` (see ``_woken``), led
        by the request's id. ``fallback`` (short) is sent instead where the answer does not fit:
        larger than a datagram, or than this socket's share of its send buffer for a turn's
        answers (each counts against it until its requester reads it: a full buffer refuses the
        next); None: then nothing is sent, and the requester, its turn come, decides."""
        if not self._name:
            return
        name = self._waiting(ticket)
        if name is None:  # (not waiting, or not here: its turn decides)
            return
        waker = self._waker_socket()
        if waker is None:
            return
        head = request.encode()
        if len(payload) > self._answer_max:
            if fallback is None:
                return
            payload = fallback
        try:
            waker.sendto(head + payload, name)
        except OSError as exc:  # (a requester gone: its request committed all the same)
            if fallback is None or payload is fallback or exc.errno not in (errno.EMSGSIZE, errno.EAGAIN):
                return
            try:
                waker.sendto(head + fallback, name)
            except OSError:  # (still refused: the requester's turn decides)
                return
        self._answered = ticket  # (the answer wakes its writer: no wake-up to it at ``release``)

    def _waiting(self, ticket: int) -> bytes | None:
        """The inbox the writer holding ``ticket`` waits on (wake-ups, answers), as its slot
        names it; None: its slot names no such wait."""
        slots = self._slots
        if slots is None:
            return None
        at = (ticket % _SLOTS) * _SLOT
        try:
            entry = slots[at : at + _SLOT]
        except ValueError:  # (closed meanwhile)
            return None
        if int.from_bytes(entry[:8], "little") != ticket:
            return None
        return _INBOX + entry[8:].hex().encode()

    def _bound(self) -> socket.socket | None:
        """This queue's inbox, made and bound now: the first wait of this queue in this process
        (a child of a fork makes its own: ``_forked``). None: no abstract names here."""
        try:
            inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        except OSError:
            return None
        token = os.urandom(8)
        try:
            inbox.bind(_INBOX + token.hex().encode())
            inbox.setblocking(False)  # (it sleeps in ``select``; what is read was waiting)
        except OSError:
            inbox.close()
            return None
        self._inbox, self._token = inbox, token
        return inbox

    def _waker_socket(self) -> socket.socket | None:
        """The socket answers and wake-ups are sent from (made on first use)."""
        waker = self._waker
        if waker is None:
            try:
                waker = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                waker.setblocking(False)
                buffer = waker.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            except OSError:
                return None
            self._waker = waker
            # a whole turn's answers must fit together (each costs its size and a little more)
            self._answer_max = min(ANSWER_MAX, buffer // (TAKEN_MAX + 1) - _DATAGRAM_OVERHEAD)
        return waker

    def _wake(self, ticket: int) -> None:
        """Tell the writer holding ``ticket`` (if it is waiting) that its turn has come."""
        if not _WAKES or not self._name:
            return
        name = self._waiting(ticket)
        if name is None:  # not waiting (yet: it looks at the lock after writing its slot)
            return
        waker = self._waker_socket()
        if waker is None:
            return
        with contextlib.suppress(OSError):  # (its wait just ended: the lock told it)
            waker.sendto(b"", name)

    def hand_on(self, header: bytes | None, payload: bytes = b"") -> None:
        """While this process holds its turn: leave ``payload`` (the documents its commit left,
        ``writer_requests.handed_on``) for the turns after it, current while the database's
        WAL-index header is ``header``; None: leave nothing. Only a turn writes it — after its
        commit and before it answers anyone (an answered writer lets the queue go on) — or
        reads it (``handed``); the header goes in last, so a holder that dies midway leaves
        nothing."""
        handed = self._handed
        if handed is None or self._ticket is None:
            return
        handed[:_HEADER] = _NONE
        if header is None or len(header) != _HEADER or len(payload) > HANDED_MAX:
            return
        end = _HEADER + 4 + len(payload)
        handed[_HEADER : end + _HEADER] = len(payload).to_bytes(4, "little") + payload + header
        handed[:_HEADER] = header

    def handed(self, header: bytes | None) -> bytes | None:
        """While this process holds its turn: what an earlier turn handed on, if the WAL-index
        header is still the one it was left at (``header``: no commit since); else None."""
        handed = self._handed
        if handed is None or self._ticket is None or header is None or handed[:_HEADER] != header:
            return None
        size = int.from_bytes(handed[_HEADER : _HEADER + 4], "little")
        if size > HANDED_MAX:
            return None
        record = handed[_HEADER + 4 : _HEADER + 4 + size + _HEADER]  # (one copy, checked whole)
        return record[:size] if record[size:] == header else None

    def drawn(self) -> int:
        """How many tickets have been drawn on this database so far (by every process)."""
        try:
            with open(self.path, "rb") as file:
                return int.from_bytes(file.read(_COUNTER), "little")
        except FileNotFoundError:
            return 0

    def _wait_for_counter(self, fd: int, deadline: float, limit: float) -> None:
        """Take the counter's lock, found held, polling until the deadline."""
        pause = 0.00005
        while not _lock(fd, 0, _COUNTER):
            if time.monotonic() >= deadline:
                raise self._busy(limit) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def _mapped(self, fd: int) -> memoryview | None:
        """The counter's bytes of ``fd``'s file mapped, once per file opened (None where that
        fails, or where this machine's order is not the file's: ``pread`` and ``pwrite``
        then). Called under the counter's lock: a file shorter than the counter was never
        drawn from (the counter is written whole, under that lock), so extending it loses
        nothing."""
        self._map_tried = True
        try:
            if os.fstat(fd).st_size < _HANDED_AT + _HANDED:  # (zeros: no slot holds a wait, none handed)
                os.ftruncate(fd, _HANDED_AT + _HANDED)
            if _NATIVE_COUNTER:
                self._counter_map = mmap.mmap(fd, _COUNTER)
                self._counter = memoryview(self._counter_map).cast("Q")
            self._slots = mmap.mmap(fd, _SLOTS * _SLOT, offset=_SLOTS_AT)
            self._handed = mmap.mmap(fd, _HANDED, offset=_HANDED_AT)
        except (OSError, ValueError):
            self._unmap()
            self._map_tried = True
        return self._counter

    def _unmap(self) -> None:
        if self._counter is not None:
            self._counter.release()  # (a mapping with a view of it cannot be closed)
        for mapped in (self._counter_map, self._slots, self._handed):
            if mapped is not None:
                mapped.close()
        self._counter = None
        self._counter_map = self._slots = self._handed = None
        self._map_tried = False

    def _busy(self, limit: float) -> StoreBusy:
        return StoreBusy(
            f"another process has held the write lock of {self.path.name[: -len('-writer')]} "
            f"for over {limit:g} s (a hung or very long transaction); nothing was written",
            retry_after=max(1, round(limit)),
        )

    def release(self) -> None:
        ticket, fd = self._ticket, self._fd
        if ticket is not None and fd is not None:
            packed = self._packed
            if packed[0] != ticket:
                packed = self._packed = (ticket, _lock_of(ticket), _unlock_of(ticket))
            _fcntl(fd, _SET_NOW, packed[2])
            # after the unlock: the next one finds it free. Nobody to wake when no ticket was
            # drawn after ours (one read; a datagram to nobody costs a failing send and an
            # exception); a writer drawing one from now on finds our byte free by itself.
            counter = self._counter
            drawn = counter[0] if counter is not None else self._drawn(fd)
            if drawn > ticket + 1:
                if self._answered != ticket + 1:  # (else its answer woke it: nothing to send)
                    self._wake(ticket + 1)
                self._answered = -1
                # The next writer can run now, but on a busy machine its wake-up waits for a CPU,
                # and ours goes on to work that can wait (its caller's answer, its next call):
                # give our CPU up, so the turn is taken at once rather than when we block.
                _yield()
            self._last = ticket
        self._ticket = None

    @staticmethod
    def _drawn(fd: int) -> int:
        raw = os.pread(fd, _COUNTER, 0)
        return int.from_bytes(raw, "little") if len(raw) == _COUNTER else 0

    def _forked(self) -> None:
        """In a forked child: the inherited inbox is its parent's (closed here: this process's
        copy only, the parent's stays bound); the child's first wait binds its own."""
        inbox, self._inbox = self._inbox, None
        if inbox is not None:
            inbox.close()
        self._last = None  # (its byte's lock is the parent's too: the child draws its own)

    def close(self) -> None:
        self.release()
        self._last = None
        self._unmap()
        if self._inbox is not None:
            self._inbox.close()
            self._inbox = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._waker is not None:
            self._waker.close()
            self._waker = None


_QUEUES: weakref.WeakSet[WriterQueue] = weakref.WeakSet()
"""every queue of this process, for ``_after_fork``"""


def _after_fork() -> None:
    for queue in list(_QUEUES):
        queue._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
