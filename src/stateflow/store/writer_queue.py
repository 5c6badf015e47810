"""The queue that SQLite writers of every process on one database file wait in.

SQLite lets one writer in at a time and makes the others poll: a writer that finds the write
lock taken sleeps (1, 2, 5, 10 … up to 100 ms) and tries again, so under contention it often
sleeps long after the lock came free, and one that keeps missing the moment waits for seconds.
Before it takes SQLite's write lock, the writer that opens a group commit takes an exclusive
``flock`` on a companion file (``<database>-writer``) and keeps it until the group's commit is
done. The kernel wakes a blocked waiter the moment the lock is released, so the write lock
passes from process to process without anyone sleeping; SQLite's busy timeout stays as the
fallback against writers that do not queue. A process that dies releases its place with it.

A blocking ``flock`` has no timeout, and a process that hangs while holding the lock (stopped,
or stuck in its transaction) must not hold every other writer forever. So an uncontended
writer takes the lock without blocking, and a contended one hands the blocking call to a
helper thread (:class:`_Turn`) and waits for it at most its time limit: the kernel still wakes
the helper the moment the lock is free, and a writer that gives up leaves its turn to the
helper, which passes the lock on to the next writer of this process or releases it at once.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

from stateflow.errors import StoreBusy

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC


class _Turn:
    """One blocking wait for the lock, on its own open file, in a daemon thread."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, _OPEN_FLAGS, 0o600)
        self._cond = threading.Condition()
        self._wanted = False
        self.granted = False
        """the lock is held on ``fd`` and belongs to the writer that waited for it"""
        self.over = False
        """the helper is done without a writer to hand the lock to (or failed to lock)"""
        self.failed = False
        """``flock`` itself failed (e.g. no locks on this file system)"""
        threading.Thread(target=self._wait, name="stateflow-writer-queue", daemon=True).start()

    def _wait(self) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)  # blocks without the GIL; woken on release
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
            self.over = True  # every writer that waited gave up: do not keep others out
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)

    def take(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the lock; True: it is held on ``fd``."""
        with self._cond:
            self._wanted = True
            try:
                return self._cond.wait_for(lambda: self.granted or self.over, timeout) and self.granted
            finally:
                self._wanted = False


class WriterQueue:
    """An exclusive lock across processes, held from a group's ``BEGIN`` to its ``COMMIT``.

    Callers are serialized by the group-commit lock of their process; this class is not
    meant for concurrent ``acquire`` calls."""

    def __init__(self, database: Path) -> None:
        self.path = Path(f"{database}-writer")
        self._fd: int | None = None
        self._held = False
        self._unusable = False
        self._turn: _Turn | None = None

    def acquire(self, timeout: float) -> None:
        """Wait for this process's turn (a no-op while it already holds the lock); raise
        :class:`StoreBusy` when the turn has not come within ``timeout`` seconds."""
        if self._held or self._unusable:
            return
        if self._fd is None:
            try:
                self._fd = os.open(self.path, _OPEN_FLAGS, 0o600)
            except OSError:  # e.g. a directory we may not create files in: SQLite's wait alone
                self._unusable = True
                return
        deadline = time.monotonic() + timeout
        while True:
            turn = self._turn
            if turn is not None and turn.over:  # it released the lock after a writer gave up
                turn = self._turn = None
            if turn is None:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass
                except OSError:  # no locks on this file system: SQLite's wait alone
                    self._unusable = True
                    return
                else:
                    self._held = True
                    return
                turn = self._turn = _Turn(self.path)
            if turn.take(max(0.0, deadline - time.monotonic())):
                break
            if turn.failed:  # a lock error, not a holder: SQLite's wait alone
                self._unusable = True
                self._turn = None
                return
            if turn.over and time.monotonic() < deadline:
                continue  # it had just released a lock nobody wanted: try again
            raise StoreBusy(
                f"another process has held the write lock of {self.path.name[: -len('-writer')]} "
                f"for over {timeout:g} s (a hung or very long transaction); nothing was written",
                retry_after=max(1, round(timeout)),
            )
        self._turn = None
        os.close(self._fd)  # the lock is held on the helper's open file: keep that one
        self._fd = turn.fd
        self._held = True

    def release(self) -> None:
        if self._held and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._held = False

    def close(self) -> None:
        self.release()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._turn = None  # a helper still waiting releases the lock as soon as it gets it
