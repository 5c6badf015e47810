"""Copies of large containers made by bringing their previous version up to date.

A small edit of a large member copies the container it changes (the algebra is copy-on-write:
cached values are shared with readers) and, once the new version has replaced it, frees the
version before. For a container of half a million elements those are two passes over half a
million objects scattered through memory — far more than the edit.

:data:`SPARES` keeps, for each large container the algebra made (``new``), the container it was
copied from (``old``) and the steps that turned the copy into ``new``. When the next edit asks
for a copy of ``new``, and ``old`` is then held by nothing but this registry, ``old`` is brought
up to date in place — the same steps, in the same order, on a container that was equal to the
copy they were made on — and handed out as the copy: O(steps) instead of a copy now and a free
later. The two versions of a container so alternate.

Why it is safe: CPython counts every strong reference, so ``sys.getrefcount(old)`` equal to the
references this module holds itself means no reader, cache, parent container or other thread
can reach ``old`` — whoever still held it (a reader, the member cache, an older parent version)
would show in the count, and an object no one can reach cannot be reached again. Only then is
it changed; otherwise it is dropped and the copy made as usual. Where reference counts are not
exact (a free-threaded build) nothing is kept. Memory: one previous version per container
registered, for at most ``MAX_ENTRIES`` containers (the elements themselves are shared).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

from stateflow.doc.copies import APPEND_STEP, DELETE, Step

MIN_ELEMENTS: Final = 4096
"""smaller containers are copied plainly: a copy is cheap, and a spare would cost memory"""

MAX_ENTRIES: Final = 8

_EXACT: Final = getattr(sys, "_is_gil_enabled", lambda: True)() and sys.implementation.name == "cpython"

_OWNED: Final = 2
"""``sys.getrefcount(old)`` inside :meth:`Spares._take` when nothing else holds ``old``: the
local name and the call's own argument."""


class Spares:
    """A registry of previous versions of large containers (see the module docstring);
    thread-safe. Implements :class:`stateflow.doc.copies.Copies`."""

    def __init__(self, max_entries: int = MAX_ENTRIES, min_elements: int = MIN_ELEMENTS) -> None:
        self.max_entries = max_entries
        self.min_elements = min_elements
        self.reused = 0
        """copies made by bringing a previous version up to date (for tests and benchmarks)"""
        self._pending: OrderedDict[int, tuple[Any, Any, tuple[Step, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def list_copy(self, source: list[Any]) -> list[Any]:
        if len(source) >= self.min_elements:
            spare = self._take(source)
            if spare is not None:
                return spare  # type: ignore[no-any-return]
        return list(source)

    def dict_copy(self, source: dict[str, Any]) -> dict[str, Any]:
        if len(source) >= self.min_elements:
            spare = self._take(source)
            if spare is not None:
                return spare  # type: ignore[no-any-return]
        return dict(source)

    def made(self, new: Any, source: Any, steps: Sequence[Step]) -> None:
        if not _EXACT or len(source) < self.min_elements or type(new) is not type(source):
            return
        dropped = []
        with self._lock:
            self._pending[id(new)] = (new, source, tuple(steps))
            while len(self._pending) > self.max_entries:
                dropped.append(self._pending.popitem(last=False))
        del dropped  # freed outside the lock

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()

    def _take(self, source: Any) -> Any:
        """``source``'s previous version brought up to date, if nothing else holds it; None
        otherwise (the previous version is then left to whoever holds it)."""
        with self._lock:
            entry = self._pending.pop(id(source), None)
        if entry is None:
            return None
        new, old, steps = entry
        entry = None  # the tuple held a reference too
        # ``new`` is held by the registry while registered, so its id cannot have been reused
        if new is not source or sys.getrefcount(old) != _OWNED:
            return None
        if type(old) is list:
            for key, value in steps:
                if key is APPEND_STEP:
                    old.append(value)
                else:
                    old[key] = value
        else:
            for key, value in steps:
                if value is DELETE:
                    del old[key]
                else:
                    old[key] = value
        if len(old) != len(source):  # cannot happen while values are never changed once made
            return None
        self.reused += 1
        return old


SPARES: Final = Spares()
"""The process's registry: the services pass it to the algebra when they change documents."""
