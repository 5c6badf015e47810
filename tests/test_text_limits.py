"""Texts a row's key holds (state names, subjects, top-level member names): each has one limit,
enforced alike on both backends and named in the refusal, and none holds U+0000 (a PostgreSQL
text cannot) — through the real HTTP app."""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from stateflow.errors import InvalidInput
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.states.service import SubjectRefused
from stateflow.store import DocKey, SqlStore, Write, open_store, plan
from stateflow.subjects import encode_subject

ADMIN = "admin-secret-0123456789"
DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["t"],
    "default_subject_kind": "t",
}
_rnd = random.Random(7)
EMOJI = [chr(c) for c in range(0x1F600, 0x1F650)]


def noise(n: int, alphabet: Any = string.ascii_letters) -> str:
    """Incompressible text (PostgreSQL compresses what an index holds)."""
    return "".join(_rnd.choice(alphabet) for _ in range(n))


@pytest.fixture
def client(store: SqlStore) -> Iterator[TestClient]:
    service = StatesService(store)
    service.install_builtins()
    service.declare("s", DECL)
    with TestClient(create_app(service, TokenSet([parse_token(ADMIN)]))) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN}"
        yield client


def record(target_name: str, key: str = "k", state: str = "s") -> str:
    return f"/api/states/{state}/records/agent/{quote(target_name, safe='')}/t/{quote(key, safe='')}"


def refused(r: Any, code: str, *words: str) -> None:
    assert r.status_code == 422, r.text
    assert r.json()["code"] == code, r.text
    for word in words:
        assert word in r.json()["error"], r.text


def test_a_target_name_is_at_most_256_characters(client: TestClient) -> None:
    longest = noise(256)
    assert client.put(record(longest), json={"n": 1}).status_code == 200
    assert client.get(record(longest)).json()["data"]["data"] == {"n": 1}
    for name in (noise(257), noise(3000), noise(10_000)):
        refused(client.put(record(name), json={"n": 1}), "subject-refused", "target_name", "256")
        refused(client.get(record(name)), "subject-refused", "256")


def test_a_subject_is_at_most_2400_bytes_encoded(client: TestClient) -> None:
    # a key of 512 characters of any text fits beside a short target name; with a long
    # target name of such text, the whole subject is over the limit
    key = noise(512, EMOJI)
    assert client.put(record("bot", key), json={"n": 1}).status_code == 200
    assert client.get(record("bot", key)).json()["data"]["data"] == {"n": 1}
    refused(client.put(record(noise(100, EMOJI), key), json={"n": 1}), "subject-refused", "bytes", "2400")
    found = client.get("/api/states/s/subjects").json()["data"]["subjects"]
    assert [s["subject"]["key"] for s in found] == [key]


def test_a_top_level_member_name_is_at_most_2048_bytes(client: TestClient) -> None:
    longest = noise(2048)
    assert client.put(record("bot"), json={longest: 1}).status_code == 200
    r = client.post("/api/states/s/records/search", json={"filters": {longest: 1}})
    assert [m["subject"]["key"] for m in r.json()["data"]["matches"]] == ["k"]
    for name in (noise(2049), noise(600, EMOJI), noise(3000)):
        refused(
            client.put(record("bot", "m"), json={name: 1}), "invalid-json", "top-level member name", "2048"
        )
        refused(client.patch(record("bot"), json={name: 1}), "invalid-json", "2048")
    # deeper names have no such limit
    assert client.put(record("bot", "deep"), json={"o": {noise(3000): 1}}).status_code == 200
    assert client.get(record("bot")).json()["data"]["data"] == {longest: 1}


def test_a_state_name_is_at_most_128_characters(client: TestClient) -> None:
    longest = noise(128, string.ascii_lowercase)
    assert client.put(f"/api/states/{longest}", json=DECL).status_code == 200
    assert client.put(record("bot", state=longest), json={"n": 1}).status_code == 200
    assert client.delete(f"/api/states/{longest}").status_code == 200
    for name in (noise(129, string.ascii_lowercase), noise(3000, string.ascii_lowercase)):
        refused(client.put(f"/api/states/{name}", json=DECL), "invalid-input", "128")
        assert client.get(f"/api/states/{name}").status_code == 404


# -------------------------------------------------- U+0000, which no stored name holds


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_a_name_holding_nul_is_refused_alike_on_every_route(client: TestClient, store: SqlStore) -> None:
    # a PostgreSQL text cannot hold U+0000: a state or template name holding it is refused as
    # invalid input before any SQL, on both backends (no store error)
    calls: list[tuple[str, str, Any]] = [
        ("GET", "/api/states/x%00", None),
        ("DELETE", "/api/states/x%00", None),
        ("GET", "/api/states/x%00/stats", None),
        ("GET", "/api/states/x%00/subjects", None),
        ("POST", "/api/states/x%00/records/search", {"filters": {"n": 1}}),
        ("GET", "/api/states/x%00/records/agent/b/t/k", None),
        ("PUT", "/api/states/x%00/records/agent/b/t/k", {"n": 1}),
        ("GET", "/api/state-templates/x%00", None),
        ("DELETE", "/api/state-templates/x%00", None),
        ("PUT", "/api/states/s/attachments/x%00", {"path": ["p"]}),
    ]
    for method, url, body in calls:
        r = client.request(method, url, json=body)
        refused(r, "invalid-input", "U+0000")
    service = StatesService(store)
    for call in (service.get_declaration, service.get_template):
        with pytest.raises(InvalidInput, match="U\\+0000"):
            call("x\x00")


def test_a_cursor_holding_nul_is_malformed(client: TestClient) -> None:
    for i in range(3):
        assert client.put(record("bot", f"k{i}"), json={"n": i}).status_code == 200
    texts = ["\x00", "\x00other:1", "a\x00b", '["agent","bot","t","a\x00"]', '\x00sorted:[[1],"a\x00"]']
    for text in texts:
        cursor = b64(text)
        refused(client.get(f"/api/states/s/subjects?cursor={cursor}"), "invalid-input", "cursor is malformed")
        search: dict[str, Any] = {"filters": {"n": {"$gte": 0}}, "cursor": cursor}
        refused(
            client.post("/api/states/s/records/search", json=search), "invalid-input", "cursor is malformed"
        )
        search["sort"] = [{"path": ["n"]}]
        refused(
            client.post("/api/states/s/records/search", json=search), "invalid-input", "cursor is malformed"
        )


def test_a_cursor_no_page_returned_is_malformed_and_returned_ones_walk(client: TestClient) -> None:
    """Any text not a subject as the store encodes it was read as a position: a garbled cursor
    ended the walk (an empty page) or started it again, unnoticed."""
    for i in range(5):
        assert client.put(record("bot", f"k{i}"), json={"n": i}).status_code == 200
    forged = ["x", "[", "[]", '["agent"]', "hello world", '{"a": 1}', '["agent", "bot", "t", "k1"]']
    for text in forged:
        cursor = b64(text)
        refused(client.get(f"/api/states/s/subjects?cursor={cursor}"), "invalid-input", "cursor is malformed")
        search: dict[str, Any] = {"filters": {"n": {"$gte": 0}}, "cursor": cursor}
        refused(
            client.post("/api/states/s/records/search", json=search), "invalid-input", "cursor is malformed"
        )
    writes = record("bot", "k0") + "/writes"
    refused(client.get(f"{writes}?cursor={b64('01')}"), "invalid-input", "cursor is malformed")
    # the cursors pages return still walk every record once
    seen: list[str] = []
    after: str | None = None
    while True:
        body: dict[str, Any] = {"filters": {"n": {"$gte": 0}}, "limit": 2}
        if after is not None:
            body["cursor"] = after
        page = client.post("/api/states/s/records/search", json=body).json()["data"]
        seen += [m["subject"]["key"] for m in page["matches"]]
        if (after := page["next_cursor"]) is None:
            break
    assert seen == [f"k{i}" for i in range(5)]
    first = client.get("/api/states/s/subjects?limit=3").json()["data"]
    rest = client.get(f"/api/states/s/subjects?cursor={first['next_cursor']}").json()["data"]
    assert [s["subject"]["key"] for s in first["subjects"] + rest["subjects"]] == seen


def test_a_search_naming_a_member_holding_nul_finds_it_missing(client: TestClient) -> None:
    for i in range(3):
        assert client.put(record("bot", f"k{i}"), json={"n": 2 - i}).status_code == 200

    def keys(body: dict[str, Any]) -> list[str]:
        r = client.post("/api/states/s/records/search", json=body)
        assert r.status_code == 200, r.text
        return [m["subject"]["key"] for m in r.json()["data"]["matches"]]

    assert keys({"filters": {"s\x00": 1}}) == []
    assert keys({"filters": {"n": 1, "s\x00": 1}}) == []
    assert keys({"filters": {"s\x00": {"$gte": 1}}}) == []
    assert keys({"filters": {"s\x00": {"$exists": False}, "n": {"$gte": 0}}}) == ["k0", "k1", "k2"]
    # sorted by a name no record holds: every match ties (missing), in subject order
    by_nul = [{"path": ["s\x00"]}, {"path": ["n"]}]
    assert keys({"filters": {"n": {"$gte": 0}}, "sort": by_nul}) == ["k2", "k1", "k0"]
    assert keys({"filters": {"s\x00": 1}, "sort": by_nul}) == []


def test_a_record_stored_before_the_limits_is_still_listed_checked_and_redeclared(store: SqlStore) -> None:
    # a subject an earlier version stored (a target name over 256 characters): every listing,
    # search and re-declare that meets it reads it as stored; only naming it anew is refused
    service = StatesService(store)
    service.declare("s", DECL)
    name = noise(300)
    key = DocKey("s", encode_subject("agent", name, "t", "k"))
    store.update([key], lambda docs: ([Write.between(key, None, {"n": 1}, 0)], None))
    listed = service.subjects("s")["subjects"]
    assert [s["subject"]["target_name"] for s in listed] == [name]
    found = service.search("s", {"n": 1}, sort=[{"path": ["n"]}])["matches"]
    assert [m["subject"]["target_name"] for m in found] == [name]
    wider = {**DECL, "schema": {"type": "object", "properties": {"n": {"type": "integer"}, "m": {}}}}
    assert "m" in service.declare("s", wider)["schema"]["properties"]
    with pytest.raises(SubjectRefused, match="256"):
        service.read("s", {"target_kind": "agent", "target_name": name, "kind": "t", "key": "k"})
    # the retention sweep erases it when it expires
    service.declare("s", {**wider, "retention_days": 1})
    report = service.prune(now=datetime.now(UTC) + timedelta(days=30))
    assert report["pruned"]["s"] == 1
    assert service.subjects("s")["subjects"] == []


def test_a_document_key_is_at_most_2528_bytes_through_the_store(store: SqlStore) -> None:
    # a document written by the store's own API (doc put, LangGraph) is held to the bound the
    # states layer keeps its keys within: refused alike on both backends, before any SQL
    # (PostgreSQL's index refused a longer one with a store error at the row lock)
    def put(key: DocKey) -> None:
        store.update([key], lambda docs: ([Write.between(key, docs[key].value, {"n": 1}, 0)], None))

    longest = DocKey(noise(128, string.ascii_lowercase), noise(2400))
    put(longest)
    assert store.get(longest).value == {"n": 1}
    for key in (
        DocKey("st", noise(2527)),
        DocKey(noise(200), noise(2400)),
        DocKey("st", noise(700, EMOJI)),
    ):
        with pytest.raises(InvalidInput, match="the limit is 2528"):
            put(key)
        with pytest.raises(InvalidInput, match="the limit is 2528"):
            store.commit([Write.between(key, None, {"n": 1}, 0)])
        assert store.get(key).revision == 0


def test_a_document_stored_under_a_longer_key_is_read_and_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite held such a key before the bound (as an earlier version wrote it): it is read as
    # stored and can be removed; writing it again is refused
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    key = DocKey("st", noise(3000))
    with monkeypatch.context() as earlier:
        earlier.setattr(plan, "KEY_MAX_BYTES", 10**6)
        store.update([key], lambda docs: ([Write.between(key, None, {"n": 1}, 0)], None))
    assert store.get(key).value == {"n": 1}
    with pytest.raises(InvalidInput, match="the limit is 2528"):
        store.commit([Write.between(key, {"n": 1}, {"n": 2}, 1)])
    store.commit([Write.between(key, {"n": 1}, None, 1)])
    assert store.get(key).body is None
