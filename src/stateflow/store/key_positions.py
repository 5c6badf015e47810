"""Where each key of a large object stands in its key order, carried from one version of the
object to the next (no I/O).

A tree update of an object finds its changed range by position (the interior nodes count keys,
and leaves hold keys in insertion order, not sorted), so replacing or deleting an existing key
first needs that key's position — a scan of the keys, ~10 ms for the last of 500,000. A
:class:`KeyPositions` answers it in O(log n): each key keeps the slot it was given when it was
first seen (slots only grow: a new key is appended to the object, and so takes the next slot),
and a key's position is its slot minus the slots freed before it (deleted keys). Replacing a
value moves no key; deleting one frees its slot; a new key takes the next slot. So each update
keeps the index true in O(keys changed) without looking at the rest of the object.

Indexes are kept by the root id of the object's tree: the id is the hash of the content, so the
same root always has the same keys in the same order, and an index kept under a root can never
be stale. An update takes the index of the root it starts from and leaves it under the root it
made; anything it cannot follow exactly (a change found by comparing the two values) drops it,
and the next update that needs a position builds one again from the object (one pass). An
object is indexed only once a second update needs a position in it: the first scans its keys
(cheaper than the pass that builds an index) and marks the root it leaves.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, insort
from collections import OrderedDict
from collections.abc import Iterable
from typing import Final

MIN_KEYS: Final = 4096
"""Smaller objects are scanned: a scan is cheap and an index would cost memory."""
MAX_INDEXES: Final = 8
"""Objects indexed at once (the most recently updated; ~60 bytes a key each)."""
MAX_MARKED: Final = 64
"""Roots remembered as scanned once (see :meth:`Positions.mark`)."""
REBUILD_GONE: Final = 4
"""An index whose freed slots outnumber its live keys by this factor is dropped (a rebuild is
one pass; a long list of freed slots makes every delete a longer insert)."""


class KeyPositions:
    """The positions of one object's keys (see the module docstring)."""

    __slots__ = ("_gone", "_next", "_slots")

    def __init__(self, keys: Iterable[str]) -> None:
        self._slots: dict[str, int] = {key: slot for slot, key in enumerate(keys)}
        self._gone: list[int] = []
        """freed slots, ascending"""
        self._next = len(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    def position(self, key: str) -> int | None:
        """Where ``key`` stands in the object (None: not one of its keys)."""
        slot = self._slots.get(key)
        if slot is None:
            return None
        return slot - bisect_left(self._gone, slot)

    def delete(self, key: str) -> None:
        insort(self._gone, self._slots.pop(key))

    def append(self, key: str) -> None:
        self._slots[key] = self._next
        self._next += 1

    @property
    def worn(self) -> bool:
        """Whether rebuilding would pay (many freed slots)."""
        return len(self._gone) > REBUILD_GONE * max(1, len(self._slots))


class Positions:
    """Key indexes of large objects by the root id of their trees; thread-safe. An index is
    handed to one update at a time (:meth:`take` removes it), so no two updates change one."""

    def __init__(self, max_indexes: int = MAX_INDEXES, min_keys: int = MIN_KEYS) -> None:
        self.min_keys = min_keys
        self.max_indexes = max_indexes
        self.built = 0
        """indexes built from an object's keys (for tests and benchmarks)"""
        self._held: OrderedDict[bytes, KeyPositions] = OrderedDict()
        self._marked: OrderedDict[bytes, None] = OrderedDict()
        """roots of objects an update found a key position in by scanning"""
        self._lock = threading.Lock()

    def take(self, root: bytes) -> KeyPositions | None:
        with self._lock:
            return self._held.pop(root, None)

    def mark(self, root: bytes) -> None:
        """An update scanned the keys of the object it left under ``root``: the next one that
        needs a position there builds an index."""
        with self._lock:
            self._marked[root] = None
            while len(self._marked) > MAX_MARKED:
                self._marked.popitem(last=False)

    def unmark(self, root: bytes) -> bool:
        with self._lock:
            return self._marked.pop(root, False) is None

    def position(self, root: bytes, key: str) -> int | None:
        """Where ``key`` stands in the object whose tree is ``root``, if that object is indexed
        here. An update may be moving the index on meanwhile (it took it out first, but a
        reader may hold it): the caller checks the answer against the leaf it leads to."""
        with self._lock:
            index = self._held.get(root)
        if index is None:
            return None
        try:
            return index.position(key)
        except (IndexError, KeyError, RuntimeError):  # changed under us: the caller scans
            return None

    def build(self, keys: Iterable[str]) -> KeyPositions:
        self.built += 1
        return KeyPositions(keys)

    def put(self, root: bytes, index: KeyPositions) -> None:
        if index.worn:
            return
        dropped = []
        with self._lock:
            self._held[root] = index
            while len(self._held) > self.max_indexes:
                dropped.append(self._held.popitem(last=False))
        del dropped  # freed outside the lock

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
