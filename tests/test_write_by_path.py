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
from stateflow.doc.sparse import Sparse
from stateflow.memory import Identity, MemoryView
from stateflow.store import DocKey, SqlStore, Write, nodes, open_store, tree_skeleton
from stateflow.store.tree_skeleton import skeleton

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
@given(series=st.lists(EDITS, min_size=1, max_size=4))
def test_writes_by_path_are_the_writes_of_the_whole_member(
    warm: tuple[str, SqlStore], series: list[list[Edit]]
) -> None:
    """A series of writes: the first after a restart and the next ones, each staged by path
    again (no value is kept for a revision written so), compared write for write."""
    location, store = warm
    n = next(_EXAMPLES)  # two equal documents of their own for each example
    cold_key, warm_key = DocKey("notes", f"cold{n}"), DocKey("notes", f"warm{n}")
    body = [Edit(("lazy",), _lazy()), Edit(("t",), 0)]
    store.commit([Write(cold_key, body), Write(warm_key, body)])
    cold = open_store(location)  # (a restart: nothing in memory)
    try:
        for turn, edits in enumerate(series):
            if turn and cold_key in cold._rows_known and _held(cold, cold_key, "lazy"):
                break  # (read whole by an earlier write, and kept: what follows is not by path)
            store.get(warm_key)  # (held whole: the write stages the member's value)
            assert _held(store, warm_key, "lazy")
            last = Edit(("t",), turn + 1)
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
            row = store._rows_known[cold_key]  # (read just above)
            if any(cold._cache.lookup((row.doc_id, "lazy"), r)[0] for r in range(1, row.revision + 1)):
                break  # (read whole by this write, refused or not: what follows is not by path)
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
    {"lazy": {"big": {"a": 1}}},  # an array held along the patch replaced by an object
]


@pytest.mark.parametrize("patch", PATCHES)
def test_patch_state_on_a_skeleton_answers_as_on_the_whole_plane(
    open_migrated: Any, patch: dict[str, Any]
) -> None:
    store = open_migrated()
    cold_store = open_migrated()  # (a restart: nothing in memory)
    cold, warm = _two_planes(store, cold_store)
    _patch_both(store, cold_store, cold, warm, patch)


def test_patch_state_series_on_a_skeleton_answers_as_on_the_whole_plane(open_migrated: Any) -> None:
    """The next patches after the first go by path too (no value is kept for a revision
    written so): each answers and stores what the whole plane gives."""
    store = open_migrated()
    cold_store = open_migrated()
    cold, warm = _two_planes(store, cold_store)
    series: list[dict[str, Any]] = [
        {"lazy": {"big": {"[5]": "first"}}},
        {"lazy": {"big": {"[11999]": "last", "[6]": {"a": [1]}}, "obj": {"k000001": 2}}},
        {"lazy": {"big": {"[6]": {"a": {"[0]": 7}, "b": 2}}}},  # into an element written before
        {"lazy": {"obj": {"new": 1, "k005999": {"x": 1}}, "deep": {"list": {"[2999]": {"i": 0}}}}},
        {"lazy": {"big": {"[5]": "again"}}},
        {"lazy": {"big": {"[12000]": "x"}}},  # refused: outside the array
        {"lazy": {"big": {"[7]": "seven"}, "fresh": {"a": 1}}},
        {"lazy": {"big": {"a": 1}}},  # the array replaced by an object
        {"lazy": {"big": {"b": 2}}},
    ]
    for patch in series:
        _patch_both(store, cold_store, cold, warm, patch)


def _two_planes(store: SqlStore, cold_store: SqlStore) -> tuple[MemoryView, MemoryView]:
    """Two equal sessions with a large lazy plane: one read through ``cold_store`` (opened
    before the writes: nothing of them in memory), one through ``store`` (held whole)."""
    views = {name: _view(store, name) for name in ("cold", "warm")}
    for view in views.values():
        view.patch_state({"session": {"lazy": _lazy(), "tactics": {"next": "a"}}})
    cold = _view(cold_store, "cold")
    cold.context()  # (shown: the receipt then says what changed since)
    views["warm"].context()
    return cold, views["warm"]


def _patch_both(
    store: SqlStore, cold_store: SqlStore, cold: MemoryView, warm: MemoryView, patch: dict[str, Any]
) -> None:
    outcomes: list[tuple[str, Any]] = []
    for view in (cold, warm):
        try:
            receipt = view.patch_state({"session": patch})
        except Exception as exc:
            outcomes.append((type(exc).__name__, str(exc)))
            continue
        shown = receipt.to_json()
        shown.get("state_updates", {}).pop("projection", None)
        outcomes.append((receipt.message, shown))
    assert outcomes[0] == outcomes[1]
    cold_key, warm_key = cold.keys["session"], warm.keys["session"]
    assert orjson.dumps(store.get(cold_key).body) == orjson.dumps(store.get(warm_key).body)
    assert _rows(store, cold_key) == _rows(store, warm_key)
    [cold_change] = store.history([cold_key], limit=1)
    [warm_change] = store.history([warm_key], limit=1)
    assert (cold_change.revision, cold_change.edits) == (warm_change.revision, warm_change.edits)
    heads = [
        {k: v for k, v in view.context().head.items() if k != "recent_transitions"} for view in (cold, warm)
    ]
    assert heads[0] == heads[1]  # (the transitions differ: their seqs and times)
    big = patch.get("lazy", {}).get("big", {})
    replaced = type(big) is dict and any(not k.startswith("[") for k in big)  # (read whole)
    if outcomes[0][0] != "PatchError" and "None" not in repr(patch) and not replaced:
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
    # an array as its real length and the elements the paths reach, nothing else
    assert type(value["big"]) is Sparse and len(value["big"]) == BIG
    assert value["big"].held == {5: lazy["big"][5], 7: lazy["big"][7]}
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


LONG = 200_000  # elements of the large plane's array below: its list alone is 1.6 MB


def _reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The nodes the store reads from the database from now on (their bodies sent: every
    node of a fetch, the leaves a key's scan does not rule out), counted where they are read."""
    counted = {"nodes": 0, "bytes": 0}

    def fetch_bodies(tx: Any, ids: Any) -> dict[bytes, bytes]:
        found = real_fetch(tx, ids)
        counted["nodes"] += len(found)
        counted["bytes"] += sum(map(len, found.values()))
        return found

    def fetch_holding(tx: Any, ids: Any, needle: bytes, holds_sql: str) -> dict[bytes, bytes | None]:
        found = real_holding(tx, ids, needle, holds_sql)
        sent = [body for body in found.values() if body is not None]
        counted["nodes"] += len(sent)
        counted["bytes"] += sum(map(len, sent))
        return found

    real_fetch, real_holding = nodes.fetch_bodies, nodes.fetch_holding
    monkeypatch.setattr(nodes, "fetch_bodies", fetch_bodies)
    monkeypatch.setattr(nodes, "fetch_holding", fetch_holding)
    return counted


def _held_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The entries each skeleton built from now on holds (a container's elements or keys, each
    level's counted: a sparse array's held elements, a list its length), counted as built."""
    sizes: list[int] = []

    def entries(value: Any) -> int:
        if type(value) is Sparse:
            return len(value.held) + sum(map(entries, value.held.values()))
        if type(value) is dict:
            return len(value) + sum(map(entries, value.values()))
        if type(value) is list:
            return len(value) + sum(entries(v) for v in value if type(v) in (dict, list, Sparse))
        return 0

    def counting(*args: Any, **kwargs: Any) -> Any:
        made = real(*args, **kwargs)
        sizes.append(entries(made.value))
        return made

    real = tree_skeleton.skeleton
    monkeypatch.setattr(tree_skeleton, "skeleton", counting)
    return sizes


def test_the_next_writes_by_path_cost_the_path_not_the_plane(
    open_migrated: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_migrated()
    key = DocKey("notes", "long")
    lazy: dict[str, Any] = {"big": list(range(LONG)), "obj": {f"k{i:06d}": i for i in range(LONG // 2)}}
    store.commit([Write(key, [Edit(("lazy",), lazy), Edit(("t",), 0)])])
    cold = open_migrated()  # (a restart: nothing in memory)
    cold.commit([Write(key, [Edit(("lazy", "big", 5), "first")])])
    reads, sizes = _reads(monkeypatch), _held_sizes(monkeypatch)
    # the next writes, elsewhere in the array: each reads the nodes on its path, and holds
    # what the path holds — not a list of the array's length (1.6 MB), copied
    for index in (6, LONG // 2, LONG - 1):
        reads.update(nodes=0, bytes=0)
        cold.commit([Write(key, [Edit(("lazy", "big", index), index * 2)])])
        assert not _held(cold, key, "lazy")
        assert reads["nodes"] <= 8, reads
        assert sizes.pop() <= 2
    # a key new to the large object: the leaves that hold its bytes are read, not them all
    reads.update(nodes=0, bytes=0)
    cold.commit([Write(key, [Edit(("lazy", "obj", "new"), 1)])])
    assert not _held(cold, key, "lazy")
    assert reads["nodes"] <= 8 + LONG // 2 // 1000, reads
    assert sizes.pop() == 1  # (the object, holding none of the keys the path names)
    # and a key deep in it (its leaf found by the bytes it holds)
    reads.update(nodes=0, bytes=0)
    cold.commit([Write(key, [Edit(("lazy", "obj", f"k{LONG // 2 - 3:06d}"), "late")])])
    assert reads["nodes"] <= 8 + LONG // 2 // 1000, reads
    body = store.get(key).body
    assert body is not None
    lazy["big"][5], lazy["big"][6], lazy["big"][LONG // 2], lazy["big"][LONG - 1] = (
        "first",
        12,
        LONG,
        2 * LONG - 2,
    )
    lazy["obj"]["new"], lazy["obj"][f"k{LONG // 2 - 3:06d}"] = 1, "late"
    assert orjson.dumps(open_migrated().get(key).body) == orjson.dumps({"lazy": lazy, "t": 0})


def test_a_compute_that_reads_past_the_paths_gets_the_member_whole(open_migrated: Any) -> None:
    """``along`` names the paths a compute changes; one that also reads an element off them
    (not in the skeleton) is computed again on the member read whole, and its write made —
    never an internal error (``NotHeld``) out of the store."""
    store = open_migrated()
    key = DocKey("notes", "past")
    store.commit([Write(key, [Edit(("lazy",), _lazy()), Edit(("t",), 0)])])
    cold = open_migrated()  # (a restart: nothing in memory)
    seen: list[str] = []

    def compute(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
        doc = docs[key]
        big = doc.body["lazy"]["big"]
        seen.append(type(big).__name__)
        edits = [
            Edit(("lazy", "big", 5), big[0] + " copied"),
            Edit(("lazy", "obj", "k000001", "n"), big[7][:6]),
        ]
        return [Write(key, edits, doc.revision)], None

    along = {key: {"lazy": {"big": {"[5]": None}, "obj": {"k000001": {"n": None}}}}}
    commit, _ = cold.update([key], compute, members=["lazy"], optimistic=True, along=along)
    assert commit.applied and commit.revisions[key] == 2
    assert seen[0] == "Sparse" and seen[-1] == "list"  # the skeleton first, then the member whole
    lazy = _lazy()
    lazy["big"][5] = lazy["big"][0] + " copied"
    lazy["obj"]["k000001"]["n"] = lazy["big"][7][:6]
    body = open_migrated().get(key).body
    assert body is not None and orjson.dumps(body["lazy"]) == orjson.dumps(lazy) and body["t"] == 0
    # a compute that stays on the paths goes by path (after a restart: the member read whole
    # above is kept in memory, and the next write there is made on it)
    seen.clear()

    def on_the_paths(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
        seen.append(type(docs[key].body["lazy"]["big"]).__name__)
        return [Write(key, [Edit(("lazy", "big", 6), "six")], docs[key].revision)], None

    six = {key: {"lazy": {"big": {"[6]": None}}}}
    open_migrated().update([key], on_the_paths, members=["lazy"], optimistic=True, along=six)
    assert seen == ["Sparse"]
    body = open_migrated().get(key).body
    assert body is not None and body["lazy"]["big"][6] == "six"
