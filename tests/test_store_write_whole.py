"""``Store.write_whole``: one document written whole on what this store last saw, or nothing.

Two stores on one location stand for two processes: what one writes, the other's caches have
not seen, so its ``write_whole`` must write nothing (and say so) rather than lose the other's
write; ``update`` then decides.
"""

from __future__ import annotations

from typing import Any

from stateflow.store import DocKey, Document, Write
from tests.conftest import StoreFactory

KEY = DocKey("items", '["agent","a","item","k"]')
GUARD = DocKey("_guard", "g")


def _whole(body: dict[str, Any]) -> Any:
    def build(
        shared: dict[DocKey, Any], current: dict[str, Any] | None
    ) -> tuple[dict[str, Any], list[list[str]]]:
        return body, [[]]

    return build


def _replace(store: Any, key: DocKey, body: dict[str, Any]) -> None:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].body, body, docs[key].revision)], None

    store.update([key], compute, {"by": "update"})


def test_a_new_document_is_written_with_its_change_and_transition(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    _replace(store, GUARD, {"v": 1})
    store.read([GUARD])  # seen here
    store.write_whole(DocKey("items", "warm"), _whole({"x": 0}), {"by": "warm"}, shared=[GUARD])
    done = store.write_whole(KEY, _whole({"a": 1, "b": [1, 2]}), {"by": "lean"}, shared=[GUARD])
    assert done is not None and done.changed and done.revisions == {KEY: 1}
    fresh = open_migrated()  # another process's view: from the database, not the caches
    assert fresh.get(KEY).body == {"a": 1, "b": [1, 2]}
    assert fresh.read_at(KEY, revision=1).body == {"a": 1, "b": [1, 2]}
    (change,) = fresh.history([KEY])
    assert change.revision == 1 and change.origin == {"by": "lean"} and change.paths == [[]]
    assert done.seq is not None
    assert [t.origin for t in fresh.transitions(after_seq=done.seq - 1, limit=5)] == [{"by": "lean"}]


def test_a_document_another_store_moved_is_left_to_update(open_migrated: StoreFactory) -> None:
    mine, other = open_migrated(), open_migrated()
    _replace(mine, KEY, {"n": 1})
    _replace(mine, GUARD, {"v": 1})
    assert mine.write_whole(KEY, _whole({"n": 2}), {"by": "lean"}, shared=[GUARD]) is not None
    _replace(other, KEY, {"n": 3, "theirs": True})  # unseen by ``mine``
    before = other.get(KEY)
    assert mine.write_whole(KEY, _whole({"n": 4}), {"by": "lean"}, shared=[GUARD]) is None
    assert other.get(KEY) == before  # nothing written
    _replace(mine, KEY, {"n": 4})  # the general write decides, on what is there now
    assert [c.origin["by"] for c in other.history([KEY])] == ["update", "update", "lean", "update"]
    assert other.get(KEY).body == {"n": 4} and other.get(KEY).revision == 4


def test_a_shared_document_that_moved_writes_nothing(open_migrated: StoreFactory) -> None:
    mine, other = open_migrated(), open_migrated()
    _replace(mine, GUARD, {"v": 1})
    _replace(mine, KEY, {"n": 1})
    assert mine.write_whole(KEY, _whole({"n": 2}), {}, shared=[GUARD]) is not None
    _replace(other, GUARD, {"v": 2})  # e.g. a re-declare, in another process
    seen: list[Any] = []

    def build(
        shared: dict[DocKey, Any], current: dict[str, Any] | None
    ) -> tuple[dict[str, Any], list[list[str]]]:
        seen.append(shared[GUARD])
        return {"n": 3}, [[]]

    assert mine.write_whole(KEY, build, {}, shared=[GUARD]) is None
    assert seen == [{"v": 1}]  # built on what it had seen; the commit found the guard moved
    assert other.get(KEY).revision == 2
