"""A bounded cache of decoded member values, keyed by the revision that wrote them.

A member row's ``revision`` changes on every write of that member, so an entry can never be
stale: a newer write simply misses. Values are shared with readers and must be treated as
immutable (every ``doc/`` function is copy-on-write). Only committed data enters the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final, Generic, TypeVar

DEFAULT_CACHE_BYTES: Final = 256 * 1024 * 1024


class MemberCache:
    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, str], tuple[int, Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, doc_id: int, name: str, revision: int) -> tuple[bool, Any]:
        with self._lock:
            entry = self._entries.get((doc_id, name))
            if entry is None or entry[0] != revision:
                return False, None
            self._entries.move_to_end((doc_id, name))
            return True, entry[1]

    def put(self, doc_id: int, name: str, revision: int, value: Any, size: int) -> None:
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop((doc_id, name), None)
            if old is not None:
                self._bytes -= old[2]
            self._entries[(doc_id, name)] = (revision, value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


DEFAULT_HEAD_DOCS: Final = 100_000


class HeadCache:
    """Member heads (name, position, revision, size, outline — no body) per document, keyed
    by the document revision they belong to. Every write bumps the revision, so an entry is
    never stale; a hit saves the head query of a write or a partial read."""

    def __init__(self, max_docs: int = DEFAULT_HEAD_DOCS) -> None:
        self.max_docs = max_docs
        self._entries: dict[int, tuple[int, list[Any]]] = {}

    def get(self, doc_id: int, revision: int) -> list[Any] | None:
        entry = self._entries.get(doc_id)
        return entry[1] if entry is not None and entry[0] == revision else None

    def put(self, doc_id: int, revision: int, heads: list[Any]) -> None:
        if len(self._entries) >= self.max_docs:
            self._entries.clear()  # crude but bounded; a miss only costs one head query
        # a lagging writer must not replace a newer entry with an older one
        current = self._entries.get(doc_id)
        if current is None or current[0] <= revision:
            self._entries[doc_id] = (revision, heads)

    def clear(self) -> None:
        self._entries.clear()


V = TypeVar("V")


class RevisionCache(Generic[V]):
    """One value per document — whatever was derived from it at one revision — bounded in
    bytes (least recently used first out). A newer revision replaces an older one, never the
    reverse (a lagging writer must not put back what a newer one replaced)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, tuple[int, V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, doc_id: int, revision: int) -> V | None:
        with self._lock:
            entry = self._entries.get(doc_id)
            if entry is None or entry[0] != revision:
                return None
            self._entries.move_to_end(doc_id)
            return entry[1]

    def latest(self, doc_id: int) -> tuple[int, V] | None:
        """The newest revision held for ``doc_id`` and its value."""
        entry = self._entries.get(doc_id)
        return None if entry is None else (entry[0], entry[1])

    def put(self, doc_id: int, revision: int, value: V, size: int) -> None:
        if size > self.max_bytes // 8:  # one huge document must not flush everything else
            return
        with self._lock:
            old = self._entries.get(doc_id)
            if old is not None:
                if old[0] > revision:
                    return
                del self._entries[doc_id]
                self._bytes -= old[2]
            self._entries[doc_id] = (revision, value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
