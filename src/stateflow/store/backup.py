"""A consistent copy of a live SQLite store (SQLite's online backup API)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from stateflow.errors import CorruptStore, InvalidInput, StoreNotFound, StoreUnavailable
from stateflow.files import private_beside, put_in_place, refuse_unreplaceable, unwritable
from stateflow.store.open import display_location
from stateflow.store.sqlite import store_files
from stateflow.store.sqlite_file import connect_read_only, holding, preflight

COMPACT_SHARE = 4
"""A copy whose free pages are more than one in this many is compacted (``VACUUM``)."""


def sqlite_backup(
    source: Path, target: Path, *, replace: bool = False, progress: Callable[[str, int], None] | None = None
) -> int:
    """Copy ``source`` to ``target`` (0600) page by page, in steps, from one read snapshot (the
    writers carry on: they never wait for the copy, nor restart it), compacted when more than a
    quarter of it is free pages; the copy is checked (``quick_check``) before it replaces
    ``target``. Returns the number of pages of the copy; ``progress`` is told ``("pages", n)``
    after each step. The source is opened as every read-only open is (a file on a read-only
    medium is read alone when its WAL holds nothing)."""
    if not preflight(source):
        raise StoreNotFound(f"no store at {display_location(source, absolute=True)}")
    # the store's own files first: --force would not help there, so it must not be suggested
    if target.expanduser().resolve() in store_files(source.resolve()):
        raise InvalidInput(
            f"{target} is a file of the store being backed up; the backup must go to another file"
        )
    refuse_unreplaceable(target)  # a device, a named pipe, a link: never renamed over, --force or not
    if target.exists() and not replace:
        raise InvalidInput(f"{target} exists; pass --force to replace it")
    copied = 0

    def step(status: int, remaining: int, total: int) -> None:
        nonlocal copied
        if progress is not None:
            progress("pages", total - remaining - copied)
        copied = total - remaining

    try:
        fd, partial = private_beside(target)
        os.close(fd)
    except OSError as exc:
        raise unwritable(target, exc) from exc
    try:
        with holding(source):
            src = connect_read_only(source, timeout=30)
            try:
                dst = sqlite3.connect(partial)
                try:
                    # one read transaction across every step: the copy is that one snapshot, and
                    # writers carry on (WAL). Between steps taken outside one, each commit by
                    # another connection restarts the copy from its first page, so under steady
                    # writes it never finished
                    src.execute("BEGIN")
                    src.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall()
                    src.backup(dst, pages=1024, progress=step)
                    src.execute("ROLLBACK")
                    dst.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
                    # a store keeps the pages deletes, erasures and pruning freed (for its next
                    # writes); where they are a good part of the copy, the copy is rebuilt
                    # without them (it is private: nothing waits for it)
                    free = int(dst.execute("PRAGMA freelist_count").fetchone()[0])
                    if free * COMPACT_SHARE > int(dst.execute("PRAGMA page_count").fetchone()[0]):
                        dst.execute("VACUUM")
                    (verdict,) = dst.execute("PRAGMA quick_check").fetchone()
                    pages = int(dst.execute("PRAGMA page_count").fetchone()[0])
                finally:
                    dst.close()
            finally:
                src.close()
        if verdict != "ok":
            raise CorruptStore(f"the copy of {source} does not pass its check: {verdict}")
        put_in_place(partial, target)
    except sqlite3.DatabaseError as exc:
        if _target_full(exc):
            raise unwritable(target, OSError(str(exc))) from exc
        raise StoreUnavailable(f"backup of {source} failed: {exc}") from exc
    except OSError as exc:
        raise unwritable(target, exc) from exc
    finally:
        # the copy and the journal SQLite kept beside it while writing it (a copy that failed
        # midway leaves one: a full disk, a file size limit)
        for leftover in (partial, Path(f"{partial}-journal")):
            leftover.unlink(missing_ok=True)
    return pages


def _target_full(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite failed writing the copy (the source is only read): a full disk, or an I/O
    error of the copy's file system."""
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_FULL", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC")
