"""``_trace`` under a traced attachment: whatever a write puts there that it changed carries the
platform's stamp — an object item of an array as much as the attachment's object — and a
``_trace`` the client supplies is never kept as supplied; what a write leaves as it was keeps
its stamp. Through the service, on both backends."""

from __future__ import annotations

from typing import Any

import pytest

from stateflow.states import StatesService
from stateflow.store import SqlStore

DECL = {
    "schema": {"type": "object", "properties": {"title": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SUBJECT = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "t1"}
FORGED = {"meta": None, "run": "forged", "turn": None, "inbound": None, "at": "1999-01-01T00:00:00Z"}
ITEM = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "n": {"type": "integer"},
        "notes": {"type": "array", "items": {"type": "object"}},
        "detail": {"type": "object"},
    },
}


@pytest.fixture
def service(store: SqlStore) -> StatesService:
    service = StatesService(store)
    service.declare("s", DECL)
    service.put_template(
        "log",
        {
            "schema": {
                "type": "object",
                "properties": {"items": {"type": "array", "items": ITEM}, "meta": {"type": "object"}},
            },
            "trace": {"enabled": True},
        },
    )
    service.attach("s", "log", {"path": ["log"]})
    return service


def _log(service: StatesService) -> dict[str, Any]:
    record = service.read("s", SUBJECT)
    assert record is not None
    log: dict[str, Any] = record["data"]["log"]
    return log


def _run(item: dict[str, Any]) -> Any:
    return item["_trace"]["run"]


def test_a_replace_stamps_each_changed_item_and_keeps_the_stamps_of_those_it_leaves(
    service: StatesService,
) -> None:
    first = service.replace(
        "s",
        SUBJECT,
        {"log": {"items": [{"id": "a", "n": 1}, {"id": "b", "n": 1, "_trace": FORGED}]}},
        origin={"run_id": "r1"},
    )
    assert first is not None
    items = first["data"]["log"]["items"]
    assert [_run(i) for i in items] == ["r1", "r1"]  # stamped; the forged stamp replaced
    kept = items[0]
    # a is sent back as read (its stamp with it, its number as 1.0), b changes, c is new and
    # carries a forged stamp of its own
    again = {
        "log": {
            "items": [
                {**kept, "n": 1.0},
                {"id": "b", "n": 2, "_trace": items[1]["_trace"]},
                {"id": "c", "_trace": FORGED},
            ]
        }
    }
    service.replace("s", SUBJECT, again, origin={"run_id": "r2"})
    items = _log(service)["items"]
    assert items[0]["_trace"] == kept["_trace"]  # unchanged: its stamp kept
    assert [_run(i) for i in items] == ["r1", "r2", "r2"]


def test_a_merge_stamps_the_items_it_changes(service: StatesService) -> None:
    service.replace("s", SUBJECT, {"log": {"items": [{"id": "a"}]}}, origin={"run_id": "r1"})
    stored = _log(service)
    service.merge(
        "s",
        SUBJECT,
        {"log": {"items": [*stored["items"], {"id": "b", "_trace": FORGED}]}},
        origin={"run_id": "r2"},
    )
    assert [_run(i) for i in _log(service)["items"]] == ["r1", "r2"]


def test_a_forged_stamp_deeper_in_a_written_value_is_replaced(service: StatesService) -> None:
    """Inside an item, or in an object of the attachment's own, a supplied ``_trace`` gets the
    platform's stamp too — by a replace, and by ops that write those values."""
    deep = {
        "log": {
            "items": [{"id": "a", "notes": [{"m": "x", "_trace": FORGED}], "detail": {"_trace": FORGED}}],
            "meta": {"k": 1, "_trace": FORGED},
        }
    }
    service.replace("s", SUBJECT, deep, origin={"run_id": "r1"})
    log = _log(service)
    item = log["items"][0]
    assert [_run(x) for x in (log, log["meta"], item, item["notes"][0], item["detail"])] == ["r1"] * 5
    ops: list[dict[str, Any]] = [
        {"op": "set", "path": ["log", "items"], "value": [{"id": "b", "_trace": FORGED}]},
        {"op": "set", "path": ["log", "meta"], "value": {"k": 2, "inner": {"_trace": FORGED}}},
        {
            "op": "set_by_key",
            "path": ["log", "items"],
            "key_field": "id",
            "value": {"id": "c", "detail": {"_trace": FORGED}},
        },
    ]
    service.apply("s", SUBJECT, ops, origin={"run_id": "r2"})
    log = _log(service)
    b, c = log["items"]
    assert [_run(x) for x in (b, c, c["detail"], log["meta"], log["meta"]["inner"])] == ["r2"] * 5


def test_ops_and_a_set_above_the_path_stamp_array_items(service: StatesService) -> None:
    ops: list[dict[str, Any]] = [
        {
            "op": "set",
            "path": ["log"],
            "value": {"items": [{"id": "a", "_trace": FORGED}, {"id": "b"}]},
        }
    ]
    service.apply("s", SUBJECT, ops, origin={"run_id": "r1"})
    log = _log(service)
    assert [_run(x) for x in (log, *log["items"])] == ["r1", "r1", "r1"]
    # an item's own notes are not the traced object's array: not stamped, unless they carry one
    ops = [
        {
            "op": "set",
            "path": ["log", "items", 0, "notes"],
            "value": [{"m": "plain"}, {"m": "f", "_trace": FORGED}],
        }
    ]
    service.apply("s", SUBJECT, ops, origin={"run_id": "r2"})
    notes = _log(service)["items"][0]["notes"]
    assert "_trace" not in notes[0] and _run(notes[1]) == "r2"
