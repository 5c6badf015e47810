"""A declared state's record holds at most ``[states] max_record_members`` top-level members: a
write that would leave it with more (and more than it had) is refused whole — ``record-too-large``,
422 over HTTP — at every door, so no one write costs without bound."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from stateflow.config import Config, StatesSettings
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.states.schema import RecordTooLarge
from stateflow.store import SqlStore

ADMIN = "admin-secret-0123456789"
DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SUBJECT = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "k"}
RECORD = "/api/states/t/records/agent/bot/thread/k"


def members(n: int) -> dict[str, int]:
    return {f"m{i}": i for i in range(n)}


def service(store: SqlStore, limit: int) -> StatesService:
    states = StatesService(store, Config(states=StatesSettings(max_record_members=limit)))
    states.install_builtins()
    return states


def test_a_write_past_the_member_limit_is_refused_at_every_door(
    store: SqlStore, backend: str, tmp_path: Path
) -> None:
    states = service(store, 5)
    states.declare("t", DECL)
    expected = (
        "record thread/k of agent bot in state 't' would hold 6 top-level members, over the 5 a record may hold "
        "([states] max_record_members): split it over several records"
    )
    with pytest.raises(RecordTooLarge) as refused:
        states.replace("t", SUBJECT, members(6))
    assert (refused.value.code, refused.value.message) == ("record-too-large", expected)
    assert states.read("t", SUBJECT) is None
    assert states.replace("t", SUBJECT, members(5)) is not None  # at the limit: written
    with pytest.raises(RecordTooLarge):
        states.merge("t", SUBJECT, {"extra": 1})
    with pytest.raises(RecordTooLarge):
        states.apply("t", SUBJECT, [{"op": "set", "path": ["extra"], "value": 1}])
    with TestClient(create_app(states, TokenSet([parse_token(ADMIN)]))) as client:
        r = client.patch(RECORD, json={"extra": 1}, headers={"Authorization": f"Bearer {ADMIN}"})
        assert (r.status_code, r.json()["code"]) == (422, "record-too-large"), r.text
    env = {**os.environ, "STATEFLOW_MAX_RECORD_MEMBERS": "5"}
    merge = ["states", "merge", "t", "--target-name", "bot", "--key", "k", "--data", '{"extra": 1}']
    out = subprocess.run(
        ["stateflow", "--store", backend, *merge],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert (out.returncode, out.stderr) == (1, f"error[record-too-large]: {expected}\n")
    record = states.read("t", SUBJECT)
    assert record is not None and record["data"] == members(5) and record["revision"] == 1


def test_a_record_over_a_lowered_limit_may_be_written_but_not_grown(store: SqlStore) -> None:
    service(store, 10).declare("t", DECL)
    service(store, 10).replace("t", SUBJECT, members(8))
    states = service(store, 3)
    assert states.merge("t", SUBJECT, {"m0": 100}) is not None  # 8 members still: not grown
    assert states.merge("t", SUBJECT, {"m1": None}) is not None  # 7: shrunk
    with pytest.raises(RecordTooLarge):
        states.merge("t", SUBJECT, {"new": 1})
