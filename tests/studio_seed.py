"""A small, realistic store for the studio tests and screenshots: a declared state with a
schema, a template with jq programs, records with several revisions from different doors, and
an agent's memory with hot and lazy planes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stateflow.memory import Identity, MemoryConfig, MemoryView
from stateflow.states import DoorContext, StatesService
from stateflow.store import SqlStore, open_store

from .conftest import PG_URL
from .conftest import _with_schema as with_schema

CHECKLIST: dict[str, Any] = {
    "description": "A list of items, written only by keyed ops",
    "parameters": {"limit": {"schema": {"type": "integer"}, "default": 20}},
    "schema": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "maxItems": {"$parameter": "limit"},
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "done": {"type": "boolean"}},
                },
            }
        },
    },
    "regimes": [{"path": ["items"], "regime": "composing"}],
    "template_jq": {
        "open": {"purpose": "input", "jq": {"content": "[.items[]? | select(.done | not) | .id]"}},
        "add": {
            "purpose": "update",
            "params": ["id"],
            "jq": {
                "content": '[{"op": "set_by_key", "path": ["items"], "key_field": "id", '
                '"value": [{"id": $input.id, "done": false}]}]'
            },
        },
    },
}

TICKETS: dict[str, Any] = {
    "description": "Support tickets the triage agent works on, one record per ticket",
    "schema": {
        "type": "object",
        "required": ["title", "status"],
        "properties": {
            "title": {"type": "string", "minLength": 1},
            "status": {"enum": ["open", "pending", "closed"]},
            "priority": {"type": "integer", "minimum": 1, "maximum": 4},
            "tags": {"type": "array", "items": {"type": "string"}},
            "customer": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "plan": {"type": "string"}},
            },
        },
    },
    "subject_kinds": ["ticket", "thread"],
    "default_subject_kind": "ticket",
    "retention_days": 365,
}


def ticket(key: str, target: str = "triage") -> dict[str, str]:
    return {"target_kind": "agent", "target_name": target, "kind": "ticket", "key": key}


def seed(store: SqlStore) -> StatesService:
    """Fill ``store``; returns the service (close it when done)."""
    states = StatesService(store)
    states.install_builtins()
    operator = DoorContext(door="operator", actor="alice")
    states.put_template("checklist", CHECKLIST, context=operator)
    states.declare("tickets", TICKETS, context=operator)
    states.attach("tickets", "checklist", {"path": ["todo"], "parameters": {"limit": 10}}, context=operator)
    states.declare(
        "profiles",
        {
            "description": "What each customer prefers",
            "schema": {"type": "object", "properties": {"tone": {"type": "string"}}},
            "subject_kinds": ["customer"],
            "default_subject_kind": "customer",
        },
        context=operator,
    )
    api = DoorContext(door="api", actor="token:3f9c2a1b7d40")
    tool = DoorContext(door="tool", actor="triage", turn_id="turn-41")
    for n in range(1, 13):
        key = f"T-{1000 + n}"
        status = ("open", "pending", "closed")[n % 3]
        states.replace(
            "tickets",
            ticket(key),
            {
                "title": f"Customer cannot export report #{n}",
                "status": "open",
                "priority": 1 + n % 4,
                "customer": {"name": f"Acme {n}", "plan": "team"},
            },
            origin={"consumer": "helpdesk-sync", "op_id": f"sync-{key}"},
            context=api,
        )
        if status != "open":
            states.merge("tickets", ticket(key), {"status": status}, context=tool)
    states.replace(
        "tickets",
        ticket("T-1000", target="billing"),
        {"title": "Invoice shows the wrong VAT", "status": "open", "priority": 2},
        context=api,
    )
    main = ticket("T-1001")
    states.merge("tickets", main, {"tags": ["export", "csv"]}, context=tool)
    states.template_jq_update(
        "tickets", main, "add", {"id": "reproduce"}, op_id="add-reproduce", context=tool
    )
    states.template_jq_update("tickets", main, "add", {"id": "reply"}, context=tool)
    states.merge(
        "tickets", main, {"priority": 1, "status": "pending"}, origin={"run_id": "run-7"}, context=tool
    )
    for i in range(30):  # a timeline longer than one page
        states.merge("tickets", ticket("T-1012"), {"priority": 2 + i % 3}, context=tool)
    for name in ("acme-1", "acme-2"):
        states.replace(
            "profiles",
            {"target_kind": "agent", "target_name": "triage", "kind": "customer", "key": name},
            {"tone": "formal"},
            context=api,
        )

    memory = MemoryView(store, Identity("triage", "/srv/helpdesk", "s-2041"), config=MemoryConfig())
    memory.patch_state(
        {
            "global": {"strategy": {"voice": "concise, friendly"}},
            "cwd": {"strategy": {"repo": "helpdesk", "language": "python"}},
            "session": {
                "intents": {"resolve": {"goal": "resolve T-1001", "plan": {"$ref": "session.lazy.plan"}}},
                "tactics": {"next": "reproduce the export bug"},
                "lazy": {
                    "plan": ["reproduce", "patch exporter", "reply to customer"],
                    "notes": {f"note-{i}": {"text": f"observation {i}", "seen": i} for i in range(40)},
                    "log": [f"step {i}" for i in range(300)],
                },
            },
        }
    )
    memory.patch_state({"session": {"tactics": {"next": "patch the exporter"}}})
    memory.patch_state({"session": {"lazy": {"plan": {"[0]": "reproduced on 2.3"}}}})
    MemoryView(store, Identity("triage", "/srv/helpdesk", "s-2042"), config=MemoryConfig()).patch_state(
        {"session": {"tactics": {"next": "triage new tickets"}}}
    )
    MemoryView(store, Identity("docs-writer", "/srv/docs", "d-1"), config=MemoryConfig()).patch_state(
        {"global": {"strategy": {"style": "plain English"}}}
    )
    return states


@contextmanager
def seeded_store(backend: str, tmp: Path) -> Iterator[tuple[SqlStore, StatesService]]:
    """A seeded store of ``backend`` (``sqlite`` or ``postgres``), shared by a module's tests
    (seeding runs jq and dozens of writes: once per backend, not once per test)."""
    schema = None
    if backend == "sqlite":
        location = str(tmp / "studio.db")
    else:
        if not PG_URL:
            pytest.skip("PostgreSQL not configured (set STATEFLOW_TEST_POSTGRES)")
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        location = with_schema(PG_URL, schema)
    store = open_store(location, auto_migrate=True)
    service = seed(store)
    try:
        yield store, service
    finally:
        service.close()
        store.close()
        if schema is not None and PG_URL:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
