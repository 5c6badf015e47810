"""Maintained counters and the value index: ``stats`` reads counters kept in step with every
write path (records, erase, fold, retention, delete, purge, load), ``stateflow check`` compares
them with the rows, and a search for a rare value starts from the members holding it — with the
same answers as a walk over the state, on both backends."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stateflow.states import StatesService
from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.store.check import check_store
from stateflow.store.listing import PROBE
from stateflow.store.portable import dump, load
from stateflow.subjects import encode_subject
from tests.conftest import WHOLE_FORM, store_location

DECL: dict[str, Any] = {
    "schema": {
        "type": "object",
        "properties": {"status": {}, "n": {}, "owner": {"type": "string"}, "extra": {}},
    },
    "subject_kinds": ["thread", "user"],
    "default_subject_kind": "thread",
}


def subj(kind: str, key: str) -> dict[str, str]:
    return {"target_kind": "agent", "target_name": "a", "kind": kind, "key": key}


def counted(store: SqlStore) -> dict[tuple[str, str, str], int]:
    """The stored counters, after asserting they equal a count of the rows."""
    with store._read_tx() as tx:
        stored, rows = store.recount(tx)
    assert stored == rows
    return stored


@pytest.fixture
def service(store: SqlStore) -> StatesService:
    service = StatesService(store)
    service.install_builtins()
    service.declare("tickets", DECL)
    service.declare("other", DECL)
    return service


def test_stats_follow_every_write_path(service: StatesService, store: SqlStore, tmp_path: Path) -> None:
    for i in range(6):
        kind = "user" if i % 3 == 0 else "thread"
        service.replace("tickets", subj(kind, f"k{i}"), {"status": "open", "n": i})
    service.merge("tickets", subj("thread", "k1"), {"owner": "o"})
    service.replace("other", subj("thread", "x"), {"status": "open"})
    assert service.stats("tickets") == {
        "records": 6,
        "per_field": {"status": 6, "n": 6, "owner": 1, "extra": 0},
        "per_kind": {"thread": 4, "user": 2},
        "consumers": 0,
    }
    counted(store)

    # a member removed, a record erased, one folded into another (merge deletes the source)
    service.replace("tickets", subj("thread", "k1"), {"status": "open"})
    service.erase("tickets", subj("user", "k0"))
    service.fold("tickets", subj("thread", "k2"), subj("thread", "k4"), "merge")
    stats = service.stats("tickets")
    assert (stats["records"], stats["per_kind"], stats["per_field"]["owner"]) == (
        4,
        {"thread": 3, "user": 1},
        0,
    )
    assert stats["per_field"]["n"] == 3  # k1 lost n, k0 and k2 are gone
    counted(store)

    # retention erases what expired; the other state keeps its counts
    service.declare("tickets", dict(DECL, retention_days=1))
    service.prune(now=datetime.now(UTC) + timedelta(days=3))
    assert service.stats("tickets")["records"] == 0
    assert service.stats("other")["records"] == 1  # no retention_days there: kept
    counted(store)


def test_delete_purge_and_load_keep_counters_exact(
    service: StatesService, store: SqlStore, tmp_path: Path
) -> None:
    for i in range(30):
        service.replace("tickets", subj("thread", f"k{i}"), {"status": "open", "n": i})
        service.replace("other", subj("user", f"k{i}"), {"status": "closed"})
    lines = list(dump(store, history=False))
    service.delete_declaration("tickets")
    assert counted(store).get(("tickets", "kind", "thread"), 0) == 0
    assert service.stats("other")["per_kind"] == {"thread": 0, "user": 30}

    target = open_store(str(tmp_path / "loaded.db"), auto_migrate=True)
    try:
        load(target, lines)
        loaded = StatesService(target)
        assert loaded.stats("tickets")["records"] == 30
        assert loaded.stats("tickets")["per_field"]["n"] == 30
        assert loaded.stats("other")["per_kind"] == {"thread": 0, "user": 30}
        assert check_store(target).ok
    finally:
        target.close()
    assert check_store(store).ok


def _sql(backend: str, statement: str) -> None:
    if backend.startswith("postgresql://"):
        with psycopg.connect(backend, autocommit=True) as pg:
            pg.execute(statement)
    else:
        with sqlite3.connect(backend) as lite:
            lite.execute(statement)


def test_check_names_a_counter_that_drifted(backend: str, service: StatesService) -> None:
    service.replace("tickets", subj("thread", "k"), {"status": "open"})
    ok = subprocess.run(
        ["stateflow", "check", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, STATEFLOW_STORE=backend),
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["checked"]["counters"] > 0
    # (2 more nobody wrote: a counter is its row plus its unfolded deltas, on both backends — a
    # PostgreSQL store's in ``count_deltas``, a SQLite store's in its transitions — until a fold)
    _sql(
        backend,
        "INSERT INTO state_counts (state, counter, name, n) VALUES ('tickets', 'kind', 'thread', 2) "
        "ON CONFLICT (state, counter, name) DO UPDATE SET n = state_counts.n + 2",
    )
    out = subprocess.run(
        ["stateflow", "check", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, STATEFLOW_STORE=backend),
    )
    assert out.returncode != 0
    problems = json.loads(out.stdout)["problems"]
    assert problems == ["counters: state 'tickets' kind 'thread' is counted 3, the rows hold 1"]


def _walk(service: StatesService, state: str, filters: dict[str, Any]) -> list[str]:
    """Every match by following cursors, as subject keys."""
    keys: list[str] = []
    cursor = None
    while True:
        page = service.search(state, filters, limit=7, cursor=cursor)
        keys.extend(m["subject"]["key"] for m in page["matches"])
        cursor = page["next_cursor"]
        if cursor is None:
            return keys


def test_a_search_from_the_value_index_answers_as_a_walk_does(service: StatesService) -> None:
    rows = []
    for i in range(60):
        status = "rare" if i % 20 == 3 else "open"
        n: Any = 7 if i == 11 else (7.0 if i == 12 else ("7" if i == 13 else i + 100))
        rows.append((f"k{i:03d}", {"status": status, "n": n, "owner": f"o{i % 4}"}))
    rows.append(("kbool", {"status": True, "n": 1}))
    rows.append(("knested", {"status": ["rare"], "n": {"x": 7}}))
    for key, body in rows:
        service.replace("tickets", subj("thread", key), body)
    service.replace("other", subj("thread", "k003"), {"status": "rare"})  # the same value elsewhere

    assert _walk(service, "tickets", {"status": "rare"}) == ["k003", "k023", "k043"]
    assert _walk(service, "tickets", {"status": "rare", "owner": "o3"}) == ["k003", "k023", "k043"]
    assert _walk(service, "tickets", {"status": "rare", "owner": "o1"}) == []
    assert _walk(service, "tickets", {"n": 7}) == ["k011", "k012"]  # numbers by value
    assert _walk(service, "tickets", {"n": "7"}) == ["k013"]  # a string is not a number
    assert _walk(service, "tickets", {"status": 1}) == []  # true is not 1
    assert _walk(service, "tickets", {"n": 1}) == ["kbool"]
    assert _walk(service, "tickets", {"status": True}) == ["kbool"]
    assert _walk(service, "tickets", {"status": "open"}) == [k for k, b in rows if b["status"] == "open"]
    assert _walk(service, "tickets", {"status": "none-such"}) == []
    assert _walk(service, "other", {"status": "rare"}) == ["k003"]


def test_a_value_held_by_many_members_is_found_by_walking(service: StatesService, store: SqlStore) -> None:
    """At PROBE members or more the index is not used; the answers are the same."""
    keys = [DocKey("tickets", encode_subject("agent", "a", "thread", f"k{i:05d}")) for i in range(PROBE + 5)]
    for start in range(0, len(keys), 400):
        store.commit([Write.between(k, None, {"status": "common"}, 0) for k in keys[start : start + 400]])
    page = service.search("tickets", {"status": "common"}, limit=3)
    assert [m["subject"]["key"] for m in page["matches"]] == ["k00000", "k00001", "k00002"]
    assert service.stats("tickets")["records"] == PROBE + 5


def test_a_states_counters_read_together_as_each_alone(service: StatesService, store: SqlStore) -> None:
    service.replace("tickets", subj("thread", "a"), {"status": "open", "n": 1})
    service.replace("tickets", subj("user", "b"), {"status": "open"})
    other = DocKey("tickets", "not an encoded subject")
    store.commit([Write.between(other, None, {"status": "x"}, 0)])
    both = store.counts("tickets")
    assert both.members == store.member_counts("tickets") == {"status": 3, "n": 1}
    assert both.kinds == store.kind_counts("tickets") == {"thread": 1, "user": 1, None: 1}
    stats = service.stats("tickets")  # (a subject that is not an encoded one counts as no kind)
    assert stats["records"] == 2 and stats["per_kind"] == {"thread": 1, "user": 1}
    assert stats["per_field"] == {"status": 3, "n": 1, "owner": 0, "extra": 0}


@pytest.fixture(params=["sqlite", WHOLE_FORM, "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each backend, and SQLite with this module's states in whole form."""
    return store_location(request, tmp_path, ("tickets", "other"))


def test_stats_count_the_members_an_attached_template_adds(service: StatesService) -> None:
    """``per_field`` counts the records holding each top-level member of the schema writes are
    checked against — an attached template's fragment among them, which it left out (the base
    schema's members only)."""
    service.put_template(
        "counter",
        {
            "description": "a counter",
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "template_jq": {},
        },
    )
    service.attach("tickets", "counter", {"path": ["ctr"]})
    service.apply("tickets", subj("thread", "t1"), [{"op": "set", "path": ["ctr", "n"], "value": 1}])
    service.apply("tickets", subj("thread", "t2"), [{"op": "set", "path": ["status"], "value": "open"}])
    stats = service.stats("tickets")
    assert stats["per_field"] == {"status": 1, "n": 0, "owner": 0, "extra": 0, "ctr": 1}
