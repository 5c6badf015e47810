"""The commit's time taken once for both uses: the clock's text it answers and the value a
SQLite transition stores (``clock.utc_now_stored``), which must be the text's own microseconds."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from stateflow.langgraph import StateflowStore
from stateflow.states import StatesService
from stateflow.store import open_store
from stateflow.store.clock import micros_of, restoring_time, time_text, utc_now, utc_now_stored


def test_the_stored_value_is_the_texts_own_microseconds() -> None:
    for _ in range(2_000):  # (across a second's edge now and then: the text's prefix is cached)
        text, stored = utc_now_stored()
        assert isinstance(stored, int)
        assert micros_of(text) == stored
        assert time_text(stored) == text
        assert len(text) == 27 and text <= utc_now()


def test_a_restored_time_is_stored_as_the_restored_text_says() -> None:
    with restoring_time("2020-01-01T00:00:00.000042Z"):
        assert utc_now_stored() == ("2020-01-01T00:00:00.000042Z", micros_of("2020-01-01T00:00:00.000042Z"))
    with restoring_time("2020-01-01 odd"):  # (a text of another shape is stored as it is)
        assert utc_now_stored() == ("2020-01-01 odd", "2020-01-01 odd")


def test_an_optimistic_commit_stores_the_time_it_answers(tmp_path: Path) -> None:
    service = StatesService(open_store(f"sqlite:///{tmp_path / 's.db'}"))
    try:
        items = StateflowStore(service)
        for n in range(3):  # (created, then rewritten: the whole form's optimistic commits)
            items.put(("notes",), "n-1", {"a": n})
        with restoring_time("2021-06-01T12:00:00.123456Z"):
            items.put(("notes",), "n-1", {"a": 3})
    finally:
        service.close()
        service.store.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        rows = conn.execute("SELECT at FROM transitions ORDER BY seq").fetchall()
    finally:
        conn.close()
    assert all(isinstance(at, int) for (at,) in rows)
    assert time_text(rows[-1][0]) == "2021-06-01T12:00:00.123456Z"
