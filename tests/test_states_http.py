"""The declared-states contract over the real HTTP app, on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_to_bytes

import pytest
from fastapi.responses import Response
from fastapi.testclient import TestClient

from stateflow.config import Config, RetentionConfig
from stateflow.doc.canonical import encode
from stateflow.errors import BadRequest, InvalidInput
from stateflow.http.app import _json, _segment, create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.store import SqlStore
from stateflow.store.sqlite import SqliteStore
from tests.http_api import ADMIN, ALICE, READER, Api, tenant_api

from .threads import run_threads

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "string"},
        "count": {"type": "integer"},
        "people": {"type": "array", "items": {"type": "object"}},
        "box": {"type": "object"},
    },
}
DECL: dict[str, Any] = {
    "schema": SCHEMA,
    "subject_kinds": ["thread", "person"],
    "default_subject_kind": "thread",
}


@pytest.fixture
def api(store: SqlStore) -> Iterator[Api]:
    with tenant_api(store) as api:
        yield api


def rec(key: str, tn: str = "alice", kind: str = "thread") -> str:
    return f"/api/states/tickets/records/agent/{tn}/{kind}/{key}"


@pytest.fixture
def declared(api: Api) -> Api:
    status, body = api("PUT", "/api/states/tickets", DECL)
    assert status == 200, body
    return api


def test_declare_list_get_and_computed_fields(api: Api) -> None:
    status, body = api("PUT", "/api/states/tickets", DECL)
    # the declare answers what a read answers (computed fields included)
    assert status == 200 and body["data"] == api("GET", "/api/states/tickets")[1]["data"]
    assert body["data"]["effective_schema"] == SCHEMA and body["data"]["regimes"] == []
    status, body = api("GET", "/api/states")
    assert [d["name"] for d in body["data"]] == ["memory", "tickets"]
    status, body = api("GET", "/api/states/tickets")
    assert body["data"]["effective_schema"] == SCHEMA and body["data"]["updated_at"]
    assert body["data"]["retention_exempt"] is False
    # exempt from the retention sweep: shown, kept by a re-declare not naming it, never with a retention
    assert api("PUT", "/api/states/tickets", {**DECL, "retention_exempt": True})[1]["data"][
        "retention_exempt"
    ]
    assert api("PUT", "/api/states/tickets", {**DECL, "description": "d"})[1]["data"]["retention_exempt"]
    status, body = api("PUT", "/api/states/tickets", {**DECL, "retention_days": 9})
    assert status == 422 and "is retention-exempt" in body["error"]
    status, body = api("PUT", "/api/states/tickets", {**DECL, "retention_exempt": False, "retention_days": 9})
    assert status == 200 and (body["data"]["retention_exempt"], body["data"]["retention_days"]) == (False, 9)
    for field in ("effective_schema", "regimes", "updated_at"):
        status, body = api(
            "PUT", "/api/states/tickets", {**DECL, field: {} if field != "updated_at" else "x"}
        )
        assert (status == 422 and "computed" in body["error"]) or "set by the platform" in body["error"]


@pytest.mark.parametrize(
    ("decl", "message"),
    [
        ({**DECL, "schema": {"type": "array"}}, 'must declare "type": "object"'),
        ({**DECL, "schema": {"type": "object", "properties": {}}}, "at least one property"),
        ({**DECL, "schema": {"type": "object", "properties": {"a": {"$ref": "http://x/y"}}}}, "remote $ref"),
        (
            {**DECL, "schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}},
            "does not resolve",
        ),
        ({**DECL, "schema": {"type": "object", "properties": {"a": {"type": 5}}}}, "not a valid JSON Schema"),
        ({**DECL, "subject_kinds": ["thread", "thread"]}, "unique"),
        ({**DECL, "subject_kinds": ["Thread"]}, "kind"),
        ({**DECL, "default_subject_kind": "person2"}, "default_subject_kind"),
        ({**DECL, "retention_days": 0}, "retention_days"),
        # a number in text was read as the number: a positive integer is a JSON integer
        ({**DECL, "retention_days": "  7 "}, "retention_days must be an integer"),
        ({**DECL, "retention_days": "5"}, "retention_days must be an integer"),
        ({**DECL, "retention_days": True}, "retention_days must be an integer"),
        ({**DECL, "retention_exempt": 1}, "retention_exempt must be true or false"),
        ({**DECL, "retention_exempt": True, "retention_days": 5}, "contradict"),
        ({**DECL, "unknown": 1}, "unknown"),
    ],
)
def test_invalid_declarations_are_refused_with_422(api: Api, decl: dict[str, Any], message: str) -> None:
    status, body = api("PUT", "/api/states/tickets", decl)
    assert status == 422 and message.lower() in body["error"].lower(), body
    assert api("GET", "/api/states/tickets")[0] == 404


def test_bad_state_names_and_bodies(api: Api) -> None:
    assert api("PUT", "/api/states/Bad:Name", DECL)[0] == 422
    # a JSON body of the wrong type is the service's refusal, as from Python; one that is not
    # JSON at all is the door's
    status, body = api("PUT", "/api/states/tickets", [1])
    assert (status, body) == (422, {"error": "a declaration must be a JSON object", "code": "invalid-input"})
    r = api.client.put("/api/states/tickets", content=b"{nope", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 400 and r.json()["code"] == "bad-request"


def test_a_declaration_naming_another_state_is_refused_and_writes_nothing(api: Api) -> None:
    status, body = api("PUT", "/api/states/tickets", {**DECL, "name": "queues"})
    assert (status, body["code"]) == (422, "invalid-input"), body
    assert "'queues' differs from the state name 'tickets'" in body["error"]
    assert api("GET", "/api/states/tickets")[0] == 404 and api("GET", "/api/states/queues")[0] == 404
    assert api("PUT", "/api/states/tickets", {**DECL, "name": "tickets"})[0] == 200  # the same: fine
    status, body = api("PUT", "/api/states/tickets", {**DECL, "name": "queues", "description": "v2"})
    assert status == 422 and api("GET", "/api/states/tickets")[1]["data"]["description"] == ""


def test_redeclare_is_additive_while_records_exist(declared: Api) -> None:
    api = declared
    assert api("PUT", rec("t1"), {"status": "open"})[0] == 200
    added = {
        **DECL,
        "schema": {**SCHEMA, "properties": {**SCHEMA["properties"], "extra": {"type": "string"}}},
    }
    assert api("PUT", "/api/states/tickets", added)[0] == 200
    changed = {
        **DECL,
        "schema": {**SCHEMA, "properties": {**SCHEMA["properties"], "status": {"type": "integer"}}},
    }
    status, body = api("PUT", "/api/states/tickets", changed)
    assert status == 409 and "erase them first" in body["error"]
    strict = {**added, "schema": {**added["schema"], "additionalProperties": False}}
    assert api("PUT", "/api/states/tickets", strict)[0] == 409
    no_thread = {**added, "subject_kinds": ["person"], "default_subject_kind": "person"}
    status, body = api("PUT", "/api/states/tickets", no_thread)
    assert status == 409 and "still has records under subject kind(s) ['thread']" in body["error"]
    assert api("PUT", "/api/states/tickets", {**added, "retention_days": 30, "description": "d"})[0] == 200
    assert api("DELETE", rec("t1"))[0] == 200
    assert api("PUT", "/api/states/tickets", changed)[0] == 200  # no records: anything goes


def test_records_read_replace_merge_erase(declared: Api) -> None:
    api = declared
    assert api("GET", rec("t1")) == (200, {"data": None})
    status, body = api("PUT", rec("t1"), {"status": "open", "count": 1})
    assert (
        status == 200
        and body["data"]["data"] == {"status": "open", "count": 1}
        and body["data"]["revision"] == 1
    )
    status, body = api("PATCH", rec("t1"), {"count": 2, "note": None})
    assert body["data"]["data"] == {"status": "open", "count": 2, "note": None}  # null is stored
    status, body = api("PUT", rec("t1"), {"count": "many"})
    assert status == 422 and "$.count" in body["error"]
    assert api("PUT", rec("t1"), [1]) == (
        422,
        {"error": "a record document must be a JSON object", "code": "invalid-input"},
    )
    assert api("PATCH", rec("t1"), [1])[1]["error"] == "a merge patch must be a JSON object"
    assert api("DELETE", rec("t1")) == (200, {"data": {"erased": True}})
    assert api("GET", rec("t1")) == (200, {"data": None})
    assert api("DELETE", rec("t1")) == (200, {"data": {"erased": False}})  # nothing left to erase
    status, body = api("GET", rec("t1") + "/writes")
    assert [w["action"] for w in body["data"]["items"]] == ["erase", "merge", "replace"]
    assert body["data"]["next_cursor"] is None
    first = api("GET", rec("t1") + "/writes?limit=2")[1]["data"]
    assert [w["action"] for w in first["items"]] == ["erase", "merge"] and first["next_cursor"]
    rest = api("GET", rec("t1") + f"/writes?limit=1&cursor={first['next_cursor']}")[1]["data"]
    assert [w["action"] for w in rest["items"]] == ["replace"] and rest["next_cursor"] is None


def test_subject_validation(declared: Api) -> None:
    api = declared
    assert api("GET", "/api/states/tickets/records/robot/alice/thread/t1")[0] == 422
    status, body = api("GET", "/api/states/tickets/records/agent/alice/unknown/t1")
    assert status == 422 and "not declared by state 'tickets'" in body["error"]
    assert api("GET", "/api/states/tickets/records/agent/alice/thread/%20%20")[0] == 422
    assert api("GET", "/api/states/tickets/records/agent/alice/thread/" + "k" * 513)[0] == 422
    status, body = api("GET", "/api/states/tickets/records/agent/alice/thread/%20padded%20")
    assert status == 200  # keys are trimmed
    assert api("GET", "/api/states/nope/records/agent/alice/thread/t1")[0] == 404


def test_op_batches_guards_and_idempotency(declared: Api) -> None:
    api = declared
    ops = [
        {"op": "set", "path": ["status"], "value": "open"},
        {
            "op": "set_by_key",
            "path": ["people"],
            "key_field": "id",
            "value": [{"id": 1, "n": "a"}, {"id": 2}],
        },
        {"op": "set", "path": ["count"], "value": 9, "guard": {"path": ["status"], "expected": "closed"}},
    ]
    status, body = api("POST", rec("t1") + "/deltas", {"ops": ops, "op_id": "op-1"})
    assert status == 200
    data = body["data"]
    assert data["applied"] is True and data["data"] == {
        "status": "open",
        "people": [{"id": 1, "n": "a"}, {"id": 2}],
    }
    assert data["skipped"] == [
        {
            "index": 2,
            "op": {"op": "set", "path": ["count"], "value": 9},
            "reason": "guard",
            "expected": "closed",
            "actual": None,
        }
    ]
    status, body = api(
        "POST", rec("t1") + "/deltas", {"ops": [{"op": "remove", "path": ["status"]}], "op_id": "op-1"}
    )
    assert body["data"] == {
        "applied": False,
        "data": None,
        "seq": None,
        "skipped": [],
        "replayed": True,
        "replayed_seq": data["seq"],
    }
    assert api("GET", rec("t1"))[1]["data"]["data"]["status"] == "open"
    # a refused batch does not consume its op_id
    status, body = api(
        "POST",
        rec("t1") + "/deltas",
        {"ops": [{"op": "set", "path": ["count"], "value": "x"}], "op_id": "op-2"},
    )
    assert status == 422
    status, body = api(
        "POST",
        rec("t1") + "/deltas",
        {"ops": [{"op": "set", "path": ["count"], "value": 3}], "op_id": "op-2"},
    )
    assert body["data"]["applied"] is True and body["data"]["data"]["count"] == 3
    assert api("POST", rec("t1") + "/deltas", {"ops": []})[1]["data"] == {
        "applied": False,
        "data": None,
        "seq": None,
        "skipped": [],
    }
    # an empty batch writes nothing, but still names an unknown state or a refused subject
    status, body = api("POST", "/api/states/nope/records/agent/bot/thread/t1/deltas", {"ops": []})
    assert status == 404 and body["code"] == "state-not-found", body
    status, body = api("POST", "/api/states/tickets/records/agent/bot/planet/t1/deltas", {"ops": []})
    assert status == 422 and "subject kind 'planet'" in body["error"], body
    status, body = api("POST", rec("t1") + "/deltas", {"ops": [{"op": "frob", "path": ["a"]}]})
    assert status == 422 and body["error"].startswith("ops[0]: unknown op 'frob'")
    # the published answer for ops that are not an array (was 422 from the service)
    bad: list[Any] = ["x", {"op": "set"}, None]
    for ops in bad:
        assert api("POST", rec("t1") + "/deltas", {"ops": ops}) == (
            400,
            {"error": "body must contain a JSON array 'ops'", "code": "bad-request"},
        )
    assert api("POST", rec("t1") + "/deltas", {"op": []})[0] == 400
    writes = api("GET", rec("t1") + "/writes")[1]["data"]["items"]
    assert [w["origin"]["op_id"] for w in writes] == ["op-2", "op-1"]
    assert writes[1]["paths"] == [["status"], ["people"]] and writes[1]["origin"]["door"] == "api"
    assert writes[1]["origin"]["actor"].startswith("token:") and ADMIN[:6] not in writes[1]["origin"]["actor"]


def test_keys_with_slashes_and_writes_suffix_stay_one_segment(declared: Api) -> None:
    api = declared
    key = "bridge%3Aweb%3Aacme.example.com%2F%2B15550001111%2Fu-42"
    assert api("PUT", rec(key), {"status": "x"})[0] == 200
    _, body = api("GET", rec(key))
    assert body["data"]["subject"]["key"] == "bridge:web:acme.example.com/+15550001111/u-42"
    _status, body = api("PUT", rec("conv%2Fwrites"), {"status": "y"})
    assert body["data"]["subject"]["key"] == "conv/writes"
    assert api("GET", rec("conv%2Fwrites"))[1]["data"]["data"] == {"status": "y"}
    assert len(api("GET", rec("conv%2Fwrites") + "/writes")[1]["data"]["items"]) == 1


@pytest.mark.parametrize("front", [True, False])
def test_keys_with_line_breaks_are_reached_over_http(store: SqlStore, front: bool) -> None:
    # a key (or target name) holding a line break is written by every other door; over HTTP
    # its %0A / %0D addresses it as %09 does (it was a 404 naming a path without it), through
    # the record shortcut and through the router alike (which a debug app takes)
    service = StatesService(store)
    service.declare("tickets", DECL)
    app = create_app(service, TokenSet([parse_token(ADMIN)]))
    app.debug = not front
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        for key, raw in (("a\nb", "a%0Ab"), ("a\r\nb", "a%0D%0Ab"), ("a\tb", "a%09b")):
            for tn, tn_raw in (("alice", "alice"), ("line\nbreak", "line%0Abreak")):
                path = f"/api/states/tickets/records/agent/{tn_raw}/thread/{raw}"
                subject = {"target_kind": "agent", "target_name": tn, "kind": "thread", "key": key}
                r = client.put(path, json={"status": "open"})
                assert r.status_code == 200 and r.json()["data"]["subject"] == subject, r.text
                ops = [{"op": "set", "path": ["count"], "value": 1}]
                assert client.post(path + "/deltas", json={"ops": ops}).status_code == 200
                r = client.get(path)
                assert r.status_code == 200 and r.json()["data"]["data"] == {"status": "open", "count": 1}
                assert len(client.get(path + "/writes").json()["data"]["items"]) == 2
                assert service.read("tickets", subject)["data"] == r.json()["data"]["data"]  # type: ignore[index]
        r = client.get("/api/states/tickets/records/agent/alice/thread/a%0Ab/nope")
        assert r.status_code == 404 and "/thread/a\nb/nope" in r.json()["error"], r.text
    assert vars(app)["_front_open"] is front  # (the path each run took)


LONG = "1" + "0" * 400
SET_LONG = f'{{"op": "set", "path": ["count"], "value": {LONG}}}'


def test_a_body_naming_a_member_twice_is_refused_and_changes_nothing(declared: Api) -> None:
    # the last value silently won: {"ops": [set], "ops": []} applied nothing, answering 200
    api = declared
    assert api("PUT", rec("t1"), {"status": "open"})[0] == 200
    auth = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    for method, path, raw in (
        ("PUT", rec("t1"), '{"status": "a", "status": "b"}'),
        ("PATCH", rec("t1"), '{"box": {"k": 1, "k": 2}}'),
        ("POST", rec("t1") + "/deltas", '{"ops": [{"op": "set", "path": ["count"], "value": 5}], "ops": []}'),
        ("POST", "/api/states/tickets/records/search", '{"filters": {}, "filters": {"status": "x"}}'),
        ("PUT", "/api/states/tickets", '{"schema": {}, "schema": {"type": "object"}}'),
        # with an integer too long for a double, kept for the service to refuse: it was read by
        # another parse, which let the name given twice through (the integer left with its ops)
        (
            "POST",
            rec("t1") + "/deltas",
            f'{{"ops": [{SET_LONG}], "ops": [{{"op": "set", "path": ["count"], "value": 5}}]}}',
        ),
        (
            "POST",
            "/api/states/tickets/records/search",
            f'{{"filters": {{"count": {LONG}}}, "filters": {{}}}}',
        ),
    ):
        r = api.client.request(method, path, content=raw, headers=auth)
        assert r.status_code == 400 and r.json()["code"] == "bad-request", (path, r.text)
        assert "is given more than once in one object" in r.json()["error"]
    r = api.client.request(
        "PATCH", rec("t1"), json={"count": 1}, headers={**auth, "X-Stateflow-Meta": '{"a": 1, "a": 2}'}
    )
    assert r.status_code == 400 and r.json()["error"].startswith("X-Stateflow-Meta must be a JSON object: ")
    _, body = api("GET", rec("t1"))
    assert body["data"]["data"] == {"status": "open"} and body["data"]["revision"] == 1
    assert api("GET", "/api/states/tickets")[1]["data"]["schema"] == SCHEMA


def test_fold_switch_and_merge(declared: Api) -> None:
    api = declared
    api("PUT", rec("old"), {"status": "old", "count": 1})
    api("PUT", rec("new"), {"status": "new"})
    into = {"target_kind": "agent", "target_name": "alice", "kind": "thread", "key": "new"}
    status, body = api("POST", rec("old") + "/fold", {"into": into, "mode": "merge"})
    assert body["data"] == {
        "mode": "merge",
        "from": {"kind": "thread", "key": "old"},
        "into": {"kind": "thread", "key": "new"},
        "already": False,
        "flattened": 0,
        "merged_members": ["count"],
    }
    status, body = api("GET", rec("old"))
    assert body["data"]["data"] == {"status": "new", "count": 1}
    assert body["data"]["canonical_subject"]["key"] == "new"
    assert [s["key"] for s in api("GET", rec("new"))[1]["data"]["folded_from"]] == ["old"]
    assert api("POST", rec("old") + "/fold", {"into": into, "mode": "merge"})[1]["data"]["already"] is True
    api("PATCH", rec("old"), {"count": 5})  # lands on the survivor
    assert api("GET", rec("new"))[1]["data"]["data"]["count"] == 5
    other = {**into, "target_name": "bob"}
    status, body = api("POST", rec("x") + "/fold", {"into": other, "mode": "switch"})
    assert status == 409 and "across targets" in body["error"]
    assert api("POST", rec("new") + "/fold", {"into": {**into, "key": "old"}, "mode": "switch"})[0] == 409
    status, body = api("POST", rec("x") + "/fold", {"into": into, "mode": "eat"})
    assert status == 422 and body["code"] == "invalid-input" and "unknown fold mode 'eat'" in body["error"]
    # erase the survivor: its aliases go too
    api("DELETE", rec("new"))
    assert api("GET", rec("old"))[1]["data"] is None


def test_fold_honours_if_match_on_the_folded_record(declared: Api) -> None:
    """A fold sent with ``If-Match`` happens only while the record is at that revision (it was
    ignored: a record written since the sender read it was folded all the same)."""
    api = declared
    api("PUT", rec("a"), {"status": "one"})
    api("PUT", rec("a"), {"status": "two"})  # revision 2: someone wrote after the sender read it
    api("PUT", rec("b"), {"status": "b"})
    into = {"target_kind": "agent", "target_name": "alice", "kind": "thread", "key": "b"}
    status, body = api(
        "POST", rec("a") + "/fold", {"into": into, "mode": "merge"}, headers={"If-Match": '"1"'}
    )
    assert status == 412 and body["code"] == "revision-mismatch", body
    assert "is at revision 2, not 1" in body["error"]
    assert api("GET", rec("a"))[1]["data"]["canonical_subject"]["key"] == "a"  # nothing folded
    status, body = api(
        "POST", rec("a") + "/fold", {"into": into, "mode": "merge"}, headers={"If-Match": '"2"'}
    )
    assert status == 200 and body["data"]["already"] is False
    assert api("GET", rec("a"))[1]["data"]["canonical_subject"]["key"] == "b"


def test_if_match_outside_the_record_routes_is_refused_not_ignored(declared: Api) -> None:
    """Only a record's reads and writes evaluate ``If-Match``: on any other route it is 400 before
    anything happens (a re-declare sent with a stale declaration version went through)."""
    api = declared
    version = api("GET", "/api/states/tickets")[1]["data"]["version"]
    redeclare = {**DECL, "description": "new"}
    for method, path, body in (
        ("PUT", "/api/states/tickets", redeclare),
        ("DELETE", "/api/states/tickets", None),
        ("PUT", "/api/state-templates/t", {"name": "t"}),
        ("POST", "/api/state-retention/prune", None),
        ("POST", "/api/states/tickets/records/search", {"filters": {}}),
        ("GET", "/api/states/tickets", None),
    ):
        status, said = api(method, path, body, headers={"If-Match": f'"{version}"'})
        assert status == 400 and said["code"] == "bad-request", (method, path, said)
        assert said["error"] == f"If-Match conditions a record's read and writes, not {method} {path}"
    declaration = api("GET", "/api/states/tickets")[1]["data"]
    assert (declaration["version"], declaration["description"]) == (version, "")  # nothing changed
    assert api("GET", "/api/state-templates/t")[0] == 404


def test_a_folds_rows_and_the_folded_records_revisions_stay_in_the_audit_trail(declared: Api) -> None:
    """Every read of a folded subject resolves to the survivor, so its own trail (its revisions
    and the fold that erased it) is listed in the survivor's, each row naming that subject."""
    api = declared
    api("PUT", rec("a"), {"status": "a1"})
    api("PATCH", rec("a"), {"status": "a2"})
    api("PUT", rec("b"), {"status": "b1"})
    api("PUT", rec("c"), {"count": 3})
    into = {"target_kind": "agent", "target_name": "alice", "kind": "thread", "key": "b"}
    assert api("POST", rec("a") + "/fold", {"into": into, "mode": "switch"})[0] == 200
    assert api("POST", rec("c") + "/fold", {"into": into, "mode": "merge"})[0] == 200

    def rows(key: str, limit: int = 50) -> list[tuple[str | None, int, str]]:
        out, cursor = [], ""
        while True:
            page = api("GET", rec(key) + f"/writes?limit={limit}" + (f"&cursor={cursor}" if cursor else ""))
            assert page[0] == 200, page
            items = page[1]["data"]["items"]
            out += [(i.get("folded_from", {}).get("key"), i["revision"], i["action"]) for i in items]
            cursor = page[1]["data"]["next_cursor"]
            if not cursor:
                return out

    trail = [
        (None, 2, "fold"),  # the merge into b and the erase of c: one transition
        ("c", 2, "fold"),
        ("a", 3, "fold"),  # a switch writes only the folded record's erase
        ("c", 1, "replace"),
        (None, 1, "replace"),
        ("a", 2, "merge"),
        ("a", 1, "replace"),
    ]
    for key in ("a", "b", "c"):
        assert rows(key) == trail, key
    assert rows("b", limit=1) == trail  # a page of one keeps a transition's two rows together
    page = api("GET", rec("b") + "/writes")[1]["data"]["items"]
    assert page[2]["folded_from"] == {**into, "key": "a"} and page[2]["origin"]["door"]


def test_a_folded_records_own_revisions_are_read_by_their_seq(declared: Api) -> None:
    """The trail lists a folded subject's own revisions (with folded_from): each is read as that
    record was, by the seq its row names; a revision of it names the survivor's, and one the
    survivor lacks is refused saying where the folded record's are."""
    api = declared
    api("PUT", rec("a"), {"status": "a1"})
    api("PATCH", rec("a"), {"status": "a2"})
    api("PUT", rec("b"), {"status": "b1"})
    into = {"target_kind": "agent", "target_name": "alice", "kind": "thread", "key": "b"}
    assert api("POST", rec("a") + "/fold", {"into": into, "mode": "switch"})[0] == 200
    items = api("GET", rec("a") + "/writes")[1]["data"]["items"]
    own = {i["revision"]: i["seq"] for i in items if i.get("folded_from") and i["action"] != "fold"}
    assert sorted(own) == [1, 2]
    for revision, status in ((1, "a1"), (2, "a2")):
        code, body = api("GET", rec("a") + f"?seq={own[revision]}")
        assert code == 200, body
        record = body["data"]
        assert (record["data"], record["revision"]) == ({"status": status}, revision)
        assert record["canonical_subject"]["key"] == "a" and record["folded_from"] == []
    assert api("GET", rec("a"))[1]["data"]["data"] == {"status": "b1"}  # today: the survivor
    code, body = api("GET", rec("a") + "?revision=2")
    assert code == 404 and "thread/a was folded into thread/b" in body["error"], body
    assert body["error"].startswith(
        "record thread/b of agent alice in state 'tickets' has no revision 2 (current"
    )
    assert "read by their seq" in body["error"]


def test_a_listing_by_a_kind_no_record_has_reads_no_records(declared: Api, store: SqlStore) -> None:
    # the per-kind counter answers "none of that kind" in a read of a few rows: neither
    # subjects nor search scans the state for it, and both answer as before
    api = declared
    for i in range(3):
        api("PUT", rec(f"k{i}"), {"status": "open"})
    service = StatesService(store)
    assert len(service.subjects("tickets")["subjects"]) == 3  # (this thread's reader is open)
    statements: list[str] = []
    traced = list(store._all) if isinstance(store, SqliteStore) else []
    for conn in traced:
        conn.set_trace_callback(statements.append)
    try:
        page = service.subjects("tickets", kind="person")
        found = service.search("tickets", {"status": "open"}, kind="person", sort=[{"path": ["status"]}])
    finally:
        for conn in traced:
            conn.set_trace_callback(None)
    assert page == {"subjects": [], "next_cursor": None}
    assert found == {"matches": [], "next_cursor": None}
    assert not [s for s in statements if "FROM documents" in s]  # (SQLite: traced)
    assert api("GET", "/api/states/tickets/subjects?kind=person")[1]["data"] == page
    assert api("GET", "/api/states/tickets/subjects?kind=person&cursor=%25%25%25")[0] == 422
    api("PUT", rec("p1", kind="person"), {"status": "open"})
    page = api("GET", "/api/states/tickets/subjects?kind=person")[1]["data"]
    assert [s["subject"]["key"] for s in page["subjects"]] == ["p1"]
    api("DELETE", rec("p1", kind="person"))
    assert api("GET", "/api/states/tickets/subjects?kind=person")[1]["data"]["subjects"] == []


def test_a_listing_by_a_kind_the_state_does_not_declare_is_refused(declared: Api, store: SqlStore) -> None:
    # a mistyped kind read as "no records of it" (an empty page), where the studio refused it
    api = declared
    api("PUT", rec("k1"), {"status": "open"})
    service = StatesService(store)
    said = "state 'tickets' declares no subject kind 'thraed'"
    for call in (
        lambda: service.subjects("tickets", kind="thraed"),
        lambda: service.search("tickets", {"status": "open"}, kind="thraed"),
        lambda: service.search("tickets", {"status": "open"}, kind="thraed", sort=[{"path": ["status"]}]),
    ):
        with pytest.raises(InvalidInput, match=said):
            call()
    status, body = api("GET", "/api/states/tickets/subjects?kind=thraed")
    assert (status, body["code"], body["error"]) == (422, "invalid-input", said)
    # a declared kind no record has still lists nothing
    assert service.subjects("tickets", kind="person") == {"subjects": [], "next_cursor": None}
    assert (
        api("GET", "/api/states/tickets/subjects?kind=thread")[1]["data"]["subjects"][0]["subject"]["key"]
        == "k1"
    )


def test_subjects_search_stats_pagination(declared: Api) -> None:
    api = declared
    for i in range(5):
        api(
            "PUT",
            rec(f"k{i}"),
            {"status": "open" if i % 2 else "closed", "box": {"items": [{"id": f"a-{i}"}]}},
        )
    api("PUT", rec("p1", kind="person"), {"status": "open"})
    api("PUT", rec("b1", tn="bob"), {"status": "open"})
    _status, body = api("GET", "/api/states/tickets/subjects?limit=3")
    page = body["data"]
    assert len(page["subjects"]) == 3 and page["next_cursor"]
    rest = api("GET", f"/api/states/tickets/subjects?limit=10&cursor={page['next_cursor']}")[1]["data"]
    keys = [s["subject"]["key"] for s in page["subjects"] + rest["subjects"]]
    assert sorted(keys) == sorted(["k0", "k1", "k2", "k3", "k4", "p1", "b1"]) and len(set(keys)) == 7
    assert rest["next_cursor"] is None
    persons = api("GET", "/api/states/tickets/subjects?kind=person")[1]["data"]["subjects"]
    assert [s["subject"]["key"] for s in persons] == ["p1"]
    assert api("GET", "/api/states/tickets/subjects?limit=x")[0] == 400
    assert api("GET", "/api/states/tickets/subjects?limit=0")[0] == 422
    assert api("GET", "/api/states/tickets/subjects?cursor=%25%25%25")[0] == 422
    found = api(
        "POST", "/api/states/tickets/records/search", {"filters": {"box": {"items": [{"id": "a-3"}]}}}
    )[1]["data"]
    assert [m["subject"]["key"] for m in found["matches"]] == ["k3"]
    opened = api("POST", "/api/states/tickets/records/search", {"filters": {"status": "open"}, "limit": 2})[
        1
    ]["data"]
    assert len(opened["matches"]) == 2 and opened["next_cursor"]
    # a cursor only when another page exists: an exactly full last page ends the walk
    exact = api("GET", "/api/states/tickets/subjects?limit=7")[1]["data"]
    assert len(exact["subjects"]) == 7 and exact["next_cursor"] is None
    last = api("GET", f"/api/states/tickets/subjects?limit=4&cursor={page['next_cursor']}")[1]["data"]
    assert len(last["subjects"]) == 4 and last["next_cursor"] is None
    kinds = api("GET", "/api/states/tickets/subjects?kind=person&limit=1")[1]["data"]
    assert len(kinds["subjects"]) == 1 and kinds["next_cursor"] is None
    walked: list[str] = []
    cursor: dict[str, str] = {}
    while True:  # search pages of one: every open record once, no empty page at the end
        got = api(
            "POST",
            "/api/states/tickets/records/search",
            {"filters": {"status": "open"}, "limit": 1, **cursor},
        )[1]["data"]
        assert len(got["matches"]) == 1
        walked += [m["subject"]["key"] for m in got["matches"]]
        if got["next_cursor"] is None:
            break
        cursor = {"cursor": got["next_cursor"]}
    assert sorted(walked) == ["b1", "k1", "k3", "p1"]
    assert api("POST", "/api/states/tickets/records/search", {"filters": {}})[0] == 422
    assert api("POST", "/api/states/tickets/records/search", {"filters": {"a": 1}, "limit": "x"}) == (
        422,
        {"error": "limit must be a positive integer, got 'x'", "code": "invalid-input"},
    )
    stats = api("GET", "/api/states/tickets/stats")[1]["data"]
    assert stats == {
        "records": 7,
        "per_field": {"status": 7, "count": 0, "people": 0, "box": 5},
        "per_kind": {"thread": 6, "person": 1},
        "consumers": 0,
    }


def test_a_sorted_searchs_cursor_is_refused_without_its_sort_and_an_unsorted_one_with_a_sort(
    declared: Api,
) -> None:
    api = declared
    for i in range(4):
        api("PUT", rec(f"k{i}"), {"status": "open", "count": 3 - i})
    search = "/api/states/tickets/records/search"
    sort = [{"path": ["count"]}]
    first = api("POST", search, {"filters": {"status": "open"}, "sort": sort, "limit": 2})[1]["data"]
    assert [m["subject"]["key"] for m in first["matches"]] == ["k3", "k2"]
    sorted_cursor = first["next_cursor"]
    # without its sort the cursor was read as a subject before every other: page one again
    status, body = api("POST", search, {"filters": {"status": "open"}, "limit": 2, "cursor": sorted_cursor})
    assert (status, body["code"]) == (422, "invalid-input")
    assert "a sorted search's cursor; give it with the sort it was returned with" in body["error"]
    status, body = api("GET", f"/api/states/tickets/subjects?cursor={sorted_cursor}")
    assert (status, body["code"]) == (422, "invalid-input")
    unsorted = api("POST", search, {"filters": {"status": "open"}, "limit": 2})[1]["data"]["next_cursor"]
    status, body = api("POST", search, {"filters": {"status": "open"}, "sort": sort, "cursor": unsorted})
    assert (status, body["code"]) == (422, "invalid-input")
    assert "not a sorted search's cursor" in body["error"]
    rest = api("POST", search, {"filters": {"status": "open"}, "sort": sort, "cursor": sorted_cursor})
    assert [m["subject"]["key"] for m in rest[1]["data"]["matches"]] == ["k1", "k0"]


def test_auth_read_only_and_tenancy(declared: Api) -> None:
    api = declared
    assert api("GET", "/api/states", token=None)[0] == 401
    assert api("GET", "/api/states", token="wrong-token-000000000")[0] == 401
    assert api("GET", "/api/states", token=READER)[0] == 200
    status, body = api("PUT", rec("t1"), {"status": "x"}, token=READER)
    assert status == 403 and body["code"] == "forbidden"
    assert (
        api("POST", "/api/states/tickets/records/search", {"filters": {"status": "x"}}, token=READER)[0]
        == 200
    )
    assert api("PUT", rec("t1"), {"status": "mine"}, token=ALICE)[0] == 200
    api("PUT", rec("t9", tn="bob"), {"status": "bob's"})
    assert api("GET", rec("t9", tn="bob"), token=ALICE)[0] == 403
    assert api("PUT", rec("t9", tn="bob"), {"status": "x"}, token=ALICE)[0] == 403
    seen = api("GET", "/api/states/tickets/subjects", token=ALICE)[1]["data"]["subjects"]
    assert {s["subject"]["target_name"] for s in seen} == {"alice"}
    found = api("POST", "/api/states/tickets/records/search", {"filters": {"status": "bob's"}}, token=ALICE)[
        1
    ]["data"]
    assert found["matches"] == []
    assert api("PUT", "/api/states/other", DECL, token=ALICE)[0] == 403
    assert api("GET", "/api/states/tickets/stats", token=ALICE)[0] == 403


def test_delete_state_and_prune(declared: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    api = declared
    api("PUT", rec("t1"), {"status": "x"})
    status, body = api("POST", "/api/state-retention/prune")
    assert status == 200 and body["data"]["pruned"] == {}
    api("PUT", "/api/states/tickets", {**DECL, "retention_days": 1})
    assert api("POST", "/api/state-retention/prune")[1]["data"]["pruned"] == {"tickets": 0}
    monkeypatch.setenv("STATEFLOW_DEFAULT_RETENTION_DAYS", "nope")
    with pytest.raises(InvalidInput, match="STATEFLOW_DEFAULT_RETENTION_DAYS: 'nope' is not a valid int"):
        Config.from_env()  # refused when the configuration is parsed, not at the first prune
    assert api("DELETE", "/api/states/tickets") == (200, {"data": {"deleted": True, "name": "tickets"}})
    assert api("GET", "/api/states/tickets")[0] == 404
    assert api("GET", rec("t1"))[0] == 404
    assert api("DELETE", "/api/states/tickets")[0] == 404


def test_memory_scopes_are_visible_as_records(api: Api, store: SqlStore) -> None:
    from stateflow.memory import Identity, MemoryView

    MemoryView(store, Identity.of("alice", "/tmp", "s1")).patch_state({"session": {"tactics": {"next": "x"}}})
    _status, body = api("GET", "/api/states/memory/records/agent/alice/session/s1")
    assert body["data"]["data"] == {"tactics": {"next": "x"}}
    writes = api("GET", "/api/states/memory/records/agent/alice/session/s1/writes")[1]["data"]["items"]
    assert writes[0]["origin"]["door"] == "tool" and writes[0]["paths"] == [["tactics"]]


def test_unknown_routes_and_openapi(api: Api) -> None:
    assert api("GET", "/api/nothing")[0] == 404
    r = api.client.get("/openapi.json")
    assert r.status_code == 200 and "/api/states" in r.json()["paths"]


def test_retention_erases_expired_records_and_old_audit_rows(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    service = StatesService(store, Config(retention=RetentionConfig(audit_days=1)))
    service.declare("tickets", {**DECL, "retention_days": 1})
    service.declare("kept", DECL)
    subject = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "t"}
    service.replace("tickets", subject, {"status": "old"})
    service.replace("kept", subject, {"status": "kept"})
    service.apply("kept", subject, [{"op": "set", "path": ["status"], "value": "k2"}], op_id="once")
    service.replace("tickets", {**subject, "key": "t2"}, {"status": "old"})
    later = datetime.now(UTC) + timedelta(days=2)
    seen: list[tuple[str, int]] = []
    report = service.prune(now=later, progress=lambda state, erased: seen.append((state, erased)))
    assert report["pruned"] == {"tickets": 2} and seen == [("tickets", 1), ("tickets", 2)]
    assert report["op_ids"] == 0 and report["audit_rows"]["kept"] == 2
    assert service.read("tickets", subject) is None
    assert service.read("kept", subject)["data"] == {"status": "k2"}  # type: ignore[index]
    assert service.writes("kept", subject)["items"] == []
    monkeypatch.setenv("STATEFLOW_OP_RETENTION_DAYS", "1")
    service = StatesService(store, Config.from_env())
    assert service.prune(now=later)["op_ids"] == 1
    again = service.apply("kept", subject, [{"op": "set", "path": ["status"], "value": "k3"}], op_id="once")
    assert again.applied  # the expired key no longer blocks


def test_concurrent_applies_to_one_record_lose_nothing(store: SqlStore) -> None:
    service = StatesService(store)
    service.declare("tickets", DECL)
    subject = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "shared"}

    def worker(n: int) -> None:
        for i in range(15):
            ops = [{"op": "set_by_key", "path": ["people"], "key_field": "id", "value": [{"id": f"{n}-{i}"}]}]
            service.apply("tickets", subject, ops, op_id=f"w{n}-{i}")

    assert run_threads(worker, 4) == []
    record = service.read("tickets", subject)
    assert record is not None and len(record["data"]["people"]) == 60 and record["revision"] == 60
    assert len(service.writes("tickets", subject, limit=500)["items"]) == 60


def test_an_unmigrated_store_answers_501_until_it_is_migrated(backend: str) -> None:
    from stateflow.api import states_service
    from stateflow.store import open_store

    store = open_store(backend, auto_migrate=False)
    # the composition root: built-ins are installed when the store is first found migrated
    service = states_service(store, unmigrated=lambda exc: None)
    try:
        with TestClient(create_app(service, TokenSet([parse_token(ADMIN)]))) as client:
            api = Api(client)
            for method, path, body in (
                ("GET", "/api/states", None),
                ("PUT", "/api/states/tickets", DECL),
                ("POST", rec("t1") + "/deltas", {"ops": []}),
                ("GET", "/api/state-templates", None),
            ):
                status, payload = api(method, path, body)
                assert status == 501 and payload["code"] == "states-not-configured" and payload["error"], path
            store.migrate()
            status, payload = api("GET", "/api/states")
            assert status == 200 and [d["name"] for d in payload["data"]] == ["memory"]
    finally:
        store.close()


@pytest.mark.parametrize(
    "raw",
    ["t-1", "a.b_c~d", "caf%C3%A9", "conv%2Fwrites", "caf\u00c3\u00a9", "%41", "", "x+y", "x%"],
)
def test_a_path_segment_decodes_as_percent_decoding_gives_it(raw: str) -> None:
    # a segment with nothing to decode is taken as it is: the same text the decoding gives
    assert _segment(raw) == unquote_to_bytes(raw).decode("utf-8")


def test_a_path_segment_that_is_not_utf8_is_refused() -> None:
    for raw in ("%C3%28", "%FF%28", "%FF"):
        with pytest.raises(BadRequest):
            _segment(raw)


@pytest.mark.parametrize("status", [200, 201, 204, 304, 404, 412, 500])
@pytest.mark.parametrize(
    "headers", [None, {"ETag": '"3"'}, {"Allow": "GET, PUT"}, {"Allow": "POST", "Retry-After": "2"}]
)
def test_a_json_answer_is_the_response_starlette_builds(status: int, headers: dict[str, str] | None) -> None:
    payload = {"data": {"state": "tickets", "data": {"n": 1, "s": "é"}}}
    answer = _json(status, payload, headers)
    expected = Response(encode(payload), status_code=status, media_type="application/json", headers=headers)
    assert answer.body == expected.body
    assert answer.raw_headers == expected.raw_headers
    assert answer.status_code == expected.status_code and answer.background is None
    assert dict(answer.headers) == dict(expected.headers)


def test_a_record_write_answers_its_etag_length_and_type(declared: Api) -> None:
    r = declared.client.request(
        "PUT", rec("t-headers"), json={"status": "open"}, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.headers["etag"] == '"1"'
    assert int(r.headers["content-length"]) == len(r.content)
    assert r.json()["data"]["data"]["status"] == "open"
    assert [k for k, _ in r.headers.raw] == [b"etag", b"content-length", b"content-type"]
    g = declared.client.get(rec("t-headers"), headers={"Authorization": f"Bearer {ADMIN}"})
    assert [(k, v) for k, v in g.headers.raw][:1] == [(b"etag", b'"1"')]
    assert [k for k, _ in g.headers.raw] == [b"etag", b"content-length", b"content-type"]


def test_a_revision_the_record_never_had_is_refused_naming_the_record(declared: Api) -> None:
    # named as every other record error names it, not by the stored subject (a JSON array)
    api = declared
    assert api("PUT", rec("t-1"), {"status": "a"})[0] == 200
    code, body = api("GET", rec("t-1") + "?revision=7")
    assert (code, body["error"]) == (
        404,
        "record thread/t-1 of agent alice in state 'tickets' has no revision 7 (current revision 1)",
    ), body
