"""A PostgreSQL server older than the schema's functions need is refused by name at migration,
before any statement of the schema runs (not by a syntax error part way through the scripts)."""

from __future__ import annotations

import psycopg
import pytest

from stateflow.errors import StoreError
from stateflow.store import open_store
from stateflow.store import postgres as pg_module
from stateflow.store.migrations import SCHEMA_VERSION


def test_a_server_older_than_the_minimum_is_refused_naming_both_versions_and_nothing_is_migrated(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(pg_schema_url) as conn:
        number = int(conn.execute("SELECT current_setting('server_version_num')").fetchone()[0])  # type: ignore[index]
    # (this server plays an older one: the minimum raised one major version past it)
    monkeypatch.setattr(pg_module, "MIN_SERVER_VERSION", (number // 10000 + 1) * 10000)
    store = open_store(pg_schema_url, auto_migrate=False)
    try:
        with pytest.raises(StoreError) as refused:
            store.migrate()
    finally:
        store.close()
    message = str(refused.value)
    assert f"runs PostgreSQL {number // 10000}.{number % 10000}" in message
    assert f"needs PostgreSQL {number // 10000 + 1} or later" in message
    assert "nothing was migrated" in message
    with psycopg.connect(pg_schema_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").fetchone()
    assert tables == (0,)
    # the same server at its real minimum migrates
    monkeypatch.setattr(pg_module, "MIN_SERVER_VERSION", 140000)
    store = open_store(pg_schema_url, auto_migrate=False)
    try:
        store.migrate()
        assert store.schema_version() == SCHEMA_VERSION
    finally:
        store.close()
