"""Path reads inside documents: only the nodes on the path are read, now and as of any retained
revision, and the answer is the one a whole-document read gives."""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.diff import Edit, apply_edits, diff, to_patch
from stateflow.doc.paths import ReadPath, parse
from stateflow.doc.select import MISSING
from stateflow.doc.select import keys as keys_projection
from stateflow.errors import Conflict, CorruptData, InvalidInput, NotFound, SelectionError
from stateflow.memory import Identity, MemoryView
from stateflow.memory.view import MemoryConfig
from stateflow.memory.view import _selected as selected
from stateflow.memory.view import _walk_patch as walk_patch
from stateflow.store import DocKey, SqlStore, Write
from stateflow.store.nodes import fetch_bodies
from stateflow.store.plan import SNAPSHOT_LARGE_CHAIN
from stateflow.store.trail import KeysEnd, KeysForm, SliceEnd, SliceForm, keys_form, slice_form
from stateflow.store.trail import probe as probe_json
from stateflow.store.tree import (
    Builder,
    decoding,
    fetch_tree,
    keys_of,
    listing,
    probe,
    slice_of,
)
from tests.conftest import StoreFactory

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=300),
    lambda inner: (
        st.lists(inner, max_size=40) | st.dictionaries(st.sampled_from("abcdefgh"), inner, max_size=8)
    ),
    max_leaves=300,
)
segments = st.lists(st.sampled_from("abcdefgh") | st.integers(0, 45), max_size=5)


def plane(count: int) -> dict[str, Any]:
    """A member above the tree threshold: an array and an object of ~100-byte entries."""
    return {
        "big": [f"{i:07d} " + "x" * 90 for i in range(count)],
        "obj": {f"k{i}": {"n": i, "s": "y" * 60} for i in range(count // 2)},
        "small": {"a": [1, 2, {"b": 3}]},
    }


@settings(max_examples=60, deadline=None)
@given(json_values, segments)
def test_a_tree_probe_answers_what_the_decoded_value_answers(value: Any, path: list[str | int]) -> None:
    nodes: dict[bytes, bytes] = {}
    built = Builder().build({"v": value, "pad": ["z" * 200] * 20})
    nodes.update(built.nodes)
    assert built.root is not None
    fetch = lambda ids: {i: nodes[i] for i in ids if i in nodes}  # noqa: E731
    steps, found = probe(built.root, ["v", *path], decoding(fetch), fetch)
    want_steps, want = probe_json({"v": value, "pad": ["z" * 200] * 20}, ("v", *path))
    assert steps == want_steps
    assert found == want or (found is MISSING and want is MISSING)


def test_a_tree_probe_reads_only_the_nodes_on_its_path() -> None:
    nodes: dict[bytes, bytes] = {}
    value = plane(40_000)
    built = Builder().build(value)
    nodes.update(built.nodes)
    assert built.root is not None and len(nodes) > 1000
    read: list[bytes] = []

    def fetch(ids: Any) -> dict[bytes, bytes]:
        read.extend(ids)
        return {i: nodes[i] for i in ids if i in nodes}

    steps, found = probe(built.root, ["big", 31_234], decoding(fetch), fetch)
    assert found == value["big"][31_234]
    assert [s.kind for s in steps] == ["object", "array", "string"]
    assert steps[1].length == 40_000
    assert len(read) <= 6, len(read)  # the root, one node per level of `big`, its leaf
    read.clear()
    kind, size, items = listing(built.root, 0, 10, decoding(fetch))
    assert (kind, size) == ("object", 3)
    assert [(k, c, n) for k, c, n, _ in items] == [
        ("big", "array", 40_000),
        ("obj", "object", 20_000),
        ("small", "object", 1),
    ]
    assert len(read) <= 3, len(read)  # the root leaf and the roots of the two subtrees
    read.clear()
    kind, size, items = listing(probe_ref(built.root, ["big"], fetch), 25_000, 30, decoding(fetch))
    assert [k for k, *_ in items] == list(range(25_000, 25_030))
    assert [v for *_, v in items] == value["big"][25_000:25_030]
    assert len(read) <= 10, len(read)


def probe_ref(root: bytes, path: list[str | int], fetch: Any) -> bytes:
    _, ref = probe(root, path, decoding(fetch), fetch, whole=False)
    return bytes(ref.root)


def _history(
    store: SqlStore, key: DocKey, rng: random.Random, revisions: int, *, extra: bool = False
) -> dict[int, dict[str, Any]]:
    """Random small edits of a document with a tree member; its body at every revision."""
    body: dict[str, Any] = {"lazy": plane(12_000), "tactics": {"next": "start"}}
    store.commit([Write.between(key, {}, body, 0)])
    bodies = {1: body}
    for revision in range(2, revisions + 1):
        roll = rng.random()
        index = rng.randrange(12_000)
        if roll < 0.25:
            edits = [Edit(("lazy", "big", index), f"v{revision}")]
        elif roll < 0.4:
            edits = [Edit(("lazy", "obj", f"n{revision}"), {"n": revision})]
        elif roll < 0.5:
            edits = [Edit(("lazy", "obj", f"k{index // 2}"))]
        elif roll < 0.6:
            edits = [Edit(("lazy", "small"), [revision])]
        elif roll < 0.7:
            edits = [Edit(("lazy", "big"), [*body["lazy"]["big"], f"appended {revision}"])]
        elif roll < 0.75:
            edits = [Edit(("lazy", "small", "a", 2, "b"), revision)]
        elif roll < 0.8 and extra:
            edits = [Edit(("lazy", "big", len(body["lazy"]["big"])), f"a{revision}")]  # an append
        elif roll < 0.85 and extra:
            edits = [Edit(("lazy", "obj", f"k{index // 2}", "n"), revision)]  # below a key
        elif roll < 0.9 and extra:
            edits = [Edit(("lazy", "obj", f"fresh{revision}", "deep"), revision)]  # creates an object
        else:
            edits = [Edit(("tactics", "next"), f"step {revision}")]
        try:
            after = apply_edits(body, edits)
        except Conflict:  # the member moved on (small became an array): edit something else
            edits = [Edit(("tactics", "next"), f"step {revision}")]
            after = apply_edits(body, edits)
        store.commit([Write(key, edits, revision - 1)])
        body = after
        bodies[revision] = body
    return bodies


PATHS: list[tuple[str | int, ...]] = [
    ("lazy", "big", 5),
    ("lazy", "big", 11_999),
    ("lazy", "big", 12_003),
    ("lazy", "obj", "k17"),
    ("lazy", "obj", "k17", "n"),
    ("lazy", "obj", "n9"),
    ("lazy", "small"),
    ("lazy", "small", "a", 2, "b"),
    ("lazy", "small", 0),
    ("lazy", "nope"),
    ("tactics",),
    ("tactics", "next"),
    ("absent", "x"),
]


def test_path_reads_equal_whole_reads_at_every_revision(store: SqlStore) -> None:
    key = DocKey("paths", "doc")
    bodies = _history(store, key, random.Random(12), 40)
    for revision, body in bodies.items():
        seq = store.read_at(key, revision=revision, members=[]).seq
        got = store.read_paths({key: PATHS}, seq=seq)[key]
        assert got.revision == revision and got.seq == seq
        for path, trail in zip(PATHS, got.trails, strict=True):
            steps, value = probe_json(body, path)
            assert list(trail.steps) == steps, (revision, path)
            assert trail.value == value or (trail.value is MISSING and value is MISSING), (revision, path)
    now = store.read_paths({key: PATHS})[key]
    assert now.revision == 40
    assert [t.value for t in now.trails[:2]] == [
        bodies[40]["lazy"]["big"][5],
        bodies[40]["lazy"]["big"][11_999],
    ]
    assert (
        store.read_paths({DocKey("paths", "never"): [("lazy",)]}, seq=0)[DocKey("paths", "never")].revision
        == 0
    )
    with pytest.raises(InvalidInput):
        store.read_paths({key: [()]})


def _as_of_history(store: SqlStore) -> tuple[DocKey, DocKey, int]:
    """A large document (tree member, snapshots, edits kept apart, a member deleted and made
    again) and a small one written after it; the number of transitions."""
    key, other = DocKey("paths", "doc"), DocKey("paths", "other")
    _history(store, key, random.Random(3), 40)
    store.commit([Write(key, [Edit(("tactics",))], 40)])  # the member goes away …
    store.commit([Write(key, [Edit(("lazy", "big"), plane(12_000)["big"][:5_000])], 41)])  # … kept apart
    store.commit([Write(key, [Edit(("tactics",), {"next": "again"})], 42)])  # … and comes back
    store.commit([Write(other, [Edit(("n",), 0)], 0)])
    for n in range(1, 4):
        store.commit([Write(other, [Edit(("n",), n), Edit(("tactics",), {"n": n})], n)])
    return key, other, 47


def _same_reads(got: Any, expected: Any) -> None:
    for k in expected:
        assert (got[k].revision, got[k].seq) == (expected[k].revision, expected[k].seq), k
        for a, b in zip(got[k].trails, expected[k].trails, strict=True):
            assert list(a.steps) == list(b.steps) and (a.value == b.value or a.value is b.value is MISSING)


def test_an_as_of_path_read_is_settled_by_one_statement_at_every_offset(open_migrated: StoreFactory) -> None:
    """``read_paths(back=…)`` takes the transition, each document's revision after it, the
    snapshot, the change chain with its edits kept apart, the snapshot's members and the
    current members of a document the transition left as it is from one statement
    (``asof.statement``; on PostgreSQL with no transaction around it) — at every offset it is
    settled there and answers what a read at the revisions it found answers."""
    store = open_migrated()
    key, other, transitions = _as_of_history(store)
    asked: dict[DocKey, list[tuple[str | int, ...]]] = {
        key: PATHS,
        other: [("n",), ("tactics", "n"), ("lazy",)],
    }
    for cold in (True, False):
        reader = open_migrated() if cold else store
        if cold:  # a current member inline but over CURRENT_BODY_MAX (lazy, ~1 MB): once the long way
            assert reader._paths._back_in_one(asked, 1, None) is None
            reader.read_paths(asked, back=1)  # … which leaves it in the member cache
        for back in range(1, transitions + 1):
            one = reader._paths._back_in_one(asked, back, None)
            assert one is not None, (cold, back)
            revisions = {k: one[k].revision for k in asked}
            _same_reads(one, reader.read_paths(asked, revisions=revisions))
            _same_reads(reader.read_paths(asked, back=back), one)
        both = {key: [("tactics",)], other: []}
        assert reader.read_paths(both, back=transitions)[key].revision == 0  # the origin
        with pytest.raises(NotFound, match="predates the retained history"):
            reader.read_paths(both, back=transitions + 1)
    only = store.read_paths({key: [("tactics", "next")], other: []}, back=4)  # found among both
    assert (only[key].revision, only[other].revision, only[key].trails[0].value) == (43, 0, "again")
    # pruned: the history before the cut is gone, the rest still read in one statement
    cut = store.transitions(after_seq=20, limit=1)[0].at
    assert store.prune_history("paths", cut) > 0
    retained = {key: [("tactics",)], other: []}
    kept = len(store.transitions(after_seq=0, limit=100))
    for reader in (store, open_migrated()):
        reader.read_paths(asked, back=1)  # (lazy, inline and over CURRENT_BODY_MAX, in the cache)
        for back in range(1, kept):
            one = reader._paths._back_in_one(asked, back, None)
            assert one is not None, back
            _same_reads(one, reader.read_paths(asked, revisions={k: one[k].revision for k in asked}))
        with pytest.raises(NotFound, match="predates the retained history"):
            reader.read_paths(retained, back=kept + 1)


def test_a_current_path_read_is_settled_by_one_statement(open_migrated: StoreFactory) -> None:
    """``read_paths`` of the current documents takes their rows and the members the paths name
    from one statement (``asof.now_statement``; on PostgreSQL with no transaction around it),
    cold and warm, after every kind of write, and answers what a read at their revisions
    answers; a member inline but too large to come with it, not cached, is read the long way."""
    store = open_migrated()
    key, other, _ = _as_of_history(store)
    gone, never = DocKey("paths", "gone"), DocKey("paths", "never")
    store.commit([Write(gone, [Edit(("n",), 1)], 0)])
    store.commit([Write(gone, [Edit(())], 1)])
    asked: dict[DocKey, list[tuple[str | int, ...]]] = {
        key: PATHS,
        other: [("n",), ("tactics", "n"), ("lazy",)],
        gone: [("n",)],
        never: [("n",)],
    }
    for cold in (True, False):
        reader = open_migrated() if cold else store
        if cold:  # lazy: inline but over CURRENT_BODY_MAX (~1 MB) — once the long way
            assert reader._paths._now_in_one({key: [("tactics",)], other: [("n",)]}, None) is not None
            assert reader._paths._now_in_one(asked, None) is None
            reader.read_paths(asked)  # … which leaves it in the member cache
        revisions = {k: d.revision for k, d in reader.read(list(asked)).items()}
        one = reader._paths._now_in_one(asked, None)
        assert one is not None, cold
        assert {k: one[k].revision for k in asked} == revisions
        _same_reads(one, reader.read_paths(asked, revisions={k: r for k, r in revisions.items() if r}))
        _same_reads(reader.read_paths(asked), one)
        at_current = reader._paths._now_in_one(asked, None, revisions)  # asked at these revisions
        assert at_current is not None
        _same_reads(at_current, one)
        assert reader._paths._now_in_one(asked, None, {**revisions, key: revisions[key] - 1}) is None
    for n in range(5):  # each write seen by the next read
        store.commit([Write(other, [Edit(("tactics", "n"), 10 + n)], 4 + n)])
        [trail] = store.read_paths({other: [("tactics", "n")]})[other].trails
        assert trail.value == 10 + n
        before = store.read_paths({other: [("tactics", "n")]}, revisions={other: 4 + n})[other]
        assert (before.revision, before.trails[0].value) == (4 + n, 9 + n if n else 3)  # the long way
    big = DocKey("paths", "big")  # inline (under a tree's size) but over CURRENT_BODY_MAX
    store.commit([Write(big, [Edit(("m",), "z" * 40_000)], 0)])
    fresh = open_migrated()
    assert fresh._paths._now_in_one({big: [("m",)]}, None) is None
    assert fresh.read_paths({big: [("m",)]})[big].trails[0].value == "z" * 40_000
    assert fresh._paths._now_in_one({big: [("m",)]}, None) is not None  # now in the member cache


def test_an_as_of_path_read_fails_closed_on_a_missing_snapshot_member(open_migrated: StoreFactory) -> None:
    """A snapshot member row gone: the one statement finds an older row of that member (not the
    one the directory names), so the read is taken the long way and fails closed there."""
    store = open_migrated()
    key, _, _ = _as_of_history(store)
    with store._read_tx() as tx:
        (doc_id,) = tx.one("SELECT doc_id FROM documents WHERE state = ? AND subject = ?", key) or ()
        snaps = [
            int(r) for (r,) in tx.all("SELECT revision FROM snapshots WHERE doc_id = ? ORDER BY 1", (doc_id,))
        ]
        newest = tx.one(
            "SELECT max(revision) FROM snapshot_members WHERE doc_id = ? AND name = 'tactics'", (doc_id,)
        )
    assert len(snaps) >= 2 and newest is not None
    with store._write_tx() as tx:
        assert (
            tx.run(
                "DELETE FROM snapshot_members WHERE doc_id = ? AND name = 'tactics' AND revision = ?",
                (doc_id, newest[0]),
            )
            == 1
        )
    reader = open_migrated()
    revision = max(s for s in snaps if s >= newest[0] and s < 41)
    back = 43 - revision  # the large document's own transitions
    assert reader.read_paths({key: [("lazy", "small")]}, back=back)[key].revision == revision
    with pytest.raises(CorruptData, match=f"snapshot at revision {revision} is corrupt: member 'tactics'"):
        reader.read_paths({key: [("tactics",)]}, back=back)


class Planted:
    """A document whose ``lazy`` member (``plane(20_000)``) is stored as a tree, the nodes the
    reads under :meth:`recording` fetched, and a store left with only those nodes."""

    def __init__(self, open_migrated: StoreFactory) -> None:
        self.open_migrated = open_migrated
        self.key = DocKey("paths", "doc")
        self.body: dict[str, Any] = {"lazy": plane(20_000)}
        self.touched: list[bytes] = []
        store = open_migrated()
        store.commit([Write.between(self.key, {}, self.body, 0)])
        self.store = store

    @contextmanager
    def recording(self) -> Iterator[tuple[bytes, Callable[[Any], dict[bytes, bytes]]]]:
        """The member's root and a fetch that records what it reads, in one read transaction;
        on leaving, checks that the store holds many more nodes than that."""
        with self.store._read_tx() as tx:
            self.tx = tx
            (root,) = tx.one("SELECT root FROM members WHERE name = 'lazy'") or (None,)

            def fetch(ids: Any) -> dict[bytes, bytes]:
                self.touched.extend(ids)
                return fetch_bodies(tx, ids)

            yield bytes(root), fetch
            total = int(tx.one("SELECT count(*) FROM nodes")[0])  # type: ignore[index]
        assert total > 500

    def keeping_only_touched(self) -> SqlStore:
        """Delete every node the recorded reads did not fetch; a fresh store (nothing cached)."""
        self.store.close()
        keep = sorted(set(self.touched))
        with self.open_migrated()._write_tx() as tx:
            tx.run(f"DELETE FROM nodes WHERE id NOT IN ({','.join('?' * len(keep))})", keep)
        return self.open_migrated()


@pytest.fixture
def planted(open_migrated: StoreFactory) -> Planted:
    return Planted(open_migrated)


def test_a_path_read_touches_only_its_nodes_and_fails_closed_beside_them(planted: Planted) -> None:
    with planted.recording() as (root, fetch):
        probe(root, ["big", 15_000], decoding(fetch), fetch)
    assert len(planted.touched) <= 6
    fresh, key = planted.keeping_only_touched(), planted.key
    [trail] = fresh.read_paths({key: [("lazy", "big", 15_000)]})[key].trails
    assert trail.value == planted.body["lazy"]["big"][15_000]
    with pytest.raises(CorruptData, match="missing"):
        fresh.read_paths({key: [("lazy", "big", 3)]})
    with pytest.raises(CorruptData):
        fresh.get(key)


def test_a_key_is_looked_up_in_the_database_and_only_its_leaf_is_sent(planted: Planted) -> None:
    """The database says which leaves of a large object hold a key's bytes: the read decodes
    the interior nodes and that leaf, not the object's other leaves, and needs no node past
    it — deleted, the read still answers; a key in a deleted leaf fails closed."""
    holds = planted.store.holds_sql
    assert holds is not None
    planted.store._node_cache.clear()
    sent: list[bytes] = []
    with planted.recording() as (root, fetch):
        through_cache = planted.store._node_cache.scanner(planted.tx, "lazy", holds)

        def scan(ids: Any, needle: bytes) -> Mapping[bytes, dict[str, Any] | None]:
            planted.touched.extend(ids)
            found = through_cache(ids, needle)
            sent.extend(i for i, node in found.items() if node is not None and "c" not in node)
            return found

        steps, found = probe(root, ["obj", "k42", "n"], decoding(fetch), fetch, scan=scan)
    assert found == 42 and [s.kind for s in steps] == ["object", "object", "object", "number"]
    assert len(sent) == 1, len(sent)  # 10,000 keys in ~300 leaves: one of them sent
    fresh, key = planted.keeping_only_touched(), planted.key
    [trail] = fresh.read_paths({key: [("lazy", "obj", "k42")]})[key].trails
    assert trail.value == {"n": 42, "s": "y" * 60}
    with pytest.raises(CorruptData, match="missing"):
        fresh.read_paths({key: [("lazy", "obj", "k9999")]})


def test_keys_that_need_escapes_are_found_by_their_bytes(store: SqlStore) -> None:
    """A key's bytes in a leaf are its JSON: quotes, backslashes, control characters and
    non-ASCII text are looked up as they are stored, and a value equal to a key is no match."""
    key = DocKey("paths", "escapes")
    tricky = ['a"b', "c\\d", "tab\tnew\nline", "é ü 猫", "\u0001x", "k7"]
    obj = {f"k{i}": f"value {i} " + "v" * 80 for i in range(6_000)}
    obj |= {name: f"tricky {n}" for n, name in enumerate(tricky)}
    obj["decoy"] = "k7 in a value, not a key"
    store.commit([Write.between(key, {}, {"big": obj}, 0)])
    for n, name in enumerate(tricky):
        [trail] = store.read_paths({key: [("big", name)]})[key].trails
        assert trail.value == (f"tricky {n}" if name != "k7" else obj["k7"]), name
    [gone] = store.read_paths({key: [("big", "k7 in a value, not a key")]})[key].trails
    assert gone.value is MISSING


def test_children_lists_a_page_without_reading_grandchildren(store: SqlStore) -> None:
    key = DocKey("paths", "doc")
    body = {"lazy": plane(12_000)}
    store.commit([Write.between(key, {}, body, 0)])
    top = store.children(key, ("lazy",))
    assert top is not None and (top.kind, top.size) == ("object", 3)
    assert [(k, c, n) for k, c, n, _ in top.items] == [
        ("big", "array", 12_000),
        ("obj", "object", 6_000),
        ("small", "object", 1),
    ]
    page = store.children(key, ("lazy", "obj"), start=100, limit=3)
    assert page is not None and page.size == 6_000
    assert [(k, v) for k, _, _, v in page.items] == [
        (f"k{i}", body["lazy"]["obj"][f"k{i}"]) for i in (100, 101, 102)
    ]
    small = store.children(key, ("lazy", "small", "a"))
    assert small is not None and [(k, c) for k, c, _, _ in small.items] == [
        (0, "number"),
        (1, "number"),
        (2, "object"),
    ]
    assert store.children(key, ("lazy", "nope")) is None


def test_a_negative_index_reaches_nothing_in_either_form(store: SqlStore) -> None:
    """An index counts from the start only: a small member (stored inline) read -1 as Python
    does, the last item, while a large one (a tree) found nothing there."""
    key = DocKey("paths", "doc")
    body = {"lazy": plane(12_000), "hot": {"list": ["a", "b"]}}
    store.commit([Write.between(key, {}, body, 0)])
    for path in (("hot", "list", -1), ("lazy", "big", -1)):
        [trail] = store.read_paths({key: [path]})[key].trails
        assert trail.value is MISSING, path
        assert store.children(key, path) is None, path
    assert probe_json(["a", "b"], (-1,))[1] is MISSING


def test_read_state_by_path_equals_the_whole_read_at_every_offset(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    rng = random.Random(5)
    view = MemoryView(store, Identity.of("paths", "/", "s"))
    view.patch_state(
        {
            "global": {"lazy": {"shared": {"g": 1, "over": {"x": 1}}, "list": [1, 2]}},
            "cwd": {"lazy": {"shared": {"c": 2, "over": "scalar"}}},
            "session": {"lazy": {"big": plane(9_000)["big"], "shared": {"s": 3}}, "tactics": {"next": "a"}},
        }
    )
    for i in range(12):
        scope = rng.choice(["global", "cwd", "session"])
        roll = rng.random()
        if roll < 0.3:
            patch: dict[str, Any] = {scope: {"lazy": {"shared": {f"k{i}": i}}}}
        elif roll < 0.5:
            patch = {scope: {"lazy": {"shared": {"over": {"y": i} if i % 2 else f"s{i}"}}}}
        elif roll < 0.7:
            patch = {"session": {"lazy": {"big": {f"[{rng.randrange(9_000)}]": f"v{i}"}}}}
        else:
            patch = {scope: {"tactics": {"next": f"step {i}"}}}
        view.patch_state(patch)
    texts = [
        "effective.lazy.shared",
        "effective.lazy.shared.over",
        "effective.lazy.shared.over.x",
        "effective.lazy.big[5]",
        "effective.lazy.big[8999]",
        "effective.lazy.list[1]",
        "effective.lazy.big[3:6][1]",
        "session.lazy.big[8990:9000][9]",
        "effective.lazy.list[0:2][1]",
        "effective.tactics",
        "effective.tactics.next",
        "session.lazy.big[17]",
        "cwd.lazy.shared",
        "global.lazy",
        "effective.intents",
    ]
    for offset in range(0, 8):
        for text in texts:
            root, rest = text.split(".", 1)
            asked = f"{root}[{offset}].{rest}" if offset else text
            try:
                expected: Any = {"value": view._as_of_whole(offset, text)}
            except Exception as exc:
                expected = (type(exc), str(exc))
            try:
                got: Any = view.read_state({"path": asked})
            except Exception as exc:
                got = (
                    type(exc),
                    str(exc).replace(asked.split(".", 1)[0] + ".", root + "."),
                )  # (the root as asked)
            if isinstance(expected, tuple) and text == "effective.intents":
                continue  # as_of has no "absent plane reads as null" rule
            assert got == expected, (asked, got, expected)
    for text in (
        "effective.lazy.big[9000]",
        "effective.lazy.big.x",
        "effective.lazy.shared[0]",
        "lazy.list[0].a",
        "effective.lazy.big[0:2].x",
        "effective.lazy.big[0:2][2]",
        "effective.lazy.big[8999:9001][0]",
        "effective.lazy.shared[0:1][0]",
    ):
        with pytest.raises(Exception) as by_path:
            view.read_state({"path": text})
        with pytest.raises(Exception) as whole:
            view._as_of_whole(0, text)
        assert (type(by_path.value), str(by_path.value)) == (type(whole.value), str(whole.value))


def test_one_path_as_of_an_offset_equals_the_whole_read_past_many_large_edits(
    open_migrated: StoreFactory,
) -> None:
    """A single path at an offset is read in one snapshot (the store finds the offset's
    transition itself, ``read_paths(back=…)``): at every offset, through more edits of a tree
    member than a snapshot is apart in a large document, it answers what the whole-document
    computation answers — the origin and beyond the retained history included — and an as-of
    read never replays more than ``SNAPSHOT_LARGE_CHAIN`` changes."""
    store = open_migrated()
    rng = random.Random(7)
    view = MemoryView(store, Identity.of("back", "/", "s"), config=MemoryConfig(history_limit=40))
    big = plane(12_000)["big"]
    view.patch_state({"session": {"lazy": {"big": big}, "tactics": {"next": "start"}}})
    for i in range(36):
        roll = rng.random()
        if roll < 0.4:
            patch: dict[str, Any] = {"session": {"lazy": {"big": {f"[{rng.randrange(6)}]": "v" * (i + 1)}}}}
        elif roll < 0.6:
            patch = {"session": {"lazy": {"extra": {f"k{i}": i}}}}
        elif roll < 0.8:
            patch = {"session": {"tactics": {"next": f"step {i}"}}}
        else:
            patch = {rng.choice(["global", "cwd"]): {"tactics": {f"t{i}": i}}}
        view.patch_state(patch)
    texts = ["effective.tactics", "effective.tactics.next", "effective.lazy.big[3]", "session.lazy.extra"]
    for offset in range(0, 38):
        for text in texts:
            root, rest = text.split(".", 1)
            asked = f"{root}[{offset}].{rest}" if offset else text
            try:
                expected: Any = {"value": view._as_of_whole(offset, text)}
            except Exception as exc:
                expected = (type(exc), str(exc))
            try:
                got: Any = view.read_state({"path": asked})
            except Exception as exc:
                got = (
                    type(exc),
                    str(exc).replace(asked.split(".", 1)[0] + ".", root + "."),
                )  # (the root as asked)
            if isinstance(expected, tuple) and text == "effective.tactics":
                assert got == {"value": None}  # an absent plane reads as null (as_of has no such rule)
                continue
            assert got == expected, (asked, got, expected)
    # the origin (37 transitions back: before the first) is empty; one more is refused
    with pytest.raises(SelectionError):
        view.read_state({"path": "effective[37].lazy.big[3]"})
    with pytest.raises(NotFound, match="predates the retained history"):
        view.read_state({"path": "effective[38].lazy.big[3]"})
    key = view.keys["session"]
    with store._read_tx() as tx:
        row = tx.one("SELECT doc_id, revision FROM documents WHERE state = ? AND subject = ?", key)
        assert row is not None
        snaps = [int(r[0]) for r in tx.all("SELECT revision FROM snapshots WHERE doc_id = ?", (row[0],))]
    for revision in range(1, int(row[1]) + 1):
        assert revision - max([0, *(s for s in snaps if s <= revision)]) <= SNAPSHOT_LARGE_CHAIN, (
            revision,
            snaps,
        )
    now = store.read_paths({key: [("tactics",)]})[key]
    back = store.read_paths({key: [("tactics",)], view.keys["global"]: []}, back=3)
    assert back[key].revision <= now.revision and back[view.keys["global"]].trails == []
    with pytest.raises(InvalidInput):
        store.read_paths({key: [("tactics",)]}, back=2, seq=1)


def test_a_range_inside_a_path_reads_only_its_leaves(open_migrated: StoreFactory, tmp_path: Any) -> None:
    """``lazy.big[a:b][i]`` reads the leaves holding the range, now and as of a transition:
    with every other node of the plane gone it still answers (a whole read fails)."""
    store = open_migrated()
    view = MemoryView(store, Identity.of("ranges", str(tmp_path), "s"))
    big = [{"n": i, "s": f"{i:06d} " + "x" * 80} for i in range(12_000)]
    view.patch_state({"session": {"lazy": {"big": big}}})
    view.patch_state({"session": {"tactics": {"next": "later"}}})
    with store._read_tx() as tx:
        (root,) = tx.one("SELECT root FROM members WHERE name = 'lazy'") or (None,)
        touched: list[bytes] = []

        def fetch(ids: Any) -> dict[bytes, bytes]:
            touched.extend(ids)
            return fetch_bodies(tx, ids)

        ref = probe_ref(bytes(root), ["big"], fetch)
        slice_of(ref, SliceEnd(9_000, 9_003), decoding(fetch), fetch)
        total = int(tx.one("SELECT count(*) FROM nodes")[0])  # type: ignore[index]
    assert total > 100 and len(set(touched)) <= 8
    store.close()
    keep = sorted(set(touched))
    with open_migrated()._write_tx() as tx:
        tx.run(f"DELETE FROM nodes WHERE id NOT IN ({','.join('?' * len(keep))})", keep)
    fresh = MemoryView(open_migrated(), Identity.of("ranges", str(tmp_path), "s"))
    assert fresh.read_state({"path": "session.lazy.big[9000:9003][1]"}) == {"value": big[9_001]}
    assert fresh.read_state({"path": "effective[1].lazy.big[9000:9003][2].n"}) == {"value": 9_002}
    assert fresh.read_state({"path": "lazy.big[9000:9003][0]", "projection": "keys"})["keys"] == {
        "n": "number",
        "s": "string",
    }
    with pytest.raises(CorruptData):
        fresh.read_state({"path": "session.lazy.big[10:12][0]"})


def test_the_cli_reads_a_path_as_of_and_fails_closed_on_a_missing_node_on_it(
    backend: str, open_migrated: StoreFactory, tmp_path: Any
) -> None:
    store = open_migrated()
    view = MemoryView(store, Identity.of("cli", str(tmp_path), "s"))
    view.patch_state({"session": {"lazy": plane(12_000)}})
    view.patch_state({"session": {"lazy": {"big": {"[5]": "five, changed"}}}})
    view.patch_state({"session": {"tactics": {"next": "later"}}})
    key = view.keys["session"]

    def read(path: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "stateflow",
                "--store",
                backend,
                "tool",
                "read_state",
                "--agent",
                "cli",
                "--cwd",
                str(tmp_path),
                "--session",
                "s",
                orjson.dumps({"path": path}).decode(),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )

    ok = read("effective[1].lazy.big[5]")
    assert ok.returncode == 0, ok.stderr
    assert orjson.loads(ok.stdout) == {"value": "five, changed"}
    assert orjson.loads(read("session[2].lazy.big[5]").stdout) == {"value": plane(6)["big"][5]}
    with store._write_tx() as tx:
        root = bytes(tx.one("SELECT root FROM members WHERE name = 'lazy'")[0])  # type: ignore[index]
        touched: list[bytes] = []

        def fetch(ids: Any) -> dict[bytes, bytes]:
            touched.extend(ids)
            return fetch_bodies(tx, ids)

        probe(root, ["big", 6_000], decoding(fetch), fetch)
        tx.run("DELETE FROM nodes WHERE id = ?", (touched[-1],))
    broken = read("effective.lazy.big[6000]")
    assert broken.returncode != 0 and "error[corrupt-store]" in broken.stderr, broken.stderr
    assert str(key) in broken.stderr or "member 'lazy'" in broken.stderr


def test_history_show_and_diff_read_a_plane_path_along_it_at_any_depth(
    backend: str, open_migrated: StoreFactory, tmp_path: Any
) -> None:
    """`stateflow history show --path` and `history diff --path` read a plane path as read_state
    does, below the model's history window too: only the nodes on the path, never every scope
    document whole (a hot path beside a 10 MB lazy plane took seconds at a deep offset). Shown
    by a node of `lazy.obj` lost: `lazy.big` and `tactics` still read at every depth, while the
    whole state fails closed."""
    store = open_migrated()
    view = MemoryView(store, Identity.of("ops", str(tmp_path), "s"))
    view.patch_state({"session": {"lazy": plane(12_000), "tactics": {"n": 0}}})
    for i in range(1, 25):
        patch: dict[str, Any] = (
            {"lazy": {"big": {f"[{i % 5}]": f"edit {i}"}}} if i % 2 else {"tactics": {"n": i}}
        )
        view.patch_state({"session": patch})
    expected = {n: view._as_of_whole(n, "session.lazy.big[3]") for n in (0, 9, 20, 24)}
    assert len(set(map(str, expected.values()))) > 1  # (the element changed on the way)
    tactics = to_patch(
        diff(view._as_of_whole(20, "session.tactics"), view._as_of_whole(9, "session.tactics"))
    )
    assert tactics == {"n": 14}
    with store._write_tx() as tx:
        root = bytes(tx.one("SELECT root FROM members WHERE name = 'lazy'")[0])  # type: ignore[index]
        touched: list[bytes] = []

        def fetch(ids: Any) -> dict[bytes, bytes]:
            touched.extend(ids)
            return fetch_bodies(tx, ids)

        probe(
            root, ["obj", "k5000"], decoding(fetch), fetch
        )  # (obj is never edited: every version shares it)
        tx.run("DELETE FROM nodes WHERE id = ?", (touched[-1],))

    def history(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *("stateflow", "--store", backend, "history", *args),
                *("--agent", "ops", "--session", "s", "--cwd", str(tmp_path)),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )

    for n, value in expected.items():
        shown = history("show", str(n), "--path", "session.lazy.big[3]")
        assert shown.returncode == 0 and orjson.loads(shown.stdout) == value, (n, shown.stderr)
    diffed = history("diff", "20", "9", "--path", "session.tactics")
    assert diffed.returncode == 0 and orjson.loads(diffed.stdout) == tactics, diffed.stderr
    whole = history("show", "20")
    assert whole.returncode != 0 and "error[corrupt-store]" in whole.stderr, whole.stderr


ENDS: list[tuple[tuple[str | int, ...], KeysEnd | SliceEnd]] = [
    (("lazy", "big"), KeysEnd()),
    (("lazy", "obj"), KeysEnd()),
    (("lazy", "small"), KeysEnd()),
    (("lazy",), KeysEnd()),
    (("lazy", "big", 7), KeysEnd()),
    (("tactics",), KeysEnd()),
    (("lazy", "nope"), KeysEnd()),
    (("lazy", "big"), SliceEnd(5, 9)),
    (("lazy", "big"), SliceEnd(11_995, 12_010)),
    (("lazy", "big"), SliceEnd(0, 0)),
    (("lazy", "obj"), SliceEnd(0, 2)),
    (("lazy", "small"), SliceEnd(0, 1)),
    (("tactics", "next"), SliceEnd(0, 1)),
]


def test_keys_and_range_reads_equal_whole_reads_at_every_revision(store: SqlStore) -> None:
    key = DocKey("paths", "doc")
    bodies = _history(store, key, random.Random(7), 40, extra=True)
    for revision, body in bodies.items():
        seq = store.read_at(key, revision=revision, members=[]).seq
        for at in (seq, None) if revision == 40 else (seq,):
            for path, end in ENDS:
                [trail] = store.read_paths({key: [path]}, seq=at, end=end)[key].trails
                steps, value = probe_json(body, path)
                want = MISSING if value is MISSING else keys_form(value) if isinstance(end, KeysEnd) else None
                if isinstance(end, SliceEnd) and value is not MISSING:
                    want = slice_form(value, end)
                assert list(trail.steps) == steps, (revision, path, end)
                assert trail.value == want or (trail.value is MISSING and want is MISSING), (
                    revision,
                    path,
                    end,
                )


def test_read_state_keys_and_ranges_equal_the_whole_read_at_every_offset(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    rng = random.Random(9)
    view = MemoryView(store, Identity.of("paths", "/", "s"))
    view.patch_state(
        {
            "global": {"lazy": {"shared": {"g": 1, "over": {"x": 1}}, "list": [1, 2, 3]}},
            "cwd": {"lazy": {"shared": {"c": 2, "over": "scalar"}}},
            "session": {"lazy": {"big": plane(9_000)["big"], "shared": {"s": 3}}, "tactics": {"next": "a"}},
        }
    )
    for i in range(14):
        scope = rng.choice(["global", "cwd", "session"])
        roll = rng.random()
        if roll < 0.25:
            patch: dict[str, Any] = {scope: {"lazy": {"shared": {f"k{i}": i}}}}
        elif roll < 0.4:
            patch = {scope: {"lazy": {"shared": {"over": {"y": i} if i % 2 else f"s{i}", "g": None}}}}
        elif roll < 0.75:
            patch = {"session": {"lazy": {"big": {f"[{rng.choice([3, 6, 8_998])}]": f"v{i}"}}}}
        else:
            patch = {scope: {"tactics": {"next": f"step {i}"}}}
        view.patch_state(patch)
    reads = [
        ("effective.lazy.big", "keys"),
        ("effective.lazy.shared", "keys"),
        ("effective.lazy.shared.over", "keys"),
        ("effective.lazy", "keys"),
        ("session.lazy.big", "keys"),
        ("cwd.lazy.shared", "keys"),
        ("effective.tactics.next", "keys"),
        ("effective.lazy.big[2:9]", "value"),
        ("effective.lazy.big[8995:9001]", "value"),
        ("effective.lazy.big[8995:9001]", "keys"),
        ("session.lazy.big[0:0]", "value"),
        ("effective.lazy.list[1:3]", "value"),
        ("effective.lazy.big[9000:9200]", "value"),
        ("effective.lazy.shared[0:1]", "value"),
        ("effective.tactics.next[0:1]", "value"),
        ("effective.lazy.nope[0:1]", "value"),
        ("effective.lazy.nope", "keys"),
    ]
    for offset in range(0, 8):
        for text, projection in reads:
            root, rest = text.split(".", 1)
            asked = f"{root}[{offset}].{rest}" if offset else text
            try:
                value = view._as_of_whole(offset, text)
                expected: Any = keys_projection(value) if projection == "keys" else {"value": value}
            except Exception as exc:
                expected = (type(exc), str(exc))
            try:
                got: Any = view.read_state({"path": asked, "projection": projection})
            except Exception as exc:
                got = (
                    type(exc),
                    str(exc).replace(asked.split(".", 1)[0] + ".", root + "."),
                )  # (the root as asked)
            assert got == expected, (asked, projection, got, expected)


def test_keys_and_range_reads_touch_only_their_nodes(planted: Planted) -> None:
    """Beside a large member, a keys read of an array needs its root only, a range the leaves
    holding it: with every other node gone both still answer (a whole-member read fails)."""
    with planted.recording() as (root, fetch):
        big = probe_ref(root, ["big"], fetch)
        keys_of(big, decoding(fetch))
        slice_of(big, SliceEnd(15_000, 15_004), decoding(fetch), fetch)
    assert len(set(planted.touched)) <= 8, len(set(planted.touched))
    fresh, key = planted.keeping_only_touched(), planted.key
    [keys] = fresh.read_paths({key: [("lazy", "big")]}, end=KeysEnd())[key].trails
    assert keys.value == KeysForm("array", 20_000)
    [window] = fresh.read_paths({key: [("lazy", "big")]}, end=SliceEnd(15_000, 15_004))[key].trails
    assert window.value == SliceForm("array", 20_000, planted.body["lazy"]["big"][15_000:15_004])
    with pytest.raises(CorruptData, match="missing"):
        fresh.read_paths({key: [("lazy", "big")]}, end=SliceEnd(3, 5))


def test_read_state_patches_by_path_equal_the_whole_patch_at_every_offset(
    open_migrated: StoreFactory,
) -> None:
    store = open_migrated()
    rng = random.Random(3)
    view = MemoryView(store, Identity.of("paths", "/", "s"))
    view.patch_state(
        {
            "global": {"lazy": {"shared": {"g": 1, "over": {"x": 1}}}},
            "cwd": {"lazy": {"shared": {"c": 2, "over": "scalar"}}},
            "session": {
                "lazy": {"big": plane(9_000)["big"], "shared": {"s": 3}, "solo": {"deep": {"x": 0}}},
                "tactics": {"next": "a"},
            },
        }
    )
    for i in range(16):
        scope = rng.choice(["global", "cwd", "session"])
        roll = rng.random()
        if i in (10, 12, 13):  # a prefix of the path deleted from every scope, then back
            patch: dict[str, Any] = {"session": {"lazy": {"solo": None if i != 12 else {"deep": {"x": i}}}}}
        elif i in (4, 9):  # the large array grows (replaced whole in the effective diff)
            patch = {"session": {"lazy": {"big": [*view._as_of_whole(0, "session.lazy.big"), {"x": i}]}}}
        elif i in (5, 11, 14):  # a narrower scope's array hides a broader one's, of other lengths
            patch = {scope: {"lazy": {"list": [{"x": i}, i] if i != 11 else [{"x": i}, {"x": 0, "y": i}, 3]}}}
        elif i == 7:  # an element of the large array becomes an object, then changes inside
            patch = {"session": {"lazy": {"big": {"[6]": {"x": i, "y": [i]}}}}}
        elif i == 8:
            patch = {"session": {"lazy": {"big": {"[6]": {"x": i, "y": [i, i]}}}}}
        elif roll < 0.25:
            patch = {scope: {"lazy": {"shared": {f"k{i % 3}": i}}}}
        elif roll < 0.4:
            patch = {scope: {"lazy": {"shared": {"over": {"y": i} if i % 2 else f"s{i}", "g": None}}}}
        elif roll < 0.5:
            patch = {scope: {"lazy": {"shared": None if i % 2 else {"over": [i]}}}}
        elif roll < 0.7:
            patch = {"session": {"lazy": {"big": {f"[{rng.choice([3, 6, 8_998])}]": f"v{i}"}}}}
        else:
            patch = {scope: {"tactics": {"next": f"step {i}"}}}
        view.patch_state(patch)
    history = view.transitions(limit=20)
    texts = [
        "effective.lazy.shared",
        "effective.lazy.shared.over",
        "effective.lazy.shared.over.x",
        "effective.lazy.shared.over.y",
        "effective.lazy.shared.g",
        "effective.lazy.shared.k1",
        "effective.lazy.big",
        "effective.tactics.next",
        "effective.tactics",
        "session.lazy.big[3]",
        "session.lazy.big[2:8]",
        "session.lazy.shared.over.y",
        "cwd.lazy.shared",
        "global.lazy.shared.over",
        "global.tactics.next.deeper",
        "effective.lazy.solo.deep.x",
        "effective.lazy.solo.deep",
        "effective.lazy.big[3]",
        "effective.lazy.big[6]",
        "effective.lazy.big[6].x",
        "effective.lazy.big[6].y[1]",
        "effective.lazy.big[3].x",
        "effective.lazy.big[5].x",
        "effective.lazy.big[6].x.z",
        "effective.lazy.shared.g.x",
        "effective.lazy.big[9000]",
        "effective.lazy.big[9001].x",
        "effective.lazy.big[99999]",
        "effective.lazy.big.x",
        "effective.lazy.shared[0]",
        "effective.lazy.shared.over[0]",
        "effective.lazy.list[0].x",
        "effective.lazy.list[1]",
        "effective.lazy.list[1].y",
        "effective.lazy.list[2]",
        "effective.tactics.next[0]",
        "effective.lazy.solo[0]",
    ]

    def whole(n: int, root: str, plane_name: str) -> Any:
        try:
            return {plane_name: view._as_of_whole(n, f"{root}.{plane_name}")}
        except SelectionError:
            return {}

    whole_reads: list[str] = []
    patch_at = view._patch_at

    def patch_whole(path: ReadPath, *args: Any) -> Any:
        whole_reads.append(path.text)
        return patch_at(path, *args)

    view._patch_at = patch_whole  # type: ignore[method-assign,assignment]  # counts reads of whole scopes
    for n in range(0, view.config.history_limit):
        for text in texts:
            root, rest = text.split(".", 1)
            parsed = parse(text, view.planes.names)
            assert isinstance(parsed, ReadPath)
            plane_name = rest.split(".")[0].split("[")[0]
            try:
                if root == "effective":
                    patch = to_patch(diff(whole(n + 1, root, plane_name), whole(n, root, plane_name)))
                else:
                    patch = history[n]["changes"].get(root, {})
                expected: Any = {
                    "patch": walk_patch(
                        patch,
                        parsed.selectors,
                        text,
                        value_before=partial(
                            selected, whole(n + 1, root, plane_name), parsed.selectors, text
                        ),
                    )
                }
            except Exception as exc:
                expected = (type(exc), str(exc))
            if isinstance(expected, dict) and expected["patch"] in (None, {}) and len(parsed.selectors) > 1:
                # a path there on neither side of the transition is refused as its value read
                # after it is (seed: a nonexistent path is a tool error in every projection)
                refusals: list[tuple[type[Exception], str]] = []
                for offset in (n, n + 1):
                    try:
                        view._as_of_whole(offset, text)
                    except SelectionError as exc:
                        refusals.append((type(exc), str(exc)))
                if len(refusals) == 2:
                    expected = refusals[0]
            asked = f"{root}[{n}].{rest}" if n else text
            try:
                got: Any = view.read_state({"path": asked, "projection": "patch"})
            except Exception as exc:
                got = (
                    type(exc),
                    str(exc).replace(asked.split(".", 1)[0] + ".", root + "."),
                )  # (the root as asked)
            assert got == expected, (asked, got, expected)
    # a path into the large array never reads the scopes whole, whatever the change was
    assert not [t for t in whole_reads if t.startswith("effective") and "lazy.big" in t], whole_reads


def referrers_whole(
    scopes: list[tuple[str, dict[str, Any]]], candidates: list[str], scan: tuple[str, ...]
) -> tuple[list[str], bool]:
    """The referrer scan as it was over whole decoded states (a stack of nodes to visit)."""
    from stateflow.doc.paths import is_key
    from stateflow.memory.refs import MAX_REFERRERS, NODE_BUDGET, REF, text_ref

    text_res = [text_ref(c) for c in candidates]
    structured: list[str] = []
    textual: list[str] = []
    visited, truncated = 0, False
    for label, state in scopes:
        for plane_name in scan:
            if plane_name not in state or plane_name == "response":
                continue
            stack: list[tuple[Any, str, bool]] = [
                (state[plane_name], f"{label}.{plane_name}" if label else plane_name, True)
            ]
            while stack:
                if len(structured) + len(textual) >= MAX_REFERRERS or visited >= NODE_BUDGET:
                    truncated = True
                    break
                node, at, exact = stack.pop()
                visited += 1
                if type(node) is dict:
                    if type(node.get(REF)) is str and node[REF] in candidates:
                        if at not in structured + textual:
                            structured.append(at)
                        continue
                    for k in sorted(node, reverse=True):
                        named = exact and is_key(k)
                        stack.append((node[k], f"{at}.{k}" if named else at, named))
                elif type(node) is list:
                    stack.extend(
                        (node[i], f"{at}[{i}]" if exact else at, exact) for i in range(len(node) - 1, -1, -1)
                    )
                elif (
                    type(node) is str
                    and any(r.search(node) for r in text_res)
                    and at not in structured + textual
                ):
                    textual.append(at)
            if truncated:
                break
        if truncated:
            break
    return (sorted(structured) + sorted(textual))[:MAX_REFERRERS], truncated


def test_the_dangling_reference_hint_scans_a_large_plane_only_as_far_as_its_budget(
    open_migrated: StoreFactory,
) -> None:
    store = open_migrated()
    view = MemoryView(store, Identity.of("paths", "/", "s"))
    big = [f"{i:06d} " + "plain text " * 8 for i in range(20_000)]  # a plane above the tree threshold
    for i in (7, 4_000, 15_000):
        big[i] = f"see $lazy.gone{i % 2} at {i}"
    view.patch_state(
        {
            "cwd": {"lazy": {"small": [{"$ref": "cwd.lazy.gone1"}, "x $cwd.lazy.gone0 y"]}},
            "session": {
                "lazy": {
                    "big": big,
                    "nested": [{"deep": {"$ref": "session.lazy.gone0"}}] * 3,
                    "obj": {f"k{i}": {"$ref": "lazy.gone1", "n": i} for i in range(6_000)},
                },
                "tactics": {"next": {"$ref": "session.lazy.gone1"}},
            },
        }
    )
    scan = ("artifacts", "strategy", "tactics", "intents", "lazy")
    docs = store.read([view.keys[s] for s in view.scopes])
    states = [(s, docs[view.keys[s]].body or {}) for s in view.scopes]
    for text in (
        "lazy.gone0",
        "lazy.gone1",
        "cwd.lazy.gone0",
        "cwd.lazy.gone1",
        "session.lazy.gone0",
        "lazy.nope",
    ):
        try:
            got = view.read_state({"path": text})
        except SelectionError:
            got = {}
        candidates = [text, f"effective.{text}"] if text.startswith("lazy.") else [text]
        found, truncated = referrers_whole(states, candidates, scan)
        if not found:
            assert "hint" not in got, (text, got)
            continue
        [hint] = got["hint"]
        assert hint["paths"] == found, (text, hint, found)
        assert ("additional reference owners may exist" in hint["message"]) == truncated
    # the scan of session's lazy plane ends inside `big`: `obj`, listed past it, is never read
    with store._read_tx() as tx:
        key = view.keys["session"]
        (root,) = tx.one(
            "SELECT m.root FROM members m JOIN documents d ON d.doc_id = m.doc_id "
            "WHERE m.name = 'lazy' AND d.state = ? AND d.subject = ?",
            (key.state, key.subject),
        ) or (None,)
        fetch = lambda ids: fetch_bodies(tx, ids)  # noqa: E731
        obj = probe_ref(bytes(root), ["obj"], fetch)
        below = [i for i in fetch_tree(obj, decoding(fetch)) if i != obj]
    store.close()
    with open_migrated()._write_tx() as tx:
        tx.run(f"DELETE FROM nodes WHERE id IN ({','.join('?' * len(below))})", below)
    fresh = MemoryView(open_migrated(), Identity.of("paths", "/", "s"))
    [hint] = fresh.read_state({"path": "session.lazy.gone1"})["hint"]
    assert hint["paths"] == ["session.tactics.next"]
    with pytest.raises(CorruptData):
        fresh.read_state({"path": "session.lazy.obj"})


def test_a_warm_path_read_answers_from_the_caches_and_still_sees_other_writers(
    open_migrated: StoreFactory,
) -> None:
    """A path into a small member whose heads and value this store holds at the document's
    revision is answered without reading the member rows; a write by another store moves the
    revision, so the next read misses and sees it, and a member held as a tree (over
    ``TREE_MIN``) is still walked from its root."""
    key = DocKey("paths", "warm")
    reader, writer = open_migrated(), open_migrated()
    reader.commit([Write.between(key, {}, {"tactics": {"next": "a"}, "lazy": plane(12_000)}, 0)])
    assert reader.read_paths({key: [("tactics", "next")]})[key].trails[0].value == "a"
    # warm: the heads and the member are cached at the current revision
    assert reader.read_paths({key: [("tactics", "next"), ("absent",)]})[key].trails[0].value == "a"
    doc = writer.read([key])[key]
    body = doc.body or {}
    writer.commit([Write.between(key, body, {**body, "tactics": {"next": "b"}}, doc.revision)])
    got = reader.read_paths({key: [("tactics", "next"), ("lazy", "big", 7), ("absent",)]})[key]
    assert got.revision == doc.revision + 1
    assert [t.value for t in got.trails[:2]] == ["b", plane(12_000)["big"][7]]
    assert got.trails[2].value is MISSING
