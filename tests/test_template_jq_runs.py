"""How often a template jq program runs, and on which pool: a write that computes its change
more than once runs a failing program once; a closed service refuses programs."""

from __future__ import annotations

from typing import Any

import pytest

from stateflow.errors import StateflowError
from stateflow.jq import JqBusy, JqRunner
from stateflow.states import StatesService
from stateflow.states.models import DoorContext
from stateflow.store import SqlStore

from .conftest import StoreFactory

STATE: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"t": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SUBJECT = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "k"}
# fails unless the subtree says ok: the record as one writer last saw it may differ from the
# record its write finds
CHECKED = 'if .ok == true then [{"op": "set", "path": ["n"], "value": 1}] else error("not ok") end'


class CountingRunner(JqRunner):
    """A real pool that counts the programs it is asked to run."""

    def __init__(self) -> None:
        super().__init__(workers=1, timeout=60)
        self.runs = 0

    def run(self, program: str, value: Any = None, variables: dict[str, Any] | None = None) -> list[Any]:
        self.runs += 1
        return super().run(program, value, variables)


def prepared(store: SqlStore, runner: JqRunner | None = None) -> StatesService:
    service = StatesService(store)
    if runner is not None:
        service.use_jq(runner)
    service.put_template(
        "counter",
        {
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}},
            "template_jq": {
                "bad": {"purpose": "update", "jq": {"content": 'error("boom")'}},
                "checked": {
                    "purpose": "update",
                    "jq": {"content": CHECKED},
                },
                "peek": {"purpose": "input", "jq": {"content": ".n"}},
            },
        },
    )
    service.declare("tickets", STATE)
    service.attach("tickets", "counter", {"path": ["c"]})
    return service


def test_a_failing_update_program_runs_once_per_write(store: SqlStore) -> None:
    runner = CountingRunner()
    service = prepared(store, runner)
    try:
        service.replace("tickets", SUBJECT, {"t": "x", "c": {}})  # (now held as written)
        runner.runs = 0
        with pytest.raises(StateflowError, match="boom"):
            service.template_jq_update("tickets", SUBJECT, "bad")
        assert runner.runs == 1
    finally:
        service.close()


def test_a_program_that_failed_on_a_stale_record_runs_again_on_the_current_one(
    open_migrated: StoreFactory,
) -> None:
    """The failure is remembered for the subtree it ran on only: a record another process
    changed since this one last saw it is computed on as it now is."""
    mine, theirs = prepared(open_migrated()), StatesService(open_migrated())
    try:
        mine.replace("tickets", SUBJECT, {"t": "x", "c": {"ok": False}})
        theirs.replace("tickets", SUBJECT, {"t": "x", "c": {"ok": True}})
        mine.template_jq_update("tickets", SUBJECT, "checked")
        record = theirs.read("tickets", SUBJECT)
        assert record is not None and record["data"] == {"t": "x", "c": {"ok": True, "n": 1}}
    finally:
        mine.close()
        theirs.close()


def test_a_closed_service_refuses_programs_instead_of_starting_a_new_pool(store: SqlStore) -> None:
    """Closing stops the pool for good (a server's stop kills the programs running on it): a
    program asked for afterwards — an update's write computing its change again included — is
    refused jq-busy, on the service and on every copy bound to a caller, made before or after."""
    service = prepared(store)
    early = service.acting_as(DoorContext(door="api", actor="early"))
    service.replace("tickets", SUBJECT, {"t": "x", "c": {"n": 1}})
    assert service.template_jq_input("tickets", SUBJECT, "peek", {})["value"] == 1  # the pool started
    pool = service.jq()
    service.close()
    with pytest.raises(JqBusy):
        service.template_jq_update("tickets", SUBJECT, "checked")
    with pytest.raises(JqBusy):
        service.template_jq_input("tickets", SUBJECT, "peek", {})
    for bound in (early, service.acting_as(DoorContext(door="api", actor="late"))):
        with pytest.raises(JqBusy):
            bound.template_jq_update("tickets", SUBJECT, "checked")
        assert bound.jq() is pool
    record = service.read("tickets", SUBJECT)
    assert record is not None and record["data"] == {"t": "x", "c": {"n": 1}}  # nothing written


def test_an_update_programs_bad_op_batch_is_refused_naming_the_program(store: SqlStore) -> None:
    """An op batch an update program returns is the program's, not the caller's: a refusal of
    it names the program, and shows the op as JSON (it printed Python's form, and an unknown op
    read as if the caller had sent it). Nothing is written."""
    service = prepared(store)
    try:
        service.put_template(
            "broken",
            {
                "schema": {"type": "object", "properties": {"m": {"type": "integer"}}},
                "template_jq": {
                    "frob": {"purpose": "update", "jq": {"content": '[{"op": "frob", "path": ["m"]}]'}},
                    "pathless": {"purpose": "update", "jq": {"content": '[{"op": "set", "value": true}]'}},
                    "single": {
                        "purpose": "update",
                        "jq": {"content": '{"op": "set", "path": ["m"], "value": null}'},
                    },
                },
            },
        )
        service.attach("tickets", "broken", {"path": ["b"]})
        for name, says in (
            ("frob", "template_jq 'frob' returned an invalid op batch: ops[0]: unknown op 'frob'"),
            (
                "pathless",
                'template_jq \'pathless\' returned ops[0] = {"op":"set","value":true}: an update program',
            ),
            ("single", 'got {"op":"set","path":["m"],"value":null}'),
        ):
            with pytest.raises(StateflowError) as refused:
                service.template_jq_update("tickets", SUBJECT, name)
            assert says in refused.value.message, refused.value.message
        assert service.read("tickets", SUBJECT) is None
    finally:
        service.close()
