"""The rows a write leaves — history and audit included — pinned byte for byte.

A LangGraph store ``put`` (a new item, then the item replaced), a saver ``put`` and
``put_writes``, and ``update`` writes of a plain document (created, a member changed with
numbers of three types — ``1``, ``1.0`` and ``True`` differ —, a member added, one deleted, the
document deleted and written again) on a new store of each backend: every row of
``documents``, ``members``, ``changes``, ``change_edits``, ``change_paths``, ``snapshots``,
``snapshot_members`` and ``transitions`` (its time left out; the bodies' times replaced by a
placeholder of the same width) is digested and compared with the digest the write paths gave
before the plan was made leaner. A changed row — a byte of a body, an edit, a path, a size,
a revision, a counter, an origin — changes the digest; the rows are printed on failure.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson
import pytest

from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import DocKey, Document, Write
from stateflow.store.base import SqlStore
from stateflow.store.plan import NONE, Fresh
from tests.conftest import StoreFactory

_TABLES = {
    "documents": "doc_id, state, subject, revision, present, updated_seq, snapshot_revision, "
    "bytes_since_snapshot, body_size, next_position",
    "members": "doc_id, name, position, revision, size, outline, body, root",
    "changes": "doc_id, revision, seq, paths, edits",
    "change_edits": "doc_id, revision, member, edits, roots, ord",
    "snapshots": "doc_id, revision, body",
    "snapshot_members": "doc_id, name, revision, body, root",
}

_EXPECTED = {  # (the write paths as they were before: the same digests; since a declaration makes its
    # aliases' row, one more documents row; since declarations keep ``retention_exempt``, one more
    # member in each of the two adapters' declarations; since schema 37, ``change_edits.ord``
    # pinned too — 0 in every row here: each change kept apart holds one member's edits; since a
    # declaration can name its record rule, ``record_rule`` in the store adapter's declaration;
    # since the saver keys checkpoints ascending, each checkpoint's and writes' subject holds its
    # id's UTF-8 in hex, not the inverted id: only those six subjects differ; since the adapters
    # keep their records in whole form on SQLite, ``documents.body`` pinned there too, and the
    # adapters' records there are their body alone, no member rows, and a new one's change the mark;
    # since schema 45 the writes records' entries ``[channel, value, task_path]`` in ``p0`` … ``pf``:
    # only their bodies, sizes and edits differ)
    "sqlite": "427bc50423b9644328d6a9aa294d16fcbdb822d2b503c5a3d6909a9b404be29b",
    "postgres": "eb1f6ad867eba6121570258df10db5b2ab2fc906e138d3011166078773e74f4e",
}

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")


def _plain(value: Any) -> Any:
    """A cell as comparable text: bytes decoded (times in them replaced), booleans as 0/1."""
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(value, bytes):
        return _TIME.sub("<time>", value.decode("utf-8", "backslashreplace"))
    if isinstance(value, str):
        return _TIME.sub("<time>", value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict | list):
        return _TIME.sub("<time>", orjson.dumps(value).decode())
    return value


def _rows(store: SqlStore, sqlite: bool) -> dict[str, list[list[Any]]]:
    tables = dict(_TABLES)
    tables["transitions"] = "seq, origin" + (", changed" if sqlite else "")
    if sqlite:
        tables["change_paths"] = "doc_id, revision, paths"
        tables["documents"] += ", body"  # (a whole-form record's body: the LangGraph adapters')
    out = {}
    with store._read_tx() as tx:
        for table, columns in tables.items():
            rows = tx.all(f"SELECT {columns} FROM {table}")
            out[table] = sorted(([_plain(v) for v in row] for row in rows), key=repr)
    return out


def _drive(store: SqlStore) -> None:
    service = StatesService(store)
    items, saver = StateflowStore(service), StateflowSaver(service)
    items.put(("users", "u1"), "prefs", {"theme": "dark", "n": 1, "tags": ["a", "b"]})
    items.put(("users", "u1"), "prefs", {"theme": "light", "n": 1.0, "tags": ["a", "b"], "x": True})
    items.put(("users", "u1"), "other", {"deep": {"list": [1, 2, {"k": None}]}})
    items.put(("users", "u1"), "other", {"deep": {"list": [1, 2, {"k": "v" * 700}]}})  # edits apart
    config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    for n in range(3):
        checkpoint: Any = {
            "v": 4,
            "id": f"1f0c0000-0000-7000-8000-00000000000{n}",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"messages": [f"m{i}" for i in range(n + 1)], "step": n, "plan": {"next": n}},
            "channel_versions": {"messages": n + 1, "step": n + 1, "plan": 1},
            "versions_seen": {"node": {"messages": n}},
            "updated_channels": ["messages", "step"],
        }
        config = saver.put(
            config, checkpoint, {"source": "loop", "step": n, "parents": {}}, {"messages": n + 1}
        )
        saver.put_writes(config, [("messages", f"reply {n}"), ("step", n)], f"task-{n}")
        saver.put_writes(config, [("plan", {"next": n + 1})], f"task-{n}b", "path")

    key = DocKey("notes", "n1")

    def setting(body: dict[str, Any] | None) -> Any:
        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            doc = docs[key]
            return [Write.between(key, doc.body, body, doc.revision)], None

        return compute

    for body in (
        {"a": 1, "b": {"c": [1, 2]}},
        {"a": 1.0, "b": {"c": [1, 2, 3]}},
        {"a": True, "b": {"c": [1, 2, 3]}, "d": "new"},
        {"b": {"c": []}, "d": "new"},
        None,
        {"e": {"f": "again"}},
        {"e": {"f": "again"}, "big": "x" * 5000},
        {"e": {"f": "again"}, "big": "y" * 5000},  # a snapshot due
    ):
        store.update([key], setting(body), {"by": "test"})
    for n in range(3):  # optimistic and locked, one member each
        store.update(
            [key],
            setting({"e": {"f": "again"}, "g": n}),
            {"by": "test", "n": n},
            optimistic=n % 2 == 0,
        )


def test_a_puts_a_saver_puts_and_an_updates_rows_are_as_before(
    open_migrated: StoreFactory, backend: str
) -> None:
    store = open_migrated()
    sqlite = not backend.startswith("postgres")
    _drive(store)
    rows = _rows(store, sqlite)
    digest = hashlib.sha256(orjson.dumps(rows)).hexdigest()
    print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())  # (shown where it fails)
    assert all(rows[t] for t in ("documents", "members", "changes", "change_edits", "snapshots"))
    assert digest == _EXPECTED["sqlite" if sqlite else "postgres"], digest


def test_what_a_write_leaves_empty_is_one_shared_read_only_empty(open_migrated: StoreFactory) -> None:
    """Rows and caches a write leaves empty start as ``plan.NONE`` — never filled, whatever
    the writes (members held as trees, their nodes and roots, deletes, bodies kept) — and a
    write that fills one makes its own."""
    store = open_migrated()
    _drive(store)
    key = DocKey("notes", "tree")
    huge = {f"k{i}": "v" * 100 for i in range(11_000)}  # over TREE_MIN: a tree of nodes
    for body in ({"huge": huge, "small": 1}, {"huge": {**huge, "k1": "w"}, "small": 2}, {"small": 3}, None):

        def compute(docs: dict[DocKey, Document], body: Any = body) -> tuple[list[Write], None]:
            doc = docs[key]
            return [Write.between(key, doc.body, body, doc.revision)], None

        store.update([key], compute, {"by": "test"})
    assert store.get(key).body is None
    assert dict(NONE) == {}
    with pytest.raises(TypeError):
        NONE[b"x"] = b"y"  # type: ignore[index]
    one, other = Fresh(), Fresh()
    assert one.roots is NONE and one.nodes is NONE and one.bodies is NONE
    one.keep_roots(1, (2, {"a": b"r"}))
    one.keep_nodes({b"n": b"{}"})
    one.keep_body(1, (2, {"a": 1}, 7))
    assert one.roots == {1: (2, {"a": b"r"})} and one.nodes == {b"n": b"{}"} and one.bodies[1][2] == 7
    assert other.roots is NONE and other.nodes is NONE and other.bodies is NONE and dict(NONE) == {}
    one.clear()
    assert one.roots is NONE and one.nodes is NONE and one.bodies is NONE
