"""Content-addressed trees: exact round trips, path reads, sharing between versions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.diff import Edit, apply_edits
from stateflow.errors import CorruptData
from stateflow.store.tree import INLINE_MAX, Builder, children, load, load_path

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=400),
    lambda inner: st.lists(inner, max_size=60) | st.dictionaries(st.text(max_size=8), inner, max_size=40),
    max_leaves=400,
)


def _store() -> dict[bytes, bytes]:
    return {}


def _built(value: Any, nodes: dict[bytes, bytes], builder: Builder | None = None) -> bytes | None:
    built = (builder or Builder()).build(value)
    nodes.update(built.nodes)
    return built.root


@settings(max_examples=40)
@given(json_values)
def test_every_value_reads_back_exactly(value: Any) -> None:
    nodes = _store()
    built = Builder().build(value)
    nodes.update(built.nodes)
    if built.root is None:
        assert built.inline is not None
        return
    assert load(built.root, lambda ids: {i: nodes[i] for i in ids if i in nodes}) == value


def big() -> dict[str, Any]:
    return {
        "big": [f"{i:06d} " + "x" * 60 for i in range(20_000)],
        "obj": {f"k{i}": {"n": i, "s": "y" * 30} for i in range(5_000)},
    }


def test_a_large_value_is_cut_into_small_nodes_and_paths_read_few_of_them() -> None:
    nodes = _store()
    value = big()
    root = _built(value, nodes)
    assert root is not None
    assert max(len(b) for b in nodes.values()) <= 4096
    read: list[bytes] = []

    def fetch(ids: Any) -> dict[bytes, bytes]:
        read.extend(ids)
        return {i: nodes[i] for i in ids if i in nodes}

    assert load_path(root, ["big", 12_345], fetch) == value["big"][12_345]
    assert len(read) <= 8
    assert load_path(root, ["obj", "k4321", "n"], fetch) == 4321
    with pytest.raises(KeyError):
        load_path(root, ["obj", "nope"], fetch)
    with pytest.raises(IndexError):
        load_path(root, ["big", 20_000], fetch)


@pytest.mark.parametrize(
    "edit",
    [
        Edit(("big", 5), "longer " * 7),  # an element of changed length
        Edit(("obj", "new key"), 1),  # a new key in a big object
        Edit(("obj", "k100", "n"), -1),  # deep inside
    ],
)
def test_a_small_edit_writes_few_new_nodes_and_equal_values_share_a_root(edit: Edit) -> None:
    nodes = _store()
    builder = Builder()
    value = big()
    before = _built(value, nodes, builder)
    after_value = apply_edits(value, [edit])
    built = builder.build(after_value)
    fresh = {i: b for i, b in built.nodes.items() if i not in nodes}
    assert 0 < len(fresh) <= 12
    assert sum(len(b) for b in fresh.values()) < 40_000
    assert built.root != before
    # history independence: built from scratch, the same value has the same root
    assert Builder().build(after_value).root == built.root
    nodes.update(built.nodes)
    assert built.root is not None
    assert load(built.root, lambda ids: {i: nodes[i] for i in ids if i in nodes}) == after_value


def test_an_append_to_a_big_array_writes_only_its_tail() -> None:
    nodes = _store()
    value = big()
    _built(value, nodes)
    grown = dict(value, big=[*value["big"], "appended"])
    built = Builder().build(grown)
    fresh = {i: b for i, b in built.nodes.items() if i not in nodes}
    assert 0 < len(fresh) <= 10


def test_a_missing_or_damaged_node_fails_closed() -> None:
    nodes = _store()
    root = _built(big(), nodes)
    assert root is not None
    victim = children(nodes[root])[0]
    damaged = dict(nodes)
    damaged[victim] = b'{"a":[1],"r":[]}'
    with pytest.raises(CorruptData, match="do not match its id"):
        load(root, lambda ids: {i: damaged[i] for i in ids if i in damaged})
    del damaged[victim]
    with pytest.raises(CorruptData, match="missing"):
        load(root, lambda ids: {i: damaged[i] for i in ids if i in damaged})


def test_small_values_stay_inline() -> None:
    built = Builder().build({"a": [1, 2, 3], "s": "x" * 100})
    assert built.root is None and built.inline == b'{"a":[1,2,3],"s":"' + b"x" * 100 + b'"}'
    assert len(built.inline) <= INLINE_MAX
