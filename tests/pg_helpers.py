"""Reading what the PostgreSQL store sends and takes, for the tests that check it."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

import stateflow.store.postgres as pg
from stateflow.store import DocKey, Document, Write
from stateflow.store.migrations import WRITE_FUNCTIONS


def bytea_elements(data: bytes | None) -> list[bytes | None] | None:
    """A one-dimensional binary ``bytea[]``'s elements (its header, then each element's length
    and bytes, as the server's ``array_recv`` reads them); None for a NULL array."""
    if data is None:
        return None
    (n,) = struct.unpack_from("!i", data, 12)
    out: list[bytes | None] = []
    at = 20
    for _ in range(n):
        (size,) = struct.unpack_from("!i", data, at)
        out.append(None if size < 0 else data[at + 4 : at + 4 + size])
        at += 4 + max(size, 0)
    return out


@contextmanager
def connections_taken(store: Any) -> Iterator[list[int]]:
    """Count the connections a PostgreSQL store takes from its pool: every one is taken by
    ``getconn``, through the pool's context manager or not."""
    taken: list[int] = []
    pool = store._pool
    real = pool.getconn

    def counting(*args: Any, **kwargs: Any) -> Any:
        taken.append(1)
        return real(*args, **kwargs)

    pool.getconn = counting
    try:
        yield taken
    finally:
        pool.getconn = real


def commits_sent(monkeypatch: Any) -> list[Any]:
    """The commits a PostgreSQL store sends alone from now on, as sent (a fast statement's
    ``FastCommit`` or the commit function's parameters)."""
    sent: list[Any] = []
    real = pg._commit_alone

    def recording(conn: Any, params: Any) -> Any:
        sent.append(params)
        return real(conn, params)

    monkeypatch.setattr(pg, "_commit_alone", recording)
    return sent


def set_n(n: int) -> Callable[[dict[DocKey, Document]], tuple[list[Write], None]]:
    """A read-modify-write of one document that sets it to ``{"n": n}``."""

    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        ((key, doc),) = docs.items()
        return [Write.between(key, doc.value, {"n": n}, doc.revision)], None

    return compute


def backends_of(url: str, app: str) -> list[int]:
    """The server processes serving connections named ``app``."""
    with psycopg.connect(url, autocommit=True) as admin:
        query = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        return [r[0] for r in admin.execute(query, (app,)).fetchall()]


def assert_node_rows_read_as_slices(url: str) -> None:
    """Both write functions, as the store at ``url`` defines them, read the node rows as slices,
    and keep the settings they are planned with (``CREATE OR REPLACE`` resets them)."""
    with psycopg.connect(url) as conn:
        for function, config in zip(
            WRITE_FUNCTIONS[:2],  # stateflow_commit, stateflow_write_rows
            (["enable_seqscan=off"], ["enable_seqscan=off", "plan_cache_mode=force_generic_plan"]),
            strict=True,
        ):
            [(text, settings)] = conn.execute(
                "SELECT pg_get_functiondef(oid), proconfig FROM pg_proc WHERE oid = %s::regprocedure",
                (function,),
            ).fetchall()
            assert "node_rows[:][1:1], " in text, function
            assert "node_rows[i]" not in text, function
            assert settings == config, function
