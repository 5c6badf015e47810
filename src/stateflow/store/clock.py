"""The store's one clock: fixed-width ISO-8601 UTC text, so text order is time order."""

from __future__ import annotations

import time
from datetime import datetime

_second: tuple[int, str] = (-1, "")
"""The last second formatted by ``utc_now`` (formatting is most of its cost; every write asks)."""


def utc_now() -> str:
    """The store's one clock: fixed-width ISO-8601 UTC, so text order is time order."""
    global _second
    second, micros = divmod(time.time_ns() // 1000, 1_000_000)
    cached = _second
    if cached[0] != second:
        cached = _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{micros:06d}Z"


def utc_text(moment: datetime) -> str:
    """``moment`` (UTC) as the store writes times: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
