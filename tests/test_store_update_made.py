"""``update``'s optimistic write planned straight from what each write says its edits make
(``Write.bodies``: a patch's merge, or a diff) — no staging, no edit applied — writes the rows
the general path (the edits applied, ``Writes._stage`` then ``Writes._plan_doc``) writes.

Two documents of one store get the same writes, one with its bodies (the lean path), one
without (the general path): every row of every table is compared after each commit.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from stateflow.doc.merge import Emitted, merge_patch
from stateflow.store import DocKey, Document, Write, writes
from stateflow.store.model import made_write
from stateflow.store.plan import TREE_MIN
from tests.conftest import StoreFactory
from tests.test_store_write_whole import _rows

STATE = "scopes"


def _key(subject: str) -> DocKey:
    return DocKey(STATE, subject)


def _counting(store: Any, name: str) -> list[int]:
    """Calls of one of the store's own methods, counted (each still runs as it is)."""
    calls = [0]
    real = getattr(store, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    setattr(store, name, counted)
    return calls


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.25:
        return rng.randrange(-3, 9)
    if roll < 0.35:
        return "x" * rng.choice([1, 30, 400, 3000])  # inline edits, ``change_edits`` rows, a snapshot
    if roll < 0.45:
        return [rng.randrange(5) for _ in range(rng.randrange(4))]
    if roll < 0.5:
        return rng.choice([True, 1.5, "é\u2028"])
    if depth > 2:
        return rng.randrange(9)
    return {f"k{rng.randrange(5)}": _value(rng, depth + 1) for _ in range(rng.randrange(1, 4))}


def _patch(rng: random.Random, body: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """A merge patch of ``body``: members and keys set, replaced, deleted (``None``), nested."""
    patch: dict[str, Any] = {}
    names = [*body, *(f"m{i}" for i in range(6))] if depth == 0 else [*body, "k0", "k1", "k9"]
    for _ in range(rng.randrange(1, 4)):
        name = rng.choice(names)
        roll = rng.random()
        here = body.get(name)
        if roll < 0.15:
            patch[name] = None
        elif roll < 0.5 and type(here) is dict and depth < 3:
            patch[name] = _patch(rng, here, depth + 1)
        else:
            patch[name] = _value(rng, depth)
    return patch


def _writes(
    rng: random.Random, docs: dict[DocKey, Document], pairs: list[tuple[DocKey, DocKey]]
) -> tuple[list[Write], list[Write]]:
    """One patch per pair, as the memory layer makes its writes: the merge's own edits where
    it lists them exactly, else the diff of the bodies — with their bodies for the lean
    document, without for the general one (the same edits, expected revisions and paths)."""
    lean: list[Write] = []
    general: list[Write] = []
    for mine, theirs in pairs:
        doc = docs[mine]
        body = doc.body or {}
        patch = _patch(rng, body)
        edits = Emitted()
        new = merge_patch(body, patch, prune=True, edits=edits)
        assert type(new) is dict
        if edits.exact:
            if not edits:
                continue
            write = made_write(mine, list(edits), doc.revision, None, (body, new))
        else:
            write = Write.between(mine, body, new, doc.revision)
            if not write.edits:
                continue
        lean.append(write)
        # (the general document is at the same revision: it gets the same writes)
        general.append(made_write(theirs, write.edits, doc.revision, write.paths, None))
    return lean, general


def _run(
    store: Any, keys: list[DocKey], make: Callable[[dict[DocKey, Document]], list[Write]], **kw: Any
) -> None:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return make(docs), None

    store.update(keys, compute, {"by": "test"}, checked=True, **{"optimistic": True, **kw})


@pytest.mark.parametrize(("named", "locked"), [(False, False), (True, False), (False, True), (True, True)])
def test_writes_with_their_bodies_have_the_rows_of_the_general_write(
    open_migrated: StoreFactory, backend: str, named: bool, locked: bool
) -> None:
    """Random patches of two documents at a time (one commit, as ``patch_state`` of two
    scopes), through the lean path and the general one: every ``documents``, ``members``,
    ``changes``, ``change_edits``, ``snapshots`` and ``snapshot_members`` row the same after
    each commit, every revision read back the same here and from another store; ``named``:
    the members handed to the computation are some of them (as ``patch_state`` hands its hot
    planes), the rest untouched; ``locked``: every write takes the locked path (as a
    contended write does), whose common case is planned the same lean way under its locks."""
    store = open_migrated()
    pairs = [(_key("lean-a"), _key("general-a")), (_key("lean-b"), _key("general-b"))]
    every = [k for pair in pairs for k in pair]
    rng = random.Random(20261203 + named)
    seed = {"m0": {"k0": 1}, "m1": "v", "m5": {"k1": {"k2": [1]}}, "cold": {"k0": "x" * 50}}
    _run(store, every, lambda docs: [Write.between(k, None, seed, 0) for k in every])
    members = ["m0", "m1", "m2", "m3", "m4", "m5"] if named else None
    staged = _counting(store, "_stage")
    other = open_migrated()
    for round_ in range(150):
        both: list[Write] = []

        def make(docs: dict[DocKey, Document], both: list[Write] = both) -> list[Write]:
            lean, general = _writes(rng, docs, pairs)
            both[:] = general
            return lean

        before = staged[0]
        _run(store, [k for k, _ in pairs], make, members=members, optimistic=not locked)
        assert staged[0] == before  # planned straight from the bodies: nothing staged
        _run(
            store,
            [k for _, k in pairs],
            lambda docs: list(both),  # noqa: B023
            members=members,
            optimistic=not locked,
        )
        assert staged[0] == before + len(both)  # (the general path, for the same writes)
        for mine, theirs in pairs:
            assert _rows(backend, mine.subject) == _rows(backend, theirs.subject), (round_, mine)
        if round_ % 25 == 24:
            for mine, theirs in pairs:
                now = store.get(mine)
                assert now.body == store.get(theirs).body == other.get(mine).body
                for revision in range(1, now.revision + 1):
                    assert (
                        other.read_at(mine, revision=revision).body
                        == other.read_at(theirs, revision=revision).body
                    )
    rows = _rows(backend, "lean-a")
    assert len(rows["snapshots"]) > 1 and rows["change_edits"]  # (the rarer rows met too)


def _written(store: Any, key: DocKey, patch: dict[str, Any]) -> None:
    def make(docs: dict[DocKey, Document]) -> list[Write]:
        body = docs[key].body or {}
        edits = Emitted()
        new = merge_patch(body, patch, prune=True, edits=edits)
        assert edits.exact and type(new) is dict
        return [made_write(key, list(edits), docs[key].revision, None, (body, new))]

    _run(store, [key], make)


def test_a_patch_is_planned_from_its_merge_without_staging(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    key = _key("lean")
    _run(store, [key], lambda docs: [Write.between(key, None, {"a": {"n": 1}, "b": 2}, 0)])
    staged, planned = _counting(store, "_stage"), _counting(store, "_plan_doc")
    for n in range(5):
        _written(store, key, {"a": {"n": n + 2}, "c": [n]})
    assert (staged[0], planned[0]) == (0, 0)
    assert open_migrated().get(key).body == {"a": {"n": 6}, "b": 2, "c": [4]}
    assert open_migrated().history([key])[0].paths == [["a", "n"], ["c", 0]]


def test_a_member_that_becomes_a_tree_is_left_to_the_general_path(
    open_migrated: StoreFactory, backend: str
) -> None:
    store = open_migrated()
    lean, general = _key("lean"), _key("general")
    _run(
        store,
        [lean, general],
        lambda docs: [Write.between(k, None, {"a": 1, "b": {"k": 1}}, 0) for k in docs],
    )
    big = {f"k{i}": "y" * 1000 for i in range(TREE_MIN // 1000 + 10)}
    staged = _counting(store, "_stage")
    _written(store, lean, {"a": 2, "big": big})
    assert staged[0] == 1  # planned half way, then given to the general path
    _run(
        store,
        [general],
        lambda docs: [
            Write.between(
                general, docs[general].body, {"a": 2, "b": {"k": 1}, "big": big}, docs[general].revision
            )
        ],
    )
    assert _rows(backend, "lean") == _rows(backend, "general")
    assert open_migrated().get(lean).body == {"a": 2, "b": {"k": 1}, "big": big}
    before = staged[0]
    _written(store, lean, {"b": {"k": 2}})  # a small member beside the tree: lean again
    assert staged[0] == before
    assert (open_migrated().get(lean).body or {})["b"] == {"k": 2}


def test_writers_taking_turns_on_one_document_keep_every_write(
    open_migrated: StoreFactory, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stores (as two writer processes) patch one document in turn, each its own key of
    one member, so every write finds the document moved by the other: every value kept, each
    revision's change its own path. On SQLite such a write goes to the locked path (one turn
    in the writers' queue), where it is planned from its merge as the unlocked one is:
    nothing staged."""
    # (a store remembers a lost race for CONTENDED_SECONDS, 0.5 s: long enough here for a loaded
    # machine's pause between two writes, which is not this test's subject)
    monkeypatch.setattr(writes, "CONTENDED_SECONDS", 60.0)
    first, second = open_migrated(), open_migrated()
    key = _key("shared")
    _run(first, [key], lambda docs: [Write.between(key, None, {"tactics": {}, "intents": {"a": 1}}, 0)])
    for n in range(3):  # (each store reads the document and learns that it is contended)
        for i, store in enumerate((first, second)):
            _written(store, key, {"tactics": {f"w{i}": n}})
    staged = [_counting(store, "_stage") for store in (first, second)]
    queue = getattr(first, "_group", None)
    drawn = queue.queue.drawn() if queue is not None else 0
    for n in range(3, 23):
        for i, store in enumerate((first, second)):
            _written(store, key, {"tactics": {f"w{i}": n}})
    reader = open_migrated()
    doc = reader.get(key)
    assert doc.body == {"tactics": {"w0": 22, "w1": 22}, "intents": {"a": 1}}
    assert doc.revision == 1 + 2 * 23
    changes = reader.history([key], limit=200)
    assert [c.paths for c in changes[:4]] == [[["tactics", "w1"]], [["tactics", "w0"]]] * 2
    for revision in (10, 25, 47):
        n, i = divmod(revision - 2, 2)
        assert (reader.read_at(key, revision=revision).body or {})["tactics"][f"w{i}"] == n
    if queue is not None:  # (SQLite)
        assert staged == [[0], [0]]  # planned from each merge under the lock
        assert queue.queue.drawn() - drawn == 40  # one turn per write
