"""`StatesService.unit()`: stage op batches, read through them, commit them in one transaction."""

from __future__ import annotations

from typing import Any

import pytest

from stateflow.errors import StateflowError
from stateflow.states import StatesService
from stateflow.states.unit import UnitClosed
from stateflow.store import SqlStore

DECL = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def subj(key: str) -> dict[str, str]:
    return {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": key}


def set_n(n: Any) -> list[dict[str, Any]]:
    return [{"op": "set", "path": ["n"], "value": n}]


def tag(t: str) -> list[dict[str, Any]]:
    return [{"op": "set", "path": ["tags", "-"], "value": t}]


@pytest.fixture
def service(store: SqlStore) -> StatesService:
    s = StatesService(store)
    s.declare("s", DECL)
    return s


def data(service: StatesService, key: str) -> Any:
    record = service.read("s", subj(key))
    return None if record is None else record["data"]


def test_staged_writes_are_read_through_and_committed_together(service: StatesService) -> None:
    service.apply("s", subj("a"), set_n(1))
    ran: list[str] = []
    with service.unit() as unit:
        preview = unit.apply("s", subj("a"), tag("x"))
        assert preview.data == {"n": 1, "tags": ["x"]} and preview.seq is None
        unit.apply("s", subj("b"), set_n(2), op_id="b-2")
        unit.defer(lambda: ran.append("after"))
        assert unit.read("s", subj("a"))["data"] == {"n": 1, "tags": ["x"]}  # type: ignore[index]
        assert unit.read("s", subj("b"))["data"] == {"n": 2}  # type: ignore[index]
        assert data(service, "b") is None and ran == []  # nothing written yet
    assert data(service, "a") == {"n": 1, "tags": ["x"]} and data(service, "b") == {"n": 2}
    assert ran == ["after"]
    seqs = {w["seq"] for key in "ab" for w in service.writes("s", subj(key))["items"][:1]}
    assert len(seqs) == 1  # one transaction
    assert service.store.applied_op("b-2", "s@agent/a") is not False


def test_an_exception_in_the_block_writes_nothing(service: StatesService) -> None:
    ran: list[str] = []
    with pytest.raises(RuntimeError), service.unit() as unit:
        unit.apply("s", subj("a"), set_n(1))
        unit.defer(lambda: ran.append("never"))
        raise RuntimeError("changed my mind")
    assert data(service, "a") is None and ran == []


def test_a_savepoint_drops_only_what_was_staged_inside_it(service: StatesService) -> None:
    with service.unit() as unit:
        unit.apply("s", subj("a"), tag("kept"))
        with pytest.raises(ValueError), unit.savepoint():
            unit.apply("s", subj("a"), tag("dropped"))
            unit.apply("s", subj("b"), set_n(1))
            raise ValueError("inner step failed")
        assert unit.read("s", subj("b")) is None
    assert data(service, "a") == {"tags": ["kept"]} and data(service, "b") is None


def test_a_refused_commit_writes_nothing_and_skips_deferred_calls(service: StatesService) -> None:
    ran: list[str] = []
    unit = service.unit()
    unit.apply("s", subj("a"), set_n(1))
    unit.apply("s", subj("b"), set_n("two"))  # the schema refuses it at commit
    unit.defer(lambda: ran.append("never"))
    with pytest.raises(StateflowError):
        unit.commit()
    assert data(service, "a") is None and ran == []
    with pytest.raises(UnitClosed):
        unit.apply("s", subj("a"), set_n(1))


def test_discard_and_malformed_ops(service: StatesService) -> None:
    unit = service.unit()
    with pytest.raises(StateflowError, match="unknown op"):
        unit.apply("s", subj("a"), [{"op": "pop", "path": ["n"]}])
    unit.apply("s", subj("a"), set_n(1))
    unit.discard()
    assert data(service, "a") is None
    with pytest.raises(UnitClosed):
        unit.commit()


def test_staged_preview_runs_the_regime_check_and_stamps_trace(service: StatesService) -> None:
    service.put_template(
        "log",
        {
            "schema": {
                "type": "object",
                "properties": {"entries": {"type": "array", "items": {"type": "object"}}},
            },
            "regimes": [{"path": ["entries"], "regime": "composing"}],
            "trace": {"enabled": True},
        },
    )
    service.attach("s", "log", {"path": ["log"]})
    with service.unit(origin={"run_id": "r-1"}) as unit:
        # a regime violation is refused when staged, not only at commit
        with pytest.raises(StateflowError, match="composing path"):
            unit.apply("s", subj("x"), [{"op": "set", "path": ["log", "entries"], "value": []}])
        unit.apply("s", subj("x"), [{"op": "set", "path": ["log", "entries", "-"], "value": {"m": "hi"}}])
        staged = unit.read("s", subj("x"))
        assert staged is not None
        entry = staged["data"]["log"]["entries"][0]
        assert entry["m"] == "hi" and entry["_trace"]["run"] == "r-1"
    written = service.read("s", subj("x"))
    assert written is not None and written["data"]["log"]["entries"][0]["_trace"]["run"] == "r-1"
