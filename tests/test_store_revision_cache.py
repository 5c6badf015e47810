"""The byte-bounded caches: members and PostgreSQL's whole bodies (``RevisionCache``), and
each document's heads with its body assembled (``HeadCache``)."""

from __future__ import annotations

from typing import Any

from stateflow.store.cache import HeadCache, RevisionCache


def test_a_value_is_served_only_at_its_revision_and_never_replaced_by_an_older_one() -> None:
    cache: RevisionCache[int, str] = RevisionCache(1000)
    cache.put(1, 3, "r3", 10)
    assert cache.get(1, 3) == "r3" and cache.get(1, 2) is None and cache.get(1, 4) is None
    cache.put(1, 2, "r2", 10)  # a lagging writer
    assert cache.get(1, 3) == "r3" and cache.latest(1) == (3, "r3")
    cache.put(1, 4, "r4", 10)
    assert cache.get(1, 4) == "r4" and cache.get(1, 3) is None


def test_bytes_are_bounded_least_recently_used_first_and_huge_values_are_not_kept() -> None:
    cache: RevisionCache[int, int] = RevisionCache(800)
    for doc in range(8):
        cache.put(doc, 1, doc, 100)
    assert cache.get(0, 1) == 0  # touched: now the most recent
    cache.put(8, 1, 8, 100)  # over budget: the least recently used (doc 1) goes
    assert cache.get(1, 1) is None
    assert [cache.get(d, 1) for d in (0, 2, 7, 8)] == [0, 2, 7, 8]
    cache.put(9, 1, 9, 101)  # more than an eighth of the budget: not kept, nothing evicted
    assert cache.get(9, 1) is None and cache.get(2, 1) == 2


def test_put_many_leaves_what_puts_one_by_one_leave() -> None:
    """A write's members go in under one lock: the same entries, bytes, order and evictions as
    the same puts made one at a time (a lagging revision, a replaced entry, a value too large,
    evictions in the middle of the batch)."""
    import random

    rng = random.Random(7)
    for _ in range(200):
        one: RevisionCache[int, int] = RevisionCache(800)
        many: RevisionCache[int, int] = RevisionCache(800)
        for cache in (one, many):
            for doc in range(6):
                cache.put(doc, 5, doc, 100)
        batch = [
            (rng.randrange(10), rng.randrange(3, 8), rng.randrange(100), rng.choice([0, 50, 100, 250, 101]))
            for _ in range(rng.randrange(8))
        ]
        for key, revision, value, size in batch:
            one.put(key, revision, value, size)
        many.put_many(batch)
        assert list(one._entries.items()) == list(many._entries.items())
        assert one._bytes == many._bytes


def test_lookup_all_answers_what_lookups_one_by_one_answer() -> None:
    cache: RevisionCache[int, str | None] = RevisionCache(1000)
    for doc in range(4):
        cache.put(doc, 2, f"d{doc}", 10)
    cache.put(4, 2, None, 10)  # (a held None is a hit)
    assert cache.lookup_all([(3, 2), (1, 2), (4, 2)]) == ["d3", "d1", None]
    assert list(cache._entries) == [0, 2, 3, 1, 4]  # each hit is now the most recent
    assert cache.lookup_all([(0, 2), (2, 3), (1, 2)]) is None  # one at another revision
    assert cache.lookup_all([(0, 2), (9, 2)]) is None  # one not held
    assert list(cache._entries)[-1] == 0  # (the hits before the miss count, as lookups do)
    assert cache.lookup_all([]) == []


def _heads(*names: str) -> dict[str, Any]:
    return {n: (1, n, i, 1, 10, None) for i, n in enumerate(names)}


def test_a_documents_entry_holds_its_heads_and_body_at_one_revision() -> None:
    """One entry per document: heads alone (a reader's head query) or heads with the body
    assembled (a write's). Heads alone at the revision held keep what is assembled there; a
    newer revision replaces both; an older one (a lagging writer) changes nothing."""
    cache = HeadCache()
    known = {"a": 1}
    cache.put(1, 3, _heads("a"), known, 10)
    entry = cache.entry(1, 3)
    assert entry is not None and entry[2] is known and cache.get(1, 3) == _heads("a")
    assert cache.entry(1, 2) is None and cache.get(1, 4) is None
    cache.put(1, 3, _heads("a"))  # a reader's heads at the same revision
    entry = cache.entry(1, 3)
    assert entry is not None and entry[2] is known
    cache.put(1, 2, _heads("old"), {}, 1)  # a lagging writer
    assert cache.get(1, 3) == _heads("a") and cache.get(1, 2) is None
    cache.put(1, 4, _heads("a", "b"))  # newer, nothing assembled
    entry = cache.entry(1, 4)
    assert entry is not None and entry[2] is None and cache.get(1, 3) is None
    assert cache._bytes == 0


def test_a_documents_entry_is_bounded_by_documents_and_by_the_bytes_of_its_bodies() -> None:
    cache = HeadCache(max_docs=12, max_bytes=800)
    for doc in range(8):
        cache.put(doc, 1, _heads("a"), {"a": doc}, 100)
    assert cache._bytes == 800 and all(cache.entry(d, 1) is not None for d in range(8))
    cache.put(9, 1, _heads("a"), {"a": 9}, 100)  # past the bytes: everything goes
    assert [d for d in range(10) if cache.entry(d, 1) is not None] == [9] and cache._bytes == 100
    cache.put(10, 1, _heads("a"), {}, 101)  # more than an eighth: heads kept, body not
    entry = cache.entry(10, 1)
    assert entry is not None and entry[2] is None and cache._bytes == 100
    cache.put(9, 2, _heads("a"), {"a": 9}, 50)  # replaced: its bytes with it
    assert cache._bytes == 50
    for doc in range(11, 21):
        cache.put(doc, 1, _heads("a"))
    assert len(cache._entries) == 12
    cache.put(21, 1, _heads("a"))  # past the documents: everything goes
    assert list(cache._entries) == [21] and cache._bytes == 0


def test_a_documents_entry_counts_exactly_the_bytes_it_holds_under_threads() -> None:
    """Random puts from several threads (new documents, newer, older and equal revisions,
    with and without a body) leave the byte count equal to the bodies held."""
    import random
    import threading

    cache = HeadCache(max_docs=50, max_bytes=5_000)

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(3_000):
            known: dict[str, Any] | None = {} if rng.random() < 0.7 else None
            cache.put(rng.randrange(60), rng.randrange(5), _heads("a"), known, rng.randrange(700))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache._bytes == sum(e[3] for e in cache._entries.values())
    assert cache._bytes <= 5_000 and len(cache._entries) <= 50


def test_a_writes_entries_are_held_as_its_plan_made_them() -> None:
    """A write's member entries and its document's entry are held as the very tuples its plan
    made (no second tuple per write), and still never replace a newer revision; an entry whose
    body is too large to keep is held as heads alone."""
    members: RevisionCache[tuple[int, str], Any] = RevisionCache(1000)
    entry = ((7, "a"), 3, {"v": 1}, 10)
    members.put_many([entry])
    assert members._entries[(7, "a")] is entry and members.get((7, "a"), 3) == {"v": 1}
    members.put_many([((7, "a"), 2, "older", 10)])
    assert members._entries[(7, "a")] is entry and members.latest((7, "a")) == (3, {"v": 1})

    heads = HeadCache(max_bytes=800)
    head: Any = (7, "a", 0, 3, 10, None)
    made = (3, {"a": head}, {"a": {"v": 1}}, 10)
    heads.hold(7, made)
    assert heads.entry(7, 3) is made
    heads.hold(7, (2, {}, None, 0))  # a lagging writer
    assert heads.entry(7, 3) is made
    large = (4, {"a": head}, {"a": "x" * 200}, 200)  # over an eighth of the bytes: heads only
    heads.hold(7, large)
    held = heads.entry(7, 4)
    assert held is not None and held[1] is large[1] and held[2] is None and held[3] == 0


def test_an_entry_holding_a_body_alone_makes_its_heads_when_first_asked() -> None:
    """A whole-form document's entry may hold its body without heads (a record written once):
    ``get`` and ``entry`` make them from the body — those a reader of the row makes
    (``rows.whole_members``: positions from 0, sizes and outlines computed) — and keep them;
    ``body`` answers without making them; an entry whose body is not kept (larger than an
    eighth of the bytes) gets its heads at once, since nothing is left to make them from."""
    import orjson

    from stateflow.store.rows import whole_members

    body = {"saved": {"a": 1, "b": [1, 2]}, "n": 3}
    expected = whole_members(7, 3, orjson.dumps(body), "a body")[0]
    cache = HeadCache(max_bytes=800)

    def heads_held(doc_id: int) -> Any:
        return cache._entries[doc_id][1]

    cache.hold(7, (3, None, body, 40))
    assert heads_held(7) is None and cache.body(7, 3) is body and cache.body(7, 2) is None
    assert heads_held(7) is None  # (the body alone asked: no heads made)
    entry = cache.entry(7, 3)
    assert entry is not None and entry[1] == expected and entry[2] is body and entry[3] == 40
    assert heads_held(7) is entry[1] and cache.get(7, 3) is entry[1]  # made once, kept
    assert list(entry[1]) == ["saved", "n"] and [h[2] for h in entry[1].values()] == [0, 1]
    cache.hold(8, (5, None, body, 40))
    assert cache.get(8, 5) == whole_members(8, 5, orjson.dumps(body), "a body")[0]
    assert cache.get(8, 4) is None and cache.entry(8, 6) is None
    cache.hold(9, (2, None, body, 101))  # not kept: heads made now
    held = cache._entries[9]
    assert held[1] == whole_members(9, 2, orjson.dumps(body), "a body")[0]
    assert held[2] is None and held[3] == 0 and cache._bytes == 80


def test_an_entry_is_dropped_only_at_the_revision_named() -> None:
    """``drop`` forgets a document's entry held at the revision named, its bytes with it; a
    newer revision held since stays (a later write of a state cached for its latest writes)."""
    cache = HeadCache(max_bytes=800)
    cache.hold(1, (3, None, {"n": 1}, 10))
    cache.hold(2, (5, _heads("a"), {"a": 2}, 20))
    assert cache.drop(1, 2) is None  # (not the revision held)
    assert cache.drop(2, 5) == (5, _heads("a"), {"a": 2}, 20)  # (the entry forgotten)
    assert cache.drop(3, 1) is None  # (nothing held)
    assert cache.body(1, 3) == {"n": 1} and cache.entry(2, 5) is None and cache._bytes == 10
    assert cache.drop(1, 3) == (3, None, {"n": 1}, 10)
    assert cache._entries == {} and cache._bytes == 0


def test_a_value_is_dropped_only_at_the_revision_named() -> None:
    """``RevisionCache.drop`` forgets a key's value held at the revision named, its bytes with
    it; a newer revision held since stays, and nothing held is a no-op."""
    cache: RevisionCache[tuple[int, str], str] = RevisionCache(1000)
    cache.put((1, "a"), 3, "a3", 10)
    cache.put((1, "b"), 2, "b2", 20)
    cache.drop((1, "a"), 2)  # (not the revision held)
    cache.drop((2, "a"), 3)  # (nothing held)
    assert cache.get((1, "a"), 3) == "a3" and cache._bytes == 30
    cache.drop((1, "a"), 3)
    assert cache.get((1, "a"), 3) is None and cache.get((1, "b"), 2) == "b2" and cache._bytes == 20
    cache.put((1, "a"), 4, "a4", 5)  # (written again: held anew)
    assert cache.get((1, "a"), 4) == "a4" and cache._bytes == 25
