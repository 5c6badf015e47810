"""One error hierarchy for the whole package.

Every refusal carries a stable ``code`` (kebab-case, part of the public contract) and a message
written for the person or model that has to act on it. Edges map these once: HTTP status,
tool-error text, CLI exit code.
"""

from __future__ import annotations

from typing import Any


class StateflowError(Exception):
    """Base of every error stateflow raises on purpose."""

    code = "stateflow-error"
    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce calls the class again with ``args`` — the message alone —,
        # which a subclass whose constructor takes other arguments (a key and revisions, a
        # server's code and status) refuses, so the error could not cross a process (pickle,
        # multiprocessing, concurrent.futures) nor be copied. It is rebuilt from what its
        # constructor left instead: the same args, message and attributes.
        return _rebuilt, (type(self), self.args, self.__dict__)


def _rebuilt(cls: type[StateflowError], args: tuple[Any, ...], attributes: dict[str, Any]) -> StateflowError:
    """An unpickled (or copied) error: ``cls`` made without its constructor, holding ``args``
    and ``attributes`` as the original did (see :meth:`StateflowError.__reduce__`)."""
    error = cls.__new__(cls, *args)
    error.__dict__.update(attributes)
    return error


class InvalidInput(StateflowError):
    """The caller's input is malformed or breaks a rule; nothing was changed."""

    code = "invalid-input"
    http_status = 422


class BadRequest(StateflowError):
    """A request the caller sent malformed, before any rule could be checked (a parameter that
    should be JSON text and is not, a body of the wrong shape); nothing was changed."""

    code = "bad-request"
    http_status = 400


class InvalidJSON(InvalidInput):
    """A value is not canonical JSON (NaN, Infinity, non-string keys, huge integers …)."""

    code = "invalid-json"


class NotJSON(InvalidJSON):
    """Text that does not parse as JSON at all (a door may answer it as a malformed request,
    where JSON that parses to a value no document can hold is refused as that value is)."""


class InvalidPath(InvalidInput):
    """A path string or path list does not follow its grammar."""

    code = "invalid-path"


class SelectionError(InvalidInput):
    """A well-formed path does not select anything in the document it was applied to."""

    code = "path-not-found"


class PatchError(InvalidInput):
    """A patch cannot be applied to its basis (bad index selector, forbidden deletion …)."""

    code = "invalid-patch"


class OpError(InvalidInput):
    """An op batch is malformed or cannot be applied; the whole batch is refused."""

    code = "invalid-ops"


NO_ROUTE = "no route for "
"""how the HTTP API's 404 for an address it does not serve begins (a client tells it from a
missing record by it)"""


class NotFound(StateflowError):
    code = "not-found"
    http_status = 404


class Conflict(StateflowError):
    """A compare-and-set check failed or a change no longer fits the current document."""

    code = "conflict"
    http_status = 409


class StoreError(StateflowError):
    """Base for problems of the store itself rather than of the caller's input."""

    code = "store-error"
    http_status = 500


class StoreNotMigrated(StoreError):
    code = "store-not-migrated"
    http_status = 501


class StoreTooNew(StoreError):
    code = "store-too-new"
    http_status = 501


class StoreUnavailable(StoreError):
    code = "store-unavailable"
    http_status = 503


class StoreBusy(StoreUnavailable):
    """Another writer kept the write lock past this call's wait limit; nothing was written."""

    code = "store-busy"

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class WriteAborted(StoreBusy):
    """The database ended the write to break a lock cycle with other writers (PostgreSQL:
    deadlock detected, serialization failure); nothing was written, the call may be retried."""


class StoreTimeout(StoreUnavailable):
    """(PostgreSQL) A statement ran past the store's statement timeout and the server cancelled
    it; its transaction was rolled back, so nothing of it was written. A call that needs longer
    (a migration runs unbounded) is given a larger ``statement_timeout_seconds``."""

    code = "store-timeout"


class CallCancelled(StoreUnavailable):
    """(PostgreSQL) The call was cancelled midway because nobody waits for its answer any more
    (an HTTP request's client went away): its transaction was rolled back, nothing of it was
    written. A write that had committed before the cancel arrived stands, and is answered."""

    code = "call-cancelled"


class WriteOutcomeUnknown(StoreUnavailable):
    """The write was handed to another writer (SQLite: an earlier turn took a memory patch into
    its group commit) that still held the write lock when this call's wait ran out: it may yet
    be committed, or not. Not ``store-busy``: a blind retry could apply it twice; read the
    state first."""

    code = "write-outcome-unknown"


class CorruptData(StoreError):
    """Stored bytes do not decode into what they must be; we fail closed instead of guessing."""

    code = "corrupt-data"
    http_status = 500


class CorruptStore(CorruptData):
    """The store is damaged: the file itself (header, schema, pages: it is not opened at all), or a
    stored row that decodes but lacks the shape the service wrote (e.g. a catalog declaration
    overwritten by a low-level write); we fail closed and name it."""

    code = "corrupt-store"
    http_status = 500

    def __init__(self, message: str, *, advised: bool = False) -> None:
        super().__init__(message)
        self.advised = advised
        """Whether the message says what fixes it (then no other advice is given beside it)."""


class StoreNotFound(StoreError):
    """A command that only reads was pointed at a store that does not exist (nothing is created)."""

    code = "store-not-found"
    http_status = 404


class StoreReadOnly(StoreError):
    """The store was opened read-only (``?mode=ro`` or a read-only medium)."""

    code = "store-read-only"
    http_status = 503


class StorePermissionDenied(StoreUnavailable):
    """The operating system refuses access to the store's file or directory."""

    code = "permission-denied"
    http_status = 503


class TargetUnwritable(StateflowError):
    """A command's output file (a dump's or a backup's TARGET) cannot be written: a missing
    folder, no permission, a full disk or a read-only file system. The store is not at fault
    and nothing was written there."""

    code = "target-unwritable"
    http_status = 500


class UnsupportedStore(StoreError):
    code = "unsupported-store"
    http_status = 400


class MissingExtra(StateflowError):
    """A feature needs an optional part of the install (an extra) that is not installed."""

    code = "missing-extra"
    http_status = 501


class Forbidden(StateflowError):
    """The caller is known but may not do this (a read-only or tenant-limited token)."""

    code = "forbidden"
    http_status = 403


class ReadOnlyState(StateflowError):
    """This door may read the state but never write it (agent memory through the state tools)."""

    code = "read-only-state"
    http_status = 403


class OutsideRoots(InvalidInput):
    """A source path resolves outside the working directory and the configured knowledge roots."""

    code = "outside-roots"


class HotBudgetExceeded(InvalidInput):
    """A patch would grow the hot (always shown) state beyond its configured budget."""

    code = "hot-budget"
