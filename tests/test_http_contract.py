"""Small parts of the HTTP contract, over the real HTTP app on both backends: inputs refused
rather than ignored, the 401 challenge, and one answer for each thing a request can get wrong."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stateflow.store import SqlStore
from tests.http_api import ADMIN, READER, Api, tenant_api

DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
REC = "/api/states/tickets/records/agent/alice/thread/t1"


@pytest.fixture
def api(store: SqlStore) -> Iterator[Api]:
    with tenant_api(store) as api:
        status, body = api("PUT", "/api/states/tickets", DECL)
        assert status == 200, body
        yield api


def test_prune_refuses_a_body_it_does_not_take(api: Api) -> None:
    api("PUT", "/api/states/tickets", {**DECL, "retention_days": 1})
    status, body = api("POST", "/api/state-retention/prune", {"dry_run": True})
    assert status == 400 and body["code"] == "bad-request" and "dry_run" in body["error"], body
    r = api.client.post(
        "/api/state-retention/prune", content=b"not json", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 400 and r.json()["code"] == "bad-request"
    for raw in (b"null", b"false", b"[]", b"0"):  # a body, and not {}: refused, no sweep runs
        r = api.client.post(
            "/api/state-retention/prune",
            content=raw,
            headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["code"] == "bad-request", (raw, r.text)
        assert "prune takes no parameters" in r.json()["error"]
    assert api("POST", "/api/state-retention/prune", {})[1]["data"]["pruned"] == {"tickets": 0}
    assert api("POST", "/api/state-retention/prune")[1]["data"]["pruned"] == {"tickets": 0}


def test_an_optional_body_of_null_is_a_body_not_its_absence(api: Api) -> None:
    # only a request without a body means "no parameters"; null, false or [] are refused as
    # the body they are, never read as {}
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    for raw in (b"null", b"false", b"[]"):
        r = api.client.post(f"{REC}/template-jq/count", content=raw, headers=headers)
        assert r.status_code == 400 and "body must be" in r.json()["error"], (raw, r.text)
        r = api.client.put("/api/states/tickets/attachments/none", content=raw, headers=headers)
        assert r.status_code == 422 and r.json()["code"] == "invalid-input", (raw, r.text)
    assert api("GET", REC)[1]["data"] is None  # nothing was written


def test_a_query_parameter_given_twice_is_refused_naming_it(api: Api) -> None:
    api("PUT", REC, {"status": "one"})
    api("PUT", REC, {"status": "two"})
    for path in (
        f"{REC}?revision=1&revision=2",
        f"{REC}/writes?limit=2&limit=1",
        "/api/states/tickets/subjects?limit=1&kind=thread&limit=2",
        f"{REC}/template-jq/count?x=1&x=2",
    ):
        status, body = api("GET", path)
        assert status == 422 and body["code"] == "invalid-input", (path, body)
        assert "given more than once" in body["error"]
    status, body = api("GET", f"{REC}?revision=1&revision=2")
    assert "['revision']" in body["error"]
    assert api("GET", f"{REC}?revision=1")[1]["data"]["data"] == {"status": "one"}


def test_every_401_carries_a_bearer_challenge(api: Api) -> None:
    for token, challenge in (
        (None, 'Bearer realm="stateflow"'),
        ("wrong-token-000000000", 'Bearer realm="stateflow", error="invalid_token"'),
    ):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        for method, path in (("GET", "/api/states"), ("PUT", REC), ("POST", "/mcp")):
            r = api.client.request(method, path, headers=headers, json={})
            assert r.status_code == 401, (method, path, r.text)
            assert r.headers["www-authenticate"] == challenge
            assert r.json()["code"] == "unauthorized"


@pytest.mark.parametrize("depth", [300, 1_100, 50_000])
def test_a_body_too_deep_is_one_answer_at_any_depth(api: Api, depth: int) -> None:
    """Deeper than a document may nest (254) and deeper than the parser reads (about 1,000):
    the same 422 invalid-json naming the place, never 400 "not valid JSON"."""
    value = "[" * depth + "1" + "]" * depth
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    r = api.client.put(REC, content=f'{{"status": {value}}}', headers=headers)
    assert r.status_code == 422 and r.json()["code"] == "invalid-json", r.text[:300]
    assert r.json()["error"].endswith(": nested deeper than 254 levels, which JSON storage refuses")
    assert ".status[0][0][0]" in r.json()["error"]  # (the place: in the document, or in the body)
    assert api("GET", REC)[1]["data"] is None


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/states/%FF"),
        ("PUT", "/api/states/%FF"),
        ("GET", "/api/states/%C3%28/stats"),
        ("POST", "/api/states/%FF/records/search"),
        ("GET", "/api/states/%FF/records/agent/alice/thread/t1"),
        ("GET", "/api/state-templates/%FF"),
        ("GET", "/api/states/tickets/attachments/ok%80"),
        ("GET", "/api/states/tickets/records/agent/alice/thread/t1/template-jq/%FF"),
    ],
)
def test_every_name_segment_that_is_not_utf8_is_400(api: Api, method: str, path: str) -> None:
    status, body = api(
        method, path, {"filters": {}} if method == "POST" else DECL if method == "PUT" else None
    )
    assert status == 400 and body["code"] == "bad-request", body
    assert "does not percent-decode to UTF-8" in body["error"]
    assert [row["name"] for row in api("GET", "/api/states")[1]["data"]] == ["memory", "tickets"]


def test_head_is_answered_wherever_get_is_as_the_get_without_its_body(api: Api) -> None:
    api("PUT", REC, {"status": "open"})
    for path in (
        "/api/states",
        "/api/states/tickets",
        REC,
        f"{REC}?revision=1",
        f"{REC}/writes",
        "/api/states/tickets/subjects",
        "/api/state-templates",
        "/api/health",
        "/openapi.json",
    ):
        got = api.client.get(path, headers={"Authorization": f"Bearer {READER}"})
        head = api.client.head(path, headers={"Authorization": f"Bearer {READER}"})
        assert head.status_code == got.status_code == 200, (path, head.text)
        assert head.content == b"" and head.headers["content-length"] == got.headers["content-length"]
        assert head.headers.get("etag") == got.headers.get("etag")
    assert api.client.head(REC, headers={"Authorization": f"Bearer {ADMIN}"}).headers["etag"] == '"1"'
    held = {"Authorization": f"Bearer {ADMIN}", "If-None-Match": '"1"'}
    assert api.client.head(REC, headers=held).status_code == 304
    missing = api.client.head("/api/states/nothing", headers={"Authorization": f"Bearer {ADMIN}"})
    assert missing.status_code == 404 and missing.content == b""
    assert api.client.head("/api/states").status_code == 401  # (the token is checked as for the GET)
    refused = api.client.head(f"{REC}/deltas", headers={"Authorization": f"Bearer {ADMIN}"})
    assert refused.status_code == 405 and refused.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", f"{REC}/diff?from=1", "GET, HEAD"),
        ("DELETE", f"{REC}/writes?limit=1", "GET, HEAD"),
        ("GET", f"{REC}/deltas?x=1", "POST"),
        ("POST", f"{REC}?revision=1", "DELETE, GET, HEAD, PATCH, PUT"),
    ],
)
def test_a_method_a_record_path_does_not_take_is_405_whatever_its_query(
    api: Api, method: str, path: str, allow: str
) -> None:
    """The method is matched to the sub-route first: the query parameters are that method's,
    so a query on a method the path does not take is no reason to answer otherwise."""
    refused = api.client.request(method, path, headers={"Authorization": f"Bearer {ADMIN}"})
    assert refused.status_code == 405 and refused.headers["allow"] == allow, refused.text
    assert refused.json()["code"] == "method-not-allowed"
    unknown = api.client.get(f"{REC}/nothing?limit=1", headers={"Authorization": f"Bearer {ADMIN}"})
    assert unknown.status_code == 404 and unknown.json()["code"] == "not-found"


@pytest.mark.parametrize(
    "path",
    [
        "/api/states/",
        "/api/states/tickets/",
        f"{REC}/",
        f"{REC}/writes/",
        "/api/states/tickets/records/",
        "/api/states/tickets/records/search/",
        "/api/states/tickets/records/agent/alice/",
        "/api/state-templates/",
        "/docs/",
    ],
)
def test_a_trailing_slash_is_a_json_404_never_a_redirect(api: Api, path: str) -> None:
    r = api.client.get(
        path,
        headers={"Authorization": f"Bearer {ADMIN}", "Host": "evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 404 and "location" not in r.headers, (path, r.headers)
    assert r.json() == {
        "error": f"no route for GET {path} (paths take no trailing slash: {path.rstrip('/')})",
        "code": "not-found",
    }
    r = api.client.get("/api/states/tickets/records", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 404 and "location" not in r.headers
    search = "/api/states/tickets/records/search/"  # (a record path short of a key: it was 400)
    r = api.client.post(search, json={"filters": {}}, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 404 and r.json()["error"].endswith(
        f"(paths take no trailing slash: {search[:-1]})"
    )
