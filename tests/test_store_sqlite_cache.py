"""The embedded store's read cache never serves a document another process has changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stateflow.store import DocKey, Write, open_store
from stateflow.store.sqlite import SqliteStore, _CommitWatch

DOC = DocKey("notes", "shared")

WRITER = """
import sys
from stateflow.store import DocKey, Write, open_store
store = open_store(sys.argv[1])
doc = store.get(DocKey("notes", "shared"))
store.commit([Write.between(doc.key, doc.body, {"n": int(sys.argv[2])}, doc.revision)])
"""


def _write_from_another_process(path: Path, n: int) -> None:
    subprocess.run([sys.executable, "-c", WRITER, str(path), str(n)], check=True, timeout=60)


def test_a_commit_by_another_process_is_seen_by_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    store = open_store(str(path))
    store.commit([Write.between(DOC, None, {"n": 0})])
    for n in range(1, 4):
        assert store.get(DOC).body == {"n": n - 1}
        assert store.get(DOC).body == {"n": n - 1}  # served from the cache
        _write_from_another_process(path, n)
        assert store.get(DOC).body == {"n": n}  # no wait, no stale answer
    store.close()


def test_the_wal_index_header_moves_with_every_commit_and_only_then(tmp_path: Path) -> None:
    path = tmp_path / "watch.db"
    store = open_store(str(path))
    assert isinstance(store, SqliteStore)
    watch = _CommitWatch(path)
    before = watch.version()
    assert before is not None and len(before) == 48
    store.get(DOC)
    store.read([DOC], members=["x"])
    assert watch.version() == before  # reads commit nothing
    store.commit([Write.between(DOC, None, {"n": 1})])
    after = watch.version()
    assert after is not None and after != before
    _write_from_another_process(path, 2)
    assert watch.version() not in (None, after)
    watch.close()
    store.close()


def test_without_a_wal_index_the_watch_says_it_cannot_tell(tmp_path: Path) -> None:
    assert _CommitWatch(tmp_path / "missing.db").version() is None
    (tmp_path / "empty.db-shm").write_bytes(b"")
    assert _CommitWatch(tmp_path / "empty.db").version() is None


COUNTER = """
import sys
from stateflow.store import DocKey, Write, open_store
store = open_store(sys.argv[1])
key = DocKey("notes", "shared")
for _ in range(int(sys.argv[2])):
    doc = store.get(key)
    store.commit([Write.between(key, doc.body, {"n": doc.body["n"] + 1}, doc.revision)])
"""


def test_reads_racing_another_process_never_go_back_in_time(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    store = open_store(str(path))
    store.commit([Write.between(DOC, None, {"n": 0})])
    writer = subprocess.Popen([sys.executable, "-c", COUNTER, str(path), "300"])
    seen = 0
    while writer.poll() is None:
        doc = store.get(DOC)
        assert doc.body is not None and doc.body["n"] >= seen and doc.revision == doc.body["n"] + 1
        seen = doc.body["n"]
    assert writer.returncode == 0
    assert store.get(DOC).body == {"n": 300}  # the last commit is seen at once
    store.close()
