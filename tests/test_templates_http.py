"""Templates, attachments, regimes, _trace and template jq over the real HTTP app (both backends)."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from stateflow.api import states_service
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.jq import JqRunner
from stateflow.states import StatesService
from stateflow.store import SqlStore

TOKEN = "template-admin-0123456789"
BOX = {
    "description": "a box of labelled items",
    "parameters": {
        "limit": {"schema": {"type": "integer"}, "default": 8},
        "label": {"schema": {"type": "object"}},
    },
    "schema": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "maxItems": {"$parameter": "limit"},
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "label": {"$parameter": "label"}},
                },
            },
            "note": {"type": "string"},
        },
    },
    "regimes": [{"path": ["items"], "regime": "composing"}],
    "declarations": {
        "schema": {
            "type": "object",
            "properties": {"count": {"type": "integer"}, "kinds": {"type": "array"}},
        },
        "check": {
            "content": 'if (.count // 0) <= $parameters.limit then true else "count exceeds the attach limit" end'
        },
    },
    "template_jq": {
        "ids": {"purpose": "input", "jq": {"content": "[.items[]?.id]"}},
        "size": {"purpose": "input", "jq": {"content": "tjq_ids({}) | length"}},
        "at_least": {
            "purpose": "input",
            "params": ["min"],
            "jq": {"content": "(tjq_size({})) >= $params.min"},
        },
        "add": {
            "purpose": "update",
            "params": ["id"],
            "jq": {
                "content": '[{"op": "set_by_key", "path": ["items"], "key_field": "id", "value": [{"id": $input.id, "label": "new"}]}]'
            },
        },
        "spin": {"purpose": "input", "jq": {"content": "def f: f; f"}},
    },
    "reconcile": {
        "orphans": {
            "content": "[.items[]? | select(.kind != null and ((.kind as $k | $new.kinds // [] | index($k)) == null)) | {id, label: .id}]"
        },
        "close": {
            "content": '[{"op": "merge_by_key", "path": ["items"], "key_field": "id", "value": [{"id": $id, "closed": $resolution}]}]'
        },
        "resolutions": {"content": '["not-done", "abandoned"]'},
    },
    "trace": {"enabled": False},
}
STATE = {
    "schema": {"type": "object", "properties": {"title": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
REC = "/api/states/tickets/records/agent/bot/thread/t1"


class Api:
    def __init__(self, client: TestClient) -> None:
        self.client = client

    def __call__(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        sent = {"Authorization": f"Bearer {TOKEN}", **(headers or {})}
        r = self.client.request(method, path, json=body, headers=sent)
        return r.status_code, r.json()


@pytest.fixture
def api(store: SqlStore) -> Iterator[Api]:
    service = states_service(store)
    with TestClient(create_app(service, TokenSet([parse_token(TOKEN)]))) as client:
        yield Api(client)
    service.close()


@pytest.fixture
def attached(api: Api) -> Api:
    assert api("PUT", "/api/state-templates/box", BOX)[0] == 200
    assert api("PUT", "/api/states/tickets", STATE)[0] == 200
    status, body = api(
        "PUT",
        "/api/states/tickets/attachments/box",
        {"path": ["box"], "parameters": {"label": {"type": "string"}}, "declarations": {"count": 3}},
    )
    assert status == 200, body
    return api


def broken(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BOX)
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (broken(extra=1), "unknown keys"),
        (broken(kind="other"), "template kind must be 'state-template'"),
        (broken(parameters={}), "undeclared parameter"),
        (
            broken(parameters={"limit": {"schema": {}}, "label": {"schema": {}}, "unused": {"schema": {}}}),
            "must appear as a $parameter marker",
        ),
        (broken(schema={"type": "array"}, parameters={}), "not a valid object schema"),
        (broken(regimes=[{"path": ["nope"], "regime": "composing"}]), "is not a property of the fragment"),
        (broken(regimes=[{"path": ["items"], "regime": "eventual"}]), "regime must be one of"),
        (broken(trace={"enabled": "yes"}), "trace must be"),
        (broken(template_jq={"Bad": {"purpose": "input", "jq": {"content": "."}}}), "program name"),
        (broken(template_jq={"p": {"purpose": "input", "jq": {"content": "[."}}}), "does not compile"),
        (
            broken(template_jq={"p": {"purpose": "input", "reads": [["items"]], "jq": {"content": "."}}}),
            "declares no reads or writes",
        ),
        (
            broken(
                template_jq={
                    "a": {"purpose": "input", "jq": {"content": "tjq_b({})"}},
                    "b": {"purpose": "input", "jq": {"content": "tjq_a({})"}},
                }
            ),
            "call each other in a cycle: tjq_a → tjq_b → tjq_a",
        ),
        (  # jq compiles a program calling itself, which then runs until its limit
            broken(template_jq={"a": {"purpose": "input", "jq": {"content": "tjq_a({})"}}}),
            "call each other in a cycle: tjq_a → tjq_a",
        ),
        (broken(template_jq={"p": {"purpose": "input", "jq": {"id": "stored-program"}}}), "by-id"),
        (broken(reconcile={"orphans": {"content": "[]"}}), "exactly the programs"),
    ],
)
def test_template_documents_are_validated_on_upload(api: Api, doc: dict[str, Any], message: str) -> None:
    status, body = api("PUT", "/api/state-templates/box", doc)
    assert status == 422 and message in body["error"], body
    assert api("GET", "/api/state-templates/box")[0] == 404


def test_a_templates_jq_compiles_in_a_worker_that_reads_no_file(store: SqlStore, tmp_path: Path) -> None:
    """An upload's jq is compiled in a jq worker, under its time limit (jq's compiler holds the
    interpreter's lock: in the server's process one slow program stopped every request), and
    import/include/module directives are refused before jq looks for any file."""
    (tmp_path / "secret.jq").write_text('def x: "PRIVATE LINE" \n')  # does not parse: jq quotes it
    (tmp_path / "data.json").write_text('{"k": "PRIVATE VALUE"}')
    service = states_service(store, jq=JqRunner(workers=1, timeout=1))
    with TestClient(create_app(service, TokenSet([parse_token(TOKEN)]))) as client:
        api = Api(client)
        for program in (
            f'include "secret" {{search: "{tmp_path}"}}; .',
            f'import "{tmp_path}/data" as $d; $d',
            f'# a comment first\nimport "{tmp_path}/secret" as s; s::x',
        ):
            doc = broken(declarations={"schema": {}, "check": {"content": program}})
            status, body = api("PUT", "/api/state-templates/box", doc)
            assert status == 422, body
            assert "may not import modules or data files" in body["error"]
            assert "PRIVATE" not in body["error"]
        # thousands of nested definitions: seconds of compiling, stopped at the limit
        chain = "def f0: 0;" + "".join(f"def f{i}: f{i - 1} + 1;" for i in range(1, 4000)) + "f3999"
        status, body = api(
            "PUT",
            "/api/state-templates/box",
            broken(
                reconcile={
                    "orphans": {"content": "[]"},
                    "close": {"content": "[]"},
                    "resolutions": {"content": chain},
                }
            ),
        )
        assert status == 422 and "reconcile.resolutions could not be compiled" in body["error"], body
        assert "1 s limit" in body["error"]
        # a syntax error names the program's own line
        status, body = api(
            "PUT",
            "/api/state-templates/box",
            broken(template_jq={"p": {"purpose": "input", "jq": {"content": ".a |\n  .b +"}}}),
        )
        assert status == 422 and "line 2" in body["error"], body
        assert api("GET", "/api/state-templates/box")[0] == 404
        assert api("PUT", "/api/state-templates/box", BOX)[0] == 200
    service.close()


def test_template_crud_and_replace_rules(attached: Api) -> None:
    api = attached
    listed = api("GET", "/api/state-templates")[1]["data"]
    assert [(t["name"], t["attached_to"], t["shipped_default"]) for t in listed] == [("box", 1, False)]
    status, body = api("PUT", "/api/state-templates/box", BOX)
    assert status == 409 and "replace=true" in body["error"]
    stricter = broken(
        parameters={
            "limit": {"schema": {"type": "integer", "maximum": 2}, "default": 2},
            "label": {"schema": {"type": "object"}},
        }
    )
    status, body = api("PUT", "/api/state-templates/box?replace=true", stricter)
    assert status == 409 and "no longer validates" in body["error"]  # declarations count 3 > limit 2
    assert api("PUT", "/api/state-templates/box?replace=true", broken(description="v2"))[0] == 200
    assert api("GET", "/api/state-templates/box")[1]["data"]["description"] == "v2"
    # a value that is not a boolean is refused, not read as false (a 409 "already exists")
    for given in ("maybe", "", "2"):
        status, body = api("PUT", f"/api/state-templates/box?replace={given}", broken(description="v3"))
        assert (status, body) == (
            400,
            {"error": f"'replace' must be true or false, got {given!r}", "code": "bad-request"},
        )
    status, body = api("PUT", "/api/state-templates/box?replace=False", broken(description="v3"))
    assert status == 409 and "replace=true" in body["error"]
    assert api("GET", "/api/state-templates/box")[1]["data"]["description"] == "v2"
    status, body = api("DELETE", "/api/state-templates/box", {"force": True})
    assert (status, body) == (400, {"error": "DELETE takes no body", "code": "bad-request"})
    status, body = api("DELETE", "/api/states/tickets/attachments/box", {})
    assert (status, body) == (400, {"error": "DELETE takes no body", "code": "bad-request"})
    status, body = api("DELETE", "/api/state-templates/box")
    assert status == 409 and "detach it first" in body["error"]


def test_a_document_naming_another_template_is_refused_and_writes_nothing(api: Api) -> None:
    status, body = api("PUT", "/api/state-templates/box", broken(name="crate"))
    assert status == 422 and body["code"] == "invalid-template", body
    assert "'crate' differs from the template name 'box'" in body["error"]
    assert api("GET", "/api/state-templates/box")[0] == 404
    assert api("GET", "/api/state-templates/crate")[0] == 404
    assert api("PUT", "/api/state-templates/box", broken(name="box"))[0] == 200  # the same name: fine
    status, body = api("PUT", "/api/state-templates/box?replace=true", broken(name="crate", description="v2"))
    assert status == 422 and "differs from the template name 'box'" in body["error"]
    assert api("GET", "/api/state-templates/box")[1]["data"]["description"] == BOX["description"]
    assert [t["name"] for t in api("GET", "/api/state-templates")[1]["data"]] == ["box"]


def test_attach_serves_regimes_effective_schema_and_refuses_conflicts(attached: Api) -> None:
    api = attached
    decl = api("GET", "/api/states/tickets")[1]["data"]
    assert decl["regimes"] == [{"path": ["box", "items"], "regime": "composing"}]
    items = decl["effective_schema"]["properties"]["box"]["properties"]["items"]
    assert items["maxItems"] == 8 and items["items"]["properties"]["label"] == {"type": "string"}
    assert decl["attachments"] == [
        {
            "template": "box",
            "path": ["box"],
            "parameters": {"limit": 8, "label": {"type": "string"}},
            "declarations": {"count": 3},
        }
    ]
    assert api("GET", "/api/states/tickets/attachments/box")[1]["data"]["path"] == ["box"]
    assert api("GET", "/api/states/tickets/attachments/other")[0] == 404
    assert (
        api("PUT", "/api/states/tickets/attachments/box", {"path": ["x"], "parameters": {"label": {}}})[0]
        == 409
    )
    api("PUT", "/api/state-templates/box2", BOX)
    for path, code in (
        (["box", "inner"], 409),
        (["title"], 409),
        (["title", "deeper"], 409),
        ([""], 422),
        ([0], 422),
    ):
        status, body = api(
            "PUT", "/api/states/tickets/attachments/box2", {"path": path, "parameters": {"label": {}}}
        )
        assert status == code, (path, body)
    status, body = api("PUT", "/api/states/tickets/attachments/box2", {"path": ["b2"], "parameters": {}})
    assert status == 422 and "must supply parameter 'label'" in body["error"]
    status, body = api(
        "PUT",
        "/api/states/tickets/attachments/box2",
        {"path": ["b2"], "parameters": {"label": {}, "limit": "x"}},
    )
    assert status == 422 and "limit" in body["error"]
    status, body = api(
        "PUT",
        "/api/states/tickets/attachments/box2",
        {"path": ["b2"], "parameters": {"label": {}}, "declarations": {"count": 9}},
    )
    assert status == 422 and "count exceeds the attach limit" in body["error"]
    assert api("PUT", "/api/states/tickets/attachments/nope", {"path": ["n"]})[0] == 404


def test_composing_is_enforced_on_every_door_without_consuming_op_ids(attached: Api) -> None:
    api = attached
    ok = api(
        "POST",
        REC + "/deltas",
        {
            "ops": [
                {
                    "op": "set_by_key",
                    "path": ["box", "items"],
                    "key_field": "id",
                    "value": [{"id": "a-42", "label": "status"}],
                }
            ]
        },
    )
    assert ok[0] == 200 and ok[1]["data"]["data"]["box"]["items"] == [{"id": "a-42", "label": "status"}]
    assert (
        api(
            "POST",
            REC + "/deltas",
            {"ops": [{"op": "set", "path": ["box", "items", "-"], "value": {"id": "b"}}]},
        )[0]
        == 200
    )
    for ops in (
        [{"op": "set", "path": ["box", "items"], "value": []}],
        [{"op": "set", "path": ["box"], "value": {}}],
        [{"op": "set", "path": ["box", "items", 0, "label"], "value": "x"}],
        [{"op": "remove", "path": ["box", "items", 0]}],
    ):
        status, body = api("POST", REC + "/deltas", {"ops": ops, "op_id": "once"})
        assert status == 422 and body["code"] == "regime-violation", ops
    assert (
        api(
            "POST",
            REC + "/deltas",
            {"ops": [{"op": "set", "path": ["box", "note"], "value": "n"}], "op_id": "once"},
        )[1]["data"]["applied"]
        is True
    )
    status, body = api("PUT", REC, {"title": "replaced"})
    assert status == 422 and body["code"] == "regime-violation"
    assert api("PATCH", REC, {"box": {}})[0] == 422
    assert api("PATCH", REC, {"title": "merge elsewhere is fine"})[0] == 200
    record = api("GET", REC)[1]["data"]["data"]
    status, body = api("PUT", REC, {**record, "title": "same composing value"})
    assert status == 200


def test_template_jq_input_and_update(attached: Api) -> None:
    api = attached
    status, body = api("POST", REC + "/template-jq/add", {"input": {"id": "a-42"}, "op_id": "add-1"})
    assert status == 200 and body["data"]["applied"] is True and body["data"]["name"] == "add"
    assert (
        api("POST", REC + "/template-jq/add", {"input": {"id": "a-42"}, "op_id": "add-1"})[1]["data"][
            "applied"
        ]
        is False
    )
    assert api("GET", REC + "/template-jq/ids")[1]["data"] == {
        "name": "ids",
        "purpose": "input",
        "value": ["a-42"],
    }
    assert api("GET", REC + "/template-jq/box.size")[1]["data"]["value"] == 1
    assert api("GET", REC + "/template-jq/at_least?min=1")[1]["data"]["value"] is True
    assert api("GET", REC + "/template-jq/at_least?min=5")[1]["data"]["value"] is False
    writes = api("GET", REC + "/writes")[1]["data"]["items"]
    assert len(writes) == 1 and writes[0]["origin"]["meta"] == {"template_jq": "add"}
    assert api("GET", REC + "/template-jq/at_least")[0] == 422  # missing params
    assert api("GET", REC + "/template-jq/at_least?min=1&extra=2")[0] == 422
    assert api("GET", REC + "/template-jq/at_least?min=notjson")[0] == 400
    assert api("GET", REC + "/template-jq/nope")[0] == 404
    assert api("GET", REC + "/template-jq/other.ids")[0] == 404
    assert api("GET", REC + "/template-jq/add")[0] == 422  # purpose mismatch
    assert api("POST", REC + "/template-jq/add", {"input": "x"})[0] == 422
    api("PUT", "/api/state-templates/box2", BOX)
    api("PUT", "/api/states/tickets/attachments/box2", {"path": ["b2"], "parameters": {"label": {}}})
    status, body = api("GET", REC + "/template-jq/ids")
    assert status == 422 and "qualify it as <template>.ids" in body["error"]
    assert api("GET", REC + "/template-jq/box2.ids")[1]["data"]["value"] == []


def test_a_param_that_is_not_json_is_refused_alike_over_http_and_on_the_cli(
    attached: Api, backend: str
) -> None:
    # one refusal, naming the parameter (of several), with one code, whichever door
    expected = "template_jq param 'min' must be a JSON value: invalid JSON: "
    status, body = attached("GET", REC + "/template-jq/at_least?min=notjson")
    assert status == 400 and body["code"] == "bad-request" and body["error"].startswith(expected), body
    who = ["--target-name", "bot", "--key", "t1"]
    params = ["--param", "max=3", "--param", "min=notjson"]
    done = subprocess.run(
        [
            "stateflow",
            "--store",
            backend,
            "states",
            "template-jq",
            "eval",
            "tickets",
            *who,
            "at_least",
            *params,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stderr.startswith(f"error[bad-request]: {expected}"), done.stderr
    assert done.stderr.strip() == f"error[bad-request]: {body['error']}"


def test_a_param_given_twice_is_refused_naming_it_over_http_and_on_the_cli(
    attached: Api, backend: str
) -> None:
    # which value was meant is not for a door to guess: never the last one silently
    status, body = attached("GET", REC + "/template-jq/at_least?min=1&min=2")
    assert status == 422 and "'min'" in body["error"] and "more than once" in body["error"], body
    call = ["states", "template-jq", "eval", "tickets", "--target-name", "bot", "--key", "t1", "at_least"]
    done = subprocess.run(
        ["stateflow", "--store", backend, *call, "--param", "min=1", "--param", "min=5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr == (
        "error[invalid-input]: template_jq param 'min' is given more than once: give each parameter once\n"
    )


def test_an_update_program_writes_as_the_caller_and_under_its_if_match(attached: Api) -> None:
    api = attached
    origin = {
        "X-Stateflow-Consumer": "billing",
        "X-Stateflow-Run-Id": "run-7",
        "X-Stateflow-Meta": '{"ticket": 42}',
    }
    add = REC + "/template-jq/add"
    status, body = api("POST", add, {"input": {"id": "a"}}, headers=origin)
    assert status == 200 and body["data"]["applied"] is True
    written = api("GET", REC + "/writes")[1]["data"]["items"][0]["origin"]
    assert (written["consumer"], written["run_id"]) == ("billing", "run-7")
    assert written["meta"] == {
        "ticket": 42,
        "template_jq": "add",
    }  # the program is named beside the caller's keys

    stale = api("POST", add, {"input": {"id": "b"}}, headers={"If-Match": '"7"'})
    assert stale[0] == 412 and stale[1]["code"] == "revision-mismatch"
    assert api("POST", add, {"input": {"id": "b"}}, headers={"If-None-Match": "*"})[0] == 412
    assert api("POST", add, {"input": {"id": "b"}}, headers={"If-Match": '"1"'})[0] == 200
    items = api("GET", REC)[1]["data"]["data"]["box"]["items"]
    assert [i["id"] for i in items] == ["a", "b"]  # the refused calls wrote nothing


def test_an_update_program_answers_the_records_etag_as_deltas_do(attached: Api) -> None:
    api = attached
    add = REC + "/template-jq/add"
    first = api.client.post(add, json={"input": {"id": "a"}, "op_id": "once"}, headers=_admin())
    assert first.status_code == 200 and first.headers["etag"] == '"1"'
    assert first.json()["data"]["name"] == "add" and first.json()["data"]["applied"] is True
    # the ETag is the next write's If-Match
    second = api.client.post(
        add, json={"input": {"id": "b"}}, headers={**_admin(), "If-Match": first.headers["etag"]}
    )
    assert second.status_code == 200 and second.headers["etag"] == '"2"'
    assert api.client.get(REC, headers=_admin()).headers["etag"] == '"2"'
    # a replay reads nothing and answers no ETag, as a replayed …/deltas
    replay = api.client.post(add, json={"input": {"id": "a"}, "op_id": "once"}, headers=_admin())
    assert replay.status_code == 200 and replay.json()["data"]["replayed"] is True
    assert "etag" not in replay.headers


def _admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def test_trace_stamping_is_valid_under_additional_properties_false(api: Api) -> None:
    traced = broken(
        schema={
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"id": {"type": "string"}},
                    },
                }
            },
        },
        parameters={},
        regimes=[],
        template_jq=None,
        reconcile=None,
        declarations=None,
        trace={"enabled": True},
    )
    traced = {k: v for k, v in traced.items() if v is not None}
    assert api("PUT", "/api/state-templates/log", traced)[0] == 200
    api("PUT", "/api/states/tickets", STATE)
    assert api("PUT", "/api/states/tickets/attachments/log", {"path": ["log"]})[0] == 200
    status, body = api(
        "POST",
        REC + "/deltas",
        {"ops": [{"op": "set_by_key", "path": ["log", "items"], "key_field": "id", "value": [{"id": "x"}]}]},
    )
    assert status == 200, body
    item = body["data"]["data"]["log"]["items"][0]
    assert item["id"] == "x" and item["_trace"]["meta"] is None and isinstance(item["_trace"]["at"], str)
    status, body = api("PUT", REC, {"title": "t", "log": {"items": []}})
    assert status == 200 and "_trace" in body["data"]["data"]["log"]


def test_ops_may_not_forge_or_remove_the_trace_stamp(api: Api) -> None:
    traced = {
        "schema": {"type": "object", "properties": {"v": {"type": "integer"}}},
        "trace": {"enabled": True},
    }
    assert api("PUT", "/api/state-templates/log", traced)[0] == 200
    api("PUT", "/api/states/tickets", STATE)
    assert api("PUT", "/api/states/tickets/attachments/log", {"path": ["outer", "log"]})[0] == 200
    forged = {"meta": None, "run": "forged", "turn": None, "inbound": None, "at": "1999-01-01T00:00:00Z"}
    status, body = api("PUT", REC, {"outer": {"log": {"v": 1, "_trace": forged}}})
    assert status == 200 and body["data"]["data"]["outer"]["log"]["_trace"]["run"] is None
    before = api("GET", REC)[1]["data"]
    for ops in (
        [{"op": "set", "path": ["outer", "log", "_trace", "run"], "value": "forged"}],
        [{"op": "set", "path": ["outer", "log", "_trace"], "value": forged}],
        [{"op": "remove", "path": ["outer", "log", "_trace"]}],
    ):
        status, body = api("POST", REC + "/deltas", {"ops": ops})
        assert status == 422 and body["code"] == "regime-violation" and "_trace" in body["error"], ops
    assert api("GET", REC)[1]["data"] == before
    # a set above the traced path writes the attachment's object: its stamp is the platform's
    status, body = api(
        "POST",
        REC + "/deltas",
        {"ops": [{"op": "set", "path": ["outer"], "value": {"log": {"v": 2, "_trace": forged}}}]},
    )
    assert status == 200 and body["data"]["data"]["outer"]["log"]["_trace"]["at"] != forged["at"]


def test_reconcile_requires_closing_orphans(attached: Api) -> None:
    api = attached
    api(
        "POST",
        REC + "/deltas",
        {
            "ops": [
                {
                    "op": "set_by_key",
                    "path": ["box", "items"],
                    "key_field": "id",
                    "value": [{"id": "i1", "kind": "bug"}, {"id": "i2", "kind": "task"}],
                }
            ]
        },
    )
    api(
        "PATCH",
        "/api/states/tickets/attachments/box",
        {"declarations": {"count": 3, "kinds": ["bug", "task"]}},
    )
    status, body = api(
        "PATCH", "/api/states/tickets/attachments/box", {"declarations": {"count": 3, "kinds": ["bug"]}}
    )
    assert (
        status == 422
        and body["reconcile"] is True
        and body["orphans"]
        == [
            {
                "target_kind": "agent",
                "target_name": "bot",
                "subject": "t1",
                "kind": "thread",
                "id": "i2",
                "label": "i2",
            }
        ]
    )
    status, body = api(
        "PATCH",
        "/api/states/tickets/attachments/box",
        {
            "declarations": {"count": 3, "kinds": ["bug"]},
            "options": {"orphans": "close", "resolution": "bogus"},
        },
    )
    assert status == 422
    status, body = api(
        "PATCH",
        "/api/states/tickets/attachments/box",
        {
            "declarations": {"count": 3, "kinds": ["bug"]},
            "options": {"orphans": "close", "resolution": "not-done"},
        },
    )
    assert status == 200 and body["data"]["closed"] == 1
    items = api("GET", REC)[1]["data"]["data"]["box"]["items"]
    assert [i.get("closed") for i in items] == [None, "not-done"]
    assert api("GET", "/api/states/tickets/attachments/box")[1]["data"]["declarations"] == {
        "count": 3,
        "kinds": ["bug"],
    }


def test_detach_recomposes_and_keeps_records(attached: Api) -> None:
    api = attached
    api("POST", REC + "/deltas", {"ops": [{"op": "set", "path": ["box", "note"], "value": "kept"}]})
    assert api("DELETE", "/api/states/tickets/attachments/box") == (
        200,
        {"data": {"detached": True, "state": "tickets", "template": "box"}},
    )
    decl = api("GET", "/api/states/tickets")[1]["data"]
    assert decl["regimes"] == [] and "box" not in decl["effective_schema"]["properties"]
    assert api("GET", REC)[1]["data"]["data"]["box"] == {"note": "kept"}
    assert api("DELETE", "/api/states/tickets/attachments/box")[0] == 404
    assert api("DELETE", "/api/state-templates/box")[0] == 200


def test_schema_changes_that_would_strand_existing_records_are_refused(attached: Api) -> None:
    api = attached
    four = [{"id": i, "label": i} for i in "abcd"]
    item = {"op": "set_by_key", "path": ["box", "items"], "key_field": "id", "value": four}
    assert api("POST", REC + "/deltas", {"ops": [item]})[0] == 200
    # replace: a lower default for the limit the attach did not supply narrows maxItems to 3
    narrower = broken()
    narrower["parameters"]["limit"]["default"] = 3
    status, body = api("PUT", "/api/state-templates/box?replace=true", narrower)
    assert status == 409 and body["code"] == "records-invalid", body
    assert (
        "record thread/t1 of agent bot in state 'tickets' is invalid" in body["error"]
        and "$.box.items" in body["error"]
    )
    assert api("GET", "/api/state-templates/box")[1]["data"]["parameters"]["limit"]["default"] == 8
    assert api("PUT", "/api/state-templates/box?replace=true", broken(description="same shape"))[0] == 200
    # an additive re-declare whose new property a record already holds with a refused value
    assert api("PATCH", REC, {"legacy": 5})[0] == 200
    grown: dict[str, Any] = copy.deepcopy(STATE)
    grown["schema"]["properties"]["legacy"] = {"type": "string"}
    status, body = api("PUT", "/api/states/tickets", grown)
    assert status == 409 and body["code"] == "records-invalid" and "$.legacy" in body["error"], body
    grown["schema"]["properties"]["legacy"] = {"type": "integer"}
    assert api("PUT", "/api/states/tickets", grown)[0] == 200
    # detach under a strict base schema, and attach over data the template refuses
    strict: dict[str, Any] = copy.deepcopy(STATE)
    strict["schema"]["additionalProperties"] = False
    assert api("PUT", "/api/states/strict", strict)[0] == 200
    assert (
        api("PUT", "/api/states/strict/attachments/box", {"path": ["box"], "parameters": {"label": {}}})[0]
        == 200
    )
    strict_rec = "/api/states/strict/records/agent/bot/thread/s1"
    assert api("PATCH", strict_rec, {"box": {"note": "n"}})[0] == 200
    status, body = api("DELETE", "/api/states/strict/attachments/box")
    assert (
        status == 409
        and body["code"] == "records-invalid"
        and "record thread/s1 of agent bot in state 'strict'" in body["error"]
    ), body
    assert api("PATCH", strict_rec, {"title": "still writable"})[0] == 200
    assert api("PUT", "/api/states/loose", STATE)[0] == 200
    assert api("PATCH", "/api/states/loose/records/agent/bot/thread/l1", {"box": {"items": "x"}})[0] == 200
    status, body = api(
        "PUT", "/api/states/loose/attachments/box", {"path": ["box"], "parameters": {"label": {}}}
    )
    assert status == 409 and body["code"] == "records-invalid" and "$.box.items" in body["error"], body
    assert api("GET", "/api/states/loose")[1]["data"]["attachments"] == []


def test_detach_referees_can_refuse(store: SqlStore) -> None:
    service = StatesService(store)
    service.put_template("box", BOX)
    service.declare("tickets", STATE)
    service.attach("tickets", "box", {"path": ["box"], "parameters": {"label": {}}})
    service.register_detach_referee(lambda state, template: ["hook:on-alert"] if template == "box" else [])
    from stateflow.errors import Conflict

    with pytest.raises(Conflict, match="referenced by: hook:on-alert"):
        service.detach("tickets", "box")
    service.close()


def test_seeded_templates_install_once(store: SqlStore) -> None:
    service = StatesService(store)
    service.register_seed({**BOX, "name": "box"})
    service.install_seeds()
    service.install_seeds()
    [row] = service.list_templates()
    assert row["shipped_default"] is True and row["name"] == "box"
    service.put_template("box", broken(description="operator's"), replace=True)
    assert service.list_templates()[0]["shipped_default"] is False
    service.close()


def test_a_failing_reconcile_write_rolls_the_declarations_change_back(store: SqlStore) -> None:
    service = StatesService(store)
    service.put_template("box", BOX)
    service.declare("tickets", STATE)
    service.attach(
        "tickets",
        "box",
        {"path": ["box"], "parameters": {"label": {"type": "string"}}, "declarations": {"kinds": ["a"]}},
    )
    subject = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "t1"}
    service.apply("tickets", subject, [{"op": "set", "path": ["title"], "value": "x"}])

    def bad(state, template, operation, previous, new, options):  # type: ignore[no-untyped-def]
        from stateflow.states.models import StateSubject

        return [(StateSubject.model_validate(subject), [{"op": "set", "path": ["title"], "value": 5}])]

    service.register_attach_reconciler(bad)
    from stateflow.errors import InvalidInput

    with pytest.raises(InvalidInput, match="invalid under the state schema"):
        service.update_attachment("tickets", "box", {"declarations": {"kinds": ["b"]}})
    assert service.get_attachment("tickets", "box")["declarations"] == {"kinds": ["a"]}  # nothing committed
    assert service.read("tickets", subject)["data"]["title"] == "x"  # type: ignore[index]
    service.close()


def test_attach_runs_the_reconcile_flow_and_the_reconcilers_in_its_transaction(attached: Api) -> None:
    api = attached
    items = [{"id": "i1", "kind": "bug"}, {"id": "i2", "kind": "task"}]
    item = {"op": "set_by_key", "path": ["box", "items"], "key_field": "id", "value": items}
    assert api("POST", REC + "/deltas", {"ops": [item]})[0] == 200
    assert api("DELETE", "/api/states/tickets/attachments/box")[0] == 200
    again = {"path": ["box"], "parameters": {"label": {}}, "declarations": {"kinds": ["bug"]}}
    status, body = api("PUT", "/api/states/tickets/attachments/box", again)
    assert status == 422 and body["orphans"] == [
        {
            "target_kind": "agent",
            "target_name": "bot",
            "subject": "t1",
            "kind": "thread",
            "id": "i2",
            "label": "i2",
        }
    ]
    assert api("GET", "/api/states/tickets")[1]["data"]["attachments"] == []
    closing = {**again, "options": {"orphans": "close", "resolution": "abandoned"}}
    assert api("PUT", "/api/states/tickets/attachments/box", closing)[0] == 200
    after = api("GET", REC)[1]["data"]["data"]["box"]["items"]
    assert [i.get("closed") for i in after] == [None, "abandoned"]


def test_attach_reconcilers_see_the_attach_and_commit_with_it(store: SqlStore) -> None:
    from stateflow.errors import InvalidInput
    from stateflow.states.models import StateSubject

    service = StatesService(store)
    service.put_template("box", BOX)
    service.declare("tickets", STATE)
    subject = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "t1"}
    service.apply("tickets", subject, [{"op": "set", "path": ["title"], "value": "x"}])
    seen: list[tuple[str, Any, Any]] = []
    title: list[Any] = ["attached"]

    def reconciler(state, template, operation, previous, new, options):  # type: ignore[no-untyped-def]
        seen.append((operation, previous, options))
        return [(StateSubject.model_validate(subject), [{"op": "set", "path": ["title"], "value": title[0]}])]

    service.register_attach_reconciler(reconciler)
    title[0] = 5  # the state schema refuses it: the attach must not commit either
    with pytest.raises(InvalidInput, match="invalid under the state schema"):
        service.attach("tickets", "box", {"path": ["box"], "parameters": {"label": {}}, "options": {"o": 1}})
    assert service.attachments("tickets") == []
    title[0] = "attached"
    service.attach("tickets", "box", {"path": ["box"], "parameters": {"label": {}}, "options": {"o": 1}})
    assert seen == [("attach", None, {"o": 1}), ("attach", None, {"o": 1})]
    assert service.read("tickets", subject)["data"]["title"] == "attached"  # type: ignore[index]
    assert [a["template"] for a in service.attachments("tickets")] == ["box"]
    service.close()


def test_regime_matching_uses_the_longest_rule() -> None:
    from stateflow.states.templates import paths_overlap, regime_for

    rules = [{"path": ["a"], "regime": "composing"}, {"path": ["a", "b"], "regime": "single"}]
    assert regime_for(rules, ["a", "b"]) == "single"
    assert regime_for(rules, ["a"]) == "composing"
    assert regime_for(rules, ["a", "x", "y"]) == "composing"
    assert regime_for(rules, ["z"]) == "free"
    assert regime_for([{"path": ["*", "b"], "regime": "single"}], ["q", "b"]) == "single"
    for a, b in (
        ([], []),
        ([], ["a"]),
        (["a"], ["a", "b"]),
        (["a", "*"], ["a", "x", "y"]),
        (["a", 0], ["a", "*"]),
    ):
        assert paths_overlap(a, b)
    for a, b in ((["a", "b"], ["a", "c"]), (["*", "b"], ["a", "c"]), (["a"], ["b"])):
        assert not paths_overlap(a, b)


def test_a_longer_single_or_free_rule_under_a_composing_one_governs_its_writes(api: Api) -> None:
    nested = {
        "schema": {
            "type": "object",
            "properties": {
                "m": {"type": "object", "properties": {"b": {"type": "string"}, "c": {"type": "array"}}},
                "w": {"type": "object", "additionalProperties": {"type": "object"}},
            },
        },
        "regimes": [
            {"path": ["m"], "regime": "composing"},
            {"path": ["m", "b"], "regime": "single"},
            {"path": ["w", "*"], "regime": "composing"},
            {"path": ["w", "free1"], "regime": "free"},
        ],
    }
    assert api("PUT", "/api/state-templates/nested", nested)[0] == 200
    api("PUT", "/api/states/tickets", STATE)
    assert api("PUT", "/api/states/tickets/attachments/nested", {"path": ["tx"]})[0] == 200
    for path, value in ((["tx", "m", "b"], "owner-A"), (["tx", "w", "free1"], {"k": 1})):
        status, body = api("POST", REC + "/deltas", {"ops": [{"op": "set", "path": path, "value": value}]})
        assert status == 200, (path, body)
    for ops in (
        [{"op": "set", "path": ["tx", "m", "c"], "value": []}],  # governed by [m]: composing
        [{"op": "set", "path": ["tx", "m"], "value": {"b": "x"}}],
        [{"op": "set", "path": ["tx", "w", "other"], "value": {}}],  # governed by [w, *]
        [{"op": "remove", "path": ["tx", "w"]}],  # replaces the composing paths below it
    ):
        status, body = api("POST", REC + "/deltas", {"ops": ops})
        assert status == 422 and body["code"] == "regime-violation", ops
    record = api("GET", REC)[1]["data"]["data"]
    record["tx"]["m"]["b"] = "owner-B"
    assert api("PUT", REC, record)[0] == 200  # replace: only the single path changed
    assert api("PATCH", REC, {"tx": {**record["tx"], "m": {"b": "x", "c": [1]}}})[0] == 422


def test_a_busy_jq_pool_answers_503_with_retry_after() -> None:
    import threading
    import time

    from stateflow.http.app import _error
    from stateflow.jq import JqBusy, JqLimitExceeded, JqRunner

    busy = JqRunner(workers=1, timeout=2, queue=0)
    outcome: list[BaseException] = []

    def spin() -> None:
        try:
            busy.run("def f: f; f", None)
        except JqLimitExceeded as exc:
            outcome.append(exc)

    spinning = threading.Thread(target=spin)
    spinning.start()
    try:
        deadline = time.monotonic() + 60  # (a deadline for the machine, not a fixed sleep it may outlast)
        while busy._idle:  # the only worker is taken, and no caller may wait
            assert time.monotonic() < deadline and spinning.is_alive()
            time.sleep(0.005)
        with pytest.raises(JqBusy) as info:
            busy.run("1", None)
        response = _error(info.value)
        assert response.status_code == 503 and response.headers["Retry-After"] == "2"
        assert b'"code":"jq-busy"' in bytes(response.body)
    finally:
        spinning.join()
        busy.close()
    assert len(outcome) == 1
