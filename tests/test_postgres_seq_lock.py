"""Stores in different schemas of one PostgreSQL database do not queue behind each other's
commits: the lock that puts a store's transitions in commit order is keyed by the schema."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from stateflow.store import DocKey, Write, open_store
from stateflow.store.postgres import _SEQ_LOCK, _SEQ_LOCK_KEY

from .conftest import PG_URL, _with_schema, fresh_pg_schemas

pytestmark = pytest.mark.skipif(not PG_URL, reason="PostgreSQL not configured")
URL = PG_URL or ""


@pytest.fixture
def two_schemas() -> Iterator[tuple[str, str]]:
    with fresh_pg_schemas(2) as names:
        yield names[0], names[1]


def _write(url: str, key: DocKey, value: int) -> None:
    store = open_store(url, auto_migrate=True)
    try:
        store.commit([Write.between(key, None, {"n": value}, 0)], {"door": "test"})
    finally:
        store.close()


def test_a_held_seq_lock_queues_its_own_store_only(two_schemas: tuple[str, str]) -> None:
    busy, free = (_with_schema(URL, name) for name in two_schemas)
    for url in (busy, free):
        open_store(url, auto_migrate=True).close()
    key = DocKey("notes", "agent/a")
    holder = psycopg.connect(busy)
    try:
        # a writer of the busy store that has taken the lock and not yet committed
        holder.execute(f"SELECT pg_advisory_xact_lock({_SEQ_LOCK_KEY.replace('?', '%s')})", (_SEQ_LOCK,))
        queued = threading.Thread(target=_write, args=(busy, key, 1), daemon=True)
        queued.start()
        queued.join(1.5)
        assert queued.is_alive(), "the busy store's writer must wait for the lock its store holds"
        # the other store commits at once (it waited here before the lock was keyed by schema)
        done = threading.Thread(target=_write, args=(free, key, 2), daemon=True)
        done.start()
        done.join(60)  # (one that waits for the busy store's lock waits until the rollback)
        assert not done.is_alive(), "a store in another schema waited for the busy store's lock"
    finally:
        holder.rollback()
        holder.close()
    queued.join(60)
    assert not queued.is_alive()
    for url, value in ((busy, 1), (free, 2)):
        store = open_store(url)
        try:
            assert store.read([key])[key].body == {"n": value}
        finally:
            store.close()
