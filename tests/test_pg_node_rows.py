"""PostgreSQL's write functions insert a commit's tree nodes in time linear in their number: the
node rows are read as two slices unnested together, not element by element (an element of a
two-dimensional text array is found by walking the array from its start, so a commit of n nodes
cost n²: a new 20 MB member took 69 s, a 50 MB one ran past the 60 s statement timeout). Schema
version 41 defines them so, on a fresh store and on one migrated from version 40."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from stateflow.store import DocKey, Document, SqlStore, Write, open_store
from stateflow.store.check import check_store
from stateflow.store.migrations import SCHEMA_VERSION
from stateflow.store.plan import TREE_MIN

from .pg_helpers import assert_node_rows_read_as_slices
from .test_store_upgrade import _store_at


def _large(tag: str) -> dict[str, Any]:
    """A value of ~2 MiB: a tree of about a thousand nodes."""
    return {f"k{i:06d}{tag}": hashlib.sha256(f"{tag}{i}".encode()).hexdigest() * 2 for i in range(16_000)}


def _nodes(store: SqlStore) -> int:
    with store._read_tx() as tx:
        [(count,)] = tx.all("SELECT count(*) FROM nodes")
    return int(count)


@pytest.mark.parametrize("optimistic", [True, False], ids=["stateflow_commit", "stateflow_write_rows"])
def test_a_commit_of_a_thousand_nodes_writes_them_through_each_write_function(
    pg_schema_url: str, optimistic: bool
) -> None:
    store = open_store(pg_schema_url, auto_migrate=True)
    try:
        key = DocKey("s", "d")
        store.commit([Write.between(key, None, {"small": 1}, 0)])
        value = _large("a")
        assert len(orjson.dumps(value)) > 2 * TREE_MIN

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            body = docs[key].body or {}
            return [Write.between(key, body, {**body, "big": value}, docs[key].revision)], None

        # optimistic: the one-statement commit function; locked: the locked path's row writer
        store.update([key], compute, optimistic=optimistic)
        assert _nodes(store) > 1_000
    finally:
        store.close()
    store = open_store(pg_schema_url)  # read back from the nodes: nothing cached
    try:
        assert store.get(key).body == {"small": 1, "big": value}
        assert check_store(store).ok
    finally:
        store.close()


@pytest.mark.parametrize("since", [0, 40], ids=["fresh", "migrated_from_40"])
def test_the_write_functions_read_node_rows_as_slices(pg_schema_url: str, tmp_path: Path, since: int) -> None:
    if since:  # a store as version 40's release left it: its functions read each node row by subscript
        _store_at(since, pg_schema_url, tmp_path)
    store = open_store(pg_schema_url, auto_migrate=True)
    assert store.schema_version() == SCHEMA_VERSION
    store.close()
    assert_node_rows_read_as_slices(pg_schema_url)
