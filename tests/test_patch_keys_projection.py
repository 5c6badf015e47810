"""``read_state`` of a scope patch (``session.patches[k]``) with the ``keys`` projection reads
what the keys need, not the whole change: a value the change set that is kept as a tree (over
1 MiB) is known by its root node alone — on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateflow.errors import CorruptStore, StateflowError
from stateflow.memory import Identity, MemoryView
from tests.conftest import StoreFactory


def test_the_keys_of_a_patch_read_only_the_root_of_a_value_it_set_as_a_tree(
    open_migrated: StoreFactory, tmp_path: Path
) -> None:
    store = open_migrated()
    who = Identity.of("keys", str(tmp_path), "s")
    m = MemoryView(store, who)
    big = [{"n": i, "s": "x" * 40} for i in range(40_000)]  # ~2 MB: kept as a tree
    m.patch_state({"session": {"lazy": {"big": big}, "tactics": {"t": 1}}})
    m.patch_state({"session": {"tactics": {"u": 2}, "intents": {"i": {"goal": "g"}}}})
    keys = {"path": "session.patches[1]", "projection": "keys"}
    expected = {"meta": {"type": "object", "size": 2}, "keys": {"lazy": "object", "tactics": "object"}}
    assert m.read_state(keys) == expected
    assert m.read_state({"path": "session.patches[0]", "projection": "keys"})["keys"] == {
        "tactics": "object",
        "intents": "object",
    }
    with store._read_tx() as tx:
        (root,) = tx.one("SELECT root FROM members WHERE name = 'lazy'") or (None,)
        total = int(tx.one("SELECT count(*) FROM nodes")[0])  # type: ignore[index]
    assert root is not None and total > 100
    store.close()
    with open_migrated()._write_tx() as tx:  # every node but the tree's root gone
        tx.run("DELETE FROM nodes WHERE id <> ?", (bytes(root),))
    fresh = MemoryView(open_migrated(), who)
    assert fresh.read_state(keys) == expected  # the root alone says the value is an object
    with pytest.raises((CorruptStore, StateflowError)) as broken:
        fresh.read_state({"path": "session.patches[1]"})  # the value itself needs the whole tree
    assert broken.value.code in ("corrupt-store", "corrupt-data")
