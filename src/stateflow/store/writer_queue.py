"""The queue that SQLite writers of every process on one database file wait in.

SQLite lets one writer in at a time and makes the others poll: a writer that finds the write
lock taken sleeps (1, 2, 5, 10 … up to 100 ms) and tries again, so under contention it often
sleeps long after the lock came free, and one that keeps missing the moment waits for seconds.
Before it takes SQLite's write lock, the writer that opens a group commit takes an exclusive
``flock`` on a companion file (``<database>-writer``) and keeps it until the group's commit is
done. The kernel wakes a blocked waiter the moment the lock is released, so the write lock
passes from process to process without anyone sleeping; SQLite's busy timeout stays as the
fallback against writers that do not queue. A process that dies releases its place with it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class WriterQueue:
    """An exclusive lock across processes, held from a group's ``BEGIN`` to its ``COMMIT``."""

    def __init__(self, database: Path) -> None:
        self.path = Path(f"{database}-writer")
        self._fd: int | None = None
        self._held = False
        self._unusable = False

    def acquire(self) -> None:
        """Wait for this process's turn (a no-op while it already holds the lock)."""
        if self._held or self._unusable:
            return
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:  # e.g. a directory we may not create files in: SQLite's wait alone
                self._unusable = True
                return
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # blocks without the GIL; woken on release
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
