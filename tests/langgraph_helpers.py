"""Fresh stores for the LangGraph adapter tests: one per call, on the backend under test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.conftest import PG_URL, _with_schema

Fresh = Callable[[], str]


@contextmanager
def fresh_locations(backend: str, tmp_path: Path) -> Iterator[Fresh]:
    """A factory of empty store locations of ``backend``'s kind (SQLite files next to it, or
    new PostgreSQL schemas, all dropped afterwards)."""
    schemas: list[str] = []

    def make() -> str:
        if not backend.startswith("postgres"):
            return str(tmp_path / f"{uuid.uuid4().hex[:8]}.db")
        assert PG_URL
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        schemas.append(schema)
        return _with_schema(PG_URL, schema)

    try:
        yield make
    finally:
        if schemas:
            assert PG_URL
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                for schema in schemas:
                    conn.execute(f"DROP SCHEMA {schema} CASCADE")
