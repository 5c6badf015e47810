"""What one write's commit writes on SQLite, by b-tree, and what a different index or key would
save (issues 16, 17): WAL frames per write and instructions per write, for a declared-states
``apply`` (``bench_commit_floor``'s three-op batch), a LangGraph saver ``put`` of a new
checkpoint (four threads in turn, as ``bench_langgraph_adapters``; or one thread), its
``put_writes`` and a LangGraph store ``put`` (``bench_langgraph_adapters``' cases), a
three-scope ``patch_state`` (``bench_memory``'s), and the two ways a new document's key lands
in the documents' ``(state, subject)`` index: ``apply`` creating a record under a key above
every other (``new record, ascending keys``), and the saver's keys, each above its thread's
others (``saver put, one thread``: ids ascending since the saver's keys stopped inverting
them, which put each new key below its thread's others). One caller, ``synchronous=off``.

Frames: a store is filled by ``--fill`` writes, the variant is applied to the file, the WAL is
checkpointed empty and the automatic checkpoint turned off, then ``--writes`` more are made;
each frame header of the ``-wal`` file names its page, and ``dbstat`` names the page's b-tree.

Instructions (``--count``): each variant in a process of its own under ``valgrind
--tool=callgrind``, counted only while ``itertools.starmap`` makes the writes
(``--toggle-collect=starmap_next``, as ``profile_langgraph_instructions`` does), after
``--warm`` writes, the variant and 50 writes more; ``PYTHONHASHSEED=0``.

The variants change the file under the store's feet and none is a valid store: each bounds what
a schema step of that shape could save on the write, before the readers' side of it.

- ``no value index``: ``members_by_value`` dropped (what any key for it costs at most).
- ``value index on the raw body``: keyed by the member's stored bytes, no ``json_extract``.
- ``value index: strings raw, numbers cast``: strings by their stored bytes, numbers by
  ``CAST(body AS NUMERIC)`` (numbers still compared by value).
- ``value index: outline tested first``: the same entries, its ``WHERE`` testing ``outline IS
  NULL`` first (an object member's outline is never NULL, a scalar's always is), so a write of
  an object member skips the ``substr`` calls.
- ``changes keyed by seq``: ``changes`` rebuilt ``WITHOUT ROWID`` on ``(seq, doc_id,
  revision)``, so every change row appends at the tree's right edge instead of inside its
  document's range (where a full leaf is rebalanced with its neighbours).
- ``changes keyed by seq, doc index``: the same with the ``(doc_id, revision)`` index every
  history and as-of read would need.
- ``documents' key descending``: ``documents`` rebuilt with ``UNIQUE (state, subject DESC)``
  (its rows, ids and triggers as they were), so a key below its neighbours (the saver's
  newest checkpoint while its keys inverted the ids) lands at the end of its run in the
  index, and a key above them — the saver's now — at its start.
- ``whole form``: not a change of the file but of the store's choice: the LangGraph states'
  small documents kept in whole form (``SqlStore.keep_whole`` on ``langgraph_checkpoints`` and
  ``langgraph_store``) from the store's first write on — a valid store, the layout of
  ``docs/store-v5-design.md`` 1a. A tree without ``keep_whole`` writes member form. Since the
  adapters ask for it at their open (C5) it is what ``as written`` writes too.
- ``member form``: the other way round, a valid store too: the LangGraph states kept in member
  rows (``keep_whole(state, 0)`` before the adapters open, which they leave), as before C5.

``--checkpoints N``: the saver's ``put_writes`` writes on the checkpoints of ``N`` puts, in turn
(60 by default), so ``--fill`` sets how many tasks each already has before the count (``--fill
1000``: ~17, past whole form's bound; ``--checkpoints 300 --fill 300``: one).

    python3 -m benchmarks.profile_sqlite_commit_pages [--writes apply "saver put" patch_state]
        [--variants NAME ...] [--fill 2000] [--ops 300] [--count] [--warm 300]
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import sqlite3
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import callgrind
from stateflow.store.migrations import SQLITE_VALUE
from stateflow.store.plan import WHOLE_ROW_MAX

MODULE = "benchmarks.profile_sqlite_commit_pages"
WRITES = (
    "apply",
    "saver put",
    "patch_state",
    "saver put, one thread",
    "saver put_writes",
    "store put",
    "new record, ascending keys",
)
_SCALAR = "root IS NULL AND size <= 1024 AND (substr(body, 1, 1) BETWEEN x'2d' AND x'39' OR substr(body, 1, 1) = x'22')"
_BY_SEQ = """
PRAGMA foreign_keys = OFF;
BEGIN;
ALTER TABLE changes RENAME TO changes_before;
CREATE TABLE changes (doc_id BIGINT NOT NULL, revision BIGINT NOT NULL, seq BIGINT NOT NULL, paths BLOB,
    edits BLOB, PRIMARY KEY (seq, doc_id, revision)) WITHOUT ROWID;
INSERT INTO changes SELECT doc_id, revision, seq, paths, edits FROM changes_before ORDER BY seq, doc_id;
DROP TABLE changes_before;
COMMIT;
"""
VARIANTS: dict[str, str] = {
    "as written": "",
    "no value index": "DROP INDEX members_by_value;",
    "value index on the raw body": (
        f"DROP INDEX members_by_value; CREATE INDEX members_by_value ON members (name, body) WHERE {_SCALAR};"
    ),
    "value index: strings raw, numbers cast": (
        "DROP INDEX members_by_value; CREATE INDEX members_by_value ON members (name, CASE WHEN "
        f"substr(body, 1, 1) = x'22' THEN body ELSE CAST(body AS NUMERIC) END) WHERE {_SCALAR};"
    ),
    "value index: outline tested first": (
        "DROP INDEX members_by_value; CREATE INDEX members_by_value ON members (name, "
        f"{SQLITE_VALUE.format(m='')}) WHERE outline IS NULL AND {_SCALAR};"
    ),
    "changes keyed by seq": _BY_SEQ,
    "changes keyed by seq, doc index": _BY_SEQ + "CREATE INDEX changes_by_doc ON changes (doc_id, revision);",
    "documents' key descending": "",  # (by _descending: the table's triggers are read first)
    "whole form": "",  # (by _service: from the store's first write on)
    "member form": "",  # (by _service, as "whole form")
}
LANGGRAPH_STATES = ("langgraph_checkpoints", "langgraph_store")
FRAME = 4096 + 24
"""Bytes of one WAL frame (the default page size and its header)."""


def wal_pages(path: str | Path) -> list[int]:
    """The page number of every frame in ``path``'s ``-wal`` file, in the order written (a frame
    is a 24-byte header, whose first four bytes name the page, and the page)."""
    data = Path(f"{path}-wal").read_bytes()
    return [struct.unpack(">I", data[at : at + 4])[0] for at in range(32, len(data) - FRAME + 1, FRAME)]


def writer(kind: str, service: Any, tmp: str, checkpoints: int = 60) -> Callable[[int], object]:
    """The write of ``kind`` made with ``i``: each call a new value (and for a saver ``put`` a
    new checkpoint; a ``put_writes`` a new task on one of ``checkpoints``, in turn)."""
    if kind == "apply":
        from benchmarks.bench_states_vs_langgraph import DECL, ops_for, subject

        service.declare("bench", DECL)
        return lambda i: service.apply("bench", subject(i), ops_for(i))
    if kind == "new record, ascending keys":
        from benchmarks.bench_states_vs_langgraph import DECL, ops_for, subject

        service.declare("bench", DECL)
        return lambda i: service.apply("bench", {**subject(0), "key": f"t{i:08d}"}, ops_for(i))
    if kind.startswith("saver"):
        from benchmarks.bench_langgraph_adapters import saver_cases
        from stateflow.langgraph import StateflowSaver

        cases = saver_cases(StateflowSaver(service), "p", threads=1 if kind.endswith("one thread") else 4)
        if kind == "saver put_writes":  # (on the checkpoints of that many puts, in turn)
            for i in range(checkpoints):
                cases["saver put"](i)
            return cases["saver put_writes"]
        return cases["saver put"]
    if kind == "store put":
        from benchmarks.bench_langgraph_adapters import store_cases
        from stateflow.langgraph import StateflowStore

        return store_cases(StateflowStore(service), "s")["store put"]
    from stateflow.memory import Identity, MemoryView

    view = MemoryView(service.store, Identity.of("bench", tmp, "s"))
    return lambda i: view.patch_state(
        {
            "global": {"strategy": {"style": f"v{i}"}},
            "cwd": {"tactics": {"build": f"ok {i}"}},
            "session": {"tactics": {"next": f"step {i}"}, "intents": {"ship": {"goal": f"release {i}"}}},
        }
    )


def _service(tmp: str, variant: str = "as written") -> Any:
    from stateflow.states import StatesService
    from stateflow.store import open_store

    store = open_store(f"sqlite:///{tmp}/pages.db?synchronous=off", auto_migrate=True)
    keep_whole = getattr(store, "keep_whole", None)
    if variant in ("whole form", "member form") and keep_whole is not None:
        for state in LANGGRAPH_STATES:  # (a choice recorded before the adapters open stands)
            keep_whole(state, 0 if variant == "member form" else WHOLE_ROW_MAX)
    return StatesService(store)


_DOCUMENTS_DESCENDING = """
CREATE TABLE documents_before AS SELECT * FROM documents;
DROP TABLE documents;
CREATE TABLE documents (
    doc_id INTEGER PRIMARY KEY AUTOINCREMENT,
    state TEXT NOT NULL,
    subject TEXT NOT NULL,
    revision BIGINT NOT NULL DEFAULT 0,
    present SMALLINT NOT NULL DEFAULT 0,
    updated_seq BIGINT,
    snapshot_revision BIGINT NOT NULL DEFAULT 0,
    bytes_since_snapshot BIGINT NOT NULL DEFAULT 0,
    body_size BIGINT NOT NULL DEFAULT 0,
    next_position BIGINT NOT NULL DEFAULT 0,{body}
    UNIQUE (state, subject DESC)
);
INSERT INTO documents SELECT * FROM documents_before ORDER BY doc_id;
DROP TABLE documents_before;
"""


def _descending(conn: sqlite3.Connection) -> None:
    """``documents`` rebuilt with its key's subject descending (foreign keys off: dropping the
    table would otherwise delete every row that refers to it), its triggers made again."""
    triggers = [
        f"{sql};"
        for (sql,) in conn.execute(
            "SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'documents'"
        )
    ]
    columns = {row[1] for row in conn.execute("PRAGMA table_info(documents)")}
    rebuilt = _DOCUMENTS_DESCENDING.format(body="\n    body BLOB," if "body" in columns else "")
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.executescript("\n".join(["BEGIN;", rebuilt, *triggers, "COMMIT;"]))
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


def _vary(path: str, variant: str) -> None:
    if variant == "documents' key descending":
        conn = sqlite3.connect(path, isolation_level=None)
        _descending(conn)
        conn.close()
    elif VARIANTS[variant]:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.executescript(VARIANTS[variant])
        conn.close()


def frames(
    kind: str, variant: str, fill: int, ops: int, checkpoints: int = 60
) -> tuple[float, collections.Counter[str]]:
    """WAL frames per write of ``ops`` writes after ``fill``, and per write by b-tree."""
    with tempfile.TemporaryDirectory() as tmp:
        service = _service(tmp, variant)
        write = writer(kind, service, tmp, checkpoints)
        for i in range(fill):
            write(i)
        path = f"{tmp}/pages.db"
        _vary(path, variant)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for own in service.store._all:
            own.execute("PRAGMA wal_autocheckpoint = 0")
        for i in range(fill, fill + ops):
            write(i)
        pages = wal_pages(path)
        names = dict(conn.execute("SELECT pageno, name FROM dbstat"))
        conn.close()
        service.close()
        service.store.close()
    by_tree = collections.Counter(names.get(page, "(a page allocated since)") for page in pages)
    return len(pages) / ops, by_tree


def _work(kind: str, variant: str, ops: int, warm: int) -> None:
    """The counted process: ``warm`` writes, the variant, 50 writes, then ``ops`` counted."""
    with tempfile.TemporaryDirectory() as tmp:
        service = _service(tmp, variant)
        write = writer(kind, service, tmp)
        for i in range(warm):
            write(i)
        _vary(f"{tmp}/pages.db", variant)
        for i in range(warm, warm + 50):
            write(i)
        gc.collect()
        gc.freeze()
        for _ in itertools.starmap(write, ((i,) for i in range(10_000, 10_000 + ops))):
            pass
        service.close()
        service.store.close()


def instructions(kind: str, variant: str, ops: int, warm: int) -> float:
    """Instructions per write (callgrind, counted inside the loop only)."""
    return callgrind.count(MODULE, ["--work", kind, variant, str(ops), str(warm)]) / ops


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--work":
        _work(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--writes", nargs="+", default=list(WRITES), choices=WRITES)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--fill", type=int, default=2000, help="writes before the frames are counted")
    parser.add_argument("--ops", type=int, default=300, help="writes counted")
    parser.add_argument("--count", action="store_true", help="also count instructions (callgrind)")
    parser.add_argument("--warm", type=int, default=300, help="writes before instructions are counted")
    parser.add_argument("--checkpoints", type=int, default=60, help="checkpoints put_writes writes on")
    args = parser.parse_args()
    for kind in args.writes:
        base: float | None = None
        for variant in args.variants:
            per_write, by_tree = frames(kind, variant, args.fill, args.ops, args.checkpoints)
            trees = ", ".join(f"{name} {n / args.ops:.2f}" for name, n in by_tree.most_common())
            line = f"{kind:12s} {variant:40s} WAL frames {per_write:5.2f} per write ({trees})"
            if args.count:
                counted = instructions(kind, variant, args.ops, args.warm)
                base = counted if base is None else base
                line += f"; {counted:,.0f} instructions ({counted / base:.3f}x the first variant)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
