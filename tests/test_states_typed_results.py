"""Every answer of the declared-states service conforms to its typed result (states/results.py):
the keys a result type requires are there and no key it does not name — through the Python
service and through the HTTP app (the published JSON), on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NotRequired, get_origin, get_type_hints

import pytest
from fastapi.testclient import TestClient

from stateflow.api import states_service
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.states import results as r
from stateflow.states.service import ConsumerRow
from stateflow.store import SqlStore
from tests.test_templates_http import BOX, STATE

TOKEN = "admin-secret-0123456789"
T1 = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "t1"}
T2 = {**T1, "key": "t2"}
REC = "/api/states/tickets/records/agent/bot/thread"


def conforms(value: Any, kind: Any) -> None:
    """``value`` has every key ``kind`` requires and none it does not name (``NotRequired`` read
    from the hints: the runtime's required keys miss it under postponed annotations)."""
    assert isinstance(value, dict), value
    hints = get_type_hints(kind, include_extras=True)
    required = {name for name, hint in hints.items() if get_origin(hint) is not NotRequired}
    assert required <= set(value), (kind.__name__, sorted(required - set(value)))
    assert set(value) <= set(hints), (kind.__name__, sorted(set(value) - set(hints)))


def each(values: list[Any], kind: Any) -> None:
    assert values
    for value in values:
        conforms(value, kind)


@pytest.fixture
def service(store: SqlStore) -> Iterator[StatesService]:
    service = states_service(store)
    # a consumer whose lister is down: listed, yet it does not keep the state from deletion
    service.register_consumer_lister("hook", lambda state: [ConsumerRow("hook", "pager", unavailable="down")])
    service.declare("tickets", STATE)
    service.put_template("box", BOX)
    service.attach("tickets", "box", {"path": ["box"], "parameters": {"label": {}}})
    yield service
    service.close()


def test_the_python_service_answers_its_result_types(service: StatesService) -> None:
    service.replace("tickets", T1, {"title": "one"})
    service.replace("tickets", T2, {"title": "two"})
    service.merge("tickets", T1, {"title": "one again"})
    conforms(service.diff("tickets", T1, 1), r.Diff)
    each(service.consumers("tickets"), r.Consumer)
    each(service.list_templates(), r.TemplateRow)
    conforms(service.get_template("box"), r.Template)
    each(service.attachments("tickets"), r.StateAttachment)
    conforms(service.get_attachment("tickets", "box"), r.StateAttachment)
    conforms(service.template_jq_input("tickets", T1, "ids", {}), r.JqInput)
    update = service.template_jq_update("tickets", T1, "add", {"id": "a-1"}, op_id="u-1")
    conforms(update, r.JqUpdate)
    conforms(service.template_jq_update("tickets", T1, "add", {"id": "a-1"}, op_id="u-1"), r.JqUpdate)
    conforms(service.apply("tickets", T1, [], op_id="n-1").to_json(), r.ApplyAnswer)
    conforms(service.fold("tickets", T2, T1, "merge"), r.FoldReport)
    conforms(service.fold("tickets", T2, T1, "merge"), r.FoldReport)  # already folded
    conforms(service.erase("tickets", T1), r.Erased)
    conforms(service.prune(), r.PruneReport)
    update_answer = service.update_attachment("tickets", "box", {"declarations": {"count": 1}})
    conforms(update_answer, r.AttachmentUpdated)
    conforms(service.detach("tickets", "box"), r.Detached)
    conforms(service.attach("tickets", "box", {"path": ["box"], "parameters": {"label": {}}}), r.Attached)
    conforms(service.put_template("other", BOX), r.Template)
    conforms(service.delete_template("other"), r.Deleted)
    conforms(service.writes("tickets", T1), r.Page)
    conforms(service.delete_declaration("tickets"), r.Deleted)


def test_the_published_json_answers_the_result_types(service: StatesService) -> None:
    with TestClient(create_app(service, TokenSet([parse_token(TOKEN)]))) as http:

        def call(method: str, path: str, body: Any = None) -> Any:
            answer = http.request(method, path, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
            assert answer.status_code == 200, answer.text
            return answer.json()["data"]

        call("PUT", f"{REC}/t1", {"title": "one"})
        call("PUT", f"{REC}/t2", {"title": "two"})
        call("PATCH", f"{REC}/t1", {"title": "one again"})
        conforms(call("GET", f"{REC}/t1/diff?from=1"), r.Diff)
        conforms(call("GET", f"{REC}/t1/writes"), r.Page)
        each(call("GET", "/api/states/tickets/consumers"), r.Consumer)
        each(call("GET", "/api/state-templates"), r.TemplateRow)
        conforms(call("GET", "/api/state-templates/box"), r.Template)
        each(call("GET", "/api/states/tickets/attachments"), r.StateAttachment)
        conforms(call("GET", "/api/states/tickets/attachments/box"), r.StateAttachment)
        conforms(call("GET", f"{REC}/t1/template-jq/ids"), r.JqInput)
        conforms(
            call("POST", f"{REC}/t1/template-jq/add", {"input": {"id": "a-1"}, "op_id": "u"}), r.JqUpdate
        )
        conforms(call("POST", f"{REC}/t2/fold", {"into": T1, "mode": "switch"}), r.FoldReport)
        conforms(call("DELETE", f"{REC}/t1"), r.Erased)
        conforms(call("POST", "/api/state-retention/prune"), r.PruneReport)
        conforms(call("DELETE", "/api/states/tickets/attachments/box"), r.Detached)
        attached = call(
            "PUT", "/api/states/tickets/attachments/box", {"path": ["box"], "parameters": {"label": {}}}
        )
        conforms(attached, r.Attached)
        conforms(call("PUT", "/api/state-templates/other", BOX), r.Template)
        conforms(call("DELETE", "/api/state-templates/other"), r.Deleted)
        conforms(call("DELETE", "/api/states/tickets"), r.Deleted)


def test_apply_result_lives_with_the_other_results_and_replace_and_merge_always_answer_a_record(
    service: StatesService,
) -> None:
    # the documentation sent readers to stateflow.states.results for ApplyResult, which lived in
    # the service module only; both paths now import the one class
    from stateflow.states.service import ApplyResult

    assert ApplyResult is r.ApplyResult and r.ApplyResult.__module__ == "stateflow.states.results"
    applied = service.apply("tickets", T1, [{"op": "set", "path": ["title"], "value": "x"}])
    assert type(applied) is r.ApplyResult
    # replace and merge answer a record every time (typed `Record`, no longer `Record | None`):
    # a merge of nothing onto an absent record too, the empty record it would make, writing nothing
    conforms(service.replace("tickets", T1, {"title": "one"}), r.Record)
    conforms(service.merge("tickets", T1, {"title": "two"}), r.Record)
    conforms(service.merge("tickets", T1, {}), r.Record)
    empty = service.merge("tickets", T2, {})
    conforms(empty, r.Record)
    assert (empty["data"], empty["revision"], empty["seq"]) == ({}, 0, None)
    assert service.read("tickets", T2) is None
