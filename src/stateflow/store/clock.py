"""The store's one clock: fixed-width ISO-8601 UTC text, so text order is time order."""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import overload

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


def restored_at() -> str | None:
    """The time ``restoring_time`` set for this thread's commits, or None (the clock's)."""
    return _RESTORED_AT.get()


def utc_now() -> str:
    """The store's one clock: fixed-width ISO-8601 UTC, so text order is time order."""
    global _second
    restored = _RESTORED_AT.get()
    if restored is not None:
        return restored
    now = time.time_ns() // 1000
    second, micros = divmod(now, 1_000_000)
    cached = _second
    if cached[0] != second:
        cached = _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    global _last
    text = f"{cached[1]}.{micros:06d}Z"
    _last = (text, now)
    return text


def utc_now_stored() -> tuple[str, int | str]:
    """``utc_now()`` and its ``micros_of``: the text a SQLite commit answers and the value its
    transition stores (the time just taken is found by identity, not parsed again)."""
    text = utc_now()
    return text, micros_of(text)


def utc_text(moment: datetime) -> str:
    """``moment`` (UTC) as the store writes times: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_last: tuple[str, int] = ("", 0)
"""The text ``utc_now`` last gave and its microseconds: the commit that takes a time stores it
as ``micros_of`` of that very text, known without parsing it back."""

_parsed: tuple[str, int] = ("", 0)
"""The last second parsed by ``micros_of`` (as ``_second`` for ``utc_now``)."""

_shown: dict[int, str] = {}
"""Seconds formatted by ``time_text`` (a listing page's rows share a few; cleared when large)."""

_texts: dict[int, str] = {}
"""Times formatted by ``time_text``, by their microseconds: every read of a document's row shows
the time of its last transition, the same until it is written again (cleared when large)."""


def micros_of(at: str) -> int | str:
    """The clock's text ``at`` as microseconds since the epoch — how SQLite keeps a transition's
    time since schema 8 (8 bytes in the row instead of 27); text of another shape as it is."""
    global _parsed
    last = _last
    if at is last[0]:  # (the same object: the time just taken)
        return last[1]
    if len(at) != 27 or at[19] != "." or at[26] != "Z" or not at[20:26].isdigit():
        return at
    prefix = at[:19]
    cached = _parsed
    if cached[0] != prefix:
        try:
            second = calendar.timegm(time.strptime(prefix, "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            return at
        cached = _parsed = (prefix, second * 1_000_000)
    return cached[1] + int(at[20:26])


def micros_cutoff(text: str) -> int:
    """An ISO-8601 time given as a bound (``prune_history``) in microseconds since the epoch;
    one without a zone is UTC. ValueError when ``text`` is no ISO-8601 time."""
    exact = micros_of(text)
    if isinstance(exact, int):
        return exact
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return calendar.timegm(moment.utctimetuple()) * 1_000_000 + moment.microsecond


@overload
def time_text(stored: str | int) -> str: ...
@overload
def time_text(stored: None) -> None: ...
@overload
def time_text(stored: str | int | None) -> str | None: ...
def time_text(stored: str | int | None) -> str | None:
    """A transition's time as read from either backend, as the clock's text (the inverse of
    :func:`micros_of`)."""
    if not isinstance(stored, int):
        return stored  # text (PostgreSQL, or SQLite's odd rows) or nothing
    text = _texts.get(stored)
    if text is not None:  # a row read again (its document's time is unchanged): no formatting
        return text
    second = stored // 1_000_000
    prefix = _shown.get(second)
    if prefix is None:
        if len(_shown) >= 4096:
            _shown.clear()
        prefix = _shown[second] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    if len(_texts) >= 8192:
        _texts.clear()
    # the last six digits are the microseconds (from 1970-01-01T00:00:01 on; before, padded)
    micros = str(stored)[-6:] if stored >= 1_000_000 else f"{stored - second * 1_000_000:06d}"
    text = _texts[stored] = f"{prefix}.{micros}Z"
    return text
