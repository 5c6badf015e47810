"""Group commit for callers of one process whose commits are ready at the same time.

A caller hands its ready commit to :meth:`CommitGroups.submit`. When no group is on its way to
the database the caller sends its own at once (alone: no wait, no group made); otherwise it
waits, and the commits that gathered meanwhile go out together as the next group — one
transaction, one flush — sent by the first of them. Each caller gets back its own answer or its
own error, and only once the group's commit is done: the sender decides how a failing member is
kept from failing the others (see ``PostgresStore._send_group``).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

P = TypeVar("P")
A = TypeVar("A")


class Member(Generic[P, A]):
    """One caller's commit in a group: what to send, and then its answer or its error."""

    __slots__ = ("_done", "answer", "error", "lead", "params", "settled")

    def __init__(self, params: P) -> None:
        self.params = params
        self.answer: A | None = None
        self.error: BaseException | None = None
        self.settled = False
        """answered (``answer``, which may be None) or failed (``error``)"""
        self.lead = False
        """woken to send the next group rather than with an answer"""
        # Held until the member is answered or made the next sender; a bare lock is the
        # cheapest one-shot wake-up (an Event is a condition over a lock).
        self._done = threading.Lock()
        self._done.acquire()

    def answered(self, answer: A | None) -> None:
        self.answer, self.settled = answer, True

    def failed(self, error: BaseException) -> None:
        self.error, self.settled = error, True

    def wake(self) -> None:
        self._done.release()

    def wait(self) -> None:
        self._done.acquire()


class CommitGroups(Generic[P, A]):
    """Gathers ready commits into groups; ``send`` commits a group and answers every member
    (``Member.answered`` or ``Member.failed``). At most ``max_group`` commits share one group, so a
    steady stream of callers cannot hold the first one's answer back for long."""

    def __init__(
        self,
        send: Callable[[Sequence[Member[P, A]]], None],
        max_group: int = 64,
        *,
        alone: Callable[[P], A | None],
    ) -> None:
        """``alone``: commit one commit by itself and return its answer (or raise its error) —
        how a commit submitted while no group is on its way goes, with no ``Member`` made."""
        self._send = send
        self._alone = alone
        self._max = max(1, max_group)
        self._lock = threading.Lock()
        self._pending: list[Member[P, A]] = []
        self._sending = False
        self.groups = 0
        """groups sent so far (for tests and benchmarks)"""
        self.largest = 0
        """the most commits one group carried"""

    @property
    def busy(self) -> bool:
        """Whether a group is on its way to the database (a commit submitted now would wait)."""
        return self._sending

    def submit(self, build: Callable[[], P]) -> A | None:
        """Commit what ``build()`` returns (called under the group lock, so members are sent in
        the order they were built); return its answer, or raise its error."""
        with self._lock:
            params = build()
            alone = not self._sending  # nobody on the way: this commit goes at once, by itself
            if alone:
                self._sending = True
                self.groups += 1
                if not self.largest:  # (not ``max``: a call of it makes an argument tuple)
                    self.largest = 1
            else:
                member: Member[P, A] = Member(params)
                self._pending.append(member)
        if alone:
            try:
                return self._alone(params)
            finally:
                self._hand_on()
        member.wait()
        if member.lead:
            self._send_next()
        return _outcome(member)

    def _hand_on(self) -> None:
        """Hand the sending on to the first caller that queued meanwhile, or stop."""
        with self._lock:
            following = self._pending[0] if self._pending else None
            if following is not None:
                following.lead = True
            else:
                self._sending = False
        if following is not None:
            following.wake()

    def _send_next(self) -> None:
        """Send the pending commits (this caller's first among them), then hand the sending on
        (``_hand_on``)."""
        with self._lock:
            group = self._pending[: self._max]
            del self._pending[: self._max]
            self.groups += 1
            self.largest = max(self.largest, len(group))
        try:
            self._send(group)
        except BaseException as exc:  # the sender failed as a whole: every member hears it
            for member in group:
                if not member.settled:
                    member.failed(exc)
        finally:
            for member in group[1:]:  # the first is this caller: it is not waiting
                member.wake()
            self._hand_on()


def _outcome(member: Member[P, A]) -> A | None:
    if member.error is None:
        return member.answer
    # one error may be every member's: each caller raises its own copy (its own traceback)
    raise copy.copy(member.error).with_traceback(None) from member.error
