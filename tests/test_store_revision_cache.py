"""The byte-bounded per-document cache behind known documents and PostgreSQL's whole bodies."""

from __future__ import annotations

from stateflow.store.cache import RevisionCache


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
