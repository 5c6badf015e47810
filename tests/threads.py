"""Run one function on several threads at once and collect what they raised."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_threads(target: Callable[[int], object], count: int, *, timeout: float = 120) -> list[BaseException]:
    """``target(i)`` for ``i < count``, each on its own thread, started together; returns the
    exceptions raised (an empty list when every call returned)."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(i: int) -> None:
        try:
            start.wait()
            target(i)
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    return errors
