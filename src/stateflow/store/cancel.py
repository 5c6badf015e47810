"""Cancelling a call's database work from another thread, once nobody waits for its answer.

An edge (the HTTP server) runs a call under a :class:`Cancel` (:func:`cancellable`); when the
call's client goes away, it calls :meth:`Cancel.cancel` from another thread. A backend that can
stop a statement midway (PostgreSQL) registers each connection while the call uses it
(:meth:`Cancel.enter`, :meth:`Cancel.leave`): a cancel interrupts the statement running on each
of them, later connections are refused to the call, and a connection that was in use at the
cancel is closed rather than used again — PostgreSQL's cancel targets a server process, not a
statement, so one that arrives after its statement ended would hit whichever statement that
connection ran next, another call's. A backend that registers nothing (SQLite) is unaffected:
its calls run to their end.

Work done for other callers too (a group of several callers' commits) runs outside any call's
cancel (:func:`uncancellable`): one caller going away must not fail the others.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar, Token
from typing import Any, Final

from stateflow.errors import CallCancelled

_CURRENT: ContextVar[Cancel | None] = ContextVar("stateflow_cancel", default=None)

CANCELLED: Final = (
    "the call was cancelled (nobody waits for its answer any more); its transaction was rolled "
    "back, nothing of it was written"
)


class Cancel:
    """One call's cancel: the connections it is using, whether it was cancelled, and whether it
    committed. A call is cancelled only before its first commit (of any of its transactions): one
    that committed runs to its end (what it wrote stands, and its answer says so), and a cancel
    then does nothing."""

    __slots__ = ("_lock", "_using", "cancelled", "settled")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._using: dict[int, Callable[[], object]] = {}
        """id of each connection in use by the call -> how to interrupt its running statement"""
        self.cancelled = False
        """cancelled before the call committed (its running statements were interrupted)"""
        self.settled = False
        """the call committed a write: no cancel from then on"""

    def enter(self, conn: object, interrupt: Callable[[], object]) -> None:
        """``conn`` is in use by the call from now on; refused once the call was cancelled."""
        with self._lock:
            if self.settled:
                return
            if self.cancelled:
                raise CallCancelled(CANCELLED)
            self._using[id(conn)] = interrupt

    def leave(self, conn: object) -> bool:
        """``conn`` is no longer in use by the call: whether it was in use when the call was
        cancelled (an interrupt may still be on its way to it: it must be closed, never used
        again)."""
        with self._lock:
            return self._using.pop(id(conn), None) is not None and self.cancelled

    def settle(self) -> None:
        """The call committed a write: it runs to its end from now on."""
        with self._lock:
            self.settled = True
            if not self.cancelled:  # (else those in use were interrupted: still to be closed)
                self._using.clear()

    def cancel(self) -> None:
        """Interrupt the statements running on the call's connections, unless it committed
        already (may block a network round trip each: not on an event loop's thread)."""
        with self._lock:
            if self.cancelled or self.settled:
                return
            self.cancelled = True
            interrupts = list(self._using.values())
        for interrupt in interrupts:
            with suppress(Exception):  # (a connection closed meanwhile: nothing runs on it)
                interrupt()


def current() -> Cancel | None:
    """The cancel of the call running here, if it runs under one."""
    return _CURRENT.get()


@contextmanager
def cancellable(cancel: Cancel | None) -> Iterator[None]:
    """Run what is inside (and what it starts with a copy of this context) under ``cancel``."""
    token = _CURRENT.set(cancel)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def running(cancel: Cancel) -> Token[Cancel | None]:
    """:func:`cancellable` entered, for a caller on every request (no generator's context
    manager: ~4 µs a call); left by :func:`done`."""
    return _CURRENT.set(cancel)


def done(token: Token[Cancel | None]) -> None:
    _CURRENT.reset(token)


def committed() -> None:
    """The call running here committed a write (see :meth:`Cancel.settle`)."""
    cancel = _CURRENT.get()
    if cancel is not None:
        cancel.settle()


def uncancellable() -> Any:
    """What is inside runs under no call's cancel (work for several callers at once)."""
    return cancellable(None)
