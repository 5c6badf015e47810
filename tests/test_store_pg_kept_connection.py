"""PostgreSQL: commits sent alone keep one connection of the pool instead of taking one and
giving it back on every commit — a broken one given back and replaced, the pool's bound kept,
the kept one given back when the store closes."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
import pytest

from stateflow.store import DocKey, Write, open_store, postgres
from stateflow.store.postgres import PostgresStore
from tests.pg_helpers import backends_of, connections_taken, set_n

KEY = DocKey("k", "doc")


@pytest.fixture
def app() -> str:
    return f"kept-{uuid.uuid4().hex[:8]}"


def _opened(url: str, app: str, **options: Any) -> PostgresStore:
    store = PostgresStore(f"{url}&application_name={app}", auto_migrate=True, **options)
    store.commit([Write.between(KEY, None, {"n": 0})])
    for n in (-1, 0):  # known here: the next writes are optimistic, sent alone
        store.update([KEY], set_n(n), optimistic=True)
    return store


def test_a_lone_callers_commits_keep_one_connection(
    pg_schema_url: str, app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "KEPT_FOR", 60.0)  # (no hand-back within the test)
    store = _opened(pg_schema_url, app)
    other = open_store(pg_schema_url)
    try:
        with connections_taken(store) as taken:
            for n in range(1, 21):
                store.update([KEY], set_n(n), optimistic=True)
        assert taken == []  # the connection kept since the warm-up's commit: none taken
        doc = other.get(KEY)
        assert doc.body == {"n": 20} and doc.revision == 23
        assert [c.revision for c in other.history([KEY])][:3] == [23, 22, 21]
        # a pool too small to keep one from the others lends one per commit, as before
        small = _opened(pg_schema_url, f"{app}-small", max_size=2)
        try:
            with connections_taken(small) as taken:
                for n in range(30, 33):
                    small.update([KEY], set_n(n), optimistic=True)
            assert len(taken) == 3
        finally:
            small.close()
    finally:
        store.close()
        other.close()


def test_the_kept_connection_goes_back_to_the_pool_every_so_often(
    pg_schema_url: str, app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "KEPT_FOR", 0.0)  # given back at every commit
    store = _opened(pg_schema_url, app)
    try:
        with connections_taken(store) as taken:
            for n in range(1, 4):
                store.update([KEY], set_n(n), optimistic=True)
        assert len(taken) == 3  # each commit gave the kept one back (the pool's checks) and took one
        assert store.get(KEY).body == {"n": 3}
    finally:
        store.close()


def test_a_broken_kept_connection_is_given_back_and_replaced(
    pg_schema_url: str, app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "KEPT_FOR", 60.0)
    store = _opened(pg_schema_url, app, max_size=3)
    other = open_store(pg_schema_url)
    try:
        kept = store._kept
        assert kept is not None
        pid = kept.info.backend_pid
        with psycopg.connect(pg_schema_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 60
        while pid in backends_of(pg_schema_url, app) and time.monotonic() < deadline:
            time.sleep(0.05)  # (the backend ends a moment after it is told to)
        # seen ended before anything is sent on it: given back (closed, the pool opens another)
        # and the commit sent on a fresh connection
        store.update([KEY], set_n(1), optimistic=True)
        assert kept.closed
        assert other.get(KEY).body == {"n": 1} and other.get(KEY).revision == 4
        for n in range(2, 5):
            store.update([KEY], set_n(n), optimistic=True)
        assert other.get(KEY).body == {"n": 4} and other.get(KEY).revision == 7
        assert store._kept is not None and store._kept is not kept
        assert len(backends_of(pg_schema_url, app)) <= 3  # the pool's bound holds
    finally:
        store.close()
        other.close()


def test_closing_the_store_closes_its_kept_connection(pg_schema_url: str, app: str) -> None:
    store = _opened(pg_schema_url, app)
    store.update([KEY], set_n(1), optimistic=True)
    assert store._kept is not None
    store.close()
    deadline = time.monotonic() + 60
    while backends_of(pg_schema_url, app) and time.monotonic() < deadline:
        time.sleep(0.05)  # (a backend ends a moment after its client closes)
    assert backends_of(pg_schema_url, app) == []
