"""A key that is not a DocKey is refused invalid-input naming the call, the same on every
backend, before any SQL (not a damaged file, not a raw SQL error)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stateflow.errors import InvalidInput
from stateflow.store import DocKey, SqlStore, Write

KEY = DocKey("keys", "x")

CALLS: list[tuple[str, Callable[[Any], Any], str]] = [  # (a store typed Any: wrong on purpose)
    ("get", lambda s: s.get("keys/x"), "get: a key is a DocKey(state, subject), got str 'keys/x'"),
    ("read", lambda s: s.read(["keys/x"]), "read: a key is a DocKey(state, subject), got str"),
    ("read tuple", lambda s: s.read([("keys", "x")]), "read: a key is a DocKey(state, subject), got tuple"),
    ("read one key", lambda s: s.read(KEY), "read takes a list of DocKey, got one DocKey"),
    ("history one key", lambda s: s.history(KEY), "history takes a list of DocKey, got one DocKey"),
    ("history str", lambda s: s.history(["keys/x"]), "history: a key is a DocKey(state, subject), got str"),
    ("read_at", lambda s: s.read_at("keys/x", revision=1), "read_at: a key is a DocKey(state, subject)"),
]


@pytest.mark.parametrize(("name", "call", "message"), CALLS, ids=[c[0] for c in CALLS])
def test_a_key_that_is_not_a_doc_key_is_invalid_input(
    store: SqlStore, name: str, call: Callable[[SqlStore], Any], message: str
) -> None:
    store.commit([Write.between(KEY, None, {"n": 1}, expect=None)])
    with pytest.raises(InvalidInput) as refused:
        call(store)
    assert refused.value.code == "invalid-input"
    assert message in str(refused.value)
    assert store.get(KEY).body == {"n": 1}  # (and the store goes on)


@pytest.mark.parametrize("limit", [-1, "3", 2.0, True, None])
def test_a_listing_limit_that_is_not_a_count_is_invalid_input(store: SqlStore, limit: Any) -> None:
    store.commit([Write.between(DocKey("keys", f"d{i}"), None, {"n": i}, expect=None) for i in range(3)])
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("scan", lambda: store.scan("keys", limit=limit)),
        ("search", lambda: store.search("keys", {"n": 1}, limit=limit)),
    ]
    for name, call in calls:
        with pytest.raises(InvalidInput) as refused:
            call()
        assert f"{name}: limit must be a whole number of documents (0 or more), got {limit!r}" in str(
            refused.value
        )
    assert store.scan("keys", limit=0) == []
    assert [item.key.subject for item in store.scan("keys", limit=2**70)] == ["d0", "d1", "d2"]
