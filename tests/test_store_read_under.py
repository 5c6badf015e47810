"""``read_under``: the present documents under a subject prefix, whole, in subject order."""

from __future__ import annotations

from stateflow.store import DocKey, Write

from .conftest import StoreFactory


def test_documents_under_a_prefix_in_order_with_a_limit(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    subjects = ["a/", "a/1", "a/2", "a/10", "a0", "a.", "b/1", "a/\u00e9", "a"]
    store.commit([Write.between(DocKey("s", x), None, {"x": x}) for x in subjects])
    store.commit([Write.between(DocKey("other", "a/3"), None, {"x": 3})])
    store.commit([Write.between(DocKey("s", "a/2"), {"x": "a/2"}, None, 1)])  # erased: not listed
    under = store.read_under("s", "a/")
    assert [d.key.subject for d in under] == ["a/", "a/1", "a/10", "a/\u00e9"]  # bytewise order
    assert [d.body for d in under] == [{"x": "a/"}, {"x": "a/1"}, {"x": "a/10"}, {"x": "a/\u00e9"}]
    assert all(d.revision == 1 and d.at for d in under)
    assert [d.key.subject for d in store.read_under("s", "a/", limit=2)] == ["a/", "a/1"]
    assert [d.key.subject for d in store.read_under("s", "")][:3] == ["a", "a.", "a/"]
    assert store.read_under("s", "zz") == []
    # a document changed by another store object reads as it is now, cached or not
    other = open_migrated()
    other.commit([Write.between(DocKey("s", "a/1"), {"x": "a/1"}, {"x": "new"}, 1)])
    assert [d.body for d in store.read_under("s", "a/1")] == [{"x": "new"}, {"x": "a/10"}]


def test_the_first_document_under_each_of_several_prefixes(open_migrated: StoreFactory) -> None:
    store = open_migrated()
    subjects = ["a/2", "a/1", "b/9", "b/10", "c"]
    store.commit([Write.between(DocKey("s", x), None, {"x": x}) for x in subjects])
    store.commit([Write.between(DocKey("s", "a/1"), {"x": "a/1"}, None, 1)])  # erased: skipped
    firsts = store.read_first_under("s", ["a/", "b/", "zz", "", "a/2"])
    assert [d.key.subject if d else None for d in firsts] == ["a/2", "b/10", None, "a/2", "a/2"]
    assert [d.body for d in firsts if d] == [{"x": "a/2"}, {"x": "b/10"}, {"x": "a/2"}, {"x": "a/2"}]
    assert store.read_first_under("s", []) == []
    other = open_migrated()  # changed by another store object: read as it is now
    other.commit([Write.between(DocKey("s", "b/10"), {"x": "b/10"}, {"x": "new"}, 1)])
    first = store.read_first_under("s", ["b/"])[0]
    assert first is not None and first.body == {"x": "new"} and first.revision == 2
