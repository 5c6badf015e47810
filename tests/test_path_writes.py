"""Writes computed from the paths a service changed: the diff looks only below them, an append
is stored as an append, and the store updates a large member's tree from the edits' paths —
with every result exactly what a whole-document diff would have written."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.diff import APPEND, Edit, apply_edits, diff, diff_within, within
from stateflow.doc.merge import merge_patch, patch_paths, patch_within
from stateflow.doc.select import MISSING
from stateflow.errors import PatchError, SelectionError
from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.store import DocKey, Document, SqlStore, Write, nodes, tree
from stateflow.store.plan import TREE_MIN
from stateflow.store.tx import Tx

SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([1.0, 0.5]) | st.text(max_size=3)
KEYS = st.sampled_from(["a", "b", "c", "[0]", "[1]"])
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
PATCHES = st.recursive(
    SCALARS | st.lists(SCALARS, max_size=2),
    lambda inner: st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=4), st.dictionaries(KEYS, PATCHES, max_size=3))
def test_a_diff_below_the_patched_paths_equals_the_whole_diff(
    doc: dict[str, Any], patch: dict[str, Any]
) -> None:
    try:
        new = merge_patch(doc, patch)
    except PatchError:
        return
    narrowed = diff_within(doc, new, within(patch_paths(patch)))
    whole = diff(doc, new)
    assert sorted(map(repr, narrowed)) == sorted(map(repr, whole))
    assert orjson.dumps(apply_edits(doc, narrowed)) == orjson.dumps(new)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(KEYS, PATCHES, min_size=1, max_size=3), min_size=1, max_size=3))
def test_a_patch_is_its_own_trie_of_paths(patches: list[dict[str, Any]]) -> None:
    # the trie built straight from several patches is the one their leaf paths give, in any order
    paths = [path for patch in patches for path in patch_paths(patch)]
    built: dict[Any, Any] = {}
    for patch in patches:
        assert patch_within(patch, built) is built
    assert built == within(paths)
    backwards: dict[Any, Any] = {}
    for patch in reversed(patches):
        patch_within(patch, backwards)
    assert backwards == built


def test_appends_are_diffed_as_appends_and_applied_at_the_length() -> None:
    old = {"log": {"items": [1, 2, 3]}, "other": [0]}
    new = {"log": {"items": [1, 2, 3, {"x": 1}, 5]}, "other": [0]}
    edits = diff_within(old, new, within([("log", "items", APPEND)]))
    assert edits == [Edit(("log", "items", 3), {"x": 1}), Edit(("log", "items", 4), 5)]
    assert apply_edits(old, edits) == new
    # an index past the length is still refused; a set elsewhere in the array is a whole set
    with pytest.raises(Exception, match="outside an array"):
        apply_edits(old, [Edit(("log", "items", 5), 1)])
    mixed = {"log": {"items": [9, 2, 3, 4]}, "other": [0]}
    assert diff_within(old, mixed, within([("log", "items", 0), ("log", "items", APPEND)])) == [
        Edit(("log", "items"), [9, 2, 3, 4])
    ]


RECORD = {
    "schema": {"type": "object", "properties": {"items": {"type": "array"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def test_an_append_op_is_stored_as_an_append_and_reads_back(store: SqlStore) -> None:
    service = StatesService(store)
    service.declare("log", RECORD)
    subject = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "t"}
    items = [f"{i:06d} " + "x" * 60 for i in range(20_000)]  # ~1.4 MB: a tree member
    service.replace("log", subject, {"items": items})
    service.apply("log", subject, [{"op": "set", "path": ["items", "-"], "value": "last"}])
    [doc] = store.scan("log")
    [change] = store.history([doc.key], limit=1)
    # the history keeps the appended element, not a 1.4 MB copy of the array
    assert change.edits == [Edit(("items", 20_000), "last")]
    assert len(orjson.dumps([e.to_json() for e in change.edits])) < 100
    body = store.get(doc.key).body
    assert body is not None and body["items"] == [*items, "last"]
    assert store.read_at(doc.key, revision=1).body == {"items": items}


def _view(store: SqlStore) -> MemoryView:
    return MemoryView(store, Identity.of("agent", "/work", "s"))


def test_a_patch_beside_a_large_plane_writes_only_its_paths(open_migrated: Any) -> None:
    store = open_migrated()
    view = _view(store)
    lazy = {
        "big": [f"{i:06d} " + "x" * 60 for i in range(20_000)],
        "obj": {f"k{i:06d}": {"n": i} for i in range(10_000)},
    }
    view.patch_state({"session": {"lazy": lazy, "tactics": {"next": "a"}}})
    key = view.keys["session"]
    assert len(orjson.dumps(lazy)) > TREE_MIN
    patches: list[tuple[dict[str, Any], list[Edit]]] = [
        ({"lazy": {"big": {"[5]": "another length"}}}, [Edit(("lazy", "big", 5), "another length")]),
        ({"lazy": {"obj": {"new": {"n": -1}}}}, [Edit(("lazy", "obj", "new"), {"n": -1})]),
        (
            {"lazy": {"obj": {"k000017": {"n": None, "m": 1}}}, "tactics": {"next": "b"}},
            [Edit(("lazy", "obj", "k000017", "n")), Edit(("lazy", "obj", "k000017", "m"), 1)],
        ),
        ({"lazy": {"obj": {"k000018": None}}}, [Edit(("lazy", "obj", "k000018"))]),
    ]
    expected: Any = {"lazy": lazy, "tactics": {"next": "a"}}
    versions = []
    for patch, edits in patches:
        view.patch_state({"session": patch})
        expected = merge_patch(expected, patch)
        [change] = store.history([key], limit=1, members=["lazy"])
        assert change.edits == edits
        versions.append((change.revision, expected))
    # every revision reads back as of itself, whole and along the edited paths
    for revision, then in versions:
        was = store.read_at(key, revision=revision, members=["lazy"]).body
        assert was is not None and orjson.dumps(was["lazy"]) == orjson.dumps(then["lazy"])
        paths = [("lazy", "big", 5), ("lazy", "obj", "new"), ("lazy", "obj", "k000017")]
        [read] = store.read_paths({key: paths}, revisions={key: revision}).values()
        assert [t.value for t in read.trails] == [
            then["lazy"]["big"][5],
            then["lazy"]["obj"].get("new", MISSING),
            then["lazy"]["obj"]["k000017"],
        ]
    body = store.get(key).body
    assert body is not None
    assert orjson.dumps(body["lazy"]) == orjson.dumps(expected["lazy"])
    # the tree as stored, read cold by another store, gives the same bytes (key order too)
    cold = open_migrated().get(key, ["lazy"]).body
    assert cold is not None and orjson.dumps(cold["lazy"]) == orjson.dumps(expected["lazy"])


def test_a_direct_store_append_writes_the_tail_and_replays(store: SqlStore) -> None:
    key = DocKey("notes", "n")
    big = [f"{i:06d} " + "x" * 60 for i in range(20_000)]
    store.commit([Write(key, [Edit(("big",), big)])])
    body = store.get(key).body
    assert body is not None
    new = {**body, "big": [*body["big"], "one more"]}
    write = Write.between(key, body, new, 1, changed=[("big", APPEND)])
    assert write.edits == [Edit(("big", 20_000), "one more")]
    store.commit([write])
    assert store.get(key).body == new
    assert store.read_at(key, revision=1).body == {"big": big}


def test_an_optimistic_write_to_a_tree_member_is_computed_once_unless_it_moved(
    open_migrated: Any,
) -> None:
    store, other = open_migrated(), open_migrated()
    key = DocKey("notes", "t")
    big = [f"{i:06d} " + "x" * 60 for i in range(20_000)]
    store.commit([Write(key, [Edit(("big",), big), Edit(("n",), 0)])])
    store.get(key)  # seen here: the optimistic path computes against it
    calls: list[int] = []

    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], int]:
        calls.append(docs[key].revision)
        edits = [Edit(("big", 1), f"changed {len(calls)}")]
        return [Write(key, edits, docs[key].revision)], len(calls)

    commit, result = store.update([key], compute, optimistic=True)
    # the locked path staged the tree member with the writes already computed
    assert commit.applied and calls == [1] and result == 1
    assert (store.get(key).body or {})["big"][1] == "changed 1"

    def moving(docs: dict[DocKey, Document]) -> tuple[list[Write], int]:
        if not calls[1:]:  # the first computation: another writer moves the document meanwhile
            other.commit([Write(key, [Edit(("n",), 5)])])
        return compute(docs)

    store.get(key)
    commit, result = store.update([key], moving, optimistic=True)
    assert commit.applied and calls == [1, 2, 3] and result == 3  # computed again on what moved
    body = store.get(key).body or {}
    assert body["big"][1] == "changed 3" and body["n"] == 5


def test_an_edit_of_a_tree_member_after_an_edit_here_commits_without_the_lock(
    open_migrated: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a commit here has left a tree member's root and the nodes on the edited path in the
    caches, the next optimistic write stages the tree from them with no lock held and commits
    as a small document's write does (on PostgreSQL one statement); the first one, whose nodes
    are not cached, takes the locked path. What they wrote reads back cold."""
    store = open_migrated()
    key = DocKey("notes", "t")
    big = [f"{i:06d} " + "x" * 60 for i in range(20_000)]
    store.commit([Write(key, [Edit(("big",), big)])])
    store.get(key)

    def append(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        n = len((docs[key].body or {})["big"])
        return [Write(key, [Edit(("big", n), f"appended {n}")], docs[key].revision)], None

    locked: list[int] = []
    real = type(store)._commit_in

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        locked.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(store), "_commit_in", counted)
    store.update([key], append, optimistic=True)
    assert locked == [1]  # the fresh tree's nodes are read under the lock
    for _ in range(3):
        store.update([key], append, optimistic=True)
    assert locked == [1]
    cold = open_migrated().get(key).body
    assert cold is not None and cold["big"][-4:] == [f"appended {n}" for n in range(20_000, 20_004)]
    assert cold["big"][:20_000] == big


def test_a_write_made_between_bodies_keeps_its_result_and_history(open_migrated: Any) -> None:
    """The store takes a member's new value from the write (computed from the very member it
    holds) rather than applying the edits again: several edits to one member, an append among
    them, land once; history and as-of reads replay them; a write computed from a member that
    has moved since is applied to the member as it is now."""
    store, other = open_migrated(), open_migrated()
    key = DocKey("notes", "between")
    big = [f"{i:06d} " + "x" * 60 for i in range(20_000)]
    store.commit([Write(key, [Edit(("lazy",), {"big": big, "obj": {"a": 1}}), Edit(("gone",), 1)])])
    body = store.get(key).body
    assert body is not None
    lazy = body["lazy"]
    new = {"lazy": {"big": [*lazy["big"], "end", "after"], "obj": {"a": 1, "b": 2}}}
    changed = [("lazy", "big", APPEND), ("lazy", "obj", "b"), ("gone",)]
    write = Write.between(key, body, new, 1, changed=changed)
    assert write.edits == [
        Edit(("gone",)),
        Edit(("lazy", "big", 20_000), "end"),
        Edit(("lazy", "big", 20_001), "after"),
        Edit(("lazy", "obj", "b"), 2),
    ]
    store.commit([write])
    after = store.get(key).body
    assert after == new and after is not None
    assert after["lazy"] is new["lazy"]  # the write's own result, not a second copy
    cold = open_migrated().get(key).body
    assert cold is not None and orjson.dumps(cold) == orjson.dumps(new)
    assert store.read_at(key, revision=1).body == {"lazy": {"big": big, "obj": {"a": 1}}, "gone": 1}
    assert store.read_at(key, revision=2).body == new
    paths = [("lazy", "big", 20_000), ("lazy", "big", 20_001), ("lazy", "obj", "b")]
    [now] = store.read_paths({key: paths}).values()
    assert [t.value for t in now.trails] == ["end", "after", 2]
    [then] = store.read_paths({key: paths}, revisions={key: 1}).values()
    assert [t.value for t in then.trails] == [MISSING, MISSING, MISSING]
    assert len(store.read_paths({key: [("lazy", "big")]})[key].trails[0].value) == 20_002
    [change] = store.history([key], limit=1, members=["lazy"])
    assert change.edits == write.edits[1:]  # the member asked for
    # computed from revision 2, but another writer moved the member first: applied to what is there
    stale = store.get(key).body
    assert stale is not None
    other.commit([Write(key, [Edit(("lazy", "obj", "c"), 3)])])
    grown = {"lazy": {**stale["lazy"], "big": [*stale["lazy"]["big"], "tail"]}}
    store.commit([Write.between(key, stale, grown, changed=[("lazy", "big", APPEND)])])
    final = open_migrated().get(key).body
    assert final is not None
    assert final["lazy"]["obj"] == {"a": 1, "b": 2, "c": 3}
    assert final["lazy"]["big"][-3:] == ["end", "after", "tail"] and len(final["lazy"]["big"]) == 20_003
    assert store.get(key).body == final


def test_an_edit_after_an_edit_walks_the_written_nodes_from_the_cache(
    open_migrated: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree update reads its nodes through the decoded-node cache, and the nodes a committed
    update wrote enter it: the next edit of the member sends no node statement at all (on
    PostgreSQL each would be a round trip), nor one for the member's root (the last commit
    here left it), and what it writes reads back cold."""
    store = open_migrated()
    view = _view(store)
    big = [f"{i:06d} " + "x" * 60 for i in range(20_000)]
    view.patch_state({"session": {"lazy": {"big": big, "obj": {f"k{i}": i for i in range(20_000)}}}})
    reads: list[int] = []
    real = nodes.fetch_bodies

    def counted(tx: Any, ids: Any) -> dict[bytes, bytes]:
        found = real(tx, ids)
        reads.append(len(found))
        return found

    monkeypatch.setattr(nodes, "fetch_bodies", counted)
    statements: list[str] = []
    real_one = Tx.one

    def one(tx: Tx, sql: str, params: Any = ()) -> Any:
        statements.append(sql)
        return real_one(tx, sql, params)

    monkeypatch.setattr(Tx, "one", one)
    view.patch_state({"session": {"lazy": {"big": {"[5]": "first"}}}})
    view.patch_state({"session": {"lazy": {"obj": {"old": 1}}}})
    assert reads  # the first edit of each subtree reads the nodes on its path
    reads.clear()
    statements.clear()
    view.patch_state({"session": {"lazy": {"big": {"[5]": "second, of another length"}}}})
    view.patch_state({"session": {"lazy": {"obj": {"new": 1}}}})
    assert reads == []
    assert not [sql for sql in statements if "SELECT root" in sql]
    key = view.keys["session"]
    cold = open_migrated().get(key, ["lazy"]).body
    assert cold is not None
    assert cold["lazy"]["big"][5] == "second, of another length" and cold["lazy"]["big"][6] == big[6]
    assert cold["lazy"]["obj"]["new"] == 1 and len(cold["lazy"]["obj"]) == 20_002


def test_a_key_of_a_large_object_the_store_just_wrote_is_read_by_its_position(
    open_migrated: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a write has replaced or deleted an existing key of a large object, the store knows
    where every key of the object's new tree stands: a path read of any key (a late one too)
    descends by the counts, without asking the database which leaves hold it, and answers what
    a whole read does — also for a key that is gone, and once another process moved it on."""
    store = open_migrated()
    view = _view(store)
    count = 20_000
    pad = "x" * 60  # a tree: over TREE_MIN
    view.patch_state({"session": {"lazy": {"obj": {f"k{i}": f"value {i}{pad}" for i in range(count)}}}})
    view.patch_state({"session": {"lazy": {"obj": {"k5": None}}}})  # a scan: the root is marked
    view.patch_state({"session": {"lazy": {"obj": {"k19990": "replaced"}}}})  # the index is built
    with store._read_tx() as tx:
        assert [r[0] is not None for r in tx.all("SELECT root FROM members WHERE name = 'lazy'")] == [True]
    scans: list[str] = []
    real = tree._key_leaf

    def counted(ident: bytes, data: Any, key: str, scan: Any) -> Any:
        scans.append(key)
        return real(ident, data, key, scan)

    monkeypatch.setattr(tree, "_key_leaf", counted)  # the key scan, counted
    for key, expected in (("k19999", f"value 19999{pad}"), ("k19990", "replaced"), ("k7", f"value 7{pad}")):
        assert view.read_state({"path": f"session.lazy.obj.{key}"}) == {"value": expected}
    assert scans == []
    with pytest.raises(SelectionError):
        view.read_state({"path": "session.lazy.obj.k5"})  # gone: asked of the database, not found
    assert scans == ["k5"]
    other = _view(open_migrated())  # another store moves the object on; this one's index is old
    other.patch_state({"session": {"lazy": {"obj": {"k19999": None, "k19998": "again"}}}})
    assert view.read_state({"path": "session.lazy.obj.k19998"}) == {"value": "again"}
    with pytest.raises(SelectionError):
        view.read_state({"path": "session.lazy.obj.k19999"})
    assert view.read_state({"path": "session.lazy.obj.k19997"}) == {"value": f"value 19997{pad}"}


def test_between_takes_the_changed_paths_once() -> None:
    """``changed=`` (paths) and ``where=`` (the same paths as a trie) are two spellings of one
    argument: both at once is refused, not resolved by ignoring one; each alone gives the same
    write."""
    key = DocKey("notes", "once")
    old = {"a": {"x": 1}, "b": 2}
    new = {"a": {"x": 1, "y": 3}, "b": 2}
    paths = [("a", "y")]
    with pytest.raises(TypeError, match="changed= or where=, not both"):
        Write.between(key, old, new, 1, changed=paths, where=within(paths))
    by_paths = Write.between(key, old, new, 1, changed=paths)
    by_trie = Write.between(key, old, new, 1, where=within(paths))
    assert by_paths.edits == by_trie.edits == [Edit(("a", "y"), 3)]
