"""Values as deep as a document may nest (254 levels from its top), through the doors."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateflow.store import SqlStore
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


def test_the_cli_search_refuses_a_too_deep_filter_with_a_message_and_exit_1(tmp_path: Path) -> None:
    env = dict(os.environ, STATEFLOW_STORE=str(tmp_path / "s.db"), STATEFLOW_URL="", STATEFLOW_TOKEN="")

    def sf(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, env=env)

    assert sf("states", "put", "deep", "--data", json.dumps(DECL)).returncode == 0
    record = ("--target-name", "bot", "--key", "k")
    assert sf("states", "replace", "deep", *record, "--data", json.dumps({"a": nested(200)})).returncode == 0
    found = sf("states", "search", "deep", "--filters", json.dumps({"a": nested(200)}))
    assert found.returncode == 0 and json.loads(found.stdout)["matches"][0]["subject"]["key"] == "k"
    refused = sf("states", "search", "deep", "--filters", json.dumps({"a": nested(254)}))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("error[invalid-json]: filters.a[0]")
