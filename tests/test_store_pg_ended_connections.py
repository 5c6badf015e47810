"""PostgreSQL: connections the server ended while they sat idle in the pool (a restart, a
failover, an idle-session timeout, ``pg_terminate_backend``) are not lent again — the next reads
and writes go through on fresh ones instead of failing with ``store-unavailable`` one per dead
connection — for the sync store and the async one."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import psycopg
import pytest

from stateflow.store import DocKey, Write
from stateflow.store.async_bridge import spawn
from stateflow.store.postgres import PostgresStore
from stateflow.store.postgres_async import AsyncPostgresStore
from tests.pg_helpers import backends_of, set_n

KEY = DocKey("k", "doc")


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "PostgreSQL did not get there within 60 s"
        time.sleep(0.05)  # (the pool opens, and a backend ends, a moment after it is asked to)


def _end_every_connection(url: str, app: str, at_least: int) -> None:
    """What a restart does to the store's connections, while PostgreSQL itself stays up."""
    _until(lambda: len(backends_of(url, app)) >= at_least)
    pids = backends_of(url, app)
    with psycopg.connect(url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    _until(lambda: not set(pids) & set(backends_of(url, app)))


@pytest.fixture
def app() -> str:
    return f"ended-{uuid.uuid4().hex[:8]}"


def test_reads_and_writes_after_the_server_ended_the_pooled_connections(pg_schema_url: str, app: str) -> None:
    url = f"{pg_schema_url}&application_name={app}"
    store = PostgresStore(url, auto_migrate=True, min_size=3, max_size=4)
    try:
        store.commit([Write.between(KEY, None, {"n": 0})])
        _end_every_connection(pg_schema_url, app, at_least=3)
        for _ in range(5):  # more calls than the pool held connections
            assert store.get(KEY).body == {"n": 0}
            assert [c.revision for c in store.history([KEY])] == [1]
        _end_every_connection(pg_schema_url, app, at_least=1)
        for n in range(1, 4):  # a commit sent alone, on the connection kept for them
            store.update([KEY], set_n(n), optimistic=True)
        _end_every_connection(pg_schema_url, app, at_least=1)
        store.update([KEY], set_n(4), optimistic=True)  # the kept one ended too
        assert store.get(KEY).body == {"n": 4} and store.get(KEY).revision == 5
        assert len(backends_of(pg_schema_url, app)) <= 4  # the pool's bound holds
    finally:
        store.close()


def test_the_async_store_skips_ended_connections_too(pg_schema_url: str, app: str) -> None:
    url = f"{pg_schema_url}&application_name={app}"

    async def main() -> None:
        store = await AsyncPostgresStore.connect(url, auto_migrate=True, min_size=3, max_size=4)
        try:
            await spawn(store.commit, [Write.between(KEY, None, {"n": 0})])
            await asyncio.to_thread(_end_every_connection, pg_schema_url, app, 3)
            for _ in range(5):
                assert (await spawn(store.get, KEY)).body == {"n": 0}
            await spawn(store.update, [KEY], set_n(1))
            assert (await spawn(store.get, KEY)).revision == 2
        finally:
            await spawn(store.close)

    asyncio.run(main())
