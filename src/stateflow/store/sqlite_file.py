"""A SQLite store's file before SQLite opens it: the checks that refuse a file which cannot be a
healthy store (:func:`preflight`), and read-only connections (the store's, ``check``'s and
``backup``'s), which fall back to the file alone where SQLite cannot keep its WAL index.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final
from urllib.parse import quote

from stateflow.errors import (
    CorruptStore,
    StorePermissionDenied,
    StoreReadOnly,
    StoreUnavailable,
    UnsupportedStore,
)

WAL_MAGIC: Final = (0x377F0682, 0x377F0683)
"""The first four bytes of a WAL file (big-endian), by checksum byte order."""

_held: dict[tuple[int, int], int] = {}
"""Files (device, inode) this process has connections to, with how many holders."""
_held_lock = threading.Lock()


def preflight(path: Path) -> bool:
    """Whether the store file exists; refuses at once (no lock wait) a file that cannot be the one
    its write-ahead log was written for: an empty file next to a WAL that holds data, or one
    whose header says it is not in WAL mode (what ``stateflow backup`` writes) or has another page
    size than the WAL. Replaying that WAL would write its pages over the file."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    except PermissionError:
        raise StorePermissionDenied(f"permission denied: cannot look at {path}") from None
    except NotADirectoryError:  # (no store can be made there either: said now, not as a traceback)
        raise StoreUnavailable(f"cannot open {path}: a folder on its path is a file") from None
    if stat.st_size > 0:
        with _held_lock:
            if (stat.st_dev, stat.st_ino) not in _held:  # (read only while no lock is held: below)
                _refuse_foreign(path)
    wal = Path(f"{path}-wal")
    if not wal_has_data(path):
        return True
    if stat.st_size == 0:
        # a file we create holds its header before anything goes to the WAL: an empty file next
        # to a WAL was truncated or replaced
        raise CorruptStore(
            f"{path} is empty but {wal.name} holds data: the file was truncated or replaced; "
            "restore it from a backup (or move the -wal and -shm files away to start empty)",
            advised=True,
        )
    with _held_lock:
        # Closing any descriptor of a file drops every POSIX lock this process holds on it — the
        # locks SQLite's connections here rely on: the header is read only while there are none
        # (the first open in this process, which is when a replaced file shows).
        if (stat.st_dev, stat.st_ino) not in _held:
            why = _not_the_wals_file(path, wal)
            if why is not None:
                raise CorruptStore(
                    f"{path} was replaced under its write-ahead log ({why}): {wal.name} holds "
                    "commits of the file that was there before, and replaying them would write "
                    f"stale pages over this one. If {path.name} is a restored backup, move "
                    f"{wal.name} and {path.name}-shm away (they belong to the old file); else "
                    "restore from a backup",
                    advised=True,
                )
    return True


SQLITE_MAGIC: Final = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file"""


def _refuse_foreign(path: Path) -> None:
    """Refuse a file that is no SQLite database and was never opened as a store (a dump, a JSON
    file, a mistyped path): SQLite calls it "not a database", which would be reported as a
    damaged store with advice to restore a backup, when the location most likely names the wrong
    file. A file a store left its -wal, -shm or -writer beside was one: its header overwritten
    is damage, reported as such, as are bad pages behind a good header."""
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError:
        return  # SQLite says what is wrong when it opens the file
    if head == SQLITE_MAGIC or any(Path(f"{path}{end}").exists() for end in ("-wal", "-shm", "-writer")):
        return
    from stateflow.store.open import display_location  # (named as every message names a store)

    hint = " (it is a stateflow dump: load it into a store with `stateflow load`)"
    raise UnsupportedStore(
        f"{display_location(str(path), absolute=True)} is not a SQLite database, so not a stateflow store; is the store location the right "
        f"file?{hint if head.startswith(DUMP_START) else ''}"
    )


DUMP_START: Final = b'{"format"'
"""How a stateflow dump's first line starts"""


def _not_the_wals_file(path: Path, wal: Path) -> str | None:
    """Why the file's header cannot be that of the database its WAL belongs to (None: it can).
    A store in WAL mode records it in its header (bytes 18 and 19 are 2) before any commit goes
    to the WAL, so a file in rollback-journal mode next to a WAL holding data was put there after;
    and a WAL's frames are pages of the database's page size."""
    try:
        with path.open("rb") as fh:
            header = fh.read(100)
        with wal.open("rb") as fh:
            wal_header = fh.read(32)
    except OSError:
        return None  # SQLite says what is wrong when it opens the file
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00") or len(wal_header) < 32:
        return None  # not a database, or a WAL SQLite will ignore: the open says so
    if int.from_bytes(wal_header[:4], "big") not in WAL_MAGIC:
        return None
    if header[18] != 2 or header[19] != 2:
        return "the file is in rollback-journal mode, as a backup copy is"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    wal_page_size = int.from_bytes(wal_header[8:12], "big")
    if wal_page_size != page_size:
        return f"its pages are {page_size} bytes, the log's {wal_page_size}"
    return None


@contextmanager
def holding(path: Path) -> Iterator[None]:
    """Mark ``path`` as held by connections of this process (see :func:`preflight`) while the
    block runs: :func:`hold` and :func:`release` for a scope."""
    held = hold(path)
    try:
        yield
    finally:
        release(held)


def hold(path: Path) -> tuple[int, int] | None:
    """Mark the existing file ``path`` as held by this process's connections, before they open
    it; returns what :func:`release` takes back (None: no file)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (stat.st_dev, stat.st_ino)
    with _held_lock:
        _held[key] = _held.get(key, 0) + 1
    return key


def release(key: tuple[int, int] | None) -> None:
    if key is None:
        return
    with _held_lock:
        left = _held.get(key, 0) - 1
        if left > 0:
            _held[key] = left
        else:
            _held.pop(key, None)


def read_only_uri(path: Path, *, immutable: bool = False) -> str:
    """A read-only URI naming exactly ``path``: quoted, so that ``%``, ``#`` or ``?`` in a file
    name are part of the name (unquoted, ``one%41.db`` names ``oneA.db`` and ``r#1.db`` names
    ``r``)."""
    where = ("//" if path.is_absolute() else "") + quote(str(path))
    return f"file:{where}?mode=ro" + ("&immutable=1" if immutable else "")


def connect_read_only(path: Path, *, timeout: float) -> sqlite3.Connection:
    """A read-only connection to ``path``, its header read. In a directory where SQLite cannot
    create the WAL index (``-shm``) the file is read alone (immutable) when its WAL holds
    nothing; a WAL with commits cannot be read without its index, so that is refused
    (``store-read-only`` naming the fix) rather than served without them. Other SQLite errors
    are raised as they are."""
    conn = sqlite3.connect(
        read_only_uri(path), uri=True, isolation_level=None, timeout=timeout, check_same_thread=False
    )
    try:
        conn.execute("PRAGMA schema_version").fetchone()  # reads the header: damage shows here
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        if not no_wal_index(exc):
            raise
        if wal_has_data(path):
            raise StoreReadOnly(
                f"{path} is read-only and its -wal file holds commits that cannot be read "
                "without a -shm file: open it once where it is writable (which checkpoints the "
                "WAL), or copy the files to a writable place first"
            ) from exc
    except BaseException:
        conn.close()
        raise
    conn = sqlite3.connect(
        read_only_uri(path, immutable=True),
        uri=True,
        isolation_level=None,
        timeout=timeout,
        check_same_thread=False,
    )
    try:
        conn.execute("PRAGMA schema_version").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def no_wal_index(exc: sqlite3.OperationalError) -> bool:
    """Whether a read-only open failed only for want of the WAL index file: SQLite says "unable
    to open" or, when the -shm file cannot be created, SQLITE_READONLY_CANTINIT."""
    text = str(exc)
    return "unable to open" in text or "readonly" in text or "read-only" in text


WAL_PAGES: Final = 4000
"""WAL frames at which a commit checkpoints the log into the database (SQLite's default is
1,000). Each checkpoint copies every page written since the last one once, however often it was
rewritten, and syncs the database file; a commit that finds the log fully copied and no reader
in it starts writing from its beginning again, syncing the log's new header. So a longer log
copies fewer pages per write — the pages every commit rewrites (the tables' right edges, a
rewritten item's leaf) once per 4,000 frames instead of per 1,000 — and syncs three times per
cycle less often. 4,000 keeps the log within the WAL index's first hash table (4,062 frames):
a reader looking a page up probes one table, as at 1,000 (with no bound at all, every page
read walks a table per 4,062 frames)."""

WAL_KEPT_CYCLES: Final = 2
"""A log grown past this many checkpoint cycles (a reader that held its snapshot while writers
went on, one very large transaction) is truncated back to that size when it next starts over
(``journal_size_limit``); below it, the file is kept and rewritten in place, which syncs no
change of its size."""


def keep_wal_bounded(conn: sqlite3.Connection, pages: int = WAL_PAGES) -> None:
    """Set a writable connection's checkpoint threshold (``pages`` WAL frames) and the size its
    log file is truncated back to when it starts over (``WAL_KEPT_CYCLES`` times that)."""
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")
    conn.execute(
        f"PRAGMA journal_size_limit = {WAL_HEADER + WAL_KEPT_CYCLES * int(pages) * (page_size + WAL_FRAME_HEADER)}"
    )


WAL_HEADER: Final = 32
"""bytes of a WAL file's header"""
WAL_FRAME_HEADER: Final = 24
"""bytes of each WAL frame's header, before its page"""


def wal_has_data(path: Path) -> bool:
    with suppress(OSError):
        return Path(f"{path}-wal").stat().st_size > 0
    return False
