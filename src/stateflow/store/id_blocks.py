"""Document ids reserved ahead, a block at a time, for the rows optimistic commits create
(both backends: each supplies how a block is reserved, this hands the ids out)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Final

RESERVED_IDS: Final = 64
"""Document ids reserved by a store's first block."""

MAX_RESERVED_IDS: Final = 1024
"""The most ids one block reserves: each block doubles the last, up to this. A process that
keeps creating documents reserves rarely (on PostgreSQL a block is a round trip of its own,
~1 ms, whether it takes 64 ids or 1,024: 20 µs a new document at 64, 1 µs at 1,024); one that
creates a few spends few. Ids left on hand when a process ends are only skipped."""


class IdBlocks:
    """Ids reserved ahead, handed out ``n`` at a time by :meth:`take`."""

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._lock = threading.Lock()
        self._size = RESERVED_IDS
        """the next block's size (``next_size``)"""

    def next_size(self, n: int = 0) -> int:
        """The size of the block to reserve next (at least ``n``): twice the last, from
        :data:`RESERVED_IDS` up to :data:`MAX_RESERVED_IDS`."""
        with self._lock:
            size = self._size
            self._size = min(size * 2, MAX_RESERVED_IDS)
        return max(n, size)

    def take(self, n: int, reserve: Callable[[int], Iterable[int] | None]) -> list[int] | None:
        """``n`` ids: from the block on hand, else from a new one (:meth:`next_size`) that
        ``reserve(size)`` takes from the database (None: there are none to take yet). The lock
        is never held across ``reserve``: on the async store every caller is a task of one
        thread, and a task waiting for the lock while another held it across a round trip would
        stop the loop. Two callers may both reserve a block; ids are only spent."""
        while True:
            with self._lock:
                if len(self._ids) >= n:
                    ids, self._ids[:n] = self._ids[:n], []
                    return ids
            block = reserve(self.next_size(n))
            if block is None:
                return None
            with self._lock:
                self._ids.extend(block)

    def left(self) -> int:
        """How many ids are on hand (a look: another caller may take them meanwhile)."""
        return len(self._ids)

    def add(self, block: Iterable[int]) -> None:
        """Put ids reserved by the caller on hand (a block reserved inside a commit of its own)."""
        with self._lock:
            self._ids.extend(block)

    def clear(self) -> None:
        """Forget the ids on hand (the next take reserves a new block)."""
        with self._lock:
            self._ids.clear()
