"""The store's one clock: fixed-width ISO-8601 UTC text, so text order is time order."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

_second: tuple[int, str] = (-1, "")
"""The last second formatted by ``utc_now`` (formatting is most of its cost; every write asks)."""


_RESTORED_AT: ContextVar[str | None] = ContextVar("stateflow_restored_at", default=None)
"""Set only while ``stateflow load`` replays a transition: the time it was first committed."""


@contextmanager
def restoring_time(at: str) -> Iterator[None]:
    """Commits in this block (this thread) record ``at`` as their time (a restore from a dump)."""
    token = _RESTORED_AT.set(at)
    try:
        yield
    finally:
        _RESTORED_AT.reset(token)


def utc_now() -> str:
    """The store's one clock: fixed-width ISO-8601 UTC, so text order is time order."""
    global _second
    restored = _RESTORED_AT.get()
    if restored is not None:
        return restored
    second, micros = divmod(time.time_ns() // 1000, 1_000_000)
    cached = _second
    if cached[0] != second:
        cached = _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{micros:06d}Z"


def utc_text(moment: datetime) -> str:
    """``moment`` (UTC) as the store writes times: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
