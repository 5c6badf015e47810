"""Document ids reserved ahead, a block at a time, for the rows optimistic commits create
(both backends: each supplies how a block is reserved, this hands the ids out)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Final

RESERVED_IDS: Final = 64
"""Document ids reserved at a time."""


class IdBlocks:
    """Ids reserved ahead, handed out ``n`` at a time by :meth:`take`."""

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._lock = threading.Lock()

    def take(self, n: int, reserve: Callable[[int], Iterable[int] | None]) -> list[int] | None:
        """``n`` ids: from the block on hand, else from a new one of at least
        :data:`RESERVED_IDS` that ``reserve(size)`` takes from the database (None: there are
        none to take yet). The lock is never held across ``reserve``: on the async store every
        caller is a task of one thread, and a task waiting for the lock while another held it
        across a round trip would stop the loop. Two callers may both reserve a block; ids are
        only spent."""
        while True:
            with self._lock:
                if len(self._ids) >= n:
                    ids, self._ids[:n] = self._ids[:n], []
                    return ids
            block = reserve(max(n, RESERVED_IDS))
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
