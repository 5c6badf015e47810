"""Helpers for tests that no reference cycle is left for the garbage collector to free."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def left_to_collector(kind: type) -> Iterator[list[object]]:
    """Runs its block with the cyclic collector off; on leaving, the list it yielded holds the
    objects of ``kind`` that only the collector would free (kept in a reference cycle)."""
    kept: list[object] = []
    gc.collect()
    gc.disable()
    try:
        yield kept
        gc.set_debug(gc.DEBUG_SAVEALL)  # what only the collector would free, kept to be seen
        gc.collect()
        kept += [o for o in gc.garbage if isinstance(o, kind)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
