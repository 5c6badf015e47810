"""A subject's bounds (docs/states.md: a target name of 1-256 characters, a kind of the kind
pattern, a key of 1-512 characters after trimming) are published where a subject is asked for —
the MCP state tools' input schemas and the OpenAPI document — from the subject model itself, so
a client reading them learns where the refusals begin."""

from __future__ import annotations

import os
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from stateflow.states import StatesService
from stateflow.states.models import KEY_MAX_CHARS, TARGET_NAME_MAX_CHARS, StateSubject
from stateflow.store import SqlStore

from .http_api import tenant_api

DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def _bounds(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: schema.get(k) for k in ("minLength", "maxLength", "pattern")}


TARGET_NAME = {"minLength": 1, "maxLength": TARGET_NAME_MAX_CHARS, "pattern": None}
KIND = {"minLength": None, "maxLength": 63, "pattern": "^[a-z][a-z0-9_-]{0,62}$"}
KEY = {"minLength": 1, "maxLength": KEY_MAX_CHARS, "pattern": None}


def test_the_model_advertises_what_it_refuses() -> None:
    parts = StateSubject.model_json_schema()["properties"]
    assert [_bounds(parts[n]) for n in ("target_name", "kind", "key")] == [TARGET_NAME, KIND, KEY]


def test_the_mcp_state_tools_publish_the_subjects_bounds(backend: str, store: SqlStore) -> None:
    StatesService(store).declare("notes", DECL)
    long_key = "k" * (KEY_MAX_CHARS + 1)

    async def run() -> tuple[dict[str, Any], list[Any]]:
        params = StdioServerParameters(
            command="stateflow",
            args=["--store", backend, "mcp", "--states", "*"],
            env=dict(os.environ),  # the SDK passes only a few variables by default
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
            calls = [
                await client.call_tool("state_read", {"state": "notes", "subject": key})
                for key in (long_key, "k" * KEY_MAX_CHARS, f"  {'k' * KEY_MAX_CHARS} ")
            ]
            return tools, calls

    tools, calls = anyio.run(run)
    for name in ("state_read", "state_replace", "state_merge", "state_apply", "state_template_jq"):
        shaped, bare = tools[name]["properties"]["subject"]["anyOf"]
        parts = shaped["properties"]
        assert [_bounds(parts[n]) for n in ("target_name", "kind", "key")] == [TARGET_NAME, KIND, KEY], name
        assert _bounds(bare) == KEY, name
    # the refusal begins where the schema says, in the subject model's words, as at every door
    assert calls[0].is_error and calls[0].content[0].text == (
        "error[subject-refused]: invalid subject: key: subject key must be at most "
        f"{KEY_MAX_CHARS} characters after trimming"
    )
    assert not calls[1].is_error and not calls[2].is_error  # (a key is bounded once trimmed)


def test_the_openapi_document_publishes_the_subjects_bounds(store: SqlStore) -> None:
    with tenant_api(store) as api:
        status, doc = api("GET", "/openapi.json")
        assert status == 200
        subject = doc["components"]["schemas"]["Subject"]["properties"]
        assert [_bounds(subject[n]) for n in ("target_name", "kind", "key")] == [TARGET_NAME, KIND, KEY]
        route = doc["paths"]["/api/states/{name}/records/{target_kind}/{target_name}/{kind}/{key}"]
        for method in ("get", "put", "patch", "delete"):
            params = {p["name"]: p["schema"] for p in route[method]["parameters"] if p["in"] == "path"}
            assert [_bounds(params[n]) for n in ("target_name", "kind", "key")] == [
                TARGET_NAME,
                {**KIND, "minLength": 1},
                KEY,
            ], method
        assert api("PUT", "/api/states/notes", DECL)[0] in (200, 201)
        record = "/api/states/notes/records/agent/{}/thread/k"
        status, body = api("PUT", record.format("a" * (TARGET_NAME_MAX_CHARS + 1)), {"n": 1})
        assert (status, body["code"]) == (422, "subject-refused"), body
        assert api("PUT", record.format("a" * TARGET_NAME_MAX_CHARS), {"n": 1})[0] == 200
