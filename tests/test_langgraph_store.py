"""``StateflowStore`` through LangGraph's ``BaseStore`` API, on both backends: the behaviour
LangGraph's own store tests expect, plus what stateflow adds (history, audit, as-of reads)."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import pytest
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchOp,
    _validate_namespace,
)

from stateflow.errors import CorruptStore, InvalidInput, InvalidJSON
from stateflow.langgraph import StateflowStore
from stateflow.states import StatesService, StateSubject
from stateflow.states.langgraph_items import MAX_TTL_MINUTES
from stateflow.store import DocKey, Write, open_store
from stateflow.store.base import utc_text


@pytest.fixture
def lg(backend: str) -> Iterator[StateflowStore]:
    with StateflowStore.open(backend) as store:
        yield store


def test_batch_runs_reads_before_puts_and_answers_in_order(lg: StateflowStore) -> None:
    lg.put(("test", "foo"), "key1", {"data": "value1"})
    lg.put(("test", "bar"), "key2", {"data": "value2"})
    results = lg.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test",), "key3", {"data": "value3"}),
            SearchOp(("test",), filter={"data": "value1"}),
            ListNamespacesOp(),
            GetOp(("test",), "key3"),  # the put in this batch comes after the reads
        ]
    )
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[0].namespace == ("test", "foo") and results[0].key == "key1"
    assert results[1] is None
    found = results[2]
    assert isinstance(found, list) and [i.key for i in found if isinstance(i, Item)] == ["key1"]
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None
    got = lg.get(("test",), "key3")
    assert got is not None and got.value == {"data": "value3"}


def test_put_get_update_delete(lg: StateflowStore) -> None:
    ns = ("users", "ada lovelace", "prefs")  # spaces, and a key with a slash and a percent sign
    lg.put(ns, "theme/dark 100%", {"theme": "dark"})
    first = lg.get(ns, "theme/dark 100%")
    assert first is not None and first.value == {"theme": "dark"} and first.namespace == ns
    first.value["theme"] = "mutated"  # the caller's copy: the stored value does not change
    time.sleep(0.002)
    lg.put(ns, "theme/dark 100%", {"theme": "light", "size": 12})
    second = lg.get(ns, "theme/dark 100%")
    assert second is not None and second.value == {"theme": "light", "size": 12}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert lg.get(("users", "ada lovelace"), "theme/dark 100%") is None
    lg.delete(ns, "theme/dark 100%")
    assert lg.get(ns, "theme/dark 100%") is None
    lg.delete(ns, "never-there")  # deleting a missing item is no error


def test_batch_puts_last_wins_and_deletes(lg: StateflowStore) -> None:
    lg.put(("t",), "gone", {"x": 1})
    lg.batch(
        [
            PutOp(("t",), "a", {"v": 1}),
            PutOp(("t",), "b", {"v": 2}),
            PutOp(("t",), "a", {"v": 3}),
            PutOp(("t",), "gone", None),
            PutOp(("t",), "never", None),
        ]
    )
    assert [(i.key, i.value) for i in sorted(lg.search(("t",)), key=lambda i: i.key)] == [
        ("a", {"v": 3}),
        ("b", {"v": 2}),
    ]


def test_puts_keep_creation_times_alone_and_in_a_batch(lg: StateflowStore) -> None:
    lg.put(("t",), "old", {"v": 1})
    created = lg.get(("t",), "old")
    assert created is not None
    time.sleep(0.002)
    lg.put(("t",), "old", {"v": 2})  # alone
    again = lg.get(("t",), "old")
    assert again is not None and again.created_at == created.created_at
    time.sleep(0.002)
    lg.batch([PutOp(("t",), "old", {"v": 3}), PutOp(("t",), "new", {"v": 4})])  # together
    old, new = lg.get(("t",), "old"), lg.get(("t",), "new")
    assert old is not None and old.value == {"v": 3} and old.created_at == created.created_at
    assert new is not None and created.created_at < new.created_at <= new.updated_at
    time.sleep(0.002)
    lg.put(("t",), "fresh", {"v": 5}, ttl=None)  # a new item alone: its own time, as text
    fresh = lg.get(("t",), "fresh")
    assert fresh is not None and new.created_at < fresh.created_at <= fresh.updated_at
    record = lg.states.read("langgraph_store", lg.subject(("t",), "fresh"))
    assert record is not None and isinstance(record["data"]["created_at"], str)


def test_put_over_a_record_edited_elsewhere_writes_its_own_namespace_and_key(lg: StateflowStore) -> None:
    """A put keeps the stored namespace and key objects only where they equal its own: a record
    edited elsewhere to hold others (an earlier version's states door let that through; it is
    refused now) gets the put's back, and its history shows it."""
    ns = ("t", "edited")
    lg.put(ns, "k", {"v": 1})
    subject = lg.subject(ns, "k")
    stored = lg.states.read("langgraph_store", subject)
    assert stored is not None
    doc_key = DocKey("langgraph_store", StateSubject(**subject).encode())  # type: ignore[arg-type]
    edited = {**stored["data"], "namespace": ["t", "other"], "key": "other"}
    old = lg.states.store.get(doc_key)
    lg.states.store.commit([Write.between(doc_key, old.value, edited, old.revision)], {"door": "operator"})
    lg.put(ns, "k", {"v": 2})
    record = lg.states.read("langgraph_store", subject)
    assert record is not None
    assert record["data"]["namespace"] == ["t", "edited"] and record["data"]["key"] == "k"
    assert record["data"]["value"] == {"v": 2}
    assert record["data"]["created_at"] == stored["data"]["created_at"]
    got = lg.get(ns, "k")
    assert got is not None and got.namespace == ns and got.key == "k" and got.value == {"v": 2}
    lg.put(ns, "k", {"v": 3})  # equal again: the stored objects kept, the value still written
    again = lg.states.read("langgraph_store", subject)
    assert again is not None and again["data"]["value"] == {"v": 3}
    assert again["data"]["namespace"] == ["t", "edited"] and again["revision"] == record["revision"] + 1


def test_search_filters_and_comparison_operators(lg: StateflowStore) -> None:
    rows: dict[str, dict[str, object]] = {
        "a": {"n": 9, "name": "ann", "tags": ["x"], "meta": {"lang": "en"}},
        "b": {"n": 10, "name": "bob", "meta": {"lang": "fr"}},
        "c": {"n": 10.5, "name": "cy"},
        "d": {"n": "10", "name": "dee"},  # a string: never compared with numbers
        "e": {"name": "eve", "flag": True},
    }
    for key, value in rows.items():
        lg.put(("docs", key[0]), key, value)

    def keys(**filters: object) -> list[str]:
        return sorted(i.key for i in lg.search(("docs",), filter=dict(filters), limit=50))

    assert keys(n={"$gt": 9}) == ["b", "c"]  # 10 > 9 numerically (not '10' < '9' as text)
    assert keys(n={"$gte": 10}) == ["b", "c"]
    assert keys(n={"$lt": 10}) == ["a"]
    assert keys(n={"$lte": 10, "$gt": 9}) == ["b"]
    assert keys(n={"$eq": 10}) == ["b"]
    assert keys(n={"$ne": 10}) == ["a", "c", "d"]  # a missing field matches no operator
    assert keys(n="10") == ["d"]
    assert keys(name={"$gte": "bob", "$lt": "dee"}) == ["b", "c"]
    assert keys(**{"meta.lang": "fr"}) == ["b"]  # a dotted key reaches a nested field
    assert keys(meta={"lang": "en"}) == ["a"]
    assert keys(flag=True) == ["e"] and keys(flag=1) == []
    assert keys(tags=["x"]) == ["a"]
    with pytest.raises(ValueError, match="unsupported filter operator"):
        lg.search(("docs",), filter={"n": {"$in": [1]}})


def test_an_operator_inside_a_nested_object_compares_and_a_mixed_object_is_refused(
    lg: StateflowStore,
) -> None:
    """A comparison reaches a nested field through a plain object as through a dotted key (as
    LangGraph's in-memory store has it); an object mixing operators with field names, or an
    operator it does not have at any depth, is refused before anything is read — even where
    no item exists — rather than matching nothing in silence."""
    lg.put(("d",), "hi", {"meta": {"score": 5, "tags": {"lang": "en"}}})
    lg.put(("d",), "lo", {"meta": {"score": 2, "tags": {"lang": "fr"}}})

    def keys(filter: dict[str, Any], ns: tuple[str, ...] = ("d",)) -> list[str]:
        return sorted(i.key for i in lg.search(ns, filter=filter))

    assert keys({"meta": {"score": {"$gt": 3}}}) == keys({"meta.score": {"$gt": 3}}) == ["hi"]
    assert keys({"meta": {"score": {"$lte": 5}, "tags": {"lang": {"$ne": "en"}}}}) == ["lo"]
    assert keys({"meta": {"tags": {"lang": "en"}}}) == ["hi"]  # (plain containment, as before)
    for bad, named in (
        ({"n": {"$gt": 1, "x": 2}}, r"filter\['n'\] mixes operators \['\$gt'\] with field names \['x'\]"),
        ({"meta": {"score": {"$gt": 1, "y": 0}}}, r"filter\['meta'\]\['score'\] mixes operators"),
        (
            {"meta": {"score": {"$in": [1]}}},
            r"filter\['meta'\]\['score'\]: unsupported filter operator '\$in'",
        ),
    ):
        for ns in (("d",), ("empty",)):
            with pytest.raises(ValueError, match=named):
                keys(bad, ns)


def test_a_none_filter_value_matches_a_null_or_missing_field_as_langgraphs_stores(
    lg: StateflowStore,
) -> None:
    """``{"archived_at": None}`` finds the items never archived, whether the field is null or
    absent, as LangGraph's in-memory and SQLite stores find them; it found only the nulls."""
    lg.put(("docs",), "null", {"archived_at": None, "meta": {"by": None}})
    lg.put(("docs",), "absent", {"meta": {}})
    lg.put(("docs",), "set", {"archived_at": "2026-01-01", "meta": {"by": "ann"}})

    def keys(filter: dict[str, object]) -> list[str]:
        return sorted(i.key for i in lg.search(("docs",), filter=filter))

    assert keys({"archived_at": None}) == ["absent", "null"]
    assert keys({"meta": {"by": None}}) == ["absent", "null"]  # inside a nested object too
    assert keys({"meta.by": None}) == ["absent", "null"]
    assert keys({"archived_at": {"$eq": None}}) == ["null"]  # an operator needs the field
    assert keys({"archived_at": "2026-01-01"}) == ["set"]


def test_search_orders_newest_first_with_limit_and_offset(lg: StateflowStore) -> None:
    for n in range(5):
        lg.put(("log", "day"), f"k{n}", {"n": n})
    lg.put(("log", "day"), "k1", {"n": 1, "again": True})
    assert [i.key for i in lg.search(("log",))] == ["k1", "k4", "k3", "k2", "k0"]
    assert [i.key for i in lg.search(("log",), limit=2, offset=1)] == ["k4", "k3"]
    assert lg.search(("log", "night")) == []
    assert [i.key for i in lg.search(("lo",))] == []  # a prefix is whole labels


def test_list_namespaces_prefix_suffix_depth_pages(lg: StateflowStore) -> None:
    for ns in [
        ("test", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "images", "public"),
        ("test", "images", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "private"),
    ]:
        lg.put(ns, "dummy", {"content": "dummy"})
    assert len(lg.list_namespaces()) == 6
    assert lg.list_namespaces(prefix=("test",)) == [
        ("test", "documents", "private"),
        ("test", "documents", "public"),
        ("test", "images", "private"),
        ("test", "images", "public"),
    ]
    assert lg.list_namespaces(suffix=("public",), prefix=("test", "*")) == [
        ("test", "documents", "public"),
        ("test", "images", "public"),
    ]
    assert lg.list_namespaces(prefix=("*", "documents")) == [
        ("prod", "documents", "private"),
        ("prod", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "documents", "public"),
    ]
    assert lg.list_namespaces(max_depth=2) == [
        ("prod", "documents"),
        ("test", "documents"),
        ("test", "images"),
    ]
    assert lg.list_namespaces(max_depth=1, prefix=("test",)) == [("test",)]
    assert lg.list_namespaces(limit=2, offset=1) == [
        ("prod", "documents", "public"),
        ("test", "documents", "private"),
    ]
    assert lg.batch([ListNamespacesOp((MatchCondition("suffix", ("private",)),), limit=1)]) == [
        [("prod", "documents", "private")]
    ]


def test_bad_input_is_refused_and_writes_nothing(lg: StateflowStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        lg.put(("a.b",), "k", {"x": 1})
    with pytest.raises(InvalidNamespaceError):
        lg.batch([PutOp(("ok", "a.b"), "k", {"x": 1})])
    with pytest.raises(ValueError, match="must be a dict"):
        lg.batch([PutOp(("ok",), "k", ["not", "a", "dict"])])  # type: ignore[arg-type]
    assert lg.list_namespaces() == []


def test_put_refuses_and_writes_as_langgraphs_put_through_batch(backend: str) -> None:
    """``put`` writes without going through ``batch``: the same refusals as LangGraph's
    ``BaseStore.put`` (empty namespace, the root label, bad labels, a value not a dict, each
    writing nothing), the same item for a namespace given as a list and a key not a string,
    the store's default TTL; a subclass's own ``batch`` still sees every put."""
    refusals: list[tuple[type[Exception], tuple[Any, ...]]] = [
        (InvalidNamespaceError, ((), "k", {"x": 1})),
        (InvalidNamespaceError, (("langgraph", "a"), "k", {"x": 1})),
        (InvalidNamespaceError, (("a", ""), "k", {"x": 1})),
        (InvalidNamespaceError, (("a", 1), "k", {"x": 1})),
        (InvalidNamespaceError, (("a", "b\x00"), "k", {"x": 1})),
        (ValueError, (("a",), "k", ["not", "a", "dict"])),
    ]
    with StateflowStore.open(backend, ttl={"default_ttl": 5}) as store:
        for error, args in refusals:
            with pytest.raises(error) as ours:
                store.put(*args)
            with pytest.raises(error) as theirs:
                BaseStore.put(store, *args)
            assert str(ours.value) == str(theirs.value)
        assert store.list_namespaces() == []
        store.put(["users", "u1"], 7, {"x": 1})  # type: ignore[arg-type]
        item = store.get(("users", "u1"), "7")
        assert item is not None and item.namespace == ("users", "u1") and item.value == {"x": 1}
        record = store.states.read(store.records.state, store.subject(("users", "u1"), "7"))
        assert record is not None and record["data"]["ttl_minutes"] == 5
        assert record["data"]["namespace"] == ["users", "u1"] and record["data"]["key"] == "7"

    class Seen(StateflowStore):
        seen: list[Op]

        def batch(self, ops: Iterable[Op]) -> list[Result]:
            ops = list(ops)
            self.seen.extend(ops)
            return super().batch(ops)

    with Seen.open(backend) as seen:
        seen.seen = []
        seen.put(("a",), "k", {"x": 1})
        assert seen.seen == [PutOp(("a",), "k", {"x": 1}, index=None, ttl=None)]
        assert seen.get(("a",), "k") is not None


def test_put_checks_a_namespace_once_and_refuses_a_bad_one_every_time(
    lg: StateflowStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``put`` remembers the namespaces of strings that passed LangGraph's checks (bounded): over
    many puts, LangGraph's check runs once per such namespace; a refused namespace is checked and
    refused again on every put, before and after good ones; a label that is no string —
    unhashable, too — is refused as LangGraph refuses it; a label of a ``str`` subclass passes
    LangGraph's checks on every put, is not remembered, and the store refuses the item (not plain
    JSON); past the bound the store forgets and checks again."""
    import stateflow.langgraph.store as store_module

    checks: list[Any] = []  # every namespace LangGraph's check was called with, in order

    def counted(namespace: tuple[str, ...]) -> None:  # the store's look-up of LangGraph's check
        checks.append(namespace)
        _validate_namespace(namespace)

    monkeypatch.setattr(store_module, "_validate_namespace", counted)
    good: list[tuple[str, ...]] = [("a", "b"), ("a", "c", "d"), ("\u00fc",)]
    bad: list[tuple[Any, ...]] = [("a.b",), ("a", ""), ("a", ["b"]), ("a", 1), ("langgraph", "a"), ()]
    rounds = 4
    for round_ in range(rounds):
        for namespace in good:
            lg.put(namespace, "k", {"x": round_})
            lg.put(namespace, f"k{round_}", {"x": round_})
        for namespace in bad:
            with pytest.raises(InvalidNamespaceError):
                lg.put(namespace, "k", {"x": 1})
    assert [checks.count(namespace) for namespace in good] == [1] * len(good)
    assert [checks.count(namespace) for namespace in bad] == [rounds] * len(bad)
    assert len(checks) == len(good) + rounds * len(bad)
    assert [lg.get(namespace, "k").value for namespace in good] == [{"x": rounds - 1}] * len(good)  # type: ignore[union-attr]

    class Label(str):
        pass

    checks.clear()
    for _ in range(2):
        with pytest.raises(InvalidJSON):
            lg.put(("a", Label("c")), "k", {"x": 3})
    assert checks == [("a", "c")] * 2  # passed, not remembered
    assert ("a", "c") not in lg._namespaces_checked
    monkeypatch.setattr(store_module, "NAMESPACES_CHECKED_MAX", 3)
    checks.clear()
    for n in range(10):
        lg.put(("many", f"n{n}"), "k", {"n": n})
        lg.put(("many", f"n{n}"), "k", {"n": n})
        assert len(lg._namespaces_checked) <= 3
    assert checks == [("many", f"n{n}") for n in range(10)]
    lg.put(("many", "n0"), "k", {"n": 0})  # forgotten past the bound: checked again, then known
    lg.put(("many", "n0"), "k", {"n": 0})
    assert checks[10:] == [("many", "n0")]
    with pytest.raises(InvalidNamespaceError):
        lg.put(("many", "n.9"), "k", {"x": 1})
    assert [lg.get(("many", f"n{n}"), "k").value for n in range(10)] == [{"n": n} for n in range(10)]  # type: ignore[union-attr]
    assert sorted(lg.list_namespaces()) == sorted([*good, *[("many", f"n{n}") for n in range(10)]])


def test_items_keep_their_own_subjects_while_the_kept_subject_keys_are_forgotten(
    lg: StateflowStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The subject keys a put reads without encoding them again are bounded: past the bound
    they are all forgotten and made again, and every item — put once, then replaced after its
    key was forgotten — is written and read under its own subject, the one ``subject_key``
    gives, with its own history."""
    import stateflow.states.langgraph_items as items_module

    monkeypatch.setattr(items_module, "SUBJECT_KEYS_KEPT", 3)
    items_module.KEPT_SUBJECT_KEYS.clear()
    items = [(("kept", f"n{n % 4}", "x/y z"), f"k{n}") for n in range(10)]
    for round_ in range(2):
        for n, (namespace, key) in enumerate(items):
            lg.put(namespace, key, {"n": n, "round": round_})
            assert len(items_module.KEPT_SUBJECT_KEYS) <= 3
    for n, (namespace, key) in enumerate(items):
        item = lg.get(namespace, key)
        assert item is not None and item.value == {"n": n, "round": 1}
        assert (item.namespace, item.key) == (namespace, key)
        subject = lg.subject(namespace, key)
        assert subject["key"] == "/".join(
            part.replace("/", "%2F").replace(" ", "%20") for part in (*namespace, key)
        )
        record = lg.states.read(lg.records.state, subject)
        assert record is not None and record["data"]["value"] == {"n": n, "round": 1}
        trail = lg.states.writes(lg.records.state, subject)["items"]
        assert [w["revision"] for w in trail] == [2, 1]
    assert items_module.KEPT_SUBJECT_KEYS.get((("kept", "n1", "x/y z"), "k9")) == "kept/n1/x%2Fy%20z/k9"


def test_ttl_expiry_refresh_and_sweep(backend: str) -> None:
    with StateflowStore.open(backend, ttl={"default_ttl": 60, "refresh_on_read": True}) as lg:
        lg.put(("s",), "short", {"v": 1}, ttl=0.001)  # 60 ms
        lg.put(("s",), "default", {"v": 2})  # 60 minutes from the store's default
        lg.put(("s",), "forever", {"v": 3}, ttl=None)
        subject = lg.subject(("s",), "default")
        before = lg.states.read(lg.records.state, subject)
        assert before is not None and before["data"]["ttl_minutes"] == 60
        time.sleep(0.1)
        assert lg.get(("s",), "short") is None  # expired: reads as absent before any sweep
        assert sorted(i.key for i in lg.search(("s",))) == ["default", "forever"]
        assert lg.get(("s",), "default") is not None  # refreshes its expiry
        after = lg.states.read(lg.records.state, subject)
        assert after is not None and after["data"]["expires_at"] > before["data"]["expires_at"]
        assert lg.get(("s",), "forever", refresh_ttl=True) is not None
        assert lg.sweep_ttl() == 1
        assert lg.list_namespaces() == [("s",)]
        assert lg.states.read(lg.records.state, lg.subject(("s",), "short")) is None


def test_a_ttl_refresh_keeps_what_a_put_or_delete_wrote_since_the_read(backend: str) -> None:
    """A read that refreshes a TTL writes the new expiry only where the record still has the
    expiry it was read with: a put without a TTL that came in between is not given one (it
    would vanish), a re-put keeps its own, and a deleted item is not written again."""
    with StateflowStore.open(backend) as lg, StateflowStore.open(backend) as other:
        lg.put(("s",), "now-forever", {"v": 1}, ttl=5)
        lg.put(("s",), "gone", {"v": 1}, ttl=5)
        lg.put(("s",), "kept", {"v": 1}, ttl=5)
        read = {
            key: lg.states.read(lg.records.state, lg.subject(("s",), key))
            for key in ("now-forever", "gone", "kept")
        }
        other.put(("s",), "now-forever", {"v": 2})  # (between the read and its refresh)
        other.delete(("s",), "gone")
        later = datetime.now(UTC) + timedelta(minutes=1)
        stale = {
            lg.subject_key(("s",), k): (r["data"], r["updated_at"]) for k, r in read.items() if r is not None
        }
        lg._refresh(stale, later)  # (the refresh of that read, after the other writes)
        forever = lg.states.read(lg.records.state, lg.subject(("s",), "now-forever"))
        assert forever is not None
        assert forever["data"]["ttl_minutes"] is None and forever["data"]["expires_at"] is None
        assert lg.states.read(lg.records.state, lg.subject(("s",), "gone")) is None
        kept = lg.states.read(lg.records.state, lg.subject(("s",), "kept"))
        assert kept is not None and kept["data"]["expires_at"] == utc_text(later + timedelta(minutes=5))
        trail = lg.states.writes(lg.records.state, lg.subject(("s",), "now-forever"))["items"]
        assert len(trail) == 2  # (the two puts: the refresh skipped, nothing written)

        # the same race, run: a reader refreshing while a writer puts the item without a TTL
        stop = threading.Event()

        def reader() -> None:
            while not stop.is_set():
                other.get(("s",), "raced", refresh_ttl=True)

        for n in range(15):
            lg.put(("s",), "raced", {"v": n}, ttl=5)
            thread = threading.Thread(target=reader)
            thread.start()
            time.sleep(0.005)
            lg.put(("s",), "raced", {"v": n})
            stop.set()
            thread.join()
            stop.clear()
            raced = lg.states.read(lg.records.state, lg.subject(("s",), "raced"))
            assert raced is not None and raced["data"]["expires_at"] is None, raced


def test_a_ttl_refresh_keeps_updated_at_and_the_search_order(backend: str) -> None:
    """``updated_at`` is an item's last put, as in LangGraph's stores: a read that refreshes
    the TTL moves its expiry, not its ``updated_at`` nor its place in a search (newest put
    first); the next put moves both."""
    with StateflowStore.open(backend, ttl={"default_ttl": 60, "refresh_on_read": True}) as lg:
        lg.put(("n",), "old", {"v": 1})
        time.sleep(0.01)
        lg.put(("n",), "new", {"v": 2})
        before = {i.key: i.updated_at for i in lg.search(("n",), refresh_ttl=False)}
        expiry = lg.states.read(lg.records.state, lg.subject(("n",), "old"))
        time.sleep(0.01)
        for _ in range(2):  # (a refresh of a refreshed record keeps it too)
            item = lg.get(("n",), "old")  # (refreshes)
            assert item is not None and item.updated_at == before["old"]
        refreshed = lg.states.read(lg.records.state, lg.subject(("n",), "old"))
        assert expiry is not None and refreshed is not None
        assert refreshed["data"]["expires_at"] > expiry["data"]["expires_at"]
        after = lg.search(("n",))  # (refreshes both)
        assert [i.key for i in after] == ["new", "old"]
        assert {i.key: i.updated_at for i in after} == before
        time.sleep(0.01)
        lg.put(("n",), "old", {"v": 3})
        again = lg.search(("n",), refresh_ttl=False)
        assert [i.key for i in again] == ["old", "new"] and again[0].updated_at > before["old"]
        # a batch of several puts is the item's last put as well: after a refresh, and after
        lg.get(("n",), "new")  # (refreshes)
        time.sleep(0.01)
        for _ in range(2):
            lg.batch([PutOp(("n",), "new", {"v": 4}), PutOp(("n",), "other", {"v": 5})])
            batched = lg.search(("n",), refresh_ttl=False)
            # (the two of one batch: one commit, one time)
            assert {i.key for i in batched[:2]} == {"new", "other"} and batched[2].key == "old"
            assert batched[0].updated_at == batched[1].updated_at > again[0].updated_at
            stored = lg.states.read(lg.records.state, lg.subject(("n",), "new"))
            assert stored is not None and "updated_at" not in stored["data"]


def test_a_ttl_that_cannot_be_honoured_is_refused_before_anything_is_written(backend: str) -> None:
    # LangGraph's SQL stores take True as one minute and 0 or less as an item expired at once,
    # and fail on a string, infinity or NaN in their time arithmetic; this store took a string
    # as no TTL at all (an item kept forever that was meant to expire)
    configs: list[tuple[Any, str]] = [
        ({"default_ttl": -5}, r"^ttl\['default_ttl'\] is a number of minutes more than 0"),
        ({"default_ttl": "10"}, r"^ttl\['default_ttl'\] is a number of minutes .* got a str"),
        ({"default_tll": 10}, r"^ttl holds unknown keys \['default_tll'\]"),
        ({"refresh_on_read": "no"}, r"^ttl\['refresh_on_read'\] is true or false"),
        ({"sweep_interval_minutes": 0}, r"^ttl\['sweep_interval_minutes'\] is a number of minutes"),
        (60, r"^ttl is a TTLConfig \(a dict\) or None, got a int"),
    ]
    for config, message in configs:
        with pytest.raises(ValueError, match=message):
            StateflowStore.open(backend, ttl=config)
        with pytest.raises(ValueError, match=message):
            asyncio.run(StateflowStore.aopen(backend, ttl=config))
    store = open_store(backend, auto_migrate=True)
    try:  # nothing of the adapter's written, not even its state's declaration (the built-ins
        # are every opener's: ``stateflow.api.states_service``)
        assert [d["name"] for d in StatesService(store).list_declarations()] == ["memory"]
    finally:
        store.close()
    bad: list[Any] = ["10", True, [1], float("inf"), float("nan"), 1e12, MAX_TTL_MINUTES + 1, -5, 0]
    with StateflowStore.open(backend) as lg:
        for ttl in bad:
            with pytest.raises(ValueError, match=r"^ttl is a number of minutes more than 0"):
                lg.put(("t",), "k", {"v": 1}, ttl=ttl)
            with pytest.raises(ValueError, match=r"^ops\[1\]: ttl is a number of minutes"):
                lg.batch([PutOp(("t",), "a", {"v": 1}), PutOp(("t",), "k", {"v": 1}, ttl=ttl)])
        assert lg.list_namespaces() == []
        lg.put(("t",), "k", {"v": 1}, ttl=MAX_TTL_MINUTES)  # the longest: its expiry is a time
        record = lg.states.read(lg.records.state, lg.subject(("t",), "k"))
        assert record is not None and record["data"]["ttl_minutes"] == MAX_TTL_MINUTES
        assert record["data"]["expires_at"] > utc_text(datetime.now(UTC) + timedelta(days=36500))


def test_list_namespaces_hides_namespaces_whose_items_all_expired(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's clock stands still until the test moves it past the short items' 3 s: before,
    # the first listing had to come within 3 s of the first put, which a loaded machine missed.
    moved = [timedelta(0)]
    frozen = datetime.now(UTC)

    class Clock(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Clock:
            return cls.fromtimestamp((frozen + moved[0]).timestamp(), tz)

    import stateflow.langgraph.store as store_module

    monkeypatch.setattr(store_module, "datetime", Clock)
    with StateflowStore.open(backend) as lg:
        lg.put(("gone", "soon"), "k", {"v": 1}, ttl=0.05)  # 3 s
        lg.put(("kept",), "k", {"v": 2})
        lg.put(("mixed",), "short", {"v": 3}, ttl=0.05)
        lg.put(("mixed",), "long", {"v": 4}, ttl=60)
        moved[0] = timedelta(seconds=2.9)
        assert lg.list_namespaces() == [("gone", "soon"), ("kept",), ("mixed",)]
        moved[0] = timedelta(seconds=3.1)
        # expired items read as absent, before any sweep: so do namespaces that hold only those
        assert lg.list_namespaces() == [("kept",), ("mixed",)]
        assert lg.list_namespaces(prefix=("gone",)) == []
        assert lg.list_namespaces(max_depth=1) == [("kept",), ("mixed",)]


def test_items_are_records_with_history_audit_and_as_of(backend: str) -> None:
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        lg = StateflowStore(states)
        lg.put(("memories", "ada"), "food", {"likes": "pizza"})
        lg.put(("memories", "ada"), "food", {"likes": "sushi"})
        subject = lg.subject(("memories", "ada"), "food")
        assert subject == {
            "target_kind": "agent",
            "target_name": "langgraph",
            "kind": "item",
            "key": "memories/ada/food",
        }
        record = states.read("langgraph_store", subject)
        assert record is not None and record["data"]["value"] == {"likes": "sushi"}
        trail = states.writes("langgraph_store", subject)["items"]
        assert [(w["action"], w["origin"]["consumer"], w["revision"]) for w in trail] == [
            ("replace", "langgraph", 2),
            ("replace", "langgraph", 1),
        ]
        key = DocKey("langgraph_store", store.scan("langgraph_store")[0].key.subject)
        assert store.read_at(key, revision=1).body is not None
        assert store.read_at(key, revision=1).body["value"] == {"likes": "pizza"}  # type: ignore[index]
        hits = states.search("langgraph_store", {"value": {"likes": "sushi"}})["matches"]
        assert [h["subject"]["key"] for h in hits] == ["memories/ada/food"]
    finally:
        store.close()


def test_async_methods(lg: StateflowStore) -> None:
    async def run() -> None:
        await lg.aput(("a",), "k", {"v": 1})
        got = await lg.aget(("a",), "k")
        assert got is not None and got.value == {"v": 1}
        assert [i.key for i in await lg.asearch(("a",), filter={"v": {"$gte": 1}})] == ["k"]
        assert await lg.alist_namespaces() == [("a",)]
        await lg.adelete(("a",), "k")
        assert await lg.aget(("a",), "k") is None

    asyncio.run(run())


def test_put_values_beyond_the_codecs_plain_json_are_checked_and_copied(lg: StateflowStore) -> None:
    """A put's item is checked and copied in one walk where the codec calls it plain JSON;
    values only the store's own check accepts (integers past 2^53, objects nested past 64
    levels) are stored and read back the same, and what it refuses is refused with the same
    message, writing nothing. Either way no caller's object is kept."""

    def deep() -> Any:
        value: Any = ["leaf"]
        for _ in range(70):
            value = {"d": value}
        return value

    def innermost(value: Any) -> list[Any]:
        while type(value) is dict:
            value = list(value.values())[-1]
        assert type(value) is list
        return value

    for make in (
        lambda: {"n": 2**60, "tags": ["a"]},
        lambda: {"deep": deep()},
        lambda: {"n": 1, "tags": ["a"]},
    ):
        value = make()
        lg.put(("beyond",), "k", value)
        innermost(value).append("later")  # the caller's object: what was stored does not change
        item = lg.get(("beyond",), "k")
        assert item is not None and item.value == make()
    for refused in ({"x": float("nan")}, {"x": {1, 2}}, {"x": 2**64}):
        with pytest.raises(InvalidJSON, match=r"document\.value\.x"):
            lg.put(("refused",), "k", refused)
    assert lg.get(("refused",), "k") is None


def test_a_put_stamps_the_creation_and_expiry_times_it_holds_and_no_other(lg: StateflowStore) -> None:
    def data() -> dict[str, Any]:
        record = lg.states.read(lg.records.state, lg.subject(("t",), "k"))
        assert record is not None
        found: dict[str, Any] = record["data"]
        return found

    def now() -> str:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    started = now()
    lg.put(("t",), "k", {"v": 1})  # new: its creation time taken by this put
    created = data()["created_at"]
    assert started <= created <= now()
    assert data()["expires_at"] is None
    lg.put(("t",), "k", {"v": 2})  # replaced, no TTL: the creation time kept, no expiry
    assert data()["created_at"] == created and data()["expires_at"] is None
    before = datetime.now(UTC)
    lg.put(("t",), "k", {"v": 3}, ttl=1.0)  # replaced with a TTL: expires a minute from now
    after = datetime.now(UTC)
    expires = datetime.fromisoformat(data()["expires_at"])
    assert before + timedelta(minutes=1) <= expires <= after + timedelta(minutes=1)
    assert data()["created_at"] == created and data()["ttl_minutes"] == 1.0
    item = lg.get(("t",), "k")
    assert item is not None and item.value == {"v": 3} and item.created_at.isoformat() > "2000"


def test_a_batch_of_more_puts_than_one_states_transaction_takes_writes_them_all(lg: StateflowStore) -> None:
    # LangGraph's batch takes any number of puts; the states service at most 100 records a call
    lg.put(("many",), "k0", {"v": -1})  # one that exists: the batch's puts go the batch way
    ops: list[Op] = [PutOp(("many",), f"k{i}", {"v": i}) for i in range(250)]
    assert lg.batch(ops) == [None] * 250
    found = lg.search(("many",), limit=1000)
    assert sorted((i.key, i.value["v"]) for i in found) == sorted((f"k{i}", i) for i in range(250))
    # all or nothing: one transaction, whatever their number (a batch cut short by a close or a
    # failure of the store, between two of them, left the earlier ones written)
    keys = [lg.records.doc_key("item", lg.subject_key(("many",), f"k{i}")) for i in range(250)]
    assert len({lg.states.store.history([key], limit=1)[0].seq for key in keys}) == 1


def test_a_batch_reading_more_items_than_one_states_call_takes_refreshes_their_ttl(backend: str) -> None:
    with StateflowStore.open(backend, ttl={"refresh_on_read": True}) as lg:
        lg.batch([PutOp(("ttl",), f"k{i}", {"v": i}, ttl=5) for i in range(120)])
        keys = [lg.records.doc_key("item", lg.subject_key(("ttl",), f"k{i}")) for i in range(120)]
        before = [lg.states.store.get(key).revision for key in keys]
        found = lg.batch([GetOp(("ttl",), f"k{i}") for i in range(120)])  # (refused: >100 items)
        assert [item.value["v"] for item in found] == list(range(120))  # type: ignore[union-attr]
        assert [lg.states.store.get(key).revision for key in keys] == [r + 1 for r in before]
        assert len({lg.states.store.history([key], limit=1)[0].seq for key in keys}) == 1


def test_a_refused_put_of_a_large_batch_writes_nothing_and_is_named_by_its_index(lg: StateflowStore) -> None:
    # a put the write would refuse is refused before anything is written, named by its index
    # in the caller's ops
    lg.put(("many",), "k0", {"v": -1})
    refusals: list[tuple[Any, Any, type[Exception], str]] = [
        ("k150", {"v": float("nan")}, InvalidJSON, r"ops\[150\]: value\.v: nan is not a JSON number"),
        ("k150", {"v": 2**70}, InvalidJSON, r"ops\[150\]: value\.v: integer \d+ is outside"),
        ("k150", {"v": {1: 2}}, InvalidJSON, r"ops\[150\]: value\.v: object key 1 is not a string"),
        ("k150", ["v"], ValueError, r"ops\[150\]: a store value must be a dict, got list"),
        ("k" * 600, {"v": 1}, InvalidInput, r"ops\[150\]: the encoded subject key is 605 characters"),
        (150, {"v": 1}, ValueError, r"ops\[150\]: a store key must be a string, got int"),
    ]
    for key, value, error, message in refusals:
        ops: list[Op] = [PutOp(("many",), f"k{i}", {"v": i}) for i in range(250)]
        ops[150] = PutOp(("many",), key, value)
        with pytest.raises(error, match=message):
            lg.batch(ops)
    ops = [PutOp(("many",), f"k{i}", {"v": i}) for i in range(250)]
    ops[249] = PutOp(("many",), "k249", {"v": float("inf")})
    with pytest.raises(InvalidJSON, match=r"ops\[249\]: value\.v: inf"):
        asyncio.run(lg.abatch(ops))
    assert [(i.key, i.value) for i in lg.search(("many",), limit=1000)] == [("k0", {"v": -1})]


def test_a_name_longer_than_any_items_is_found_nowhere_and_deletes_nothing(lg: StateflowStore) -> None:
    """Names are percent-encoded into a subject key of at most 512 characters (57 CJK
    characters fill it): a put of a longer one is refused, nothing written, but reading it
    finds nothing and deleting it deletes nothing, as for any other name no item has —
    ``get``, ``search``, ``list_namespaces``, ``delete``, alone or in a batch."""
    long_key, long_label = "中" * 57, "標" * 60
    lg.put(("ns",), "short", {"v": 1})
    with pytest.raises(InvalidInput, match="encoded subject key is 516 characters"):
        lg.put(("ns",), long_key, {"v": 2})
    assert lg.get(("ns",), long_key) is None
    assert lg.get((long_label,), "k") is None
    assert lg.search((long_label,)) == [] and lg.search(("ns", long_label), filter={"v": 1}) == []
    assert lg.list_namespaces(prefix=(long_label,)) == []
    lg.delete(("ns",), long_key)
    lg.batch([PutOp(("ns",), long_key, None), PutOp(("ns",), "short", None)])  # (the other delete done)
    assert asyncio.run(lg.aget(("ns",), long_key)) is None
    assert lg.get(("ns",), "short") is None and lg.search(("ns",)) == []
    with pytest.raises(InvalidInput, match=r"ops\[1\]: the encoded subject key"):
        lg.batch([PutOp(("ns",), "ok", {"v": 3}), PutOp(("ns",), long_key, {"v": 3})])
    assert lg.get(("ns",), "ok") is None


def test_records_written_out_of_shape_through_another_door_are_named_not_a_crash(
    lg: StateflowStore,
) -> None:
    """A record an earlier version let through another door (the states door now refuses it:
    the adapter's item rule) with a time that does not parse, or naming another item than its
    subject key addresses, is left out of searches and listings and named, and a get of it is
    refused by name — the namespace's other items still read."""
    ns = ("memories", "ada")
    lg.put(ns, "tea", {"fact": "likes tea"})
    lg.put(ns, "late", {"f": 0})  # (listed in shape first: its next revision is checked anew)
    assert sorted(i.key for i in lg.search(ns)) == ["late", "tea"]
    when = "2026-01-01T00:00:00+00:00"
    rest = {"expires_at": None, "ttl_minutes": None}
    written = {
        (ns, "bad"): {"namespace": list(ns), "key": "bad", "value": {"f": 1}, "created_at": "yesterday", **rest},
        (ns, "soon"): {"namespace": list(ns), "key": "soon", "value": {"f": 1}, "created_at": when,
                       "expires_at": "soon", "ttl_minutes": 5},
        (("m",), "k2"): {"namespace": ["zz"], "key": "other", "value": {"f": 2}, "created_at": when, **rest},
        (ns, "long"): {"namespace": list(ns), "key": "long", "value": {"f": 1}, "created_at": when,
                       "expires_at": "2100-01-01T00:00:00+00:00", "ttl_minutes": 1e12},  # no refresh adds it
        (ns, "late"): {"namespace": list(ns), "key": "late", "value": {"f": 1}, "created_at": when,
                       "updated_at": "later", **rest},
    }  # fmt: skip
    for (where, key), data in written.items():  # (the store layer: what the door let through then)
        doc_key = DocKey("langgraph_store", StateSubject(**lg.subject(where, key)).encode())  # type: ignore[arg-type]
        old = lg.states.store.get(doc_key)
        lg.states.store.commit([Write.between(doc_key, old.value, data, old.revision)], {"door": "operator"})
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("stateflow.langgraph")
    logger.addHandler(handler)
    try:
        assert [i.key for i in lg.search(ns)] == ["tea"]
        assert [(i.namespace, i.key) for i in lg.search(())] == [(ns, "tea")]
        assert lg.search(("zz",)) == [] and lg.search(("m",)) == []
        assert lg.list_namespaces() == [ns]
        assert lg.sweep_ttl() == 0
    finally:
        logger.removeHandler(handler)
    assert any(
        "record item/memories/ada/bad of agent langgraph in state 'langgraph_store' does not hold a LangGraph item"
        in line
        and '"yesterday"' in line
        for line in seen
    )
    assert any("item/memories/ada/soon" in line and "expires_at" in line for line in seen)
    assert any("item/m/k2" in line and "subject key" in line for line in seen)
    assert any("item/memories/ada/long" in line and "ttl_minutes" in line for line in seen)
    assert any("item/memories/ada/late" in line and "updated_at" in line for line in seen)
    whys = (
        "created_at",
        "expires_at",
        "subject key",
        "ttl_minutes 1000000000000.0 is not a number",
        "updated_at",
    )
    for (where, key), why in zip(written, whys, strict=True):
        with pytest.raises(CorruptStore, match=why) as refused:
            lg.get(where, key)
        assert refused.value.code == "corrupt-store"
    got = lg.get(ns, "tea")
    assert got is not None and got.value == {"fact": "likes tea"}
    for where, key in written:  # a put through the adapter writes each back in shape
        lg.put(where, key, {"f": 3})
        again = lg.get(where, key)
        assert again is not None and again.value == {"f": 3} and again.namespace == where
    assert sorted(i.key for i in lg.search(ns)) == ["bad", "late", "long", "soon", "tea"]
    assert [i.key for i in lg.search(("m",))] == ["k2"]


def test_search_limit_zero_answers_nothing_and_a_negative_page_is_refused(lg: StateflowStore) -> None:
    for n in range(3):
        lg.put(("log",), f"k{n}", {"n": n})
    assert lg.search(("log",), limit=0) == []
    assert [i.key for i in lg.search(("log",), limit=1)] == ["k2"]
    for page in ({"limit": -1}, {"offset": -1}):
        with pytest.raises(ValueError, match="at least 0"):
            lg.search(("log",), **page)  # type: ignore[arg-type]


def test_eq_and_ne_with_an_object_operand_compare_whole_objects(lg: StateflowStore) -> None:
    """``$eq``/``$ne`` are JSON equality, as LangGraph's in-memory store has them; containment
    is only for a nested object given as a plain filter value."""
    lg.put(("o",), "a", {"meta": {"lang": "en", "deep": 1}, "tags": ["x", "y"]})
    lg.put(("o",), "b", {"meta": {"lang": "en"}, "tags": ["x"]})

    def keys(**filters: object) -> list[str]:
        return sorted(i.key for i in lg.search(("o",), filter=dict(filters)))

    assert keys(meta={"$eq": {"lang": "en"}}) == ["b"]
    assert keys(meta={"$ne": {"lang": "en"}}) == ["a"]
    assert keys(tags={"$eq": ["x"]}) == ["b"] and keys(tags={"$ne": ["x"]}) == ["a"]
    assert keys(meta={"lang": "en"}) == ["a", "b"]  # a plain nested object: containment


def test_the_doors_refuse_a_record_the_store_could_not_read_back(backend: str) -> None:
    """The CLI's and HTTP's record writes to the store's state apply the adapter's own item rule
    (``stateflow.states.langgraph_items``): a record whose time does not parse, that names another item
    than its address or holds a TTL no refresh can add is refused ``invalid-document`` naming
    the record and why, and nothing is written; the item still reads, gets and searches."""
    import json
    import os
    import subprocess

    from tests.http_api import tenant_api

    with StateflowStore.open(backend) as lg:
        lg.put(("notes",), "k", {"text": "hi"})
    when = "2026-01-01T00:00:00+00:00"
    refused = [
        (
            {"namespace": ["notes"], "key": "k", "value": {}, "created_at": "yesterday"},
            '"yesterday" is not an ISO',
        ),
        (
            {"namespace": ["zz"], "key": "k", "value": {}, "created_at": when},
            "not the item its subject key addresses",
        ),
        (
            {"namespace": ["notes"], "key": "k", "value": {}, "created_at": when, "ttl_minutes": 1e12},
            "ttl_minutes",
        ),
    ]
    env = dict(os.environ, STATEFLOW_STORE=backend)
    address = ["--target-name", "langgraph", "--kind", "item", "--key", "notes/k"]
    writes = [(["replace", "--data", json.dumps(data)], why) for data, why in refused]
    writes.append(
        (
            ["apply", "--data", json.dumps([{"op": "set", "path": ["expires_at"], "value": "soon"}])],
            "its expires_at",
        )
    )
    for (verb, *args), why in writes:
        out = subprocess.run(
            ["stateflow", "states", verb, "langgraph_store", *address, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert out.returncode == 1, out.stdout
        assert out.stderr.startswith(
            "error[invalid-document]: record item/notes/k of agent langgraph in state 'langgraph_store' is refused: "
        ), out.stderr
        assert why in out.stderr

    store = open_store(backend)
    try:
        with tenant_api(store) as api:
            path = "/api/states/langgraph_store/records/agent/langgraph/item/notes%2Fk"
            for data, why in refused:
                status, body = api("PUT", path, data)
                assert (status, body["code"]) == (422, "invalid-document"), body
                assert (
                    "record item/notes/k of agent langgraph in state 'langgraph_store' is refused"
                    in body["error"]
                    and why in body["error"]
                )
            status, body = api("PATCH", path, {"value": {"text": "bye"}})  # (a sound write passes)
            assert status == 200, body
    finally:
        store.close()
    with StateflowStore.open(backend) as lg:
        item = lg.get(("notes",), "k")
        assert item is not None and item.value == {"text": "bye"}
        assert [(i.namespace, i.key) for i in lg.search(("notes",))] == [(("notes",), "k")]


def test_a_store_under_another_state_name_has_its_item_rule_at_every_door(backend: str) -> None:
    """The item rule follows the adapter's declaration (``record_rule``), not the state's name:
    a store given ``state=`` gets it at the CLI and over HTTP too, an operator's re-declare that
    does not name it keeps it, and ``stateflow check`` names a record an earlier write let by."""
    import json
    import os
    import subprocess

    from tests.http_api import tenant_api

    with StateflowStore.open(backend, state="team_items") as lg:
        lg.put(("notes",), "k", {"text": "hi"})
    env = dict(os.environ, STATEFLOW_STORE=backend)
    bad = {"namespace": ["notes"], "key": "k", "value": {}, "created_at": "yesterday"}

    def sf(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, env=env)

    address = ["--target-name", "langgraph", "--kind", "item", "--key", "notes/k"]
    out = sf("states", "replace", "team_items", *address, "--data", json.dumps(bad))
    assert out.returncode == 1 and out.stderr.startswith(
        "error[invalid-document]: record item/notes/k of agent langgraph in state 'team_items' is refused: its created_at"
    ), out.stderr
    store = open_store(backend)
    try:
        service = StatesService(store)
        declared = service.get_declaration("team_items")
        assert declared.get("record_rule") == "langgraph_item"
        # an operator's re-declare naming no rule (a new description) keeps it
        view = {k: declared[k] for k in ("schema", "subject_kinds", "default_subject_kind")}
        service.declare("team_items", {**view, "description": "ours"})
        assert service.get_declaration("team_items").get("record_rule") == "langgraph_item"
        with tenant_api(store) as api:
            path = "/api/states/team_items/records/agent/langgraph/item/notes%2Fk"
            status, body = api("PUT", path, bad)
            assert (status, body["code"]) == (422, "invalid-document"), body
            assert (
                "record item/notes/k of agent langgraph in state 'team_items' is refused" in body["error"]
                and "created_at" in body["error"]
            )
        # a record out of shape written below the states door: named by the check
        subject = {"target_kind": "agent", "target_name": "langgraph", "kind": "item", "key": "notes/k"}
        key = DocKey("team_items", StateSubject(**subject).encode())  # type: ignore[arg-type]
        current = store.get(key)
        store.commit([Write.between(key, current.body, {**(current.body or {}), **bad}, current.revision)])
    finally:
        store.close()
    checked = sf("check")
    assert (
        checked.returncode == 1
        and "record item/notes/k of agent langgraph in state 'team_items'" in checked.stdout + checked.stderr
    )


def _item_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 2 or roll < 0.4:
        return rng.choice([0, 1, 1.5, True, None, "a", "b", 2**70])
    if roll < 0.7:
        return {rng.choice("abcd"): _item_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [
        rng.choice(["a", "b", None]) if rng.random() < 0.5 else _item_value(rng, depth + 1) for _ in range(3)
    ]


def test_an_item_written_again_has_the_record_and_edits_of_the_general_diff() -> None:
    """An item put again over its record (``_owned``'s rewrite without a TTL, ``_rewritten``)
    gets the record ``_document`` builds and the edits ``plain_edits`` gives — the same
    objects kept from the record before — and leaves every other case to them: a TTL set
    before or now, a field missing or added, a time that does not parse, another namespace or
    key, a value the walk refuses."""
    from stateflow.langgraph.codec import plain_edits
    from stateflow.langgraph.store import _document, _owned, _rewritten

    rng = random.Random(20261206)
    now = datetime(2026, 12, 6, tzinfo=UTC)
    made = 0
    for n in range(400):
        value = _item_value(rng, 1) if rng.random() < 0.9 else {"s": {1, 2}}  # (a set: refused)
        if type(value) is not dict:
            value = {"v": value}
        op = PutOp(("a", "b"), "k", value, None, None)
        before: dict[str, Any] = {
            "namespace": ["a", "b"],
            "key": "k",
            "value": _item_value(rng, 1) if rng.random() < 0.9 else value,
            "created_at": "2026-01-01T00:00:00+00:00",
            "expires_at": None,
            "ttl_minutes": None,
        }
        case = n % 10
        if case == 1:
            before["expires_at"], before["ttl_minutes"] = "2027-01-01T00:00:00+00:00", 5
        elif case == 2:
            op = op._replace(ttl=5.0)
        elif case == 3:
            before["extra"] = 1
        elif case == 4:
            del before["ttl_minutes"]
        elif case == 5:
            before["created_at"] = "not a time"
        elif case == 6:
            before["namespace"] = ["a", "c"]
        elif case == 7:
            before["key"] = "j"
        lean = _rewritten(op, before) if op.ttl is None else None
        general = plain_edits(_document(op, now, dict(before)), before)
        if case in (1, 2, 3, 4, 5, 6, 7) or general is None:
            assert lean is None, (case, before, value)
            continue
        assert lean is not None
        made += 1
        assert (lean.body, lean.edits) == general, (before, value)
        assert (
            lean.body["namespace"] is before["namespace"] and lean.body["created_at"] is before["created_at"]
        )
        assert lean.rewritten and lean.paths == [[]] and lean.encoded is None
        assert _owned(op, now, before) == lean
    assert made > 60


def test_a_tuple_in_a_filter_matches_the_array_it_equals(lg: StateflowStore) -> None:
    """A filter value given as a tuple is the JSON array it encodes to, as LangGraph's stores
    take it (stored values hold lists only: it matched nothing, silently)."""
    lg.put(("t",), "d1", {"tags": ["a", "b"], "point": [1, [2, 3]]})
    lg.put(("t",), "d2", {"tags": ["b", "a"], "point": [1, 2]})
    assert [i.key for i in lg.search(("t",), filter={"tags": ("a", "b")})] == ["d1"]
    assert [i.key for i in lg.search(("t",), filter={"point": (1, (2, 3))})] == ["d1"]
    assert [i.key for i in lg.search(("t",), filter={"point": {"$eq": (1, 2)}})] == ["d2"]
    assert [i.key for i in lg.search(("t",), filter={"tags": {"$ne": ("a", "b")}})] == ["d2"]


def test_a_value_holding_other_mappings_is_stored_as_the_objects_they_are(lg: StateflowStore) -> None:
    """An ``OrderedDict``, a ``defaultdict``, a ``Counter``, a read-only view or a ``UserDict``
    is a JSON object to LangGraph's stores: stored as a plain object, at any depth, through
    ``put``, a batch of one and a batch of several."""
    from collections import Counter, OrderedDict, UserDict, defaultdict
    from types import MappingProxyType

    nested = {
        "o": OrderedDict(b=1, a=2),
        "d": defaultdict(list, x=[1]),
        "c": Counter("aab"),
        "l": [UserDict(k=1)],
    }
    lg.put(("m",), "nested", nested)
    lg.put(("m",), "view", MappingProxyType({"v": OrderedDict(w=1)}))
    lg.put(("m",), "user", UserDict({"u": 1}))
    lg.batch([PutOp(("m",), "one", OrderedDict(one=1))])
    lg.batch([PutOp(("m",), "a", OrderedDict(a=Counter("x"))), PutOp(("m",), "b", {"b": [OrderedDict(b=2)]})])
    expected = {
        "nested": {"o": {"b": 1, "a": 2}, "d": {"x": [1]}, "c": {"a": 2, "b": 1}, "l": [{"k": 1}]},
        "view": {"v": {"w": 1}},
        "user": {"u": 1},
        "one": {"one": 1},
        "a": {"a": {"x": 1}},
        "b": {"b": [{"b": 2}]},
    }
    for key, value in expected.items():
        item = lg.get(("m",), key)
        assert item is not None and item.value == value and type(item.value) is dict
        record = lg.states.read(lg.records.state, lg.subject(("m",), key))
        assert record is not None and record["data"]["value"] == value
    with pytest.raises(InvalidJSON):  # (what no JSON object holds is still refused, nothing written)
        lg.put(("m",), "bad", OrderedDict(k={1, 2}))
    assert lg.get(("m",), "bad") is None


def test_a_value_holding_what_orjson_encodes_is_stored_as_the_json_langgraph_keeps(
    lg: StateflowStore, tmp_path: Any
) -> None:
    """LangGraph's ``SqliteStore`` keeps a value as orjson encodes it — a tuple an array, an enum
    its value, a ``str``/``list`` subclass the plain value, a ``datetime`` or ``UUID`` its text,
    a dataclass an object — and hands that JSON back; these were refused (``tuple is not a JSON
    type``). Stored the same way here, through ``put``, a batch of one and a batch of several;
    what orjson refuses, and a NaN it would write as ``null``, stays refused, nothing written."""
    import dataclasses
    import enum
    import sqlite3
    import uuid

    from langgraph.store.sqlite import SqliteStore

    class Status(enum.StrEnum):
        OPEN = "open"

    class Rank(enum.IntEnum):
        ONE = 1

    class Text(str):
        pass

    class Items(list):  # type: ignore[type-arg]
        pass

    @dataclasses.dataclass
    class Point:
        x: int
        y: str

    value = {
        "pair": (1, (2, Status.OPEN)),
        "status": Status.OPEN,
        "rank": Rank.ONE,
        "text": Text("t"),
        "items": Items([1, (2,)]),
        "at": datetime(2026, 1, 1, tzinfo=UTC),
        "id": uuid.UUID(int=5),
        "point": Point(1, "a"),
        "deep": [{"in": (Rank.ONE,)}],
    }
    theirs = SqliteStore(sqlite3.connect(tmp_path / "lg.db", check_same_thread=False, isolation_level=None))
    theirs.setup()
    theirs.put(("m",), "k", value)
    kept = theirs.get(("m",), "k")
    assert kept is not None
    expected = kept.value
    assert expected["pair"] == [1, [2, "open"]] and expected["at"] == "2026-01-01T00:00:00+00:00"
    lg.put(("m",), "put", value)
    lg.batch([PutOp(("m",), "one", value)])
    lg.batch([PutOp(("m",), "a", value), PutOp(("m",), "b", {"b": (1,)})])
    for key in ("put", "one", "a"):
        item = lg.get(("m",), key)
        assert item is not None and item.value == expected
        record = lg.states.read(lg.records.state, lg.subject(("m",), key))
        assert record is not None and record["data"]["value"] == expected
    assert lg.search(("m",), filter={"status": "open"})[0].value == expected
    for bad, refusal in (
        ({"n": (1, float("nan"))}, "nan is not a JSON number"),
        ({"s": ({1},)}, "set is not a JSON type"),
        ({"b": b"x"}, "bytes is not a JSON type"),
    ):
        with pytest.raises(InvalidJSON, match=refusal):
            lg.put(("m",), "bad", bad)
        with pytest.raises(InvalidJSON, match=rf"ops\[0\]: .*{refusal}"):
            lg.batch([PutOp(("m",), "bad", bad), PutOp(("m",), "c", {"c": 1})])
    assert lg.get(("m",), "bad") is None and lg.get(("m",), "c") is None


def test_a_sweep_erases_only_what_is_still_expired_and_counts_what_it_erased(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sweep_ttl`` lists the expired items, then erases them: an item another process put
    again in between (with no TTL) was erased all the same, an acknowledged put lost; and two
    sweeps at once both counted every item. Each erase now holds only while the item is the
    revision found expired, and a sweep counts what it erased."""
    with StateflowStore.open(backend) as sweeper, StateflowStore.open(backend) as other:
        for n in range(6):
            other.put(("sw",), f"k{n}", {"v": n}, ttl=0.001)
        time.sleep(0.1)
        listing = sweeper.records.documents

        def listed_then_put_again(*args: Any, **kwargs: Any) -> Any:
            found = listing(*args, **kwargs)
            for n in range(3):
                other.put(("sw",), f"k{n}", {"v": n + 10})  # (no TTL: kept for good)
            return found

        monkeypatch.setattr(sweeper.records, "documents", listed_then_put_again)
        assert sweeper.sweep_ttl() == 3
        assert sorted((i.key, i.value["v"]) for i in other.search(("sw",))) == [
            ("k0", 10),
            ("k1", 11),
            ("k2", 12),
        ]

        for n in range(4):
            other.put(("sw2",), f"k{n}", {"v": n}, ttl=0.001)
        time.sleep(0.1)
        counts = []

        def listed_then_swept_elsewhere(*args: Any, **kwargs: Any) -> Any:
            found = listing(*args, **kwargs)
            counts.append(other.sweep_ttl())
            return found

        monkeypatch.setattr(sweeper.records, "documents", listed_then_swept_elsewhere)
        counts.append(sweeper.sweep_ttl())
        assert counts == [4, 0]
        assert other.search(("sw2",)) == []
