"""The OpenAPI document matches what the API answers: a bounded schemathesis run against the
real app on both backends finds no server error and no response that breaks its schema."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.store import SqlStore

ADMIN = "admin-secret-0123456789"
DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def _app(store: SqlStore) -> FastAPI:
    service = StatesService(store)
    service.install_builtins()
    service.declare("tickets", DECL)
    subject = {"target_kind": "agent", "target_name": "support-bot", "kind": "thread", "key": "t-1"}
    service.replace("tickets", subject, {"status": "open"})
    return create_app(service, TokenSet([parse_token(ADMIN)]))


@pytest.fixture
def app(store: SqlStore) -> FastAPI:
    return _app(store)


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture
def api_schema(app: FastAPI) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_every_answer_matches_the_document(case: Any) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {ADMIN}"},
        checks=[
            not_a_server_error,
            response_schema_conformance,
            status_code_conformance,
            content_type_conformance,
        ],
    )


RECORD = "/api/states/{name}/records/{target_kind}/{target_name}/{kind}/{key}"
SUBJECT = {
    "name": "tickets",
    "target_kind": "agent",
    "target_name": "support-bot",
    "kind": "thread",
    "key": "t-1",
}
INTO = {k: v for k, v in SUBJECT.items() if k != "name"}
TEMPLATE = {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
TALLY = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "template_jq": {
        "count": {"purpose": "input", "jq": {"content": ".n // 0"}},
        "bump": {
            "purpose": "update",
            "params": ["by"],
            "jq": {"content": '[{"op": "set", "path": ["n"], "value": ((.n // 0) + $input.by)}]'},
        },
    },
}
# Every operation once on its success path, in an order where each finds what it needs
# (random generation rarely names the declared state, so success answers are checked here).
SUCCESS: list[tuple[str, str, dict[str, Any], Any, dict[str, Any]]] = [
    ("/api/health", "GET", {}, None, {}),
    ("/api/ready", "GET", {}, None, {}),
    ("/api/states", "GET", {}, None, {}),
    ("/api/states/{name}", "PUT", {"name": "other"}, DECL, {}),
    ("/api/states/{name}", "GET", {"name": "tickets"}, None, {}),
    ("/api/states/{name}/stats", "GET", {"name": "tickets"}, None, {}),
    ("/api/states/{name}/consumers", "GET", {"name": "tickets"}, None, {}),
    ("/api/states/{name}/subjects", "GET", {"name": "tickets"}, None, {"limit": 1}),
    (
        "/api/states/{name}/records/search",
        "POST",
        {"name": "tickets"},
        {"filters": {"status": {"$exists": True}}, "include_data": True},
        {},
    ),
    ("/api/state-templates/{name}", "PUT", {"name": "counter"}, TEMPLATE, {}),
    ("/api/state-templates", "GET", {}, None, {}),
    ("/api/state-templates/{name}", "GET", {"name": "counter"}, None, {}),
    (
        "/api/states/{name}/attachments/{template}",
        "PUT",
        {"name": "other", "template": "counter"},
        {"path": ["c"]},
        {},
    ),
    ("/api/states/{name}/attachments", "GET", {"name": "other"}, None, {}),
    ("/api/states/{name}/attachments/{template}", "GET", {"name": "other", "template": "counter"}, None, {}),
    (
        "/api/states/{name}/attachments/{template}",
        "PATCH",
        {"name": "other", "template": "counter"},
        {"declarations": {}},
        {},
    ),
    (
        "/api/states/{name}/attachments/{template}",
        "DELETE",
        {"name": "other", "template": "counter"},
        None,
        {},
    ),
    ("/api/state-templates/{name}", "DELETE", {"name": "counter"}, None, {}),
    # template jq on the record: an update program applies its ops, an input program reads
    ("/api/state-templates/{name}", "PUT", {"name": "tally"}, TALLY, {}),
    (
        "/api/states/{name}/attachments/{template}",
        "PUT",
        {"name": "tickets", "template": "tally"},
        {"path": ["tally"]},
        {},
    ),
    (
        RECORD + "/template-jq/{program}",
        "POST",
        {**SUBJECT, "program": "tally.bump"},
        {"input": {"by": 2}, "op_id": "tj"},
        {},
    ),
    (RECORD + "/template-jq/{program}", "GET", {**SUBJECT, "program": "tally.count"}, None, {}),
    (RECORD, "GET", SUBJECT, None, {}),
    (RECORD, "PUT", SUBJECT, {"status": "a"}, {}),
    (RECORD, "PATCH", SUBJECT, {"status": "b"}, {}),
    (
        RECORD + "/deltas",
        "POST",
        SUBJECT,
        {"ops": [{"op": "set", "path": ["status"], "value": "c"}], "op_id": "x"},
        {},
    ),
    (
        RECORD + "/deltas",
        "POST",
        SUBJECT,
        {"ops": [{"op": "set", "path": ["status"], "value": "c"}], "op_id": "x"},
        {},
    ),
    (RECORD, "GET", SUBJECT, None, {"revision": 1}),
    (RECORD + "/writes", "GET", SUBJECT, None, {"limit": 2}),
    (RECORD + "/diff", "GET", SUBJECT, None, {"from": 1}),
    (RECORD + "/revert", "POST", SUBJECT, {"revision": 1}, {}),
    (RECORD + "/fold", "POST", {**SUBJECT, "key": "t-2"}, {"into": INTO, "mode": "switch"}, {}),
    (RECORD, "DELETE", SUBJECT, None, {}),
    ("/api/state-retention/prune", "POST", {}, None, {}),
    ("/api/states/{name}", "DELETE", {"name": "other"}, None, {}),
]


def test_every_operation_answers_its_documented_success(app: FastAPI) -> None:
    loaded = schemathesis.openapi.from_asgi("/openapi.json", app)
    covered = set()
    answers: dict[tuple[str, str], Any] = {}
    for path, method, params, body, query in SUCCESS:
        op = loaded[path][method]
        kwargs: dict[str, Any] = {"path_parameters": params, "query": query}
        if body is not None:
            kwargs["body"] = body
            kwargs["media_type"] = "application/json"
        case = op.Case(**kwargs)
        response = case.call(headers={"Authorization": f"Bearer {ADMIN}"})
        assert response.status_code == 200, (path, method, response.text)
        case.validate_response(
            response, checks=[response_schema_conformance, status_code_conformance, content_type_conformance]
        )
        covered.add((path, method.lower()))
        answers.setdefault((path, method), response.json()["data"])
    jq = RECORD + "/template-jq/{program}"
    assert answers[(jq, "POST")]["data"]["tally"] == {"n": 2}  # the update program's ops applied
    assert answers[(jq, "GET")] == {"name": "tally.count", "purpose": "input", "value": 2}
    documented = {(p, m) for p, item in app.openapi()["paths"].items() for m in item}
    assert documented == covered


def test_document_declares_bearer_and_error_envelopes(app: FastAPI) -> None:
    doc = app.openapi()
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    assert doc["security"] == [{"bearer": []}]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if path in ("/api/health", "/api/ready"):  # (the token-less probes)
                continue
            assert "200" in op["responses"] and "content" in op["responses"]["200"], (path, method)
            for status in ("400", "401", "403", "404", "422", "501", "503"):
                ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                assert ref == "#/components/schemas/Error", (path, method, status)
    record = doc["paths"]["/api/states/{name}/records/{target_kind}/{target_name}/{kind}/{key}"]
    assert "412" in record["put"]["responses"] and "If-Match" in [
        p["name"] for p in record["put"]["parameters"]
    ]


def test_if_match_names_its_revision_form_once(app: FastAPI) -> None:
    """A record's writes and its read take ``If-Match`` in one form ("N" or *), defined once in
    the document and referred to by both parameters, so the two cannot drift apart."""
    doc = app.openapi()
    record = doc["paths"]["/api/states/{name}/records/{target_kind}/{target_name}/{kind}/{key}"]
    given = [p for op in record.values() for p in op.get("parameters", []) if p["name"] == "If-Match"]
    assert len({p["description"] for p in given}) == 2  # (the writes' and the read's own words)
    assert {str(p["schema"]) for p in given} == {"{'$ref': '#/components/schemas/RevisionPrecondition'}"}
    form = doc["components"]["schemas"]["RevisionPrecondition"]
    assert [s for s in ('"3"', "*", "3", '"3', 'W/"3"') if re.fullmatch(form["pattern"], s)] == ['"3"', "*"]
    assert json.dumps(doc).count(json.dumps(form["pattern"])) == 1


def test_page_limits_are_published_as_the_server_takes_them(app: FastAPI) -> None:
    """A limit over 500 answers a page of 500 and its cursor; the document said ``maximum: 500``
    for subjects and writes (a validating client refused 501) and nothing for search."""
    doc = app.openapi()
    record = "/api/states/{name}/records/{target_kind}/{target_name}/{kind}/{key}"
    given = [
        next(p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == "limit")
        for path in ("/api/states/{name}/subjects", record + "/writes")
    ]
    body = doc["components"]["schemas"]["SearchBody"]["properties"]["limit"]
    assert [p["schema"] for p in given] == [{"type": "integer", "minimum": 1}] * 2
    assert {p["description"] for p in given} == {body["description"]}
    assert "500" in body["description"] and "maximum" not in json.dumps(body)
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        r = client.get("/api/states/tickets/subjects", params={"limit": 501})
        assert r.status_code == 200 and len(r.json()["data"]["subjects"]) == 1
        search = {"filters": {"status": "open"}, "limit": 501}
        assert client.post("/api/states/tickets/records/search", json=search).status_code == 200
