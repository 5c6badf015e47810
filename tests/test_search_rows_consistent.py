"""A search's rows hold together while other connections write: each match is its record as it
was at one moment — its ``data`` satisfies the filter, its ``revision`` is that data's, a sorted
page is in the order of the values it shows, and an erased record is not listed.

The search's candidates and its matches' documents are two reads. Here another store handle
(its own connections, as another process) commits a write before every statement the searching
store sends — through the database drivers' own statement hooks (SQLite's trace callback,
psycopg's ``Connection.execute``), nothing of ours replaced — so a write always lands between the
two reads, deterministically, with no timing involved."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stateflow.states import StatesService
from stateflow.store import SqlStore, open_store
from stateflow.store.sqlite import SqliteStore
from tests.conftest import WHOLE_FORM, store_location

STATE = "tickets"
DECL = {
    "schema": {"type": "object", "properties": {"flag": {"type": "boolean"}}},
    "subject_kinds": ["k"],
    "default_subject_kind": "k",
}


def subject(key: str) -> dict[str, str]:
    return {"target_kind": "agent", "target_name": "a", "kind": "k", "key": key}


class Flipper:
    """Each call commits one more round of writes through its own store: ``x`` and ``y`` swap
    their ``flag`` (one of them matches ``{"flag": true}`` at any moment), ``z`` keeps matching
    but moves between ``n`` 1 and 9 (around ``s``'s 5, which never changes), ``e1`` and ``e2``
    swap being erased. Every document holds its own revision as ``r``."""

    def __init__(self, service: StatesService) -> None:
        self.service = service
        self.revisions: dict[str, int] = {}
        self.rounds = 0

    def put(self, key: str, body: dict[str, Any]) -> None:
        revision = self.revisions.get(key, 0) + 1
        written = self.service.replace(STATE, subject(key), {**body, "r": revision})
        assert written is not None and written["revision"] == revision
        self.revisions[key] = revision

    def erase(self, key: str) -> None:
        self.service.erase(STATE, subject(key))
        self.revisions[key] += 1

    def seed(self) -> None:
        self.put("s", {"flag": True, "n": 5})
        self.put("x", {"flag": True, "n": 3})
        self.put("y", {"flag": False, "n": 7})
        self.put("z", {"flag": True, "n": 1})
        self.put("e1", {"flag": True, "n": 2})
        self.put("e2", {"flag": True, "n": 8})
        self.erase("e2")

    def __call__(self) -> None:
        self.rounds += 1
        odd = self.rounds % 2 == 1
        self.put("x", {"flag": not odd, "n": 3})
        self.put("y", {"flag": odd, "n": 7})
        self.put("z", {"flag": True, "n": 9 if odd else 1})
        self.erase("e1" if odd else "e2")
        self.put("e2" if odd else "e1", {"flag": True, "n": 8 if odd else 2})


@contextmanager
def before_each_statement(store: SqlStore, write: Callable[[], None]) -> Iterator[list[BaseException]]:
    """``write()`` before each SELECT ``store`` sends from this thread (not those ``write``
    itself sends); the errors it raised are yielded (a SQLite trace callback's are swallowed)."""
    errors: list[BaseException] = []
    busy = False
    me = threading.get_ident()

    def hook(sql: Any) -> None:
        nonlocal busy
        if busy or threading.get_ident() != me or not str(sql).lstrip().upper().startswith("SELECT"):
            return
        busy = True
        try:
            write()
        except BaseException as exc:  # (re-raised by the caller)
            errors.append(exc)
        finally:
            busy = False

    if isinstance(store, SqliteStore):
        traced = list(store._all)  # this thread's reader is open: the search reads through it
        for conn in traced:
            conn.set_trace_callback(hook)
        try:
            yield errors
        finally:
            for conn in traced:
                conn.set_trace_callback(None)
        return
    original = psycopg.Connection.execute

    def execute(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        hook(query)
        return original(self, query, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(psycopg.Connection, "execute", execute)
        yield errors


def test_each_match_is_its_record_at_one_moment_while_writes_land_between_reads(backend: str) -> None:
    reading = open_store(backend, auto_migrate=True)
    writing = open_store(backend)
    try:
        service = StatesService(reading)
        service.declare(STATE, DECL)
        flip = Flipper(StatesService(writing))
        flip.seed()
        service.search(STATE, {"flag": True})  # (this thread's connection is open)
        cases: list[tuple[dict[str, Any], list[dict[str, str | list[str]]] | None]] = [
            ({"flag": True}, None),
            ({"flag": True}, [{"path": ["n"]}]),
            ({"flag": {"$eq": True}, "q": {"$exists": False}}, None),
            ({"q": {"$exists": False}}, [{"path": ["n"], "order": "desc"}]),
        ]
        for filters, sort in cases:
            for include_data in (True, False):
                before = flip.rounds
                with before_each_statement(reading, flip) as errors:
                    page = service.search(STATE, filters, sort=sort, include_data=include_data)
                assert not errors, errors
                assert flip.rounds - before >= 2  # (writes landed before the candidates and after)
                keys = [m["subject"]["key"] for m in page["matches"]]
                assert "s" in keys, (filters, sort, page)
                if not include_data:
                    continue
                for m in page["matches"]:
                    data = m["data"]
                    assert data is not None, m  # (an erased record is not listed)
                    assert data["r"] == m["revision"], m  # (its data is its revision's)
                    if "flag" in filters:
                        assert data["flag"] is True, m
                if sort is not None:
                    shown = [(m.get("data") or {})["n"] for m in page["matches"]]
                    assert shown == sorted(shown, reverse="order" in sort[0]), page
        # every row kept is also its record as it is once the writes stop
        page = service.search(STATE, {"flag": True}, include_data=True)
        for m in page["matches"]:
            now = service.read(STATE, m["subject"])
            assert now is not None and (now["revision"], now["data"]) == (m["revision"], m["data"])
    finally:
        writing.close()
        reading.close()


@pytest.fixture(params=["sqlite", WHOLE_FORM, "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each backend, and SQLite with this module's states in whole form."""
    return store_location(request, tmp_path, (STATE,))
