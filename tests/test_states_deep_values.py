"""Values as deep as a document may nest (254 levels from its top), through the doors."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateflow.states import StatesService
from stateflow.store import SqlStore, open_store
from tests.http_api import Api, tenant_api

DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"a": {}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
RECORD = "/api/states/deep/records/agent/bot/thread"


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture
def api(store: SqlStore) -> Iterator[Api]:
    with tenant_api(store) as api:
        assert api("PUT", "/api/states/deep", DECL)[0] == 200
        yield api


DEEPEST = 253  # lists under "a": with the record's own object, the 254 levels a document may nest


def test_a_record_as_deep_as_a_document_may_nest_is_written_and_answered(api: Api) -> None:
    # answers carry the record in an envelope ({"data": {"data": …}}) two or more levels deeper
    # than the encoder's own limit: 252 and 253 levels were stored, then answered 422 invalid-json
    # "Recursion limit reached" (the write had landed), and could not be read back
    for levels in (DEEPEST - 1, DEEPEST):
        status, body = api("PUT", f"{RECORD}/p{levels}", {"a": nested(levels)})
        assert status == 200 and body["data"]["data"] == {"a": nested(levels)}
        ops = [{"op": "set", "path": ["a"], "value": nested(levels)}]
        status, body = api("POST", f"{RECORD}/d{levels}/deltas", {"ops": ops})
        assert status == 200 and body["data"]["data"] == {"a": nested(levels)}
    assert api("GET", f"{RECORD}/p{DEEPEST}")[1]["data"]["data"] == {"a": nested(DEEPEST)}
    assert api("GET", f"{RECORD}/p{DEEPEST}?revision=1")[1]["data"]["data"] == {"a": nested(DEEPEST)}
    status, body = api("GET", f"{RECORD}/p{DEEPEST}/diff?from=0&to=1")
    assert status == 200, body
    # a change to a record that exists: its audit entry holds the value two levels deeper still
    status, body = api("PATCH", f"{RECORD}/p{DEEPEST}", {"a": [nested(DEEPEST - 1), 2]})
    assert status == 200 and body["data"]["revision"] == 2, body
    assert api("GET", f"{RECORD}/p{DEEPEST}/diff?from=1&to=2")[0] == 200
    assert api("GET", f"{RECORD}/p{DEEPEST}?revision=1")[1]["data"]["data"] == {"a": nested(DEEPEST)}
    assert len(api("GET", f"{RECORD}/p{DEEPEST}/writes")[1]["data"]["items"]) == 2
    search = {"filters": {"a": nested(DEEPEST)}, "include_data": True}
    status, body = api("POST", "/api/states/deep/records/search", search)
    assert status == 200 and [m["subject"]["key"] for m in body["data"]["matches"]] == ["d253", "p253"]

    # one level more: refused as documented, and nothing is written
    ops = [{"op": "set", "path": ["a"], "value": nested(DEEPEST + 1)}]
    status, body = api("POST", f"{RECORD}/x/deltas", {"ops": ops})
    assert status == 422 and body["code"] == "invalid-ops"
    assert body["error"].startswith("ops[0]: value[0]") and "nested deeper than 254 levels" in body["error"]
    status, body = api("PUT", f"{RECORD}/x", {"a": nested(DEEPEST + 1)})
    assert status == 422 and "nested deeper than 254 levels" in body["error"]
    assert api("GET", f"{RECORD}/x")[1]["data"] is None


def test_a_search_filter_as_deep_as_the_record_finds_it(api: Api) -> None:
    # the containment walk took three interpreter frames a level on SQLite: 500 at 200 levels
    assert api("PUT", f"{RECORD}/k", {"a": nested(200)})[0] == 200
    status, body = api("POST", "/api/states/deep/records/search", {"filters": {"a": nested(200)}})
    assert status == 200, body
    assert [m["subject"]["key"] for m in body["data"]["matches"]] == ["k"]


def test_a_filter_deeper_than_a_document_may_nest_is_refused(api: Api) -> None:
    status, body = api("POST", "/api/states/deep/records/search", {"filters": {"a": nested(254)}})
    assert status == 422 and body["code"] == "invalid-json"
    assert body["error"].startswith("filters.a[0]") and "nested deeper than 254 levels" in body["error"]
    deep: Any = {"$exists": True}
    for _ in range(900):  # objects: walked for operators before any containment check
        deep = {"a": deep}
    status, body = api("POST", "/api/states/deep/records/search", {"filters": deep})
    assert status == 422 and "nested deeper than 254 levels" in body["error"]


def test_the_cli_searches_and_reads_the_deepest_records_and_refuses_a_deeper_filter(tmp_path: Path) -> None:
    env = dict(os.environ, STATEFLOW_STORE=str(tmp_path / "s.db"), STATEFLOW_URL="", STATEFLOW_TOKEN="")

    def sf(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, env=env)

    assert sf("states", "put", "deep", "--data", json.dumps(DECL)).returncode == 0
    record = ("--target-name", "bot", "--key", "k")
    assert sf("states", "replace", "deep", *record, "--data", json.dumps({"a": nested(200)})).returncode == 0
    found = sf("states", "search", "deep", "--filters", json.dumps({"a": nested(200)}))
    assert found.returncode == 0 and json.loads(found.stdout)["matches"][0]["subject"]["key"] == "k"
    deepest = ("--target-name", "bot", "--key", "deepest")
    assert (
        sf("states", "replace", "deep", *deepest, "--data", json.dumps({"a": nested(DEEPEST)})).returncode
        == 0
    )
    read = sf(
        "states", "read", "deep", *deepest
    )  # (its answer's envelope is deeper than the encoder's limit)
    assert read.returncode == 0 and json.loads(read.stdout)["data"] == {"a": nested(DEEPEST)}
    refused = sf("states", "search", "deep", "--filters", json.dumps({"a": nested(254)}))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("error[invalid-json]: filters.a[0]")


def test_a_store_holding_the_deepest_record_dumps_loads_and_runs_template_jq_on_it(
    backend: str, tmp_path: Path
) -> None:
    # a dump line puts the record one level under its envelope (a transition's edit, four): the
    # dump of the whole store died with orjson's "Recursion limit reached"; a jq worker's request
    # and answer did the same, and an update program writing such a value raised a TypeError
    store = open_store(backend, auto_migrate=True)
    service = StatesService(store)
    try:
        service.declare("deep", DECL)
        service.put_template(
            "echo",
            {
                "schema": {"type": "object", "properties": {"v": {}}},
                "template_jq": {
                    "get": {"purpose": "input", "jq": {"content": "."}},
                    "put": {
                        "purpose": "update",
                        "params": ["x"],
                        "jq": {"content": '[{"op": "set", "path": ["v"], "value": $input.x}]'},
                    },
                },
            },
        )
        service.attach("deep", "echo", {"path": ["at"]})
        thread = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "k"}
        service.replace("deep", thread, {"a": nested(DEEPEST)})
        service.apply("deep", thread, [{"op": "set", "path": ["a"], "value": nested(DEEPEST)[0] + [2]}])
        service.template_jq_update("deep", thread, "put", {"x": nested(DEEPEST - 2)})  # under "at"
        expected = {"a": nested(DEEPEST)[0] + [2], "at": {"v": nested(DEEPEST - 2)}}
        assert service.template_jq_input("deep", thread, "get", {})["value"] == {"v": nested(DEEPEST - 2)}
    finally:
        service.close()
        store.close()
    env = dict(os.environ, STATEFLOW_URL="", STATEFLOW_TOKEN="")
    for history in ((), ("--no-history",)):
        dump = tmp_path / f"dump{len(history)}.jsonl"
        copy = str(tmp_path / f"copy{len(history)}.db")
        done = subprocess.run(
            ["stateflow", "--store", backend, "dump", *history, str(dump)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        loaded = subprocess.run(
            ["stateflow", "--store", copy, "load", str(dump)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert loaded.returncode == 0, loaded.stderr
        reopened = open_store(copy)
        copied = StatesService(reopened)
        try:
            record = copied.read("deep", thread)
            assert record is not None and record["data"] == expected
            assert record["revision"] == (1 if history else 3)
        finally:
            copied.close()
            reopened.close()
