"""The embedded store's WAL checkpoint policy: a commit checkpoints the log once it holds
``sqlite_file.WAL_PAGES`` frames (not SQLite's default 1,000), the log then starts over, and a
log grown past its bound (a reader holding an old snapshot) is truncated back to it when it next
starts over; writers of two processes and a writer killed with a long log lose nothing."""

from __future__ import annotations

import itertools
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from stateflow.store import DocKey, Write
from stateflow.store.sqlite import SqliteStore
from stateflow.store.sqlite_file import WAL_FRAME_HEADER, WAL_HEADER, WAL_KEPT_CYCLES, WAL_PAGES

PAGE = 4096
SQLITE_DEFAULT_PAGES = 1000


def _log_frames(db: Path) -> int:
    """Frames in the current log: ``mxFrame`` of the WAL-index header (bytes 16–19 of the
    ``-shm`` file, in the machine's order: SQLite's documented WAL-index format)."""
    return int.from_bytes(Path(f"{db}-shm").read_bytes()[16:20], sys.byteorder)


def _bound(pages: int) -> int:
    return WAL_HEADER + WAL_KEPT_CYCLES * pages * (PAGE + WAL_FRAME_HEADER)


def test_the_log_holds_wal_pages_frames_before_a_checkpoint_starts_it_over(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = SqliteStore(db, synchronous="off")
    try:
        seen: list[int] = []
        for i in range(400):  # ~8 frames a commit: the log passes WAL_PAGES once or more
            store.commit([Write.between(DocKey("s", f"d{i}"), None, {"text": "x" * 12_000, "n": i})])
            seen.append(_log_frames(db))
        most = max(seen)
        assert most > SQLITE_DEFAULT_PAGES * 2  # not checkpointed at SQLite's default
        assert most < WAL_PAGES + 50  # checkpointed at WAL_PAGES (plus the crossing commit)
        assert any(later < earlier for earlier, later in itertools.pairwise(seen))  # started over
        assert store.get(DocKey("s", "d399")).body == {"text": "x" * 12_000, "n": 399}
    finally:
        store.close()


def test_a_log_grown_past_its_bound_is_truncated_back_when_it_starts_over(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = SqliteStore(db, synchronous="off", wal_pages=100)
    try:
        store.commit([Write.between(DocKey("s", "first"), None, {"n": 0})])
        reader = sqlite3.connect(db, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM documents").fetchone()  # a snapshot the log must keep
        for i in range(12):
            store.commit([Write.between(DocKey("s", f"big{i}"), None, {"text": "y" * 100_000})])
        wal = Path(f"{db}-wal")
        assert wal.stat().st_size > _bound(100)  # nothing could be copied back while it read
        reader.execute("ROLLBACK")
        reader.close()
        for i in range(3):  # the first checkpoints the whole log, the next starts it over
            store.commit([Write.between(DocKey("s", f"small{i}"), None, {"n": i})])
        assert wal.stat().st_size <= _bound(100)
        assert store.get(DocKey("s", "big11")).body == {"text": "y" * 100_000}
        assert store.get(DocKey("s", "small2")).body == {"n": 2}
    finally:
        store.close()


_WRITER = textwrap.dedent(
    """
    import sys
    from stateflow.store import DocKey, Write
    from stateflow.store.sqlite import SqliteStore

    db, name, n, pages = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = SqliteStore(db, synchronous=sys.argv[5], wal_pages=pages)
    for i in range(n):
        store.commit([Write.between(DocKey("s", f"{name}{i}"), None, {"text": "z" * 6_000, "i": i})])
        print(i, flush=True)
    store.close()
    """
)


def _writer(db: Path, name: str, n: int, pages: int, synchronous: str = "off") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db), name, str(n), str(pages), synchronous],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_two_processes_writing_through_checkpoints_lose_nothing_and_keep_the_log_bounded(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    SqliteStore(db, synchronous="off").close()  # (created and migrated before both start)
    writers = [_writer(db, name, 150, 40) for name in ("a", "b")]
    for writer in writers:
        writer.communicate(timeout=120)
        assert writer.returncode == 0
    store = SqliteStore(db, synchronous="off", wal_pages=40)
    try:
        for name in ("a", "b"):
            for i in range(150):
                assert store.get(DocKey("s", f"{name}{i}")).body == {"text": "z" * 6_000, "i": i}
        for i in range(3):
            store.commit([Write.between(DocKey("s", f"last{i}"), None, {"n": i})])
        assert Path(f"{db}-wal").stat().st_size <= _bound(40)
    finally:
        store.close()


def test_a_writer_killed_with_a_log_past_sqlites_default_loses_no_acknowledged_write(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    SqliteStore(db).close()
    writer = _writer(db, "k", 10_000, WAL_PAGES, synchronous="full")
    assert writer.stdout is not None
    acknowledged = frames = -1
    for line in writer.stdout:  # ~20 frames a commit: killed once the log holds twice SQLite's default
        acknowledged = int(line)
        frames = _log_frames(db)
        if frames > 2 * SQLITE_DEFAULT_PAGES or acknowledged == 600:
            break
    writer.send_signal(signal.SIGKILL)
    rest, _ = writer.communicate(timeout=60)
    acknowledged = max([acknowledged, *(int(line) for line in rest.split())])
    assert frames > 2 * SQLITE_DEFAULT_PAGES  # the log was longer than SQLite's default lets it grow
    store = SqliteStore(db)
    try:
        for i in range(acknowledged + 1):
            assert store.get(DocKey("s", f"k{i}")).body == {"text": "z" * 6_000, "i": i}
    finally:
        store.close()
