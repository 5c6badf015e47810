"""A consistent copy of a live SQLite store (SQLite's online backup API)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from stateflow.errors import CorruptStore, InvalidInput, StoreNotFound, StoreUnavailable
from stateflow.store.sqlite import FILE_MODE, preflight, store_files


def sqlite_backup(source: Path, target: Path, *, replace: bool = False) -> int:
    """Copy ``source`` to ``target`` (0600) page by page, in steps, so writers are never held
    up for long; the copy is checked (``quick_check``) before it replaces ``target``. Returns
    the number of pages copied."""
    if not preflight(source):
        raise StoreNotFound(f"no store at {source}")
    if target.exists() and not replace:
        raise InvalidInput(f"{target} exists; pass --force to replace it")
    if target.resolve() in store_files(source.resolve()):
        raise InvalidInput("the backup must go to another file than the store's own")
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        os.close(fd)
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst, pages=1024)
            dst.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
            (verdict,) = dst.execute("PRAGMA quick_check").fetchone()
            pages = int(dst.execute("PRAGMA page_count").fetchone()[0])
        finally:
            dst.close()
            src.close()
        if verdict != "ok":
            raise CorruptStore(f"the copy of {source} does not pass its check: {verdict}")
        os.replace(partial, target)
    except sqlite3.DatabaseError as exc:
        raise StoreUnavailable(f"backup of {source} failed: {exc}") from exc
    except OSError as exc:
        raise StoreUnavailable(f"cannot write {target}: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return pages
