"""Tenants and identities at the doors: cwd keys, op_id ledgers per tenant, conditional
requests, CORS and the messages of refusals — through the real CLI, HTTP app and MCP client."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from stateflow.api import connect
from stateflow.errors import InvalidInput
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.subjects import Subject
from tests.http_api import ADMIN, ALICE, Api, tenant_api

from .test_mcp import FULL, http_client, served  # noqa: F401 (the served fixture)

DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"paid": {"type": "boolean"}, "n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def sf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.fixture
def api(store: SqlStore) -> Iterator[Api]:
    with tenant_api(store) as api:
        yield api


def _long_dir(root: Path) -> Path:
    """A real directory whose absolute path is longer than a subject key may be (512)."""
    deep = root.joinpath(*["d" * 100] * 6)
    deep.mkdir(parents=True)
    assert len(str(deep)) > 512
    return deep


# ------------------------------------------------------------------ 1. a cwd longer than a key


def test_a_cwd_longer_than_a_key_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    deep = _long_dir(tmp_path)
    patch = sf("--store", db, "tool", "patch_state", '{"cwd": {"strategy": {"db": "sqlite"}}}', cwd=deep)
    assert patch.returncode == 1
    assert "error[invalid-input]: the working directory is" in patch.stderr
    assert "at most 512" in patch.stderr and "Traceback" not in patch.stderr
    # the global and session scopes still serve from there
    ok = sf(
        "--store", db, "tool", "patch_state", '{"session": {"tactics": {"a": 1}}}', "--scopes", "global,session",
        cwd=deep,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    listed = sf("--store", db, "states", "subjects", "memory", "--kind", "cwd")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["subjects"] == []


def _plant_long_key(store: SqlStore) -> str:
    """A memory record under an overlong cwd key, as a store written before the refusal holds."""
    key = "/" + "b" * 600
    doc = DocKey("memory", Subject("agent", "alice", "cwd", key).encode())
    store.commit([Write.between(doc, {}, {"strategy": {"x": 1}}, 0)])
    return key


def test_a_stored_overlong_key_does_not_break_listings(api: Api, store: SqlStore) -> None:
    key = _plant_long_key(store)
    status, body = api("GET", "/api/states/memory/subjects")
    assert status == 200, body
    assert [s["subject"]["key"] for s in body["data"]["subjects"]] == [key]
    status, body = api("POST", "/api/states/memory/records/search", {"filters": {"strategy": {"x": 1}}})
    assert status == 200, body
    assert [m["subject"]["key"] for m in body["data"]["matches"]] == [key]
    status, body = api(
        "POST",
        "/api/states/memory/records/search",
        {"filters": {"strategy": {"x": 1}}, "sort": {"path": ["strategy", "x"]}},
    )
    assert status == 200 and len(body["data"]["matches"]) == 1, body
    page = api.client.get("/studio/states/memory", headers={"Authorization": f"Bearer {ADMIN}"})
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]


def test_the_cli_lists_a_stored_overlong_key(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    assert sf("--store", db, "migrate").returncode == 0
    store = open_store(db)
    try:
        key = _plant_long_key(store)
    finally:
        store.close()
    listed = sf("--store", db, "states", "subjects", "memory", "--kind", "cwd")
    assert listed.returncode == 0, listed.stderr
    assert [s["subject"]["key"] for s in json.loads(listed.stdout)["subjects"]] == [key]


# --------------------------------------------- 1, 6, 7. the cwd header of MCP over HTTP


def _http_patch_and_keys(served: str, cwd: str | bytes) -> tuple[str, list[str]]:  # noqa: F811
    """patch_state over MCP HTTP with ``cwd`` as the header's bytes; the answer, and the cwd
    keys the REST listing then shows for the agent."""

    async def call() -> tuple[str, list[str]]:
        headers = {
            b"Authorization": f"Bearer {FULL}".encode(),
            b"X-Stateflow-Agent": b"eve",
            b"X-Stateflow-Cwd": cwd if isinstance(cwd, bytes) else cwd.encode(),
        }
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            streamable_http_client(served, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            result = await client.call_tool("patch_state", {"cwd": {"strategy": {"x": 1}}})
            text = " ".join(getattr(c, "text", "") for c in result.content)
            answer = ("error " if result.is_error else "ok ") + text
        subjects = served.removesuffix("/mcp") + "/api/states/memory/subjects?kind=cwd"
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {FULL}"}, timeout=60) as http:
            listed = (await http.get(subjects)).json()["data"]["subjects"]
        return answer, [s["subject"]["key"] for s in listed if s["subject"]["target_name"] == "eve"]

    return anyio.run(call)


def test_mcp_http_cwd_is_text_never_looked_up_on_the_server(served: str) -> None:  # noqa: F811
    answer, keys = _http_patch_and_keys(served, "/proc/self/cwd")
    assert answer.startswith("ok "), answer
    answer, _ = _http_patch_and_keys(served, "/proc/self/fd/../fd/0/./")
    assert answer.startswith("ok "), answer
    answer, keys = _http_patch_and_keys(served, "//work//proj/sub/../")
    assert answer.startswith("ok "), answer
    assert sorted(keys) == ["/proc/self/cwd", "/proc/self/fd/0", "/work/proj"]


def test_mcp_http_cwd_is_utf8_and_a_long_one_is_refused(served: str) -> None:  # noqa: F811
    answer, keys = _http_patch_and_keys(served, "/tmp/projé".encode())
    assert answer.startswith("ok "), answer
    assert keys == ["/tmp/projé"]
    answer, _ = _http_patch_and_keys(served, "/tmp/caf\xe9".encode("latin-1"))
    assert answer.startswith("error error[bad-request]: X-Stateflow-Cwd must be UTF-8"), answer
    answer, keys = _http_patch_and_keys(served, "/" + "b" * 600)
    assert answer.startswith("error error[invalid-input]: the working directory is 601 characters"), answer
    assert keys == ["/tmp/projé"]


def test_an_empty_agent_session_or_scopes_list_is_refused_at_every_door(
    served: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    refusals = {
        "agent": "agent name '' must be 1-128 characters",
        "session": "session id '' must be 1-256 characters",
        "scopes": "scopes must be a non-empty subset of global, cwd, session (got [''])",
    }
    patch = {"session": {"tactics": {"who": "empty"}}}

    async def over_http() -> list[str]:
        answers = []
        for name in refusals:
            identity = {"agent": "eve", "session": "s", "cwd": "/tmp", name: ""}
            async with http_client(served, FULL, **identity) as client:
                result = await client.call_tool("patch_state", patch)
                answers.append(("error " if result.is_error else "ok ") + result.content[0].text)  # type: ignore[union-attr]
            async with http_client(served, FULL, agent="default", session="default") as client:
                result = await client.call_tool("read_state", {"path": "tactics"})
                assert result.content[0].text == '{"value":null}'  # type: ignore[union-attr]
        return answers

    for answer, message in zip(anyio.run(over_http), refusals.values(), strict=True):
        assert answer.startswith("error error[invalid-input]: " + message), answer
    db = str(tmp_path / "s.db")
    for name, message in refusals.items():
        args = {"agent": "eve", "session": "s", "scopes": "global,session", name: ""}
        options = [x for k, v in args.items() for x in (f"--{k}", v)]
        done = subprocess.run(
            ["stateflow", "--store", db, "tool", "patch_state", json.dumps(patch), *options],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "STATEFLOW_SESSION": "zz"},  # an empty --session is not a fallback to it
        )
        assert done.returncode == 1 and done.stderr.startswith("error[invalid-input]: " + message), (
            done.stderr
        )
    with connect(db) as sf_:
        for name in ("agent", "session"):
            with pytest.raises(InvalidInput, match=refusals[name]):
                sf_.memory(cwd="/tmp", **{name: ""})


# ------------------------------------------------------------------ 2. op_id is a tenant's own


def _deltas(api: Api, tenant: str, token: str, op_id: str, value: int) -> tuple[int, Any]:
    ops = [{"op": "set", "path": ["n"], "value": value}]
    path = f"/api/states/bills/records/agent/{tenant}/thread/invoice-1/deltas"
    return api("POST", path, {"ops": ops, "op_id": op_id}, token=token)


def _n(api: Api, tenant: str) -> Any:
    status, body = api("GET", f"/api/states/bills/records/agent/{tenant}/thread/invoice-1")
    assert status == 200, body
    data = body["data"]["data"]
    return None if data is None else data.get("n")


def test_an_op_id_is_one_tenants_own(api: Api) -> None:
    assert api("PUT", "/api/states/bills", DECL)[0] == 200
    status, bob = _deltas(api, "bob", ADMIN, "pay-invoice-1", 1)
    assert status == 200 and bob["data"]["applied"] is True, bob
    # alice's own write with the same id is hers: applied, and nothing of bob's shows
    status, alice = _deltas(api, "alice", ALICE, "pay-invoice-1", 2)
    assert status == 200, alice
    assert alice["data"]["applied"] is True and not alice["data"].get("replayed"), alice
    assert _n(api, "alice") == 2 and _n(api, "bob") == 1
    # each tenant's retry is a replay of its own write, with its own seq
    status, again = _deltas(api, "alice", ALICE, "pay-invoice-1", 3)
    assert again["data"]["replayed"] is True and again["data"]["replayed_seq"] == alice["data"]["seq"]
    status, again = _deltas(api, "bob", ADMIN, "pay-invoice-1", 3)
    assert again["data"]["replayed"] is True and again["data"]["replayed_seq"] == bob["data"]["seq"]
    assert _n(api, "alice") == 2 and _n(api, "bob") == 1


def test_an_op_id_claimed_per_state_is_still_its_tenants_replay(
    backend: str, api: Api, store: SqlStore
) -> None:
    """A claim recorded while ids were scoped by the state alone (rewritten here to that form,
    by another process, before this one writes) replays for the tenant whose record it
    changed, and only for it."""
    assert api("PUT", "/api/states/bills", DECL)[0] == 200
    ops = json.dumps([{"op": "set", "path": ["n"], "value": 1}])
    out = sf("--store", backend, "states", "apply", "bills", "--target-name", "bob", "--key", "invoice-1",
             "--data", ops, "--op-id", "pay-1")  # fmt: skip
    assert out.returncode == 0, out.stderr
    seq = json.loads(out.stdout)["seq"]
    with store._write_tx() as tx:
        assert tx.run("UPDATE applied_ops SET scope = 'bills' WHERE op_id = 'pay-1'", ()) == 1
    _, again = _deltas(api, "bob", ADMIN, "pay-1", 5)
    assert again["data"]["replayed"] is True and again["data"]["replayed_seq"] == seq, again
    _, alice = _deltas(api, "alice", ALICE, "pay-1", 2)
    assert alice["data"]["applied"] is True and not alice["data"].get("replayed"), alice
    assert _n(api, "alice") == 2 and _n(api, "bob") == 1
    # a batch item takes the same path
    bob = {"target_kind": "agent", "target_name": "bob", "kind": "thread", "key": "invoice-1"}
    item = {
        "state": "bills",
        "subject": bob,
        "ops": [{"op": "set", "path": ["n"], "value": 9}],
        "op_id": "pay-1",
    }
    (result,) = StatesService(store).apply_batch([item])
    assert result.replayed and result.replayed_seq == seq
    assert _n(api, "bob") == 1


def test_a_purge_forgets_the_states_op_ids(store: SqlStore) -> None:
    service = StatesService(store)
    service.install_builtins()
    subject = {"target_kind": "agent", "target_name": "bob", "kind": "thread", "key": "t"}
    service.declare("bills", DECL)
    ops = [{"op": "set", "path": ["n"], "value": 1}]
    assert service.apply("bills", subject, ops, op_id="x").applied
    service.delete_declaration("bills")
    service.declare("bills", DECL)
    again = service.apply("bills", subject, ops, op_id="x")
    assert again.applied and not again.replayed


def test_the_cli_keeps_tenants_op_ids_apart(backend: str, store: SqlStore) -> None:
    del store  # (migrated)
    assert sf("--store", backend, "states", "put", "bills", "--data", json.dumps(DECL)).returncode == 0
    ops = json.dumps([{"op": "set", "path": ["n"], "value": 1}])
    for who in ("bob", "alice"):
        out = sf("--store", backend, "states", "apply", "bills", "--target-name", who, "--key", "i-1",
                 "--data", ops, "--op-id", "pay-1")  # fmt: skip
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        assert answer["applied"] is True and not answer.get("replayed"), answer


# ------------------------------------------------------------------ 8. conditional requests


def _put(api: Api, key: str, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
    return api("PUT", f"/api/states/bills/records/agent/alice/thread/{key}", body, headers=headers)


def test_if_match_star_needs_the_record_and_if_none_match_star_is_create_only(api: Api) -> None:
    assert api("PUT", "/api/states/bills", DECL)[0] == 200
    status, body = _put(api, "absent", {"n": 1}, **{"If-Match": "*"})
    assert status == 412 and body["code"] == "revision-mismatch", body
    assert "does not exist" in body["error"]
    assert api("GET", "/api/states/bills/records/agent/alice/thread/absent")[1]["data"] is None
    status, body = _put(api, "k", {"n": 1}, **{"If-None-Match": "*"})  # create-only
    assert status == 200 and body["data"]["revision"] == 1, body
    status, body = _put(api, "k", {"n": 2}, **{"If-None-Match": "*"})
    assert status == 412 and body["code"] == "revision-mismatch", body
    status, body = _put(api, "k", {"n": 3}, **{"If-Match": "*"})
    assert status == 200 and body["data"]["data"] == {"n": 3}, body
    status, body = api(
        "POST", "/api/states/bills/records/agent/alice/thread/k/deltas",
        {"ops": [{"op": "set", "path": ["n"], "value": 4}]}, headers={"If-None-Match": "*"},
    )  # fmt: skip
    assert status == 412, body
    status, body = _put(api, "k", {"n": 5}, **{"If-None-Match": '"2"'})
    assert status == 400 and "If-None-Match on a write must be *" in body["error"], body
    status, body = _put(api, "k", {"n": 5}, **{"If-None-Match": "*", "If-Match": '"2"'})
    assert status == 400 and "not both" in body["error"], body
    status, body = api(
        "DELETE", "/api/states/bills/records/agent/alice/thread/gone", headers={"If-Match": "*"}
    )
    assert status == 412, body
    assert api("GET", "/api/states/bills/records/agent/alice/thread/k")[1]["data"]["data"] == {"n": 3}


def test_a_record_read_naming_the_etag_it_would_answer_is_304_without_a_body(api: Api) -> None:
    assert api("PUT", "/api/states/bills", DECL)[0] == 200
    path = "/api/states/bills/records/agent/alice/thread/polled"
    auth = {"Authorization": f"Bearer {ADMIN}"}

    def read(tag: str, query: str = "") -> Any:
        return api.client.get(path + query, headers={**auth, "If-None-Match": tag})

    absent = read('"1"')
    assert absent.status_code == 200 and absent.headers["etag"] == '"0"' and absent.json()["data"] is None
    assert read('"0"').status_code == 304 and read("*").status_code == 200  # * needs a record
    _put(api, "polled", {"n": 1})
    _put(api, "polled", {"n": 2})
    held = read('"2"')
    assert held.status_code == 304 and held.headers["etag"] == '"2"' and held.content == b""
    assert read('W/"2"').status_code == 304 and read('"7", "2"').status_code == 304
    assert read("*").status_code == 304
    moved = read('"1"')
    assert (
        moved.status_code == 200
        and moved.headers["etag"] == '"2"'
        and moved.json()["data"]["data"] == {"n": 2}
    )
    # as of a revision: its own ETag
    assert read('"1"', "?revision=1").status_code == 304
    assert read('"2"', "?revision=1").json()["data"]["data"] == {"n": 1}
    assert api.client.get(path, headers=auth).status_code == 200  # no condition, a body


def test_python_expect_revision_star(store: SqlStore) -> None:
    from stateflow.states.pipeline import RevisionMismatch

    service = StatesService(store)
    service.install_builtins()
    service.declare("bills", DECL)
    subject = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "t"}
    with pytest.raises(RevisionMismatch):
        service.replace("bills", subject, {"n": 1}, expect_revision="*")
    with pytest.raises(RevisionMismatch):
        service.apply("bills", subject, [], expect_revision="*")
    service.replace("bills", subject, {"n": 1})
    merged = service.merge("bills", subject, {"n": 2}, expect_revision="*")
    assert merged is not None and merged["data"] == {"n": 2}


# ------------------------------------------------------------------ 9. CORS


def test_an_allowed_origin_may_send_every_documented_header(store: SqlStore) -> None:
    from stateflow.http.server import wrap

    service = StatesService(store)
    service.install_builtins()
    app = wrap(create_app(service, TokenSet([parse_token(ADMIN)])), access_log=False, json_lines=False,
               cors_origins=["https://app.example.com"])  # fmt: skip
    sent = (
        "authorization,content-type,if-match,if-none-match,x-stateflow-run-id,x-stateflow-meta,"
        "x-stateflow-consumer,x-stateflow-agent,x-stateflow-cwd,x-stateflow-session,x-stateflow-scopes,"
        "x-stateflow-states,mcp-session-id,mcp-protocol-version,last-event-id,x-request-id"
    )
    with TestClient(app) as client:
        r = client.options(
            "/api/states/bills/records/agent/a/thread/k",
            headers={"Origin": "https://app.example.com", "Access-Control-Request-Method": "PUT",
                     "Access-Control-Request-Headers": sent},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        r = client.get("/api/states", headers={"Origin": "https://app.example.com",
                                                "Authorization": f"Bearer {ADMIN}"})  # fmt: skip
        exposed = r.headers["access-control-expose-headers"].lower()
        assert "etag" in exposed and "mcp-session-id" in exposed


# ------------------------------------------------------------------ 10. messages


def test_refusals_say_what_they_refuse(api: Api) -> None:
    status, body = api("GET", "/api/states/memory/stats", token=ALICE)
    assert status == 403 and "stats count every target's records" in body["error"], body
    assert "catalog changes" not in body["error"]
    assert api("PUT", "/api/states/bills", DECL)[0] == 200
    path = "/api/states/bills/records/agent/alice/thread/k"
    auth = {"Authorization": f"Bearer {ADMIN}"}
    r = api.client.put(path, content='{"n": "caf\xe9"}'.encode("latin-1"),
                       headers={**auth, "Content-Type": "application/json; charset=latin-1"})  # fmt: skip
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("the request body must be UTF-8 JSON")
    assert "charset 'latin-1'" in r.json()["error"] and "surrogates" not in r.json()["error"]
    import gzip

    r = api.client.put(path, content=gzip.compress(b'{"n": 1}'),
                       headers={**auth, "Content-Type": "application/json", "Content-Encoding": "gzip"})  # fmt: skip
    assert r.status_code == 400 and "Content-Encoding 'gzip' is not supported" in r.json()["error"], r.text
    assert api("GET", path)[1]["data"] is None


# ------------------------------------------------- 5. U+0000 in a top-level member name


def test_a_nul_in_a_top_level_member_name_is_refused_alike_on_both_backends(
    backend: str, store: SqlStore
) -> None:
    del store  # (migrated)
    decl = {**DECL, "schema": {"type": "object", "properties": {"n": {}}}}
    assert sf("--store", backend, "states", "put", "bills", "--data", json.dumps(decl)).returncode == 0
    where = ("--target-name", "a", "--key", "k")
    nested = sf("--store", backend, "states", "replace", "bills", *where, "--data", '{"n": {"x\\u0000": 1}}')
    assert nested.returncode == 0, nested.stderr  # a deeper name may hold it
    for command, data in (
        ("replace", '{"x\\u0000": 1}'),
        ("merge", '{"y\\u0000": 1}'),
        ("apply", '[{"op": "set", "path": ["z\\u0000"], "value": 1}]'),
    ):
        out = sf("--store", backend, "states", command, "bills", *where, "--data", data)
        assert out.returncode == 1, out.stdout
        assert out.stderr.startswith("error[invalid-json]: ") and "holds U+0000" in out.stderr, out.stderr
    read = sf("--store", backend, "states", "read", "bills", *where)
    assert json.loads(read.stdout)["data"] == {"n": {"x\x00": 1}}
