"""A record write's values are checked as plain JSON once: a whole document checked on its way
in (replace, revert) is vouched for to the store; one a ``_trace`` stamp deepened is checked by
the pipeline as the store would check it; a merge's and an op batch's by the store."""

from __future__ import annotations

from typing import Any

import pytest

from stateflow.errors import InvalidJSON, OpError
from stateflow.states import StatesService
from stateflow.store import SqlStore

SUBJECT = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "t"}


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.fixture
def service(store: SqlStore) -> StatesService:
    s = StatesService(store)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    s.declare("s", {"schema": schema, "subject_kinds": ["thread"], "default_subject_kind": "thread"})
    s.put_template(
        "log",
        {"schema": {"type": "object", "properties": {"x": {"type": "integer"}}}, "trace": {"enabled": True}},
    )
    s.attach("s", "log", {"path": ["log"]})
    return s


def test_a_document_the_trace_stamp_deepens_past_the_limit_is_refused(service: StatesService) -> None:
    # the origin's meta passes its own check; stamped into the traced object it sits three
    # levels deeper, past what JSON storage takes: the replace is refused, nothing is written
    deep = nested(252)
    with pytest.raises(InvalidJSON, match="nested deeper than 254 levels"):
        service.replace("s", SUBJECT, {"log": {"x": 1}}, origin={"meta": deep})
    assert service.read("s", SUBJECT) is None
    assert service.writes("s", SUBJECT)["items"] == []
    # within the limit the same write is stored, stamped
    written = service.replace("s", SUBJECT, {"log": {"x": 1}}, origin={"meta": nested(200)})
    assert written is not None and written["data"]["log"]["_trace"]["meta"] == nested(200)
    assert service.read("s", SUBJECT) == written


def test_values_too_deep_in_the_record_are_refused_whoever_checks_them(service: StatesService) -> None:
    service.replace("s", SUBJECT, {"log": {"x": 1}, "n": 1})
    # values the pipeline checks (an op batch's, a merge's) and a document replace checks whole:
    # each too deep once it sits in the record, each refused, nothing written
    with pytest.raises(OpError, match=r"^ops\[0\]: value.*nested deeper than 254 levels"):
        service.apply("s", SUBJECT, [{"op": "set", "path": ["deep"], "value": nested(254)}])
    with pytest.raises(InvalidJSON, match="nested deeper than 254 levels"):
        service.merge("s", SUBJECT, {"deep": nested(254)})
    with pytest.raises(InvalidJSON, match="nested deeper than 254 levels"):
        service.replace("s", SUBJECT, {"deep": nested(254)})
    with pytest.raises(InvalidJSON, match=r"^\$\.n: nan is not a JSON number"):
        service.replace("s", SUBJECT, {"n": float("nan")})
    record = service.read("s", SUBJECT)
    assert record is not None and record["data"]["n"] == 1 and "deep" not in record["data"]
    assert record["revision"] == 1
