"""Declared states as a reviewer found them wanting, on both backends: attach paths that are
literal places, template jq programs that yield exactly one value and take only their declared
params, a program's own line numbers and trailing comments, the ``_trace`` stamp of a builtin
tool, an erase that says whether it erased, and the caller's own bad attach values named as
such."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from stateflow.errors import StateflowError
from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.store import SqlStore
from stateflow.tools import ToolHost
from tests.http_api import Api, tenant_api

STATE: dict[str, Any] = {
    "schema": {
        "type": "object",
        "properties": {
            "t": {"type": "string"},
            "other": {"type": "object", "properties": {"items": {"type": "array"}}},
        },
    },
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SUBJECT = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "k"}
LIST = {"schema": {"type": "object", "properties": {"items": {"type": "array"}}}}


@pytest.fixture
def service(store: SqlStore) -> Iterator[StatesService]:
    service = StatesService(store)
    service.declare("tickets", STATE)
    yield service
    service.close()


@pytest.fixture
def api(store: SqlStore) -> Iterator[Api]:
    with tenant_api(store) as api:
        assert api("PUT", "/api/states/tickets", STATE)[0] == 200
        yield api


def refused(call: Any) -> StateflowError:
    with pytest.raises(StateflowError) as caught:
        call()
    return caught.value


def records(service: StatesService, subject: dict[str, str] = SUBJECT) -> list[str | None]:
    return [w["action"] for w in service.writes("tickets", subject)["items"]]


def data(service: StatesService) -> Any:
    record = service.read("tickets", SUBJECT)
    assert record is not None
    return record["data"]


# ------------------------------------------------------------------ 1. attach path segments


@pytest.mark.parametrize("segment", ["*", "-", "_trace"])
def test_an_attach_path_holding_a_wildcard_append_or_trace_segment_is_refused(
    service: StatesService, segment: str
) -> None:
    """An attachment's path is a literal place: served under it, a regime rule would read "*"
    as a wildcard over the whole document, and no op reaches a member named "-"."""
    service.put_template("lst", {**LIST, "regimes": [{"path": ["items"], "regime": "composing"}]})
    for path in ([segment], ["box", segment]):
        error = refused(lambda path=path: service.attach("tickets", "lst", {"path": path}))
        assert (error.code, error.http_status) == ("invalid-input", 422)
        assert (
            f"segment {segment!r}" in error.message and "cannot name an attachment's place" in error.message
        )
    declaration = service.get_declaration("tickets")
    assert declaration["attachments"] == [] and declaration["regimes"] == []
    # nothing attached, so nothing governs the base schema's own property
    written = service.apply("tickets", SUBJECT, [{"op": "set", "path": ["other", "items"], "value": [1]}])
    assert written.applied and written.data == {"other": {"items": [1]}}


def test_an_attach_path_segment_star_is_refused_over_http(api: Api) -> None:
    assert api("PUT", "/api/state-templates/lst", LIST)[0] == 200
    status, body = api("PUT", "/api/states/tickets/attachments/lst", {"path": ["*"]})
    assert (status, body["code"]) == (422, "invalid-input"), body
    assert "segment '*'" in body["error"]
    assert api("GET", "/api/states/tickets/attachments/lst")[0] == 404


# ------------------------------------------------------------------ 2./3. template jq values and params

PROGRAMS: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    "template_jq": {
        "two": {
            "purpose": "update",
            "jq": {
                "content": '[{"op": "set", "path": ["a"], "value": 1}], [{"op": "set", "path": ["b"], "value": 2}]'
            },
        },
        "vals": {"purpose": "input", "jq": {"content": ".a, .b"}},
        "none": {"purpose": "input", "jq": {"content": "empty"}},
        "plain": {"purpose": "update", "jq": {"content": '[{"op": "set", "path": ["a"], "value": 5}]'}},
        "withp": {
            "purpose": "update",
            "params": ["v"],
            "jq": {"content": '[{"op": "set", "path": ["b"], "value": $input.v}]'},
        },
    },
}


@pytest.fixture
def programs(service: StatesService) -> StatesService:
    service.put_template("ctr", PROGRAMS)
    service.attach("tickets", "ctr", {"path": ["c"]})
    return service


def test_a_program_yielding_several_values_is_refused_not_cut_to_its_first(programs: StatesService) -> None:
    service = programs
    error = refused(lambda: service.template_jq_update("tickets", SUBJECT, "two"))
    assert error.code == "invalid-template" and error.http_status == 422
    assert "template_jq 'two'" in error.message and "yielded 2 values" in error.message
    assert service.read("tickets", SUBJECT) is None and records(service) == []  # nothing applied
    error = refused(lambda: service.template_jq_input("tickets", SUBJECT, "vals", {}))
    assert "template_jq 'vals'" in error.message and "yielded 2 values" in error.message
    error = refused(lambda: service.template_jq_input("tickets", SUBJECT, "none", {}))
    assert "template_jq 'none'" in error.message and "no value" in error.message
    # a declarations check and a reconcile program are held to one value as well
    service.put_template(
        "chk",
        {
            **LIST,
            "declarations": {"schema": {"type": "object"}, "check": {"content": "true, false"}},
        },
    )
    error = refused(lambda: service.attach("tickets", "chk", {"path": ["d"], "declarations": {}}))
    assert "declarations check" in error.message and "yielded 2 values" in error.message


def test_a_program_yielding_several_values_is_refused_over_http(api: Api) -> None:
    assert api("PUT", "/api/state-templates/ctr", PROGRAMS)[0] == 200
    assert api("PUT", "/api/states/tickets/attachments/ctr", {"path": ["c"]})[0] == 200
    record = "/api/states/tickets/records/agent/a/thread/k"
    status, body = api("POST", f"{record}/template-jq/two", {})
    assert (status, body["code"]) == (422, "invalid-template") and "yielded 2 values" in body["error"]
    status, body = api("GET", f"{record}/template-jq/vals")
    assert (status, body["code"]) == (422, "invalid-template") and "yielded 2 values" in body["error"]
    assert api("GET", record) == (200, {"data": None})


def test_an_update_program_declaring_no_params_takes_no_input(programs: StatesService) -> None:
    service = programs
    bad: Any
    for bad in ({"typo": 2}, 42, "x", []):
        error = refused(lambda bad=bad: service.template_jq_update("tickets", SUBJECT, "plain", bad))
        assert (error.code, error.http_status) == ("invalid-input", 422), bad
        assert "declares no params" in error.message
    assert service.read("tickets", SUBJECT) is None  # nothing applied
    fine: Any
    for fine in (None, {}):
        assert service.template_jq_update("tickets", SUBJECT, "plain", fine)["applied"]
    assert data(service) == {"c": {"a": 5}}
    # declared params: exactly those keys, as before
    error = refused(lambda: service.template_jq_update("tickets", SUBJECT, "withp", {"v": 1, "typo": 2}))
    assert error.code == "invalid-input" and "undeclared ['typo']" in error.message
    assert service.template_jq_update("tickets", SUBJECT, "withp", {"v": 3})["applied"]


# ------------------------------------------------------------------ 4. comments and line numbers


def with_input(content: str, **more: Any) -> dict[str, Any]:
    return {**LIST, "template_jq": {"count": {"purpose": "input", "jq": {"content": content}}, **more}}


def test_a_program_ending_in_a_comment_uploads_and_runs(service: StatesService) -> None:
    service.put_template(
        "cnt",
        with_input(
            ".items | length  # how many items",
            twice={"purpose": "input", "jq": {"content": "tjq_count({}) * 2 # doubled"}},
            add={
                "purpose": "update",
                "jq": {
                    "content": '[{"op": "set", "path": ["items", "-"], "value": tjq_twice({})}] # one more'
                },
            },
        ),
    )
    service.attach("tickets", "cnt", {"path": ["c"]})
    service.replace("tickets", SUBJECT, {"c": {"items": [1, 2]}})
    assert service.template_jq_input("tickets", SUBJECT, "count", {})["value"] == 2
    assert service.template_jq_input("tickets", SUBJECT, "twice", {})["value"] == 4
    assert service.template_jq_update("tickets", SUBJECT, "add")["applied"]
    assert data(service) == {"c": {"items": [1, 2, 4]}}


def test_a_compile_error_names_the_line_of_the_authors_program(service: StatesService) -> None:
    error = refused(lambda: service.put_template("t", with_input("1 |\n2 |\n$nope")))
    assert error.code == "invalid-template" and "template_jq 'count'" in error.message
    assert "line 3, column 1" in error.message
    # after a sibling in the prelude (one with a comment on its last line), still its own line
    sibling = {"purpose": "input", "jq": {"content": "tjq_count({}) |\n  . + $zz"}}
    error = refused(lambda: service.put_template("t", with_input(".items | length # n", later=sibling)))
    assert "template_jq 'later'" in error.message and "line 2, column 7" in error.message
    update = {"purpose": "update", "jq": {"content": "[\n\n  $zz]"}}
    error = refused(lambda: service.put_template("t", with_input(".items # n", upd=update)))
    assert "template_jq 'upd'" in error.message and "line 3, column 3" in error.message
    assert "';'" not in error.message


# ------------------------------------------------------------------ 5. the _trace stamp of a builtin tool


def test_a_builtin_state_tool_stamps_no_run_in_trace_but_keeps_the_session_in_the_audit(
    store: SqlStore,
) -> None:
    states = StatesService(store)
    try:
        states.install_builtins()
        states.declare("tickets", STATE)
        traced = {
            "schema": {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"type": "object"}}},
            }
        }
        states.put_template("tr", {**traced, "trace": {"enabled": True}})
        states.attach("tickets", "tr", {"path": ["tr"]})
        host = ToolHost(MemoryView(store, Identity.of("coder", "/tmp", "sess-42")), states)
        subject = {"kind": "thread", "key": "t-1"}
        ops = [{"op": "set", "path": ["tr", "items", "-"], "value": {"id": 1}}]
        result = host.call("state_apply", {"state": "tickets", "subject": subject, "ops": ops})
        assert not result.is_error, result.text
        stamp = json.loads(result.text)["result"]["data"]["tr"]["items"][0]["_trace"]
        assert stamp["run"] is None and stamp["turn"] is None and stamp["inbound"] is None
        full = {"target_kind": "agent", "target_name": "coder", **subject}
        origin = states.writes("tickets", full)["items"][0]["origin"]
        assert (origin["door"], origin["consumer"], origin["run_id"]) == ("tool", "state_apply", "sess-42")
        # a writer that has a run still stamps it
        written = states.apply("tickets", full, ops, origin={"run_id": "run-7"})
        assert written.data is not None and written.data["tr"]["items"][1]["_trace"]["run"] == "run-7"
    finally:
        states.close()


# ------------------------------------------------------------------ 6. erase says whether it erased


def test_erasing_nothing_answers_erased_false_and_writes_no_audit_row(service: StatesService) -> None:
    never = {**SUBJECT, "key": "never"}
    assert service.erase("tickets", never) == {"erased": False}
    assert records(service, never) == []
    service.replace("tickets", SUBJECT, {"t": "x"})
    assert service.erase("tickets", SUBJECT) == {"erased": True}
    assert service.erase("tickets", SUBJECT) == {"erased": False}  # erased already
    assert records(service) == ["erase", "replace"]  # the second erase wrote nothing


def test_erasing_nothing_over_http_and_the_cli_answers_erased_false(api: Api, backend: str) -> None:
    record = "/api/states/tickets/records/agent/a/thread/k"
    assert api("PUT", record, {"t": "x"})[0] == 200
    assert api("DELETE", record) == (200, {"data": {"erased": True}})
    assert api("DELETE", record) == (200, {"data": {"erased": False}})
    assert [w["action"] for w in api("GET", f"{record}/writes")[1]["data"]["items"]] == ["erase", "replace"]
    env = {**os.environ, "STATEFLOW_STORE": backend, "STATEFLOW_URL": "", "STATEFLOW_TOKEN": ""}
    subject = ["--target-kind", "agent", "--target-name", "a", "--kind", "thread", "--key", "k"]
    done = subprocess.run(
        [sys.executable, "-m", "stateflow", "states", "erase", "tickets", *subject],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"erased": False}


# ------------------------------------------------------------------ 7. the caller's bad attach values

RECONCILED: dict[str, Any] = {
    "schema": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "kind": {"type": "string"},
                        "status": {"type": "string"},
                    },
                },
            }
        },
    },
    "declarations": {
        "schema": {
            "type": "object",
            "properties": {"kinds": {"type": "array", "items": {"type": "string"}}},
            "required": ["kinds"],
        },
        "check": {"content": 'if (.kinds | length) > 0 then true else "kinds must not be empty" end'},
    },
    "reconcile": {
        "orphans": {
            "content": '[.items[]? | select(.status != "closed") | select(.kind as $k | ($new.kinds | index([$k])) | not) | {id, label: .kind}]'
        },
        "close": {
            "content": '[{"op": "merge_by_key", "path": ["items"], "key_field": "id", "value": [{"id": $id, "status": "closed"}]}]'
        },
        "resolutions": {"content": '["dropped", "moved"]'},
    },
}


def test_the_callers_own_bad_attach_values_are_invalid_input(api: Api) -> None:
    assert api("PUT", "/api/state-templates/rc", RECONCILED)[0] == 200
    url = "/api/states/tickets/attachments/rc"
    status, body = api("PUT", url, {"path": ["x"]})
    assert (status, body["code"]) == (422, "invalid-input"), body
    assert "declarations schema of template 'rc'" in body["error"] and "state schema" not in body["error"]
    status, body = api("PUT", url, {"path": ["x"], "declarations": {"kinds": []}})
    assert (status, body["code"]) == (422, "invalid-input") and "kinds must not be empty" in body["error"]
    assert api("PUT", url, {"path": ["x"], "declarations": {"kinds": ["a", "b"]}})[0] == 200
    item = {"id": "i2", "kind": "b", "status": "open"}
    ops = [{"op": "set_by_key", "path": ["x", "items"], "key_field": "id", "value": [item]}]
    assert api("POST", "/api/states/tickets/records/agent/a/thread/k/deltas", {"ops": ops})[0] == 200
    narrower = {"kinds": ["a"]}
    status, body = api("PATCH", url, {"declarations": narrower})
    assert (status, body["code"]) == (422, "reconcile-needed"), body
    assert "re-attach" not in body["error"].lower() and "update of the declarations" in body["error"]
    # the refusal names the template's own resolutions (it said "<not-done resolution>") and
    # each orphan's tenant (the same kind and key may be open under two)
    assert (
        '{"orphans": "close", "resolution": R} to close them, R one of "dropped", "moved".' in body["error"]
    )
    assert "[agent/a thread:k] b (id i2)" in body["error"]
    assert body["orphans"] == [
        {
            "target_kind": "agent",
            "target_name": "a",
            "subject": "k",
            "kind": "thread",
            "id": "i2",
            "label": "b",
        }
    ]
    for options, says in (
        ({"orphans": "close", "resolution": "zap"}, "options.resolution must be one of"),
        ({"orphans": "keep"}, "unknown reconcile directive"),
    ):
        status, body = api("PATCH", url, {"declarations": narrower, "options": options})
        assert (status, body["code"]) == (422, "invalid-input"), body
        assert says in body["error"]
    status, body = api("PATCH", url, {"declarations": {"kinds": "a"}})
    assert (status, body["code"]) == (422, "invalid-input"), body
    assert "the new declarations object" in body["error"] and "re-attach" not in body["error"]
    # a replaced template the live attachment's values no longer fit is still a conflict
    stricter = {
        **RECONCILED,
        "declarations": {
            **RECONCILED["declarations"],
            "schema": {"type": "object", "properties": {"kinds": {"type": "string"}}},
        },
    }
    status, body = api("PUT", "/api/state-templates/rc?replace=true", stricter)
    assert (status, body["code"]) == (409, "template-in-use"), body
