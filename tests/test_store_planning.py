"""A write's rows as the planner makes them (``Writes._stage``, ``_plan_doc``, ``_plan_new``, ``write_whole``'s edits,
``_plan_made``):
random sequences of writes of one document — members set, added, deleted, edited inside,
small and large edits, the whole body replaced, the document deleted and written again —
through each way a write comes in (the optimistic and the locked ``update``, ``write_whole``,
``commit``), then every revision read back as of it, by this store and by another one on the
same database, and the store's own check. Both backends."""

from __future__ import annotations

import random
from typing import Any

from stateflow.store import DocKey, Document, Whole, Write
from stateflow.store.check import check_store

from .conftest import StoreFactory

KEY = DocKey("planned", "doc")


def _value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.3:
        return rng.randrange(-5, 5)
    if roll < 0.45:
        return "x" * rng.choice([1, 40, 700, 5000])  # inline edits, ``change_edits`` rows, a snapshot
    if roll < 0.6:
        return None
    if roll < 0.8:
        return {f"k{i}": rng.randrange(9) for i in range(rng.randrange(4))}
    return [rng.randrange(9) for _ in range(rng.randrange(4))]


def _next(rng: random.Random, body: dict[str, Any] | None) -> dict[str, Any] | None:
    """The body after a random write (None: the document deleted)."""
    if body is None or rng.random() < 0.08:
        return None if body is not None and rng.random() < 0.5 else {f"m{i}": _value(rng) for i in range(3)}
    new = dict(body)
    for _ in range(rng.randrange(1, 4)):
        name = f"m{rng.randrange(6)}"
        roll = rng.random()
        if roll < 0.2:
            new.pop(name, None)
        elif roll < 0.45 and type(new.get(name)) is dict:
            inner = dict(new[name])  # an edit inside an object member
            inner[f"k{rng.randrange(5)}"] = _value(rng)
            new[name] = inner
        else:
            new[name] = _value(rng)
    return new


def test_every_revision_reads_back_as_written_whichever_way_it_was_written(
    open_migrated: StoreFactory,
) -> None:
    store, other = open_migrated(), open_migrated()
    rng = random.Random(20261203)
    expected: dict[int, dict[str, Any] | None] = {}
    body: dict[str, Any] | None = None
    for step in range(160):
        new = _next(rng, body)
        if new == body:
            continue
        way = step % 4

        def compute(
            docs: dict[DocKey, Document], new: Any = new, before: Any = body
        ) -> tuple[list[Write], None]:
            doc = docs[KEY]
            assert doc.body == before  # (as cached by the write before, or read)
            return [Write.between(KEY, doc.body, new, doc.revision)], None

        if way == 0 or (way == 2 and new is None):
            store.update([KEY], compute, {"door": "test"}, optimistic=True)
        elif way == 1:
            store.update([KEY], compute, {"door": "test"})
        elif way == 2:
            assert new is not None
            whole = Whole(new, [[]])
            seen: list[Any] = []

            def build(
                _shared: dict[DocKey, Any],
                current: dict[str, Any] | None,
                whole: Whole = whole,
                seen: list[Any] = seen,
            ) -> Whole:
                seen.append(current)
                return whole

            if not store.write_whole(KEY, build, {"door": "test"}):
                store.update([KEY], compute, {"door": "test"}, optimistic=True)
            assert seen in ([], [body])
        else:
            current = store.get(KEY)
            store.commit([Write.between(KEY, current.body, new, current.revision)], {"door": "test"})
        body = new
        revision = store.get(KEY).revision
        expected[revision] = None if new is None else dict(new)
        assert store.get(KEY).body == new
    assert len(expected) > 100
    for reader in (store, other):
        for revision, want in expected.items():
            assert reader.read_at(KEY, revision=revision).body == want, revision
    assert other.get(KEY).body == body
    assert check_store(store).ok
