"""A target-limited token's listings and searches read only its targets' records: its pages,
cursors and ends are the same whether other tenants hold no record or many matching ones.

Through the real HTTP app, on both backends.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.states.batch import apply_items
from stateflow.store import SqlStore
from tests.http_api import ADMIN, ALICE, Api, tenant_api

DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}, "count": {"type": "integer"}}},
    "subject_kinds": ["thread", "person"],
    "default_subject_kind": "thread",
}
SEARCH = "/api/states/tickets/records/search"


@pytest.fixture
def api(store: SqlStore) -> Iterator[Api]:
    with tenant_api(store) as api:
        assert api("PUT", "/api/states/tickets", DECL)[0] == 200
        yield api


def _seed(store: SqlStore, target: str, kinds: dict[str, int]) -> None:
    """``kinds[kind]`` records of ``agent/target`` in one transaction, each open, count 1."""
    items = [
        {
            "state": "tickets",
            "subject": {"target_kind": "agent", "target_name": target, "kind": kind, "key": f"{kind}-{i:04}"},
            "ops": [
                {"op": "set", "path": ["status"], "value": "open"},
                {"op": "set", "path": ["count"], "value": 1},
            ],
        }
        for kind, n in kinds.items()
        for i in range(n)
    ]
    apply_items(StatesService(store), items)


def _pages(api: Api, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> list[Any]:
    """Every page ``token`` is given, following the cursors: (subjects, next cursor) each."""
    pages: list[Any] = []
    cursor = None
    while True:
        if method == "GET":
            status, answer = api("GET", path + (f"&cursor={cursor}" if cursor else ""), token=token)
        else:
            status, answer = api("POST", path, {**(body or {}), "cursor": cursor}, token=token)
        assert status == 200, answer
        data = answer["data"]
        rows = data["subjects"] if "subjects" in data else data["matches"]
        named = [
            r["subject"]["key"] if token == ALICE else f"{r['subject']['target_name']}/{r['subject']['key']}"
            for r in rows
        ]
        pages.append((named, data["next_cursor"]))
        cursor = data["next_cursor"]
        if cursor is None or len(pages) > 10:
            return pages


def _position(cursor: str) -> str:
    """What a cursor holds (the caller's to decode): the subject, or sort values and subject,
    a page ends at."""
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()


def _everything(api: Api, token: str = ALICE) -> dict[str, list[Any]]:
    sort = [{"path": ["count"]}]
    asked = {
        "subjects/1": ("GET", "/api/states/tickets/subjects?limit=1", None),
        "subjects/2": ("GET", "/api/states/tickets/subjects?limit=2", None),
        "subjects/person": ("GET", "/api/states/tickets/subjects?limit=1&kind=person", None),
        "containment/2": ("POST", SEARCH, {"filters": {"count": 1}, "limit": 2}),
        "two-members/3": ("POST", SEARCH, {"filters": {"count": 1, "status": "open"}, "limit": 3}),
        "predicate/2": ("POST", SEARCH, {"filters": {"count": {"$gte": 0}}, "limit": 2}),
        "union/2": ("POST", SEARCH, {"filters": {"count": {"$in": [1, 2]}}, "limit": 2}),
        "sorted-union/2": ("POST", SEARCH, {"filters": {"count": {"$in": [1, 2]}}, "sort": sort, "limit": 2}),
        "sorted/1": ("POST", SEARCH, {"filters": {"status": "open"}, "sort": sort, "limit": 1}),
        "sorted-predicate/2": ("POST", SEARCH, {"filters": {"count": {"$gte": 0}}, "sort": sort, "limit": 2}),
    }
    return {name: _pages(api, token, method, path, body) for name, (method, path, body) in asked.items()}


def test_a_target_limited_tokens_pages_do_not_depend_on_other_tenants_records(
    api: Api, store: SqlStore
) -> None:
    _seed(store, "alice", {"thread": 3, "person": 2})
    alone = _everything(api)
    # full pages while records remain, then a last page without a cursor: no empty page after
    assert alone["subjects/2"] == [
        (["person-0000", "person-0001"], alone["subjects/2"][0][1]),
        (["thread-0000", "thread-0001"], alone["subjects/2"][1][1]),
        (["thread-0002"], None),
    ]
    assert [keys for keys, _ in alone["subjects/person"]] == [["person-0000"], ["person-0001"]]
    assert alone["subjects/person"][-1][1] is None
    for name in ("containment/2", "predicate/2", "union/2", "sorted-union/2", "sorted-predicate/2"):
        assert [len(keys) for keys, _ in alone[name]] == [2, 2, 1], name
    assert [len(keys) for keys, _ in alone["two-members/3"]] == [3, 2]
    assert [len(keys) for keys, _ in alone["sorted/1"]] == [1] * 5
    # other tenants, before and after alice in subject order, many matching records each (more
    # than a batch a page reads at a time): alice's token is given exactly the same pages
    _seed(store, "aaron", {"thread": 600, "person": 600})
    _seed(store, "zed", {"thread": 600, "person": 600})
    assert _everything(api) == alone
    cursors = [cursor for pages in alone.values() for _, cursor in pages if cursor is not None]
    assert cursors and all("alice" in _position(c) for c in cursors)


def test_a_token_limited_to_several_targets_pages_through_their_records_alone(store: SqlStore) -> None:
    """The targets' records are one listing, in subject order across them, pages full across
    the gap between two targets; the tenants between and around them are never read."""
    both = "both-secret-0123456789"
    service = StatesService(store)
    service.install_builtins()
    tokens = TokenSet([parse_token(ADMIN), parse_token(both + "@agent/bob,agent/dan")])
    with TestClient(create_app(service, tokens)) as client:
        api = Api(client)
        assert api("PUT", "/api/states/tickets", DECL)[0] == 200
        _seed(store, "bob", {"thread": 2})
        _seed(store, "dan", {"person": 1, "thread": 2})
        alone = _everything(api, both)
        assert alone["subjects/2"] == [
            (["bob/thread-0000", "bob/thread-0001"], alone["subjects/2"][0][1]),
            (["dan/person-0000", "dan/thread-0000"], alone["subjects/2"][1][1]),
            (["dan/thread-0001"], None),
        ]
        assert [keys for keys, _ in alone["subjects/person"]] == [["dan/person-0000"]]
        assert [keys for keys, _ in alone["two-members/3"]] == [
            ["bob/thread-0000", "bob/thread-0001", "dan/person-0000"],
            ["dan/thread-0000", "dan/thread-0001"],
        ]
        assert [len(keys) for keys, _ in alone["sorted/1"]] == [1] * 5
        for tenant in ("aaron", "carl", "zed"):
            _seed(store, tenant, {"thread": 600, "person": 600})
        assert _everything(api, both) == alone
