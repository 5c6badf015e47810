"""Record guarantees: compare-and-set, as-of reads, diff, revert, origins, replays, search
operators — over the real HTTP app, Python, the CLI and the public HTTP client, on both
backends."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping
from http.client import HTTPConnection
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from stateflow.client import ClientError, StatesClient
from stateflow.doc.canonical import json_contains
from stateflow.doc.diff import Edit, apply_edits
from stateflow.doc.merge import merge_patch
from stateflow.errors import InvalidInput, StateflowError
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.states.search import matches, split_filters
from stateflow.states.service import RevisionMismatch
from stateflow.store import SqlStore
from stateflow.tools import ToolHost

from . import servers

ADMIN = "admin-secret-0123456789"
DECL: dict[str, Any] = {
    "schema": {
        "type": "object",
        "properties": {
            "status": {"type": "string"},
            "n": {"type": "number"},
            "owner": {"type": "string"},
            "meta": {"type": "object"},
        },
    },
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
T1 = {"target_kind": "agent", "target_name": "alice", "kind": "thread", "key": "t1"}
REC = "/api/states/tickets/records/agent/alice/thread/t1"


@pytest.fixture
def service(store: SqlStore) -> StatesService:
    service = StatesService(store)
    service.install_builtins()
    service.declare("tickets", DECL)
    return service


@pytest.fixture
def http(service: StatesService) -> Iterator[TestClient]:
    app = create_app(service, TokenSet([parse_token(ADMIN)]))
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        yield client


def sf(*args: str, store: str | None) -> subprocess.CompletedProcess[str]:
    """The CLI on ``store``, or (None) on the server the arguments' ``--url`` names."""
    target = [] if store is None else ["--store", store]
    return subprocess.run(["stateflow", *target, *args], capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------------- compare-and-set


def test_etag_and_if_match_over_http(http: TestClient, service: StatesService) -> None:
    r = http.put(REC, json={"status": "open"})
    assert r.status_code == 200 and r.headers["etag"] == '"1"'
    assert http.get(REC).headers["etag"] == '"1"'
    r = http.patch(REC, json={"n": 1}, headers={"If-Match": '"1"'})
    assert r.status_code == 200 and r.headers["etag"] == '"2"'
    for method, path, body in (
        ("PUT", REC, {"status": "lost"}),
        ("PATCH", REC, {"status": "lost"}),
        ("POST", REC + "/deltas", {"ops": [{"op": "set", "path": ["status"], "value": "lost"}]}),
        ("DELETE", REC, None),
    ):
        r = http.request(method, path, json=body, headers={"If-Match": '"1"'})
        assert r.status_code == 412, (method, r.text)
        assert r.json()["code"] == "revision-mismatch" and "at revision 2, not 1" in r.json()["error"]
    assert service.read("tickets", T1)["data"] == {"status": "open", "n": 1}  # type: ignore[index]
    assert len(service.writes("tickets", T1)["items"]) == 2  # nothing else was written
    r = http.post(
        REC + "/deltas", json={"ops": [{"op": "set", "path": ["n"], "value": 2}]}, headers={"If-Match": '"2"'}
    )
    assert r.status_code == 200 and r.headers["etag"] == '"3"'
    assert http.put(REC, json={}, headers={"If-Match": "yesterday"}).status_code == 400
    assert http.delete(REC, headers={"If-Match": "*"}).status_code == 200
    # 0 = absent: create-only
    assert http.put(REC, json={"status": "new"}, headers={"If-Match": '"0"'}).status_code == 200
    assert http.put(REC, json={"status": "again"}, headers={"If-Match": '"0"'}).status_code == 412


def test_if_match_conditions_a_read_and_a_delete_takes_no_body(
    http: TestClient, service: StatesService
) -> None:
    """Never ignored: If-Match on a record read is evaluated (RFC 9110 §13.1.1: 412 when it
    fails), refused on the record's other reads, and a body on a DELETE is refused, nothing
    erased (each was answered as if it were absent)."""
    http.put(REC, json={"status": "open"})
    for given, status in (('"1"', 200), ("*", 200), ('"99"', 412), ('"0"', 412)):
        r = http.get(REC, headers={"If-Match": given})
        assert r.status_code == status, (given, r.text)
        if status == 412:
            assert r.json()["code"] == "revision-mismatch" and "is at revision 1, not " in r.json()["error"]
    assert http.get(REC + "?revision=1", headers={"If-Match": '"1"'}).status_code == 200
    absent = REC.replace("/t1", "/absent")
    r = http.get(absent, headers={"If-Match": "*"})
    assert r.status_code == 412 and "does not exist (revision 0)" in r.json()["error"]
    assert http.get(absent, headers={"If-Match": '"0"'}).status_code == 200
    assert http.get(REC, headers={"If-Match": "yesterday"}).status_code == 400
    for sub in ("/writes", "/diff?from=1"):
        r = http.get(REC + sub, headers={"If-Match": '"1"'})
        assert r.status_code == 400 and r.json()["error"].startswith("If-Match conditions a record's read")
    for path in (REC, "/api/states/tickets"):
        r = http.request("DELETE", path, content=b'{"n": 4}')
        assert (r.status_code, r.json()) == (400, {"error": "DELETE takes no body", "code": "bad-request"})
    assert service.read("tickets", T1)["data"] == {"status": "open"}  # type: ignore[index]
    assert http.get("/api/states/tickets").status_code == 200


def test_an_erased_record_is_absent_to_compare_and_set_over_http(
    http: TestClient, service: StatesService
) -> None:
    """Erased, a record is at revision 0 to a compare-and-set (its ETag says so), as one never
    written is: "0" creates it again, its old revision is refused, and its history keeps
    counting (the erase is a revision of its own)."""
    r = http.get(REC)
    assert r.json() == {"data": None} and r.headers["etag"] == '"0"'  # never written
    http.put(REC, json={"status": "open"})
    http.patch(REC, json={"n": 1})
    r = http.delete(REC, headers={"If-Match": '"2"'})
    assert r.status_code == 200 and r.json() == {"data": {"erased": True}} and r.headers["etag"] == '"0"'
    r = http.get(REC)
    assert r.json() == {"data": None} and r.headers["etag"] == '"0"'
    for method, path, body in (
        ("PUT", REC, {"status": "lost"}),
        ("PATCH", REC, {"status": "lost"}),
        ("POST", REC + "/deltas", {"ops": [{"op": "set", "path": ["status"], "value": "lost"}]}),
        ("POST", REC + "/revert", {"revision": 1}),
        ("DELETE", REC, None),
    ):
        for stale in ('"2"', '"3"'):  # its revision before the erase, and the erase's own
            r = http.request(method, path, json=body, headers={"If-Match": stale})
            assert r.status_code == 412, (method, stale, r.text)
            assert f"does not exist (revision 0), not {stale[1]}" in r.json()["error"]
    assert len(service.writes("tickets", T1)["items"]) == 3  # nothing was written
    assert http.delete(REC, headers={"If-Match": '"0"'}).status_code == 200  # absent already: a no-op
    r = http.put(REC, json={"status": "back"}, headers={"If-Match": '"0"'})
    assert r.status_code == 200 and r.headers["etag"] == '"4"' and r.json()["data"]["revision"] == 4
    r = http.put(REC, json={"status": "twice"}, headers={"If-Match": '"0"'})
    assert r.status_code == 412 and "is at revision 4, not 0" in r.json()["error"]
    # reverting to a revision where it did not exist erases it: absent, "0"
    r = http.post(REC + "/revert", json={"revision": 0}, headers={"If-Match": '"4"'})
    assert r.json() == {"data": None} and r.headers["etag"] == '"0"'
    # ops that leave it absent (all guard-skipped), or no ops at all, answer the ETag of an
    # absent record too
    skipped = {"op": "set", "path": ["status"], "value": "x", "guard": {"path": ["status"], "expected": "y"}}
    for ops in ([skipped], []):
        r = http.post(REC + "/deltas", json={"ops": ops}, headers={"If-Match": '"0"'})
        assert r.status_code == 200 and r.json()["data"]["data"] is None and r.headers["etag"] == '"0"'
    assert http.patch(REC, json={"n": 2}, headers={"If-Match": '"0"'}).json()["data"]["revision"] == 6
    r = http.post(REC + "/deltas", json={"ops": []})
    assert r.status_code == 200 and r.headers["etag"] == '"6"'  # no ops: the record as it is
    assert [w["revision"] for w in service.writes("tickets", T1)["items"]] == [6, 5, 4, 3, 2, 1]


def test_an_erased_record_is_absent_to_python_the_tools_and_the_cli(
    backend: str, service: StatesService
) -> None:
    service.replace("tickets", T1, {"status": "a"})
    service.erase("tickets", T1, expect_revision=1)
    for stale in (1, 2):
        with pytest.raises(RevisionMismatch, match=f"does not exist \\(revision 0\\), not {stale}"):
            service.merge("tickets", T1, {"n": 1}, expect_revision=stale)
        with pytest.raises(RevisionMismatch):
            service.apply("tickets", T1, [{"op": "set", "path": ["n"], "value": 1}], expect_revision=stale)
        with pytest.raises(RevisionMismatch):
            service.erase("tickets", T1, expect_revision=stale)
    assert service.merge("tickets", T1, {"n": 1}, expect_revision=0)["revision"] == 3
    service.erase("tickets", T1)
    from stateflow.memory import Identity, MemoryView

    host = ToolHost(MemoryView(service.store, Identity.of("alice", "/tmp", "s1")), service)
    call = {"state": "tickets", "subject": "t1", "data": {"status": "t"}}
    result = host.call("state_replace", {**call, "expect_revision": 4})
    assert result.is_error and result.code == "revision-mismatch"
    result = host.call("state_replace", {**call, "expect_revision": 0})
    assert not result.is_error and json.loads(result.text)["result"]["revision"] == 5
    who = ["--target-name", "alice", "--key", "t1"]
    done = sf("states", "erase", "tickets", *who, "--expect-revision", "5", store=backend)
    assert done.returncode == 0, done.stderr
    done = sf("states", "replace", "tickets", *who, "--data", "{}", "--expect-revision", "6", store=backend)
    assert done.returncode == 1 and "does not exist (revision 0), not 6" in done.stderr
    done = sf("states", "replace", "tickets", *who, "--data", "{}", "--expect-revision", "0", store=backend)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["revision"] == 7


def test_expect_revision_in_python_and_tools(service: StatesService) -> None:
    assert service.replace("tickets", T1, {"status": "a"}, expect_revision=0)["revision"] == 1
    with pytest.raises(RevisionMismatch):
        service.replace("tickets", T1, {"status": "b"}, expect_revision=0)
    with pytest.raises(RevisionMismatch):
        service.apply("tickets", T1, [{"op": "set", "path": ["n"], "value": 1}], expect_revision=7)
    with pytest.raises(RevisionMismatch):
        service.apply("tickets", T1, [], expect_revision=7)
    with pytest.raises(RevisionMismatch):
        service.erase("tickets", T1, expect_revision=2)
    with pytest.raises(InvalidInput, match="non-negative integer"):
        service.merge("tickets", T1, {"n": 1}, expect_revision=-1)
    assert service.merge("tickets", T1, {"n": 1}, expect_revision=1)["revision"] == 2
    from stateflow.memory import Identity, MemoryView

    host = ToolHost(MemoryView(service.store, Identity.of("alice", "/tmp", "s1")), service)
    result = host.call(
        "state_merge", {"state": "tickets", "subject": "t1", "patch": {"n": 3}, "expect_revision": 1}
    )
    assert result.is_error and result.code == "revision-mismatch"
    result = host.call(
        "state_merge", {"state": "tickets", "subject": "t1", "patch": {"n": 3}, "expect_revision": 2}
    )
    assert not result.is_error and json.loads(result.text)["result"]["revision"] == 3


def test_expect_revision_history_diff_revert_on_the_cli(backend: str, service: StatesService) -> None:
    who = ["--target-name", "alice", "--key", "t1"]
    assert (
        sf("states", "replace", "tickets", *who, "--data", '{"status": "a"}', store=backend).returncode == 0
    )
    done = sf(
        "states",
        "merge",
        "tickets",
        *who,
        "--data",
        '{"status": "b"}',
        "--expect-revision",
        "0",
        store=backend,
    )
    assert done.returncode == 1 and done.stderr.startswith("error[revision-mismatch]: ")
    done = sf(
        "states",
        "merge",
        "tickets",
        *who,
        "--data",
        '{"n": 5}',
        "--expect-revision",
        "1",
        "--consumer",
        "nightly",
        "--run-id",
        "r-9",
        "--meta",
        '{"why": "test"}',
        store=backend,
    )
    assert done.returncode == 0, done.stderr
    old = json.loads(sf("states", "read", "tickets", *who, "--revision", "1", store=backend).stdout)
    assert old["data"] == {"status": "a"} and old["revision"] == 1 and old["updated_at"]
    seq1 = old["seq"]
    assert (
        json.loads(sf("states", "read", "tickets", *who, "--seq", str(seq1), store=backend).stdout)[
            "revision"
        ]
        == 1
    )
    changed = json.loads(sf("states", "diff", "tickets", *who, "--from", "1", store=backend).stdout)
    assert changed == {"from": 1, "to": 2, "edits": [[["n"], 5]], "patch": {"n": 5}}
    done = sf("states", "revert", "tickets", *who, "--revision", "1", store=backend)
    assert done.returncode == 0 and json.loads(done.stdout)["data"] == {"status": "a"}
    trail = json.loads(sf("states", "writes", "tickets", *who, store=backend).stdout)["items"]
    assert [w["action"] for w in trail] == ["revert", "merge", "replace"]
    assert [w["revision"] for w in trail] == [3, 2, 1]
    assert trail[1]["origin"]["consumer"] == "nightly" and trail[1]["origin"]["run_id"] == "r-9"
    assert trail[1]["origin"]["meta"] == {"why": "test"} and trail[1]["origin"]["door"] == "operator"
    done = sf("states", "read", "tickets", *who, "--revision", "9", store=backend)
    assert done.returncode == 1 and done.stderr.startswith("error[not-found]: ")


def test_a_write_that_changes_nothing_answers_the_records_stored_time(
    backend: str, http: TestClient, service: StatesService
) -> None:
    """A replace or merge that leaves the document as it was writes nothing and answers the
    record as a read does: its revision and the time that revision was written."""
    http.put(REC, json={"status": "open", "n": 1})
    read = http.get(REC).json()["data"]
    assert read["updated_at"] and read["revision"] == 1
    for method, body in (("PUT", {"status": "open", "n": 1}), ("PATCH", {"n": 1}), ("PATCH", {})):
        r = http.request(method, REC, json=body)
        assert r.status_code == 200 and r.headers["etag"] == '"1"'
        assert r.json()["data"] == read, (method, body)
    assert service.replace("tickets", T1, {"status": "open", "n": 1}) == read
    assert service.merge("tickets", T1, {"status": "open"}) == read
    from stateflow.memory import Identity, MemoryView

    host = ToolHost(MemoryView(service.store, Identity.of("alice", "/tmp", "s1")), service)
    result = host.call("state_merge", {"state": "tickets", "subject": "t1", "patch": {"n": 1}})
    assert json.loads(result.text)["result"]["updated_at"] == read["updated_at"]
    who = ["--target-name", "alice", "--key", "t1"]
    done = sf("states", "merge", "tickets", *who, "--data", '{"n": 1}', store=backend)
    assert json.loads(done.stdout)["updated_at"] == read["updated_at"], done.stderr
    assert len(service.writes("tickets", T1)["items"]) == 1


# ---------------------------------------------------------------------- as-of reads, diff, revert


def test_as_of_reads_diff_and_revert_over_http(http: TestClient, service: StatesService) -> None:
    http.put(REC, json={"status": "a", "meta": {"x": 1}})
    http.patch(REC, json={"status": "b"})
    http.post(REC + "/deltas", json={"ops": [{"op": "remove", "path": ["meta"]}]})
    r = http.get(REC, params={"revision": 1})
    assert r.json()["data"]["data"] == {"status": "a", "meta": {"x": 1}} and r.headers["etag"] == '"1"'
    seq2 = http.get(REC, params={"revision": 2}).json()["data"]["seq"]
    assert http.get(REC, params={"seq": seq2}).json()["data"]["data"] == {"status": "b", "meta": {"x": 1}}
    assert http.get(REC, params={"revision": 0}).json() == {"data": None}
    assert http.get(REC, params={"revision": 9}).status_code == 404
    assert http.get(REC, params={"revision": 1, "seq": 1}).status_code == 422
    r = http.get(REC + "/diff", params={"from": 1, "to": 3})
    assert r.json()["data"] == {
        "from": 1,
        "to": 3,
        "edits": [[["meta"]], [["status"], "b"]],
        "patch": {"meta": None, "status": "b"},
    }
    r = http.post(REC + "/revert", json={"revision": 1}, headers={"If-Match": '"3"'})
    assert r.status_code == 200 and r.json()["data"]["data"] == {"status": "a", "meta": {"x": 1}}
    assert r.headers["etag"] == '"4"'
    assert http.post(REC + "/revert", json={"revision": 1}, headers={"If-Match": '"3"'}).status_code == 412
    # reverting to before it existed erases it, as a new transition
    assert http.post(REC + "/revert", json={"revision": 0}).json() == {"data": None}
    assert service.read("tickets", T1) is None
    assert [w["action"] for w in service.writes("tickets", T1)["items"]][:2] == ["erase", "revert"]


def test_a_diff_answers_a_patch_only_where_one_merge_patch_makes_the_change(
    http: TestClient, service: StatesService
) -> None:
    """A value set to null and a member named like "[0]" render as a deletion and an array
    index: no merge patch makes those changes, so ``patch`` is left out, not answered wrong."""
    cases = [
        ({"meta": {"x": 1}, "z": 1}, {"meta": {"x": None}, "z": None}, False),
        ({"meta": {"x": 1}, "z": 1}, {"meta": {}}, True),
        ({"meta": {"[0]": "old"}}, {"meta": {"[0]": "new"}}, False),
        ({}, {"meta": {"a": {"b": None}}}, False),
        ({"meta": {"x": [1]}}, {"meta": {"x": [None, {"a": None}]}}, True),
    ]
    for i, (before, after, expressible) in enumerate(cases):
        subject = {**T1, "key": f"d{i}"}
        service.replace("tickets", subject, before)
        service.replace("tickets", subject, after)
        answered = service.diff("tickets", subject, 1, 2)
        assert ("patch" in answered) is expressible, (before, after, answered)
        if expressible:
            assert merge_patch(before, answered["patch"]) == after
        assert apply_edits(before, [Edit.from_json(e) for e in answered["edits"]]) == after
        over_http = http.get(f"{REC[: -len('t1')]}d{i}/diff", params={"from": 1}).json()["data"]
        assert over_http == answered
    # an erase is a merge patch of null on the record
    service.erase("tickets", {**T1, "key": "d1"})
    assert service.diff("tickets", {**T1, "key": "d1"}, 2)["patch"] is None


def test_integers_in_queries_and_options_are_ascii_decimal_only(
    http: TestClient, service: StatesService, backend: str
) -> None:
    """``int`` read "0_3" as 3 and " 1 ", "+1", "١", "１" as 1: a query or option naming another
    revision than the caller wrote. Such text is refused; "-1" is still a (refused) number."""
    http.put(REC, json={"status": "a"})
    http.put(REC, json={"status": "b"})
    assert http.get(REC, params={"revision": "1"}).json()["data"]["data"] == {"status": "a"}
    for text in ("0_1", " 1 ", "+1", "\u0661", "\uff11", "1.0", ""):
        for query in ({"revision": text}, {"seq": text}, {"from": text}, {"limit": text}):
            path = REC + ("/diff" if "from" in query else "/writes" if "limit" in query else "")
            r = http.get(path, params=query)
            assert r.status_code == 400 and r.json()["code"] == "bad-request", (query, r.text)
    assert http.get(REC + "/writes", params={"limit": "-1"}).status_code == 422
    who = ["--target-name", "alice", "--key", "t1"]
    for text in ("0_1", "\u0661", "+1"):
        done = sf("states", "read", "tickets", *who, "--revision", text, store=backend)
        assert done.returncode == 2 and "is not a valid integer" in done.stderr, done.stderr
    done = sf("states", "read", "tickets", *who, "--revision", "1", store=backend)
    assert json.loads(done.stdout)["data"] == {"status": "a"}, done.stderr


def test_if_match_takes_the_etag_as_served_and_nothing_else(http: TestClient) -> None:
    """An unquoted ``1`` or a zero-padded ``"02"`` in ``If-Match`` was read as revision 1 or 2
    and the write went through, while ``If-None-Match`` (strong comparison) never matched those
    spellings: one header read two ways. Only the ETag as served (``"N"``) or ``*`` is taken; any
    other spelling is refused, nothing written."""
    etag = http.put(REC, json={"status": "a"}).headers["etag"]
    assert etag == '"1"'
    for given in ("1", '"01"', '"1', '1"', 'W/"1"', '"+1"', '""'):
        for write in (http.put, http.patch):
            r = write(REC, json={"status": "b"}, headers={"If-Match": given})
            assert r.status_code == 400 and r.json()["code"] == "bad-request", (given, r.text)
            assert 'record revision as its ETag gives it ("N")' in r.json()["error"]
        r = http.get(REC, headers={"If-Match": given})
        assert r.status_code == 400, (given, r.text)
    assert http.get(REC).json()["data"]["data"] == {"status": "a"}  # nothing written
    assert http.patch(REC, json={"status": "b"}, headers={"If-Match": '"1"'}).headers["etag"] == '"2"'
    assert http.put(REC, json={"status": "c"}, headers={"If-Match": " * "}).status_code == 200


def test_members_named_empty_or_dash_are_changed_whole_not_by_ops(service: StatesService) -> None:
    """An op path never holds "" and reads "-" as the append (as documented): such members are
    refused by name for ops, and changed by a merge of their parent."""
    service.replace("tickets", T1, {"meta": {"": 1, "-": 2}})
    for op, said in (
        ({"op": "set", "path": ["meta", ""], "value": 3}, "ops[0]: empty-string path segment"),
        ({"op": "set", "path": ["meta", "-"], "value": 3}, 'ops[0] at ["meta", "-"]: \'-\' requires a list'),
        ({"op": "remove", "path": ["meta", "-"]}, "ops[0]: '-' (append) is not allowed"),
    ):
        with pytest.raises(StateflowError) as refused:
            service.apply("tickets", T1, [op])
        assert refused.value.code == "invalid-ops" and refused.value.message.startswith(said), refused.value
    with pytest.raises(InvalidInput, match="a sort path is a non-empty list of field names"):
        service.search("tickets", {"meta": {"$exists": True}}, sort=[{"path": [""]}])
    merged = service.merge("tickets", T1, {"meta": {"": 3}})
    assert merged is not None and merged["data"] == {"meta": {"": 3}}


def test_a_literal_below_the_smallest_double_rounds_to_zero_as_documented(http: TestClient) -> None:
    body = b'{"n": 1e-400, "meta": {"a": -1e-400, "b": 2.4e-324, "c": 5e-324}}'
    r = http.put(REC, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    stored = http.get(REC).json()["data"]["data"]
    assert stored == {"n": 0.0, "meta": {"a": -0.0, "b": 0.0, "c": 5e-324}}
    assert math.copysign(1, stored["meta"]["a"]) == -1 and type(stored["n"]) is float


def test_a_listing_by_a_kind_the_state_does_not_declare_is_refused_on_every_door(
    http: TestClient, service: StatesService, backend: str
) -> None:
    """A mistyped kind answered an empty page, as if no such records existed (the studio
    refused it): every door now refuses it by name."""
    service.replace("tickets", T1, {"status": "a"})
    said = "state 'tickets' declares no subject kind 'thraed'"
    for call in (
        lambda: service.subjects("tickets", kind="thraed"),
        lambda: service.search("tickets", {"status": "a"}, kind="thraed"),
    ):
        with pytest.raises(InvalidInput, match=said):
            call()
    r = http.get("/api/states/tickets/subjects", params={"kind": "thraed"})
    assert r.status_code == 422 and r.json()["error"] == said, r.text
    done = sf("states", "subjects", "tickets", "--kind", "thraed", "--json", store=backend)
    assert done.returncode == 1 and done.stderr == f"error[invalid-input]: {said}\n", done.stderr
    assert [s["subject"]["key"] for s in service.subjects("tickets", kind="thread")["subjects"]] == ["t1"]


def test_a_create_only_declare_refuses_a_declared_state_on_every_door(
    http: TestClient, service: StatesService, backend: str
) -> None:
    """``PUT /api/states/{name}?replace=false`` (``replace=False`` in Python, ``--create-only``
    on the CLI) only creates: a state declared already is 409 ``state-exists``, nothing
    changed. Without it, or with ``?replace=true``, the PUT creates or re-declares (additively),
    as the published one did; any other value is 400."""
    wider = {**DECL, "description": "wider"}
    r = http.put("/api/states/jobs", json=DECL, params={"replace": "false"})
    assert r.status_code == 200, r.text
    before = service.get_declaration("jobs")
    r = http.put("/api/states/jobs", json=wider, params={"replace": "false"})
    assert r.status_code == 409 and r.json()["code"] == "state-exists", r.text
    assert "declared already" in r.json()["error"] and "?replace=false" in r.json()["error"]
    with pytest.raises(StateflowError, match="declared already") as refused:
        service.declare("jobs", wider, replace=False)
    assert refused.value.code == "state-exists"
    done = sf("states", "put", "jobs", "--data", json.dumps(wider), "--create-only", store=backend)
    assert done.returncode == 1 and done.stderr.startswith("error[state-exists]: state 'jobs'"), done.stderr
    assert service.get_declaration("jobs") == before
    r = http.put("/api/states/jobs", json=DECL, params={"replace": "maybe"})
    assert r.status_code == 400 and "'replace' must be true or false" in r.json()["error"], r.text
    for params in ({"replace": "true"}, {}):
        r = http.put("/api/states/jobs", json={**wider, "description": f"wider {params}"}, params=params)
        assert r.status_code == 200 and r.json()["data"]["description"] == f"wider {params}", r.text
    made = sf("states", "put", "fresh", "--data", json.dumps(DECL), "--create-only", store=backend)
    assert made.returncode == 0 and json.loads(made.stdout)["name"] == "fresh", made.stderr


def test_unknown_query_parameters_are_refused(http: TestClient) -> None:
    http.put(REC, json={"status": "a"})
    for path, params in (
        (REC, {"revison": "1"}),
        (REC + "/writes", {"limit": "1", "after": "x"}),
        ("/api/states", {"x": "1"}),
        ("/api/states/tickets/subjects", {"kinds": "thread"}),
    ):
        r = http.get(path, params=params)
        assert r.status_code == 422 and "unknown query parameter" in r.json()["error"], (path, r.text)
    r = http.put(REC, json={"status": "b"}, params={"force": "1"})
    assert r.status_code == 422
    assert http.get(REC).json()["data"]["data"] == {"status": "a"}
    assert http.get("/api/states/tickets/subjects", params={"kind": "thread"}).status_code == 200


# ---------------------------------------------------------------------- origin, replays


def test_origin_headers_are_recorded_and_door_actor_stay_server_stamped(
    http: TestClient, service: StatesService
) -> None:
    headers = {
        "X-Stateflow-Consumer": "billing",
        "X-Stateflow-Run-Id": "run-7",
        "X-Stateflow-Meta": '{"ticket": 5}',
    }
    assert http.put(REC, json={"status": "a"}, headers=headers).status_code == 200
    origin = service.writes("tickets", T1)["items"][0]["origin"]
    assert origin["consumer"] == "billing" and origin["run_id"] == "run-7" and origin["meta"] == {"ticket": 5}
    assert origin["door"] == "api" and origin["actor"].startswith("token:")
    bad = http.put(REC, json={"status": "x"}, headers={"X-Stateflow-Meta": "[1]"})
    assert bad.status_code == 422
    assert http.put(REC, json={"status": "x"}, headers={"X-Stateflow-Meta": "{"}).status_code == 400


def test_origin_texts_and_op_ids_are_bounded_at_every_door(
    backend: str, http: TestClient, service: StatesService, store: SqlStore
) -> None:
    # the audit trail keeps consumer and run_id on every row, the ledger every op id: bounded
    # as meta is, refused before anything is written, naming the field and the limit
    from stateflow.memory import Identity, MemoryView

    long = "c" * 257
    ops = [{"op": "set", "path": ["n"], "value": 1}]
    service.replace("tickets", T1, {"status": "a"}, origin={"consumer": "c" * 256, "run_id": "r" * 256})
    before = len(store.transitions(limit=10_000))
    for field in ("consumer", "run_id"):
        with pytest.raises(InvalidInput, match=f"{field}: {field} is 257 characters; the limit is 256"):
            service.replace("tickets", T1, {"status": "b"}, origin={field: long})
    with pytest.raises(InvalidInput, match=r"^op_id is 257 characters; the limit is 256$"):
        service.apply("tickets", T1, ops, op_id=long)
    with pytest.raises(InvalidInput, match=r"^items\[0\]: op_id is 257 characters; the limit is 256$"):
        service.apply_batch([{"state": "tickets", "subject": T1, "ops": ops, "op_id": long}])
    for header in ("X-Stateflow-Consumer", "X-Stateflow-Run-Id"):
        r = http.put(REC, json={"status": "b"}, headers={header: long})
        assert r.status_code == 422 and "is 257 characters; the limit is 256" in r.json()["error"], r.text
    r = http.post(REC + "/deltas", json={"ops": ops, "op_id": long})
    assert r.status_code == 422 and r.json()["error"] == "op_id is 257 characters; the limit is 256"
    host = ToolHost(MemoryView(service.store, Identity.of("alice", "/tmp", "s1")), service)
    result = host.call("state_apply", {"state": "tickets", "subject": "t1", "ops": ops, "op_id": long})
    assert result.is_error and result.code == "invalid-input", result.text
    assert result.text == "op_id is 257 characters; the limit is 256"
    who = ["--target-name", "alice", "--key", "t1"]
    done = sf("states", "replace", "tickets", *who, "--data", "{}", "--consumer", long, store=backend)
    assert done.returncode == 1 and "consumer is 257 characters; the limit is 256" in done.stderr
    done = sf("states", "apply", "tickets", *who, "--data", json.dumps(ops), "--op-id", long, store=backend)
    assert done.returncode == 1 and "op_id is 257 characters; the limit is 256" in done.stderr
    assert len(store.transitions(limit=10_000)) == before  # nothing was written
    assert not service.store.applied_op(long, "tickets@agent/alice")


def test_an_op_id_holding_nul_is_refused_alike_on_both_backends(
    http: TestClient, service: StatesService, store: SqlStore
) -> None:
    # the ledger keeps op ids as text, which on PostgreSQL cannot hold U+0000: refused before
    # anything is written at every door and on both backends (it was a 500 with the server's
    # SQL message on PostgreSQL, and accepted on SQLite)
    from stateflow.memory import Identity, MemoryView

    nul = "a\x00b"
    ops = [{"op": "set", "path": ["n"], "value": 1}]
    why = "op_id must not contain U+0000 (NUL)"
    before = len(store.transitions(limit=10_000))
    with pytest.raises(InvalidInput, match=rf"^{re.escape(why)}$"):
        service.apply("tickets", T1, ops, op_id=nul)
    with pytest.raises(InvalidInput, match=rf"^items\[0\]: {re.escape(why)}$"):
        service.apply_batch([{"state": "tickets", "subject": T1, "ops": ops, "op_id": nul}])
    r = http.post(REC + "/deltas", json={"ops": ops, "op_id": nul})
    assert r.status_code == 422 and r.json() == {"error": why, "code": "invalid-input"}, r.text
    host = ToolHost(MemoryView(service.store, Identity.of("alice", "/tmp", "s1")), service)
    result = host.call("state_apply", {"state": "tickets", "subject": "t1", "ops": ops, "op_id": nul})
    assert result.is_error and result.code == "invalid-input" and result.text == why, result.text
    assert len(store.transitions(limit=10_000)) == before  # nothing was written


def test_an_origin_is_stored_without_its_unset_fields_and_the_trail_still_shows_them(
    http: TestClient, service: StatesService, store: SqlStore
) -> None:
    # every transition row holds its origin: the fields a write did not set cost no bytes
    assert http.put(REC, json={"status": "a"}, headers={"X-Stateflow-Run-Id": "run-8"}).status_code == 200
    stored = store.transitions(limit=10_000)[-1].origin
    assert stored == {"run_id": "run-8", "door": "api", "actor": stored["actor"], "action": "replace"}
    entry = service.writes("tickets", T1)["items"][0]
    assert entry["action"] == "replace"
    assert entry["origin"] == {
        "consumer": None,
        "meta": None,
        "run_id": "run-8",
        "op_id": None,
        "door": "api",
        "actor": stored["actor"],
        "turn_id": None,
        "inbound_id": None,
    }


def test_replay_and_all_skipped_batches_say_so(http: TestClient) -> None:
    ops = [{"op": "set", "path": ["n"], "value": 1}]
    first = http.post(REC + "/deltas", json={"ops": ops, "op_id": "once"}).json()["data"]
    assert first["applied"] is True and "replayed" not in first and "written" not in first
    again = http.post(REC + "/deltas", json={"ops": ops, "op_id": "once"}).json()["data"]
    assert again == {
        "applied": False,
        "data": None,
        "seq": None,
        "skipped": [],
        "replayed": True,
        "replayed_seq": first["seq"],
    }
    guarded = [{"op": "set", "path": ["n"], "value": 9, "guard": {"path": ["n"], "expected": 5}}]
    skipped = http.post(REC + "/deltas", json={"ops": guarded}).json()["data"]
    assert skipped["applied"] is True and skipped["written"] is False and skipped["seq"] == first["seq"]
    assert [s["reason"] for s in skipped["skipped"]] == ["guard"]


# ---------------------------------------------------------------------- search


def _seed(service: StatesService) -> None:
    rows = [("a", 1, "ana"), ("b", 5, "bo"), ("c", 3, "ana"), ("d", 7, None), ("e", "x", "cy")]
    for key, n, owner in rows:
        doc: dict[str, Any] = {"status": "open", "n": n} if not isinstance(n, str) else {"status": "open"}
        if owner:
            doc["owner"] = owner
        service.replace("tickets", {**T1, "key": key}, doc)
    service.replace("tickets", {**T1, "key": "z"}, {"status": "closed", "n": 4})


def _keys(page: Mapping[str, Any]) -> list[str]:
    return [m["subject"]["key"] for m in page["matches"]]


def test_search_operators_sort_and_include_data(service: StatesService, http: TestClient) -> None:
    _seed(service)
    s = service.search
    assert _keys(s("tickets", {"n": {"$gt": 3}})) == ["b", "d", "z"]
    assert _keys(s("tickets", {"status": "open", "n": {"$gte": 3, "$lt": 7}})) == ["b", "c"]
    assert _keys(s("tickets", {"owner": {"$in": ["ana", "cy"]}})) == ["a", "c", "e"]
    assert _keys(s("tickets", {"owner": {"$exists": False}})) == ["d", "z"]
    # an $in of more values than are searched one by one is looked up by each record's value,
    # as JSON equality has it: 7.0 is 7, true is not 1, "5" is not 5
    many = [True, "5", 7.0, [1], {"n": 1}, *(f"v{i}" for i in range(100_000))]
    assert _keys(s("tickets", {"n": {"$in": many}})) == ["d"]
    assert _keys(s("tickets", {"status": "open", "owner": {"$in": [*many, "bo"]}})) == ["b"]
    assert _keys(s("tickets", {"owner": {"$ne": "ana"}, "status": {"$eq": "open"}})) == ["b", "d", "e"]
    assert _keys(s("tickets", {"n": {"$lte": 1}})) == ["a"]
    page = s("tickets", {"status": "open"}, sort=[{"path": ["n"], "order": "desc"}], limit=2)
    assert _keys(page) == ["d", "b"] and page["next_cursor"]
    rest = s(
        "tickets",
        {"status": "open"},
        sort=[{"path": ["n"], "order": "desc"}],
        limit=2,
        cursor=page["next_cursor"],
    )
    assert _keys(rest) == ["c", "a"]
    last = s(
        "tickets",
        {"status": "open"},
        sort=[{"path": ["n"], "order": "desc"}],
        limit=2,
        cursor=rest["next_cursor"],
    )
    assert _keys(last) == ["e"] and last["next_cursor"] is None  # a missing value sorts last
    with_data = s("tickets", {"n": {"$eq": 5}}, include_data=True)["matches"]
    assert with_data[0]["data"] == {"status": "open", "n": 5, "owner": "bo"}
    for bad, says in (
        ({"n": {"$gt": 3, "x": 1}}, "mixes operators"),
        ({"n": {"$regex": "a"}}, "unknown filter operator '$regex'"),
        ({"n": {"$in": 3}}, "$in at 'n' takes a JSON array"),
        ({"n": {"$gt": [1]}}, "takes a number or a string"),
        # (inside an array an operator would be matched as a literal key: nothing, silently)
        ({"tags": [{"id": {"$gt": 1}}]}, "filter at 'tags' holds an operator inside an array"),
        ({"a": {"b": [[{"$eq": 1}]]}}, "filter at 'a.b' holds an operator inside an array"),
    ):
        with pytest.raises(InvalidInput, match=says.replace("$", r"\$")):
            s("tickets", bad)
    r = http.post(
        "/api/states/tickets/records/search",
        json={"filters": {"n": {"$gt": 3}}, "sort": {"path": ["n"]}, "include_data": True},
    )
    assert [m["subject"]["key"] for m in r.json()["data"]["matches"]] == ["z", "b", "d"]
    assert r.json()["data"]["matches"][0]["data"]["status"] == "closed"
    r = http.post("/api/states/tickets/records/search", json={"filters": {"n": {"$foo": 3}}})
    assert r.status_code == 422 and "$foo" in r.json()["error"]
    r = http.post("/api/states/tickets/records/search", json={"filters": {"n": 1}, "order": "x"})
    assert r.status_code == 400 and "unknown keys ['order']" in r.json()["error"]
    # every match's sort key is made of all the keys: a sort has at most 16 (one of 100,000
    # kept the server busy for hours)
    by_n = [{"path": ["n"], "order": "desc"}]
    assert _keys(s("tickets", {"status": "open"}, sort=by_n * 16, limit=2)) == ["d", "b"]
    r = http.post("/api/states/tickets/records/search", json={"filters": {"n": 1}, "sort": by_n * 100_000})
    assert r.status_code == 422 and r.json() == {
        "error": "a sort has at most 16 keys, got 100000",
        "code": "invalid-input",
    }


def test_search_checked_in_python_finds_every_match_page_after_page(service: StatesService) -> None:
    # array and object filter members are compared in Python on SQLite: a batch of candidates
    # of which few match is not the end of the candidates
    docs: dict[str, dict[str, Any]] = {}
    for start in range(0, 300, 100):
        items: list[dict[str, Any]] = []
        for i in range(start, start + 100):
            doc = {"n": i, "meta": {"arr": list(range(300)) if i == 0 else [i], "deep": {"m": i % 3}}}
            docs[f"k{i:03d}"] = doc
            items.append(
                {
                    "state": "tickets",
                    "subject": {**T1, "key": f"k{i:03d}"},
                    "ops": [{"op": "set", "path": [k], "value": v} for k, v in doc.items()],
                }
            )
        service.apply_batch(items)
    for filters, want in (
        ({"meta": {"deep": {"m": 2}}}, [k for k, d in docs.items() if d["n"] % 3 == 2]),
        ({"meta": {"arr": [299]}}, ["k000", "k299"]),
        ({"meta": {"arr": [150], "deep": {"m": 0}}}, ["k000", "k150"]),
    ):
        found: list[str] = []
        cursor = None
        while True:
            page = service.search("tickets", filters, limit=40, cursor=cursor)
            assert len(page["matches"]) == 40 or page["next_cursor"] is None
            found += _keys(page)
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert found == want, filters


def test_eq_and_in_filters_found_by_the_value_index_match_as_checked(service: StatesService) -> None:
    # $eq and $in of scalars are searched by containment of each value (the value index), not
    # checked on every record: what they find is exactly what the operators match
    values: list[Any] = [1, 2.0, 2, True, False, None, "a", "b", "1", 3, [1], {"x": 1}]
    docs: dict[str, dict[str, Any]] = {}
    items: list[dict[str, Any]] = []
    for i in range(120):
        v = values[i % len(values)]
        doc = {"n": i, "status": "open" if i % 2 else "closed", "meta": {"v": v}, "x": v}
        docs[f"k{i:03d}"] = doc
        ops = [{"op": "set", "path": [k], "value": x} for k, x in doc.items()]
        items.append({"state": "tickets", "subject": {**T1, "key": f"k{i:03d}"}, "ops": ops})
    for start in range(0, len(items), 100):
        service.apply_batch(items[start : start + 100])
    cases: list[dict[str, Any]] = [
        {"x": {"$eq": 2}},  # 2 and 2.0, never True
        {"x": {"$eq": True}},
        {"x": {"$eq": None}},
        {"x": {"$in": [1, "a", None]}},
        {"meta": {"v": {"$in": [2, "b", False]}}, "status": "open"},
        {"meta": {"v": {"$eq": "1"}}, "n": {"$lt": 60}},
        {"x": {"$in": []}},
        {"x": {"$in": [[1], 3]}},  # (an array among the values: every record is checked)
        {"x": {"$in": [1, 3], "$ne": 3}, "meta": {"v": {"$eq": 1}}},
    ]
    for filters in cases:
        want = [k for k, d in docs.items() if matches(d, split_filters(filters)[1])]
        containment = split_filters(filters)[0]
        want = [k for k in want if json_contains(docs[k], containment)]
        found: list[str] = []
        cursor = None
        while True:
            page = service.search("tickets", filters, limit=7, cursor=cursor)
            found += _keys(page)
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert found == want, filters
        assert found or filters == {"x": {"$in": []}}, filters


def test_range_filters_narrowed_in_sql_match_as_checked(service: StatesService) -> None:
    # $gt $gte $lt $lte on a top-level member narrow the candidates in SQL (a superset, checked
    # here after): numbers past 64 bits, floats one step apart, long strings, strings SQL cannot
    # read (a NUL), code points past the BMP, values of other kinds — what they find is exactly
    # what the operators match
    values: list[Any] = [
        *(0, 1, -1, 2.5, 0.1, 0.30000000000000004, 1e300, -1e300, 2**53 + 1, 2**63 + 1, 2**64 - 1, -(2**63)),
        *("a", "b", "ab", "é", "😀", "z" * 2000, "a\u0000b", "a\\u0000b", "", "A"),
        *(True, False, None, [1], {"x": 1}),
    ]
    docs: dict[str, dict[str, Any]] = {}
    items: list[dict[str, Any]] = []
    for i, v in enumerate(values * 3):
        doc = {"n": i, "x": v} if i % 7 else {"n": i}
        docs[f"k{i:03d}"] = doc
        ops = [{"op": "set", "path": [k], "value": x} for k, x in doc.items()]
        items.append({"state": "tickets", "subject": {**T1, "key": f"k{i:03d}"}, "ops": ops})
    for start in range(0, len(items), 100):
        service.apply_batch(items[start : start + 100])
    operands: list[Any] = [
        0,
        1,
        0.1,
        0.30000000000000004,
        2.5,
        2**63,
        2**64 - 1,
        -(2**63) + 1,
        1e300,
        "a",
        "b",
        "é",
        "z",
        "\U0001f600",
        "",
        # a PostgreSQL text cannot hold NUL: these were a store-error there
        "a\u0000",
        "a\u0000b",
        "a\u0000c",
        "\u0000",
    ]
    for operand in operands:
        for op in ("$gt", "$gte", "$lt", "$lte"):
            for filters in ({"x": {op: operand}}, {"x": {op: operand}, "n": {"$in": list(range(0, 80, 3))}}):
                want = [k for k, d in docs.items() if matches(d, split_filters(filters)[1])]
                found: list[str] = []
                cursor = None
                while True:
                    page = service.search("tickets", filters, limit=9, cursor=cursor)
                    found += _keys(page)
                    cursor = page["next_cursor"]
                    if cursor is None:
                        break
                assert found == want, filters


# ---------------------------------------------------------------------- the public HTTP client


@pytest.fixture
def server(backend: str, service: StatesService) -> Iterator[str]:
    port = servers.free_port()
    env = dict(os.environ, STATEFLOW_TOKENS=ADMIN, STATEFLOW_URL="", STATEFLOW_TOKEN="")
    proc = subprocess.Popen(
        ["stateflow", "--store", backend, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # until it answers (importing the server took over 30 s at load 15), not a loop that
        # went on silently after ~30 s; one that exits or never answers fails here
        servers.wait_ready(servers.Server(url, proc), timeout=120)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_the_http_client_and_the_cli_over_a_real_server(server: str, backend: str) -> None:
    client = StatesClient(server, ADMIN, consumer="sync-job")
    made = client.replace("tickets", T1, {"status": "a"}, expect_revision=0)
    assert made is not None and made["revision"] == 1 and client.last_etag == '"1"'
    with pytest.raises(ClientError) as refused:
        client.merge("tickets", T1, {"n": 1}, expect_revision=0)
    assert refused.value.http_status == 412 and refused.value.code == "revision-mismatch"
    result = client.apply(
        "tickets", T1, [{"op": "set", "path": ["n"], "value": 2}], op_id="k", expect_revision=1
    )
    assert result.applied and result.data == {"status": "a", "n": 2}
    assert client.apply("tickets", T1, [{"op": "set", "path": ["n"], "value": 2}], op_id="k").replayed
    assert client.read("tickets", T1, revision=1)["data"] == {"status": "a"}  # type: ignore[index]
    assert client.diff("tickets", T1, 1)["patch"] == {"n": 2}
    assert client.revert("tickets", T1, 1)["data"] == {"status": "a"}  # type: ignore[index]
    assert client.writes("tickets", T1)["items"][1]["origin"]["consumer"] == "sync-job"
    assert [m["subject"]["key"] for m in client.search("tickets", {"status": {"$eq": "a"}})["matches"]] == [
        "t1"
    ]
    gone = {**T1, "key": "gone"}
    client.replace("tickets", gone, {})
    client.erase("tickets", gone, expect_revision=1)
    assert client.last_etag == '"0"'
    assert client.read("tickets", gone) is None and client.last_etag == '"0"'
    assert client.replace("tickets", gone, {}, expect_revision=0)["revision"] == 3
    remote = ["states", "--url", server, "--token", ADMIN]
    who = ["--target-name", "alice", "--key", "t1"]
    done = sf(*remote, "merge", "tickets", *who, "--data", '{"n": 9}', "--expect-revision", "1", store=None)
    assert done.returncode == 1 and done.stderr.startswith("error[revision-mismatch]: ")
    done = sf(
        *remote,
        "merge",
        "tickets",
        *who,
        "--data",
        '{"n": 9}',
        "--expect-revision",
        "3",
        "--consumer",
        "cli",
        store=None,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(sf(*remote, "read", "tickets", *who, "--revision", "2", store=None).stdout)["data"] == {
        "status": "a",
        "n": 2,
    }
    assert json.loads(sf(*remote, "diff", "tickets", *who, "--from", "3", store=None).stdout)["patch"] == {
        "n": 9
    }


class _HeldBody:
    """A loopback proxy in front of a server that passes the first connection's answer head
    (status line and headers) at once and holds its body until :attr:`release` is set; every
    other connection passes through."""

    def __init__(self, target: str) -> None:
        self.target = urlsplit(target)
        self.head_sent = threading.Event()
        self.release = threading.Event()
        self._first = True
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((self.target.hostname, self.target.port))
            hold, self._first = self._first, False
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, hold), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, hold: bool) -> None:
        pending = b""
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if not hold:
                    sink.sendall(chunk)
                    continue
                pending += chunk
                head, blank, body = pending.partition(b"\r\n\r\n")
                if blank:
                    sink.sendall(head + blank)
                    self.head_sent.set()
                    self.release.wait(timeout=60)
                    sink.sendall(body)
                    hold = False
            if pending and hold:
                sink.sendall(pending)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def test_the_http_client_gives_each_thread_its_own_answers_revision(server: str) -> None:
    """``apply``'s revision is its own answer's ETag when threads share one client: another
    thread's answer arriving while this one's body is still on its way does not replace it (it
    was kept on the client, and read back after the body)."""
    client = StatesClient(server, ADMIN)
    high = {**T1, "key": "high"}
    for n in range(5):
        client.replace("tickets", high, {"n": n})
    ops = [{"op": "set", "path": ["n"], "value": 1}]
    proxy = _HeldBody(server)
    shared = StatesClient(proxy.url, ADMIN)
    try:
        results: list[Any] = []
        first = threading.Thread(target=lambda: results.append(shared.apply("tickets", T1, ops)))
        first.start()
        assert proxy.head_sent.wait(timeout=60)  # its ETag "1" is in; the body is held
        assert shared.apply("tickets", high, ops).revision == 6  # another thread's write
        proxy.release.set()
        first.join(timeout=60)
        assert [r.revision for r in results] == [1]
    finally:
        proxy.close()


def test_origins_in_any_script_travel_as_utf8_headers(server: str, service: StatesService) -> None:
    """An origin outside Latin-1 is recorded through the client as the local service records it
    (the client failed with http.client's UnicodeEncodeError), a UTF-8 header sent by hand is
    read as UTF-8 (it was recorded as mojibake), a header that is not UTF-8 is 400 naming it,
    and text a header cannot carry is refused by the client before sending."""
    client = StatesClient(server, ADMIN, consumer="агент-1")
    origins: list[dict[str, Any]] = [
        {"consumer": "агент-1", "run_id": "run-✓", "meta": {"who": "日本"}},
        {"consumer": "büro 😀", "run_id": "a\tb"},
    ]
    for n, origin in enumerate(origins):
        client.apply("tickets", T1, [{"op": "set", "path": ["n"], "value": n}], origin=origin)
        recorded = service.writes("tickets", T1)["items"][0]["origin"]
        assert {k: recorded[k] for k in origin} == origin
    client.merge("tickets", T1, {"n": 9})  # the client's own consumer
    assert service.writes("tickets", T1)["items"][0]["origin"]["consumer"] == "агент-1"
    host, port = urlsplit(server).netloc.split(":")
    body = json.dumps({"ops": [{"op": "set", "path": ["n"], "value": 10}]}).encode()
    for consumer, status in (("агент".encode(), 200), ("agent-é".encode("latin-1"), 400)):
        conn = HTTPConnection(host, int(port), timeout=60)
        conn.putrequest("POST", REC + "/deltas")
        for name, value in (
            ("Authorization", f"Bearer {ADMIN}".encode()),
            ("Content-Type", b"application/json"),
            ("Content-Length", str(len(body)).encode()),
            ("X-Stateflow-Consumer", consumer),
        ):
            conn.putheader(name, value)
        conn.endheaders(body)
        answer = conn.getresponse()
        said = json.loads(answer.read())
        conn.close()
        assert answer.status == status, said
        if status == 200:
            assert service.writes("tickets", T1)["items"][0]["origin"]["consumer"] == "агент"
        else:
            # worded as /mcp words its own headers': one refusal for one fault
            assert said == {
                "error": "X-Stateflow-Consumer must be UTF-8 (the text's own bytes, not percent-encoded)",
                "code": "bad-request",
            }
    before = len(service.writes("tickets", T1)["items"])
    for text in ("a\nb", "a\rb", "a\x00b", " padded", "padded\t"):
        for field in ("consumer", "run_id"):
            with pytest.raises(InvalidInput, match="cannot be sent in an HTTP header"):
                client.merge("tickets", T1, {"n": 11}, origin={field: text})
    assert len(service.writes("tickets", T1)["items"]) == before  # nothing was sent


def test_the_http_client_refuses_an_origin_op_id_it_cannot_send(server: str, service: StatesService) -> None:
    # no header carries an origin's op_id: the client dropped it, and the trail lacked what the
    # local service records; now refused before sending, and the call's own op_id is recorded
    client = StatesClient(server, ADMIN)
    ops = [{"op": "set", "path": ["n"], "value": 1}]
    for call in (
        lambda: client.apply("tickets", T1, ops, origin={"op_id": "job-7", "consumer": "c"}),
        lambda: client.replace("tickets", T1, {"n": 2}, origin={"op_id": "job-7"}),
    ):
        with pytest.raises(InvalidInput, match=r"^origin\.op_id cannot be sent over HTTP"):
            call()
    assert service.read("tickets", T1) is None  # nothing was sent
    client.apply("tickets", T1, ops, op_id="job-7", origin={"consumer": "c"})
    local = {**T1, "target_name": "bob"}  # (another tenant: the id is its own there)
    service.apply("tickets", local, ops, op_id="job-7", origin={"consumer": "c"})
    remote_row, local_row = (service.writes("tickets", s)["items"][0]["origin"] for s in (T1, local))
    assert remote_row["op_id"] == local_row["op_id"] == "job-7" and remote_row["consumer"] == "c"


def test_the_http_client_answers_and_refuses_as_the_local_service(
    server: str, service: StatesService
) -> None:
    """One ``StatesAPI``, two sides: the same calls give the same results and the same refusals
    (code and message) from the local service and through a real server."""

    def outcome(api: Any, call: Any, key: str) -> Any:
        try:
            return ("ok", call(api))
        except StateflowError as exc:  # (the client's InvalidInput …: refused before sending)
            return (exc.code, str(exc).replace(key, "KEY"))

    def calls(key: str) -> list[tuple[str, Any]]:
        s = {**T1, "key": key}
        ops = [{"op": "set", "path": ["n"], "value": 1}]
        again = [{"op": "set", "path": ["n"], "value": 2}]
        return [
            ("replace", lambda api: api.replace("tickets", s, {"status": "open"})["revision"]),
            ("merge *", lambda api: api.merge("tickets", s, {"n": 0}, expect_revision="*")["revision"]),
            ("apply revision", lambda api: api.apply("tickets", s, ops, expect_revision="*").revision),
            ("replayed", lambda api: api.apply("tickets", s, again, op_id=f"op-{key}").revision),
            ("replay", lambda api: api.apply("tickets", s, again, op_id=f"op-{key}").revision),
            ("read revision text", lambda api: api.read("tickets", s, revision="1")),
            ("read both", lambda api: api.read("tickets", s, revision=1, seq=1)),
            ("writes limit text", lambda api: api.writes("tickets", s, limit="2")),
            ("writes cursor int", lambda api: api.writes("tickets", s, cursor=5)),
            ("diff from text", lambda api: api.diff("tickets", s, "1")),
            ("diff no from", lambda api: api.diff("tickets", s, None)),
            ("subjects limit text", lambda api: api.subjects("tickets", limit="1")),
            ("subjects limit bool", lambda api: api.subjects("tickets", limit=True)),
            ("search include_data", lambda api: api.search("tickets", {}, include_data="yes")),
            ("search limit text", lambda api: api.search("tickets", {}, limit="3")),
            ("search cursor int", lambda api: api.search("tickets", {}, cursor=3)),
            ("apply op_id int", lambda api: api.apply("tickets", s, [], op_id=5)),
            ("apply ops text", lambda api: api.apply("tickets", s, "x")),
            ("replace list", lambda api: api.replace("tickets", s, [1])),
            ("merge list", lambda api: api.merge("tickets", s, [1])),
            ("declare list", lambda api: api.declare("other", [1])),
            # None is JSON null to the server, refused as the service refuses it (the client
            # sent no body: 400 "the request body must be JSON")
            ("replace None", lambda api: api.replace("tickets", s, None)),
            ("merge None", lambda api: api.merge("tickets", s, None)),
            ("declare None", lambda api: api.declare("other", None)),
            ("put_template None", lambda api: api.put_template(f"tpl-{key}", None)),
            ("update_attachment None", lambda api: api.update_attachment("tickets", "none", None)),
            ("revert *", lambda api: api.revert("tickets", s, 1, expect_revision="*")["revision"]),
            ("erase *", lambda api: api.erase("tickets", s, expect_revision="*")),
            ("erase * absent", lambda api: api.erase("tickets", s, expect_revision="*")),
        ]

    remote = StatesClient(server, ADMIN)
    local = [(label, outcome(service, call, "local")) for label, call in calls("local")]
    over_http = [(label, outcome(remote, call, "remote")) for label, call in calls("remote")]
    assert over_http == local
    answers = dict(local)
    assert answers["merge *"] == ("ok", 2) and answers["apply revision"] == ("ok", 3)
    assert answers["replayed"] == ("ok", 4) and answers["replay"] == ("ok", None)  # a replay reads nothing
    assert (
        answers["erase *"] == ("ok", {"erased": True}) and answers["erase * absent"][0] == "revision-mismatch"
    )
    assert answers["replace list"] == ("invalid-input", "a record document must be a JSON object")
    assert answers["replace None"] == ("invalid-input", "a record document must be a JSON object")
    assert answers["declare None"] == ("invalid-input", "a declaration must be a JSON object")
