"""Sorted search: the store sorts (SQL, a page at a time), in exactly the order the search
defines (``states.search.value_key``), and its cursors resume after the last match listed."""

from __future__ import annotations

import base64
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateflow.errors import InvalidInput
from stateflow.states import StatesService
from stateflow.states.search import sort_key
from stateflow.store import DocKey, SqlStore, Write
from stateflow.subjects import encode_subject
from tests.conftest import WHOLE_FORM, store_location

DECL = {
    "schema": {"type": "object", "properties": {"kind": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
_states = itertools.count()


def subject(key: str) -> dict[str, str]:
    return {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": key}


def walk(service: StatesService, state: str, filters: Any, sort: Any, limit: int) -> list[str]:
    """Every page's keys, in order."""
    keys: list[str] = []
    cursor = None
    while True:
        page = service.search(state, filters, sort=sort, limit=limit, cursor=cursor)
        keys += [m["subject"]["key"] for m in page["matches"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return keys


def defined(docs: dict[str, Any], sort: list[dict[str, Any]]) -> list[str]:
    """The order the search defines: each key's place, then the subject."""
    order = [(tuple(k["path"]), k.get("order") == "desc") for k in sort]
    encoded = {k: encode_subject("agent", "a", "thread", k) for k in docs}
    return sorted(docs, key=lambda k: (tuple(sort_key(docs[k], p, d) for p, d in order), encoded[k]))


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.5, 1.0, -0.0, 2.0**53, 2**53 + 1, 1e300])
    | st.text(st.characters(blacklist_categories=["Cs"]), max_size=6)
    | st.sampled_from(["", "a", "b", "ab", "é", "\U0001f600", "ﬀ", "A", "a\x00b", "\\u0000"])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("xy"), inner, max_size=2),
    max_leaves=4,
)
absent = object()
members = st.one_of(st.just(absent), values)
sort_keys = st.lists(
    st.fixed_dictionaries(
        {
            "path": st.sampled_from([["v"], ["w"], ["v", "x"], ["w", "y"], ["v", "x", "y"]]),
            "order": st.sampled_from(["asc", "desc"]),
        }
    ),
    min_size=1,
    max_size=2,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(members, members), min_size=1, max_size=12), sort_keys, st.integers(1, 4))
def test_sorted_pages_are_the_defined_order(
    store: SqlStore, rows: list[tuple[Any, Any]], sort: list[dict[str, Any]], limit: int
) -> None:
    # mixed JSON types, equal values of both number types, numbers SQL cannot order exactly
    # (sorted by the caller instead): page after page is the definition's order
    service = StatesService(store)
    state = f"s{next(_states)}"
    service.declare(state, DECL)
    docs: dict[str, Any] = {}
    for i, (v, w) in enumerate(rows):
        body = {"kind": "row", **({} if v is absent else {"v": v}), **({} if w is absent else {"w": w})}
        docs[f"k{i:02d}"] = body
        service.replace(state, subject(f"k{i:02d}"), body)
    assert walk(service, state, {"kind": "row"}, sort, limit) == defined(docs, sort)


def test_the_store_sorts_mixed_types_in_sql(store: SqlStore) -> None:
    # each JSON type in its place, in both directions, over several keys, ties by subject — and
    # sorted by the database (a page, not every match): the store answers, not None
    service = StatesService(store)
    service.declare("t", DECL)
    vs: list[Any] = [3, -1.5, 2.0, 2, "b", "a", "é", "", True, False, None, [1], {"x": 1}, "Z", 10**15]
    docs: dict[str, Any] = {}
    for i, v in enumerate(vs):
        for j, w in enumerate(["y", None, 7]):
            body: dict[str, Any] = {"kind": "row", "w": w}
            if (i + j) % 4:
                body["v"] = v
            docs[f"k{i:02d}{j}"] = body
            service.replace("t", subject(f"k{i:02d}{j}"), body)
    sorts: list[list[dict[str, Any]]] = [
        [{"path": ["v"]}],
        [{"path": ["v"], "order": "desc"}],
        [{"path": ["w"], "order": "desc"}, {"path": ["v"]}],
        [{"path": ["v"], "order": "desc"}, {"path": ["w"], "order": "desc"}],
        [{"path": ["missing"]}, {"path": ["v"]}],
    ]
    for sort in sorts:
        want = defined(docs, sort)
        for limit in (1, 7, 200):
            assert walk(service, "t", {"kind": "row"}, sort, limit) == want, (sort, limit)
        # an $in of scalars: a union of searches, each in sort order, merged
        some = {k: d for k, d in docs.items() if d["w"] in ("y", 7)}
        assert walk(service, "t", {"kind": "row", "w": {"$in": ["y", 7]}}, sort, 4) == defined(some, sort)
        order = [(tuple(k["path"]), k.get("order") == "desc") for k in sort]
        found = store.search_sorted("t", {"kind": "row"}, order, limit=5)
        assert found is not None
        assert [x.key.subject for x, _ in found] == [
            encode_subject("agent", "a", "thread", k) for k in want[:5]
        ]


def test_values_sql_cannot_order_are_sorted_by_the_caller(store: SqlStore) -> None:
    # a number of 2**53 or more (PostgreSQL reads a float's text, SQLite an integer from 2**63
    # up as a double) or a string holding U+0000: the store says so, and the search still
    # answers in the defined order
    service = StatesService(store)
    service.declare("t", DECL)
    docs: dict[str, Any] = {}
    for i, v in enumerate([2**60, float(2**60), 2**60 + 1, 2**64 - 1, 1.0, "a\x00", "a", 5]):
        docs[f"k{i}"] = {"kind": "row", "v": v}
        service.replace("t", subject(f"k{i}"), docs[f"k{i}"])
    assert store.search_sorted("t", {"kind": "row"}, [(("v",), False)], limit=3) is None
    for sort in ([{"path": ["v"]}], [{"path": ["v"], "order": "desc"}]):
        assert walk(service, "t", {"kind": "row"}, sort, 3) == defined(docs, sort)
    service.erase("t", subject("k0"))
    service.erase("t", subject("k1"))
    service.erase("t", subject("k2"))
    service.erase("t", subject("k3"))
    service.erase("t", subject("k5"))
    assert store.search_sorted("t", {"kind": "row"}, [(("v",), False)], limit=3) is not None


def test_the_least_integer_sorts_top_level_and_nested(store: SqlStore) -> None:
    # -2**63, the least valid integer, has no absolute value in SQLite's 64-bit integers: a
    # member holding it sorts in its place (before the rest), not a store error
    service = StatesService(store)
    service.declare("t", DECL)
    docs: dict[str, Any] = {}
    for i, n in enumerate([1, 5, -(2**63), -(2**63) + 1, 2**63]):
        docs[f"k{i}"] = {"kind": "row", "v": n, "o": {"n": n}}
        service.replace("t", subject(f"k{i}"), docs[f"k{i}"])
    for path in (["v"], ["o", "n"]):
        for sort in ([{"path": path}], [{"path": path, "order": "desc"}]):
            assert walk(service, "t", {"kind": "row"}, sort, 2) == defined(docs, sort), sort
    assert defined(docs, [{"path": ["v"]}])[0] == "k2"


def test_nested_paths_sort_in_sql_whatever_their_names(store: SqlStore) -> None:
    # names SQL must quote, names the encoding escapes (SQLite's paths compare them as written),
    # and one ("0") an array could be indexed by: a path reaches values
    # through objects only; inside an array, or a member held as a tree, nothing is reached
    # by SQL and the search sorts in Python — in the same order
    service = StatesService(store)
    service.declare("t", DECL)
    names = ['a"b', "it's", "{x}", "a.b", "$", "0", " 1", "é", "a\\b", "tab\t"]
    docs: dict[str, Any] = {}
    for i in range(12):
        inner: Any = {n: (i * 7 + j) % 5 if i % 3 else f"s{(i + j) % 4}" for j, n in enumerate(names)}
        docs[f"k{i:02d}"] = {"kind": "row", "o": inner if i % 4 else [inner]}
        service.replace("t", subject(f"k{i:02d}"), docs[f"k{i:02d}"])
    for name in names:
        sorts: list[list[dict[str, Any]]] = [
            [{"path": ["o", name]}],
            [{"path": ["o", name], "order": "desc"}, {"path": ["o", "$"]}],
        ]
        for sort in sorts:
            assert walk(service, "t", {"kind": "row"}, sort, 5) == defined(docs, sort), sort
    sql = store.search_sorted("t", {"kind": "row"}, [(("o", "it's"), False), (("o", "{x}"), True)], limit=3)
    assert sql is not None and len(sql) == 3
    big = {"kind": "row", "o": {"{x}": 1, "pad": [f"{i:06d}" + "x" * 90 for i in range(12_000)]}}
    docs["big"] = big
    service.replace("t", subject("big"), big)
    assert store.search_sorted("t", {"kind": "row"}, [(("o", "{x}"), False)], limit=3) is None
    by_x: list[dict[str, Any]] = [{"path": ["o", "{x}"], "order": "desc"}]
    assert walk(service, "t", {"kind": "row"}, by_x, 5) == defined(docs, by_x)


def test_a_large_member_held_as_a_tree_sorts_as_an_object(store: SqlStore) -> None:
    service = StatesService(store)
    service.declare("t", DECL)
    docs = {
        "a": {"kind": "row", "v": [f"{i:06d}" + "x" * 90 for i in range(12_000)]},
        "b": {"kind": "row", "v": "text"},
        "c": {"kind": "row"},
        "d": {"kind": "row", "v": {"x": 1}},
    }
    for k, body in docs.items():
        service.replace("t", subject(k), body)
    for sort in ([{"path": ["v"]}], [{"path": ["v"], "order": "desc"}]):
        assert walk(service, "t", {"kind": "row"}, sort, 1) == defined(docs, sort) == ["b", "a", "d", "c"]


def test_a_cursor_resumes_after_the_last_match_while_others_are_written(store: SqlStore) -> None:
    # records created before the cursor or after it, others deleted, others rewritten in
    # members the sort does not read: every record there all along and never moved is listed
    # exactly once (a position by offset listed some twice and skipped others)
    service = StatesService(store)
    service.declare("t", DECL)
    for i in range(40):
        service.replace("t", subject(f"k{i:02d}"), {"kind": "row", "v": i % 7, "w": i})
    sort = [{"path": ["v"], "order": "desc"}, {"path": ["w"]}]
    seen: list[str] = []
    cursor = None
    for turn in itertools.count():
        page = service.search("t", {"kind": "row"}, sort=sort, limit=5, cursor=cursor)
        seen += [m["subject"]["key"] for m in page["matches"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        service.replace("t", subject(f"new{turn}a"), {"kind": "row", "v": 99, "w": 0})  # before the cursor
        service.replace("t", subject(f"new{turn}b"), {"kind": "row", "v": -1, "w": turn})  # after it
        service.erase("t", subject(f"k{39 - turn:02d}"))
        service.merge("t", subject(f"k{turn:02d}"), {"note": "x"})
    deleted = {f"k{39 - t:02d}" for t in range(turn)}
    stayed = [f"k{i:02d}" for i in range(40) if f"k{i:02d}" not in deleted]
    assert len(seen) == len(set(seen))
    assert set(stayed) <= set(seen)
    assert {f"new{t}b" for t in range(turn)} <= set(seen) and not {f"new{t}a" for t in range(turn)} & set(
        seen
    )


def test_a_sorted_search_pages_past_ten_thousand_matches(store: SqlStore) -> None:
    # the store sorts and returns a page: no search collects every match, so none is refused
    # for having many (the sort in Python covered at most 10,000)
    service = StatesService(store)
    service.declare("t", DECL)
    for low in range(0, 10_050, 500):
        store.commit(
            [
                Write.between(
                    DocKey("t", encode_subject("agent", "a", "thread", f"k{i:05d}")),
                    None,
                    {"kind": "row", "v": i % 1000, "odd": i % 2},
                    0,
                )
                for i in range(low, min(10_050, low + 500))
            ]
        )
    sort = [{"path": ["v"], "order": "desc"}]
    page = service.search("t", {"kind": "row"}, sort=sort, limit=3)
    assert [m["subject"]["key"] for m in page["matches"]] == ["k00999", "k01999", "k02999"]
    page = service.search("t", {"kind": "row"}, sort=sort, limit=3, cursor=page["next_cursor"])
    assert [m["subject"]["key"] for m in page["matches"]] == ["k03999", "k04999", "k05999"]
    # a filter checked on each candidate: the candidates come in sort order, in batches
    checked = service.search("t", {"kind": "row", "v": {"$lt": 3}, "odd": {"$ne": 0}}, sort=sort, limit=2)
    assert [m["subject"]["key"] for m in checked["matches"]] == ["k00001", "k01001"]


def test_sorted_cursors_are_checked(store: SqlStore) -> None:
    service = StatesService(store)
    service.declare("t", DECL)
    for i in range(3):
        service.replace("t", subject(f"k{i}"), {"kind": "row", "v": i})
    sort = [{"path": ["v"]}]
    cursor = service.search("t", {"kind": "row"}, sort=sort, limit=1)["next_cursor"]
    with pytest.raises(InvalidInput, match="cursor is malformed"):  # another sort's cursor
        service.search("t", {"kind": "row"}, sort=[*sort, *sort], limit=1, cursor=cursor)
    for text in (
        "\x00sorted:1",  # an offset, as cursors were
        '\x00sorted:[[NaN], "k"]',
        '\x00sorted:[[[1]], "k"]',
        "\x00sorted:[[1], 2]",
        '\x00sorted:[["\\ud800"], "k"]',  # a lone surrogate: no text a store holds
        '\x00sorted:[[1], "\\udc00"]',
    ):
        bad = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
        with pytest.raises(InvalidInput, match="cursor is malformed"):
            service.search("t", {"kind": "row"}, sort=sort, cursor=bad)


@pytest.fixture(params=["sqlite", WHOLE_FORM, "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each backend, and SQLite with this module's states in whole form."""
    return store_location(request, tmp_path, ("t",))
