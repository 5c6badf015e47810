"""PostgreSQL: a commit sent alone goes to the server by libpq's one blocking call — no psycopg
wait loop per commit — and, waiting there for the server, lets the process's other threads run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from stateflow.store import DocKey, Document, Write, open_store, postgres
from stateflow.store.postgres import PostgresStore

KEY = DocKey("k", "doc")


def _set(n: int) -> Callable[[dict[DocKey, Document]], tuple[list[Write], None]]:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        ((key, doc),) = docs.items()
        return [Write.between(key, doc.value, {"n": n}, doc.revision)], None

    return compute


def _opened(url: str) -> PostgresStore:
    store = PostgresStore(url, auto_migrate=True)
    store.commit([Write.between(KEY, None, {"n": 0})])
    for n in (-1, 0):  # known here: the next writes are optimistic, sent alone
        store.update([KEY], _set(n), optimistic=True)
    return store


def test_commits_alone_land_without_psycopgs_wait_loop(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "KEPT_FOR", 60.0)  # (the kept connection's hand-back: not now)
    store = _opened(pg_schema_url)
    other = open_store(pg_schema_url)
    waits: list[int] = []
    real = psycopg.Connection.wait

    def counting(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        waits.append(1)
        return real(self, *args, **kwargs)

    try:
        monkeypatch.setattr(psycopg.Connection, "wait", counting)
        for n in range(1, 21):
            store.update([KEY], _set(n), optimistic=True)
        monkeypatch.setattr(psycopg.Connection, "wait", real)
        assert waits == []  # (one per commit through psycopg's generators)
        doc = other.get(KEY)
        assert doc.body == {"n": 20} and doc.revision == 23
        assert [c.revision for c in other.history([KEY])][:3] == [23, 22, 21]
    finally:
        store.close()
        other.close()


def test_a_commit_alone_waiting_on_the_server_lets_other_threads_run(pg_schema_url: str) -> None:
    # Another session holds the document's row locked: the commit's statement waits for it in
    # the server. Meanwhile this thread runs (the wait holds no GIL); once the row is let go the
    # commit lands, once.
    store = _opened(pg_schema_url)
    done: list[BaseException | None] = []

    def write() -> None:
        try:
            store.update([KEY], _set(7), optimistic=True)
            done.append(None)
        except BaseException as exc:  # (reported below, on the test's thread)
            done.append(exc)

    try:
        with psycopg.connect(pg_schema_url) as holder:
            holder.execute("SELECT 1 FROM documents WHERE subject = %s FOR UPDATE", (KEY.subject,))
            writer = threading.Thread(target=write)
            writer.start()
            spins = 0
            until = time.monotonic() + 0.5
            while time.monotonic() < until:
                spins += 1
            assert done == []  # still waiting for the row
            assert spins > 1_000
            holder.rollback()
            writer.join(30)
        assert done == [None]
        doc = store.get(KEY)
        assert doc.body == {"n": 7} and doc.revision == 4
    finally:
        store.close()
