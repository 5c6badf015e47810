"""A write to a large member that is not in memory — the first after a restart — is staged on
the member's skeleton read along the write's paths, not on the member read whole: every
outcome (the stored body, the member rows, history, the refusals, a ``patch_state`` receipt)
is the one the whole member gives, compared write for write against a store that holds it."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateflow.doc.diff import Edit
from stateflow.doc.select import MISSING
from stateflow.memory import Identity, MemoryView
from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.store.tree_skeleton import HOLE, skeleton

BIG = 12_000  # elements of ``big``; with ``obj`` the member is a tree (over ``TREE_MIN``)


def _lazy() -> dict[str, Any]:
    return {
        "big": [f"{i:06d} " + "x" * 60 for i in range(BIG)],
        "obj": {f"k{i:06d}": {"n": i} for i in range(6_000)},
        "deep": {"list": [{"i": i, "pad": "p" * 200} for i in range(3_000)]},
        "small": {"x": 1},
    }


def _rows(store: SqlStore, key: DocKey) -> list[tuple[Any, ...]]:
    """The document's member rows as stored: name, position, revision, size, outline, whether
    a tree (whose shape may differ: an updated tree's cuts depend on its history)."""
    with store._read_tx() as tx:
        found = tx.all(
            "SELECT m.name, m.position, m.revision, m.size, m.outline, m.root IS NULL FROM members m "
            "JOIN documents d ON d.doc_id = m.doc_id WHERE d.state = ? AND d.subject = ? ORDER BY m.position",
            (key.state, key.subject),
        )
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in found]


def _held(store: SqlStore, key: DocKey, name: str) -> bool:
    """Whether ``store`` holds the member's current value in memory."""
    row = store._rows_known[key]
    heads = store._heads.get(row.doc_id, row.revision)
    assert heads is not None
    return store._cache.lookup((row.doc_id, name), heads[name][3])[0]


def _outcome(store: SqlStore, key: DocKey, edits: list[Edit]) -> tuple[str, str]:
    try:
        store.commit([Write(key, edits)])
    except Exception as exc:  # (compared between the two stores: the same class and message)
        return type(exc).__name__, str(exc).replace(key.subject, "<key>")
    return "ok", ""


SEGMENTS: list[tuple[Any, ...]] = [
    ("big", 0),
    ("big", 5),
    ("big", BIG - 1),
    ("big", BIG),  # an append (the first time)
    ("big", BIG + 7),  # outside the array
    ("big", 5, "x"),  # through a string
    ("obj", "k000001"),
    ("obj", "k005999"),
    ("obj", "k000002", "n"),
    ("obj", "k000003", "m", "deep"),  # made below an existing key
    ("obj", "new"),
    ("obj", "absent", "y"),
    ("deep", "list", 7, "i"),
    ("deep", "list", 2_999),
    ("small", "x"),
    ("small",),
    ("fresh",),
    ("fresh2", "a"),
]
VALUES = st.sampled_from(["s", 1, None, {"a": [1, 2]}, [3], "y" * 300])
EDITS = st.lists(st.tuples(st.sampled_from(SEGMENTS), VALUES, st.booleans()), min_size=1, max_size=3).map(
    lambda drawn: [
        Edit(("lazy", *path)) if delete else Edit(("lazy", *path), value) for path, value, delete in drawn
    ]
)


@pytest.fixture
def warm(backend: str) -> Iterator[tuple[str, SqlStore]]:
    store = open_store(backend, auto_migrate=True)
    try:
        yield backend, store
    finally:
        store.close()


_EXAMPLES = count()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=EDITS)
def test_a_write_by_path_is_the_write_of_the_whole_member(
    warm: tuple[str, SqlStore], edits: list[Edit]
) -> None:
    location, store = warm
    n = next(_EXAMPLES)  # two equal documents of their own for each example
    cold_key, warm_key = DocKey("notes", f"cold{n}"), DocKey("notes", f"warm{n}")
    body = [Edit(("lazy",), _lazy()), Edit(("t",), 0)]
    store.commit([Write(cold_key, body), Write(warm_key, body)])
    cold = open_store(location)  # (a restart: nothing in memory)
    try:
        store.get(warm_key)  # (held whole: the write stages the member's value)
        assert _held(store, warm_key, "lazy")
        last = Edit(("t",), len(edits))
        by_path = _outcome(cold, cold_key, [*edits, last])
        whole = _outcome(store, warm_key, [*edits, last])
        assert by_path == whole
        cold_doc, warm_doc = store.get(cold_key), store.get(warm_key)
        assert cold_doc.revision == warm_doc.revision
        assert orjson.dumps(cold_doc.body) == orjson.dumps(warm_doc.body)
        assert _rows(store, cold_key) == _rows(store, warm_key)
        [cold_change] = store.history([cold_key], limit=1)
        [warm_change] = store.history([warm_key], limit=1)
        assert (cold_change.revision, cold_change.edits) == (warm_change.revision, warm_change.edits)
        if by_path[0] == "ok":  # (the member went by path: nothing of it kept in memory)
            assert not _held(cold, cold_key, "lazy") or not _tree_edits(edits)
    finally:
        cold.close()


def _tree_edits(edits: list[Edit]) -> bool:
    """Whether the write can go by path: every edit inside the member, none of a key deleted
    and set again (its place then is not in the paths)."""
    deleted: set[tuple[Any, ...]] = set()
    for edit in edits:
        if len(edit.path) < 2:
            return False
        if edit.value is MISSING:
            deleted.add(edit.path)
        elif any(edit.path[:i] in deleted for i in range(len(edit.path) + 1)):
            return False
    return True


def test_the_first_write_after_a_restart_does_not_read_the_member_whole(open_migrated: Any) -> None:
    store = open_migrated()
    key = DocKey("notes", "n")
    lazy = _lazy()
    store.commit([Write(key, [Edit(("lazy",), lazy), Edit(("t",), 0)])])
    cold = open_migrated()
    cold.commit([Write(key, [Edit(("lazy", "big", 5), "changed"), Edit(("lazy", "obj", "new"), 1)])])
    # staged on its skeleton: the member was never in memory, and no value is kept for it
    assert not _held(cold, key, "lazy")
    cold.commit([Write(key, [Edit(("lazy", "big", 6), "again")])])
    assert not _held(cold, key, "lazy")
    lazy["big"][5], lazy["big"][6], lazy["obj"]["new"] = "changed", "again", 1
    body = open_migrated().get(key).body
    assert body is not None and orjson.dumps(body["lazy"]) == orjson.dumps(lazy)
    # several keys of one object, elements of one array, appends: a step each
    edits = [
        Edit(("lazy", "obj", "k000001")),
        Edit(("lazy", "obj", "k000002"), 2),
        Edit(("lazy", "obj", "z"), 3),
    ]
    edits += [
        Edit(("lazy", "big", 1), "one"),
        Edit(("lazy", "big", 9), "nine"),
        Edit(("lazy", "big", BIG), "end"),
    ]
    cold.commit([Write(key, edits)])
    assert not _held(cold, key, "lazy")
    del lazy["obj"]["k000001"]
    lazy["obj"]["k000002"], lazy["obj"]["z"] = 2, 3
    lazy["big"][1], lazy["big"][9] = "one", "nine"
    lazy["big"].append("end")
    body = open_migrated().get(key).body
    assert body is not None and orjson.dumps(body["lazy"]) == orjson.dumps(lazy)
    # a write that needs the whole member (a key deleted and set again) reads it whole
    cold.commit([Write(key, [Edit(("lazy", "obj", "k000003")), Edit(("lazy", "obj", "k000003"), 0)])])
    assert _held(cold, key, "lazy")


def _view(store: SqlStore, session: str) -> MemoryView:
    return MemoryView(store, Identity.of("agent", "/work", session))


PATCHES: list[dict[str, Any]] = [
    {"lazy": {"big": {"[5]": "another length"}}},
    {"lazy": {"big": {"[6]": {"a": 1}}}, "tactics": {"next": "b"}},
    {"lazy": {"obj": {"k000017": {"m": 1}}}},
    {"lazy": {"obj": {"new": {"n": -1}}}},
    {"lazy": {"plane": {"a": [1, 2]}}},  # a new key of the plane: its navigation moves
    {"lazy": {"small": "now a string"}},  # a kind changed: so does the navigation
    {"lazy": {"deep": {"list": {"[3]": {"i": "three"}}}}},
    {"lazy": {"big": {"[99999]": "x"}}},  # refused: outside the array
    {"lazy": {"small": {"[0]": "x"}}},  # refused: an index into an object
    {"lazy": {"obj": {"k000018": None}}},  # a deletion: the plane is read whole
]


@pytest.mark.parametrize("patch", PATCHES)
def test_patch_state_on_a_skeleton_answers_as_on_the_whole_plane(
    open_migrated: Any, patch: dict[str, Any]
) -> None:
    store = open_migrated()
    views = {name: _view(store, name) for name in ("cold", "warm")}
    for view in views.values():
        view.patch_state({"session": {"lazy": _lazy(), "tactics": {"next": "a"}}})
    cold_store = open_migrated()  # (a restart: nothing in memory)
    cold = _view(cold_store, "cold")
    cold.context()  # (shown: the receipt then says what changed since)
    views["warm"].context()
    outcomes: list[tuple[str, Any]] = []
    for view in (cold, views["warm"]):
        try:
            receipt = view.patch_state({"session": patch})
        except Exception as exc:
            outcomes.append((type(exc).__name__, str(exc)))
            continue
        shown = receipt.to_json()
        shown.get("state_updates", {}).pop("projection", None)
        outcomes.append((receipt.message, shown))
    assert outcomes[0] == outcomes[1]
    cold_key, warm_key = cold.keys["session"], views["warm"].keys["session"]
    assert orjson.dumps(store.get(cold_key).body) == orjson.dumps(store.get(warm_key).body)
    assert _rows(store, cold_key) == _rows(store, warm_key)
    [cold_change] = store.history([cold_key], limit=1)
    [warm_change] = store.history([warm_key], limit=1)
    assert (cold_change.revision, cold_change.edits) == (warm_change.revision, warm_change.edits)
    heads = [
        {k: v for k, v in view.context().head.items() if k != "recent_transitions"}
        for view in (cold, views["warm"])
    ]
    assert heads[0] == heads[1]  # (the transitions differ: their seqs and times)
    if outcomes[0][0] != "PatchError" and "None" not in repr(patch):
        assert not _held(cold_store, cold_key, "lazy")  # merged into its skeleton


def test_a_skeleton_holds_what_the_paths_reach_and_nothing_else(store: SqlStore) -> None:
    key = DocKey("notes", "s")
    lazy = _lazy()
    store.commit([Write(key, [Edit(("lazy",), lazy)])])
    root = store._roots.get(store._rows_known[key].doc_id)
    assert root is not None
    with store._read_tx() as tx:
        got = store._node_cache.getter(tx, "lazy")
        from stateflow.store.nodes import load_tree

        made = skeleton(
            root[1]["lazy"],
            {"big": {5: None, "[7]": None, BIG: None}, "obj": {"k000004": None, "absent": None}},
            got,
            lambda ident: load_tree(tx, ident, "lazy"),
        )
    value = made.value
    assert list(value) == ["big", "obj"]
    assert (
        len(value["big"]) == BIG and value["big"][5] == lazy["big"][5] and value["big"][7] == lazy["big"][7]
    )
    assert value["big"][4] is HOLE and value["big"].count(HOLE) == BIG - 2
    assert value["obj"] == {"k000004": {"n": 4}}
    assert made.shapes[id(value["obj"])] == (6_000, {"k000004": 4})
    assert made.shapes[id(value["big"])] == (BIG, {})
    assert MISSING not in value.values()


def _kept(store: SqlStore, key: DocKey, revision: int) -> bool:
    """Whether ``store`` holds the ``lazy`` member's value as of ``revision`` in memory."""
    doc_id = store._rows_known[key].doc_id
    return any(store._cache.lookup((doc_id, "lazy"), r)[0] for r in range(1, revision + 1))


def test_a_document_deleted_or_erased_whole_is_not_read(open_migrated: Any) -> None:
    store = open_migrated()
    gone, erased = DocKey("notes", "gone"), DocKey("catalog", "erased")
    body = [Edit(("lazy",), _lazy()), Edit(("t",), 0)]
    store.commit([Write(gone, body), Write(erased, body)])
    cold = open_migrated()  # (a restart: nothing in memory)
    cold.commit([Write(gone, [Edit(())])])
    assert not _kept(cold, gone, 1)  # its members went by name and size: none was decoded
    cold.purge("purged", erase=[erased])  # (erased beside a purge: what ``undeclare`` does)
    assert not _kept(cold, erased, 1)
    for key in (gone, erased):
        assert store.get(key).body is None and cold.get(key).body is None
        assert cold.member_sizes(key) == {}
        [change] = cold.history([key], limit=1)
        assert change.revision == 2 and change.edits == [Edit(())]
        assert (cold.read_at(key, revision=1).body or {})["t"] == 0
    # deleted, the document is written again from nothing
    cold.commit([Write(gone, [Edit(("t",), 1)])])
    assert cold.get(gone).body == {"t": 1}
