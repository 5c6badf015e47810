"""A bounded cache of decoded member values, keyed by the revision that wrote them.

A member row's ``revision`` changes on every write of that member, so an entry can never be
stale: a newer write simply misses. Values are shared with readers and must be treated as
immutable (every ``doc/`` function is copy-on-write). Only committed data enters the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

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
