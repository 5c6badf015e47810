"""Listings and containment search mean the same on both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.canonical import json_contains
from stateflow.errors import InvalidInput
from stateflow.states import StatesService
from stateflow.store import DocKey, SqlStore, Write
from tests.conftest import WHOLE_FORM, store_location
from tests.http_api import tenant_api

DOCS: dict[str, dict[str, Any]] = {
    "a": {"box": {"items": [{"id": "a-42", "label": "status"}]}, "n": 1, "tags": ["x", "y"]},
    "b": {"box": {"items": [{"id": "b-1"}]}, "n": 1.0, "tags": ["y"]},
    "c": {"n": True, "tags": "x", "nested": [[1, 2], [3]]},
    "d": {"n": None, "big": "é" * 10, "nul": "a\u0000b"},
    "e": {"box": {}, "n": 2, "large": ["x" * 1000] * 1200 + [{"needle": 1}]},  # > 1 MiB member
}

FILTERS: list[dict[str, Any]] = [
    {"box": {"items": [{"id": "a-42"}]}},
    {"n": 1},
    {"n": True},
    {"n": None},
    {"tags": ["y"]},
    {"tags": "x"},
    {"tags": ["x", "y"]},
    {"nested": [[1]]},
    {"nested": [1]},
    {"box": {}},
    {"nul": "a\u0000b"},
    {"nul": "a"},  # a stored string with a NUL is not cut short at it
    {"big": "é" * 10},
    {"n": 1.0},
    {"n": 2},
    {"n": False},
    {"large": "x"},  # a member held as a tree never equals a scalar
    {"large": [{"needle": 1}]},
    {"missing": 1},
]


@pytest.fixture
def filled(store: SqlStore) -> SqlStore:
    store.commit([Write.between(DocKey("things", k), None, v) for k, v in DOCS.items()])
    store.commit([Write.between(DocKey("other", "a"), None, {"n": 1})])
    return store


@pytest.mark.parametrize("filters", FILTERS, ids=[str(f)[:40] for f in FILTERS])
def test_search_matches_containment_semantics(filled: SqlStore, filters: dict[str, Any]) -> None:
    expected = [k for k, v in sorted(DOCS.items()) if json_contains(v, filters)]
    assert [m.key.subject for m in filled.search("things", filters)] == expected


def test_containment_reference_cases() -> None:
    assert json_contains({"n": 1}, {"n": 1.0})
    assert not json_contains({"n": True}, {"n": 1})
    assert not json_contains({"tags": ["x"]}, {"tags": "x"})  # no scalar-in-array below the top level
    assert json_contains({"a": [{"id": 1, "x": 2}, 3]}, {"a": [3, {"id": 1}]})


def test_scan_is_keyset_paginated_in_subject_order(filled: SqlStore) -> None:
    first = filled.scan("things", limit=2)
    assert [x.key.subject for x in first] == ["a", "b"]
    rest = filled.scan("things", after=first[-1].key.subject, limit=10)
    assert [x.key.subject for x in rest] == ["c", "d", "e"]
    assert all(x.at and x.seq and x.revision == 1 for x in first)
    paged = filled.search("things", {"n": 1}, limit=1)
    assert [m.key.subject for m in paged] == ["a"]
    assert [m.key.subject for m in filled.search("things", {"n": 1}, after="a", limit=1)] == ["b"]


def test_counts(filled: SqlStore) -> None:
    assert filled.count("things") == 5
    assert filled.member_counts("things")["n"] == 5
    assert filled.member_counts("things")["box"] == 3


def test_search_needs_a_non_empty_object(filled: SqlStore) -> None:
    bad_filters: tuple[Any, ...] = ({}, [], "x")
    for bad in bad_filters:
        with pytest.raises(InvalidInput, match="non-empty filters object"):
            filled.search("things", bad)


def test_subject_order_is_bytewise_on_both_backends(store: SqlStore) -> None:
    subjects = ["B", "a", "Z", "ä", "_x", "a b", "a/b", "a\u00e9"]
    store.commit([Write.between(DocKey("s", k), None, {"v": 1}) for k in subjects])
    assert [x.key.subject for x in store.scan("s")] == sorted(subjects, key=lambda t: t.encode())


def test_kind_counts_count_present_documents_by_subject_kind(filled: SqlStore) -> None:
    from stateflow.subjects import encode_subject

    subjects = [encode_subject("agent", "a", kind, key) for kind, key in [("x", "1"), ("x", "2"), ("y", "1")]]
    filled.commit([Write.between(DocKey("kinds", s), None, {"n": 1}) for s in subjects])
    filled.commit([Write.between(DocKey("kinds", subjects[1]), {"n": 1}, None)])  # deleted: not counted
    assert filled.kind_counts("kinds") == {"x": 1, "y": 1}
    assert filled.kind_counts("things") == {None: len(DOCS)}  # not encoded subjects
    assert filled.kind_counts("nothing") == {}


def test_a_search_with_a_thousand_filter_members_checks_each_of_them(store: SqlStore) -> None:
    # Only the first members are checked in the candidate query (one EXISTS each: SQLite refused
    # ~1,000 of them as too deep an expression, PostgreSQL's planning took minutes); the others
    # are checked on its candidates, so a record differing only in the last one is no match.
    wide = {f"m{i}": i for i in range(1000)} | {"box": {"items": [{"id": "x", "n": 1}]}}
    docs = {
        "all": wide,
        "last-differs": wide | {"m999": -1},
        "last-missing": {k: v for k, v in wide.items() if k != "m999"},
        "nested-differs": wide | {"box": {"items": [{"id": "y"}]}},
    }
    store.commit([Write.between(DocKey("wide", k), None, v) for k, v in docs.items()])
    filters = {f"m{i}": i for i in range(1000)} | {"box": {"items": [{"id": "x"}]}}
    assert [item.key.subject for item in store.search("wide", filters)] == ["all"]
    assert {item.key.subject for item in store.search("wide", {f"m{i}": i for i in range(998)})} == set(docs)
    assert [item.key.subject for item in store.search("wide", filters | {"m5": -5})] == []


def _pairwise(value: Any, pattern: Any) -> bool:
    """Containment as its definition reads (every pair compared): the reference for long arrays."""
    if type(pattern) is list:
        return type(value) is list and all(any(_pairwise(x, p) for x in value) for p in pattern)
    if type(pattern) is dict:
        return type(value) is dict and all(k in value and _pairwise(value[k], v) for k, v in pattern.items())
    return type(value) not in (dict, list) and json_contains(value, pattern)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([1.0, -0.0, 0.5, 2.0**62])
    | st.text("ab", max_size=2),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text("ab", max_size=1), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(json_values, min_size=20, max_size=40), st.lists(json_values, min_size=14, max_size=30))
def test_long_arrays_are_contained_as_pair_by_pair(value: list[Any], pattern: list[Any]) -> None:
    # above PAIRWISE_MAX pairs, scalars are looked up by their equality keys and each distinct
    # pattern element is tried once: the answer is the pairwise one (1 is 1.0, true is not 1)
    assert json_contains(value, pattern) == _pairwise(value, pattern)
    assert json_contains(value, [*value[:5], *value[:5]] * 10) is True
    assert json_contains({"tags": value}, {"tags": pattern}) == _pairwise(value, pattern)


def test_a_pattern_repeating_one_element_is_tried_once() -> None:
    value = [*range(500), {"a": [1, 2]}]
    assert json_contains(value, [499] * 100_000 + [{"a": [2]}] * 100_000)
    assert not json_contains(value, [499] * 100_000 + [{"a": [3]}])
    assert not json_contains(value, [True] * 1_000)


def test_a_filter_holding_more_array_elements_than_the_limit_is_refused_at_every_door(
    store: SqlStore,
) -> None:
    # each element of a filter's array is looked for among every element of a record's array:
    # jsonb @> on PostgreSQL, which neither the statement timeout nor a cancel stops meanwhile,
    # and on SQLite in Python — a filter of 100,000 integers held a PostgreSQL backend for minutes
    states = StatesService(store)
    states.declare(
        "wide",
        {
            "schema": {"type": "object", "properties": {"v": {}}},
            "subject_kinds": ["k"],
            "default_subject_kind": "k",
        },
    )
    subject = {"target_kind": "agent", "target_name": "bot", "kind": "k", "key": "all"}
    values = [{"i": i, "x": [i, -i]} for i in range(1000)]
    states.replace("wide", subject, {"v": values})
    at_most = {"v": [*values[-84:], *range(4)]}  # 84 objects with their arrays of 2, and 4 integers
    assert [m["subject"]["key"] for m in states.search("wide", at_most)["matches"]] == []
    assert [m["subject"]["key"] for m in states.search("wide", {"v": values[-85:]})["matches"]] == ["all"]
    message = (
        "filters hold 257 array elements; a filter's arrays may hold at most 256 in all (each is "
        "looked for among every element of a record's array; an $in's values are not counted)"
    )
    too_many = {"v": [*values[-85:], 0, 1]}
    with pytest.raises(InvalidInput) as refused:
        states.search("wide", too_many)
    assert refused.value.message == message
    with tenant_api(store) as api:
        status, body = api("POST", "/api/states/wide/records/search", {"filters": too_many})
        assert (status, body) == (422, {"error": message, "code": "invalid-input"})
        nested = {"v": [{"x": list(range(257))}]}
        status, body = api("POST", "/api/states/wide/records/search", {"filters": nested})
        assert status == 422 and body["error"].startswith("filters hold 258 array elements")
        # an $in's values are looked up in a set: any number of them
        status, body = api(
            "POST", "/api/states/wide/records/search", {"filters": {"v": {"$in": list(range(10_000))}}}
        )
        assert status == 200, body


@pytest.fixture(params=["sqlite", WHOLE_FORM, "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each backend, and SQLite with this module's states in whole form."""
    return store_location(request, tmp_path, ("things", "other", "kinds", "wide", "s"))
