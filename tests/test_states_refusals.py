"""Refusals found by testing as a new user: each one a clear error with nothing changed, over the
real CLI, the real HTTP app and Python, on both backends."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.routing import Route

from stateflow.config import Config, HttpConfig
from stateflow.errors import CorruptStore, OpError, StateflowError
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.memory import Identity, MemoryConfig, MemoryView
from stateflow.states import StatesService
from stateflow.states.builtin import MEMORY_DECLARATION
from stateflow.store import DocKey, SqlStore, Write

ADMIN = "admin-secret-0123456789"
READER = "reader-secret-0123456789"
DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SUBJECT = {"target_kind": "agent", "target_name": "alice", "kind": "thread", "key": "t1"}
REC = "/api/states/tickets/records/agent/alice/thread"


def sf(*args: str, store: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["stateflow", "--store", store, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def service(store: SqlStore) -> StatesService:
    service = StatesService(store)
    service.install_builtins()
    service.declare("tickets", DECL)
    return service


@pytest.fixture
def client(service: StatesService) -> Iterator[TestClient]:
    tokens = TokenSet([parse_token(ADMIN), parse_token(READER + ":read")])
    app = create_app(service, tokens, HttpConfig(max_body_bytes=4096))
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        yield client


# ---------------------------------------------------------------------- tool arguments


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"state": "memory", "ops": [], "op_id": 5}, 'op_id: 5 is not of type "string"'),
        ({"state": "memory", "ops": {"op": "set"}}, 'ops: {"op":"set"} is not of type "array"'),
        ({"state": "memory", "ops": [], "subject": {"kind": 1, "key": "k"}}, "subject.kind"),
        ({"state": "memory", "ops": [], "frob": 1}, "does not accept frob"),
        ([1, 2], "needs an object with a 'state' name"),
    ],
)
def test_bad_tool_arguments_are_invalid_input_not_a_traceback(
    backend: str, service: StatesService, args: Any, says: str
) -> None:
    done = sf("tool", "state_apply", json.dumps(args), store=backend)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error[invalid-input]: ") and says in done.stderr, done.stderr


# ---------------------------------------------------------------------- low-level writes


def test_doc_put_into_declared_states_needs_raw(backend: str, service: StatesService) -> None:
    subject = service.read("tickets", SUBJECT)
    assert subject is None
    for state, key in (("tickets", "x"), ("memory", "x"), ("_states", "tickets"), ("_aliases", "t")):
        for verb in ("put", "patch"):
            done = sf("doc", verb, state, key, '{"garbage": 1}', store=backend)
            assert done.returncode == 1 and done.stderr.startswith("error[declared-state]: "), done.stderr
            assert "--raw" in done.stderr
    assert service.get_declaration("tickets")["schema"] == DECL["schema"]  # nothing changed
    # an undeclared state is plain documents: written as before
    assert sf("doc", "put", "notes", "n1", '{"a": 1}', store=backend).returncode == 0
    # --raw writes anyway; the corrupt catalog row is then refused by name, never a KeyError
    raw = sf("doc", "put", "_states", "tickets", '{"garbage": 1}', "--raw", store=backend)
    assert raw.returncode == 0, raw.stderr
    listed = sf("states", "list", store=backend)
    assert listed.returncode == 1 and "Traceback" not in listed.stderr
    assert listed.stderr.startswith("error[corrupt-store]: the catalog row of state 'tickets' is corrupt")
    with pytest.raises(CorruptStore, match="'schema' is missing"):
        service.read("tickets", SUBJECT)


def test_corrupt_catalog_row_over_http_is_a_named_500(client: TestClient, service: StatesService) -> None:
    key = DocKey("_states", "tickets")
    service.store.update(
        [key],
        lambda docs: ([Write.between(key, docs[key].body, {"garbage": 1}, docs[key].revision)], None),
        {"door": "operator"},
    )
    for path in ("/api/states", "/api/states/tickets", f"{REC}/t1"):
        r = client.get(path)
        assert r.status_code == 500 and r.json()["code"] == "corrupt-store", r.text


# ---------------------------------------------------------------------- declarations


def test_store_messages_name_a_record_as_the_states_door_does(
    client: TestClient, service: StatesService, store: SqlStore
) -> None:
    # the store knows a record only by its storage key (tickets/["agent","alice","thread","t1"]);
    # its messages name it as the states door does, the one rendering of a record's name
    for status in ("open", "closed", "done"):
        service.replace("tickets", SUBJECT, {"status": status})
    store.prune_history("tickets", "9999-01-01T00:00:00Z")
    record = "record thread/t1 of agent alice in state 'tickets'"
    gone = client.get(f"{REC}/t1?revision=1")
    assert gone.status_code == 404
    assert gone.json()["error"] == f"{record} revision 1 predates the retained history", gone.json()
    with pytest.raises(StateflowError) as refused:
        service.read("tickets", SUBJECT, revision=2)
    assert refused.value.message == f"{record} revision 2 predates the retained history"
    key = DocKey("tickets", '["agent","alice","thread","t1"]')
    with pytest.raises(StateflowError) as moved:
        store.commit([Write.between(key, {"status": "open"}, {"status": "x"}, 1)], {"door": "test"})
    assert moved.value.code == "conflict"
    assert moved.value.message.startswith(f"{record} changed concurrently: it is at revision 3"), moved.value
    # another target's record of the same kind and key is named apart from it
    bob = DocKey("tickets", '["agent","bob","thread","t1"]')
    store.commit([Write.between(bob, None, {"status": "open"}, 0)], {"door": "test"})
    with pytest.raises(StateflowError) as other:
        store.commit([Write.between(bob, {"status": "open"}, {"status": "x"}, 0)], {"door": "test"})
    assert other.value.message.startswith("record thread/t1 of agent bob in state 'tickets' changed"), (
        other.value
    )
    # a document that is no record keeps its storage name
    assert str(DocKey("_states", "tickets")) == "_states/tickets"


def test_declare_answers_what_a_read_answers(service: StatesService, client: TestClient) -> None:
    answered = service.declare("tickets", {**DECL, "description": "changed"})
    assert answered == service.get_declaration("tickets")
    assert answered["effective_schema"] == DECL["schema"] and answered["updated_at"]
    r = client.put("/api/states/other", json=DECL)
    assert r.json()["data"] == client.get("/api/states/other").json()["data"]
    assert r.json()["data"]["regimes"] == [] and r.json()["data"]["updated_at"]


def test_memory_state_cannot_be_deleted_or_narrowed(
    service: StatesService, client: TestClient, backend: str
) -> None:
    before = service.get_declaration("memory")
    r = client.delete("/api/states/memory")
    assert r.status_code == 409 and r.json()["code"] == "builtin-state"
    done = sf("states", "delete", "memory", "--yes", store=backend)
    assert done.stderr.startswith("error[builtin-state]: ") and done.returncode == 1
    with pytest.raises(StateflowError, match="built in"):
        service.delete_declaration("memory")
    narrowed = {
        **MEMORY_DECLARATION,
        "schema": {"type": "object", "properties": {"lazy": {"type": "object"}}},
    }
    r = client.put("/api/states/memory", json=narrowed)
    assert r.status_code == 409 and "property 'intents' was removed" in r.json()["error"]
    fewer = {**MEMORY_DECLARATION, "subject_kinds": ["session"]}
    assert client.put("/api/states/memory", json=fewer).json()["code"] == "builtin-state"
    assert service.get_declaration("memory") == before
    # an additive extension is a compatible re-declare, and survives the next start
    extended = {
        **MEMORY_DECLARATION,
        "schema": {
            **MEMORY_DECLARATION["schema"],
            "properties": {**MEMORY_DECLARATION["schema"]["properties"], "notes": {"type": "string"}},
        },
    }
    assert client.put("/api/states/memory", json=extended).status_code == 200
    fresh = StatesService(service.store)
    fresh.install_builtins()
    assert "notes" in fresh.get_declaration("memory")["schema"]["properties"]


@pytest.mark.parametrize(
    ("write", "says"),
    [
        (lambda s, who: s.replace("memory", who, {"tactics": {"a": None}}), r"null \(at tactics\.a\)"),
        (lambda s, who: s.merge("memory", who, {"lazy": {"x": [1, None]}}), r"null \(at lazy\.x\[1\]\)"),
        (
            lambda s, who: s.apply("memory", who, [{"op": "set", "path": ["tactics", "a"], "value": None}]),
            r"null \(at tactics\.a\)",
        ),
        (
            lambda s, who: s.replace("memory", who, {"tactics": {"[0]": 1}}),
            r"an index key as an object key \(at tactics\['\[0\]'\]\)",
        ),
        (
            lambda s, who: s.merge("memory", who, {"lazy": {"l": [{"[1]": 1}]}}),
            r"an index key .*\(at lazy\.l\[0\]\['\[1\]'\]\)",
        ),
    ],
)
def test_a_memory_record_memory_could_not_hold_is_refused_by_the_states_door(
    service: StatesService, write: Any, says: str
) -> None:
    """Memory never stores null and reserves index keys; the operator's states door writes whole
    records, and refuses one memory would then serve as it is."""
    memory = MemoryView(service.store, Identity.of("alice", "/tmp", "s1"), ("session",), MemoryConfig())
    memory.patch_state({"tactics": {"a": 1}})
    who = {"target_kind": "agent", "target_name": "alice", "kind": "session", "key": "s1"}
    before = service.read("memory", who)
    with pytest.raises(
        StateflowError,
        match=r"record session/s1 of agent alice in state 'memory' is refused: memory cannot store " + says,
    ):
        write(service, who)
    assert service.read("memory", who) == before
    assert memory.read_state({"path": "tactics"}) == {"value": {"a": 1}}
    service.replace("memory", who, {"tactics": {"a": 2}})  # a record memory can hold is written
    assert memory.read_state({"path": "tactics.a"}) == {"value": 2}


def test_the_cli_states_door_refuses_a_null_in_a_memory_record(service: StatesService, backend: str) -> None:
    where = ["--target-name", "alice", "--kind", "session", "--key", "s1"]
    done = sf("states", "replace", "memory", *where, "--data", '{"tactics": {"a": null}}', store=backend)
    assert done.returncode == 1
    assert done.stderr == (
        "error[invalid-document]: record session/s1 of agent alice in state 'memory' is refused: "
        "memory cannot store null "
        "(at tactics.a); leave the key out instead\n"
    )


# ---------------------------------------------------------------------- HTTP edge


def test_read_only_token_is_classified_by_route(client: TestClient, service: StatesService) -> None:
    reader = {"Authorization": f"Bearer {READER}"}
    assert (
        client.post("/api/states/tickets/records/search", json={"filters": {}}, headers=reader).status_code
        == 422
    )
    # a write whose path text ends in /records/search is still a write
    r = client.post(f"{REC}/t1/template-jq/%2Frecords%2Fsearch", json={}, headers=reader)
    assert r.status_code == 403 and r.json()["code"] == "forbidden"
    r = client.post("/api/states/records/records/search/records/search", json={}, headers=reader)
    assert r.status_code == 403


def test_request_body_limit_is_413_and_nothing_is_stored(client: TestClient, service: StatesService) -> None:
    big = {"status": "x" * 5000}
    r = client.put(f"{REC}/t1", json=big)
    assert r.status_code == 413 and r.json()["code"] == "payload-too-large"
    assert "4096 bytes" in r.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"status": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    r = client.put(f"{REC}/t1", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["code"] == "payload-too-large"
    assert service.read("tickets", SUBJECT) is None
    assert client.put(f"{REC}/t1", json={"status": "small"}).status_code == 200
    assert Config.from_env({"STATEFLOW_MAX_BODY_BYTES": "2048"}).http.max_body_bytes == 2048


def test_invalid_utf8_in_a_path_segment_is_400(client: TestClient, service: StatesService) -> None:
    for bad in ("%FF%28", "%C3%28", "ok%80"):
        r = client.put(f"{REC}/{bad}", json={"status": "x"})
        assert r.status_code == 400 and r.json()["code"] == "bad-request", r.text
        assert "UTF-8" in r.json()["error"]
    assert service.subjects("tickets")["subjects"] == []
    good = client.put(f"{REC}/%C3%A9t%C3%A9", json={"status": "x"})
    assert good.status_code == 200 and good.json()["data"]["subject"]["key"] == "été"


def test_405_carries_allow(client: TestClient) -> None:
    r = client.get(f"{REC}/t1/deltas")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json() == {"error": f"GET is not allowed on {REC}/t1/deltas", "code": "method-not-allowed"}
    r = client.post(f"{REC}/t1")
    assert r.status_code == 405 and r.headers["allow"] == "DELETE, GET, HEAD, PATCH, PUT"
    r = client.post("/api/states")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    assert client.put(f"{REC}/t1/writes", json={}).headers["allow"] == "GET, HEAD"


PROBED = ("GET", "PUT", "PATCH", "DELETE", "POST", "OPTIONS", "TRACE")
"""(OPTIONS and TRACE no route takes: a record path's 405 named the router's list for them, POST
on every path and in any order)"""
EXAMPLE = {"name": "tickets", "template": "checklist", "program": "p", "target_kind": "agent"}
RECORD_PATH = "/api/states/{name}/records/{target_kind}/{target_name}/{kind}/{key}"


def test_a_method_no_route_of_a_path_takes_answers_405_with_all_of_the_paths_methods(
    client: TestClient,
) -> None:
    """Walk every route of the API: a path's methods may be spread over several routes (a
    declaration's GET, PUT and DELETE are three), and a 405 names them all. The record route
    is one catch-all: its sub-paths are walked as the API description names them."""
    app: Any = client.app
    methods: dict[str, set[str]] = {}
    for route in app.routes:
        if isinstance(route, Route) and route.path.startswith("/api/") and route.name != "record":
            methods.setdefault(route.path, set()).update(route.methods or ())
    for path, item in app.openapi()["paths"].items():
        if path.startswith(RECORD_PATH):
            methods[path] = {m.upper() for m in item}
    assert {"/api/states/{name}", "/api/states/{name}/records/search", RECORD_PATH} <= set(methods)
    probed = 0
    for path, allowed in methods.items():
        if "GET" in allowed:
            allowed = {*allowed, "HEAD"}  # (answered as the GET)
        url = re.sub(r"\{([a-z_]+)(:path)?\}", lambda m: EXAMPLE.get(m[1], "x"), path)
        for method in PROBED:
            if method in allowed:
                continue
            r = client.request(method, url)
            assert r.status_code == 405, (method, url, r.text)
            assert r.headers["allow"] == ", ".join(sorted(allowed)), (method, url)
            assert r.json()["code"] == "method-not-allowed"
            probed += 1
    assert probed > 40


def test_unknown_query_parameters_are_refused_but_on_the_open_paths_and_template_jq_inputs(
    client: TestClient,
) -> None:
    """What docs/states.md says of the query: refused (422) on the API's routes; the open
    paths (probes, the API description) answer whatever it holds; a template jq input
    program takes its params from it, as the API description declares."""
    assert client.get("/api/states?x=1").status_code == 422
    assert client.get(f"{REC}/t1?x=1").status_code == 422
    for path in ("/api/health", "/api/ready", "/openapi.json"):
        r = client.get(path + "?x=1", headers={"Authorization": ""})
        assert r.status_code == 200, (path, r.text)
    app: Any = client.app
    jq = app.openapi()["paths"][RECORD_PATH + "/template-jq/{program}"]
    query = [p for p in jq["get"]["parameters"] if p["in"] == "query"]
    assert [(p["name"], p["style"], p["explode"], p["schema"]["type"]) for p in query] == [
        ("params", "form", True, "object")
    ]
    assert not [p for p in jq["post"].get("parameters", []) if p["in"] == "query"]


def test_unknown_keys_in_template_and_attach_bodies_are_named(client: TestClient) -> None:
    template = {
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "trace": {"enabled": False, "colour": "red"},
    }
    r = client.put("/api/state-templates/counter", json=template)
    assert r.status_code == 422 and "unknown keys ['colour']" in r.json()["error"], r.text
    template["trace"] = {"enabled": False}
    template["regimes"] = [{"path": ["n"], "regime": "composing", "why": 1}]
    assert "unknown keys ['why']" in client.put("/api/state-templates/counter", json=template).json()["error"]
    del template["regimes"]
    assert client.put("/api/state-templates/counter", json=template).status_code == 200
    r = client.put("/api/states/tickets/attachments/counter", json={"path": ["c"], "paramters": {}})
    assert r.status_code == 422 and "unknown keys ['paramters']" in r.json()["error"], r.text


def test_connect_is_the_composition_root(backend: str, store: SqlStore) -> None:
    import stateflow
    from stateflow.config import RetentionConfig

    config = Config(retention=RetentionConfig(op_days=3))
    with stateflow.connect(backend, config) as sf_:
        states = sf_.states()
        assert states is sf_.states() and states.config is config
        assert states.get_declaration("memory")["subject_kinds"] == ["global", "cwd", "session"]
        sf_.memory("alice", "/tmp", "s1").patch_state({"session": {"tactics": {"next": "x"}}})
        subject = {"target_kind": "agent", "target_name": "alice", "kind": "session", "key": "s1"}
        assert states.read("memory", subject)["data"] == {"tactics": {"next": "x"}}  # type: ignore[index]


def test_one_validator_cache_serves_both_services(store: SqlStore) -> None:
    from stateflow.memory import Identity, MemoryConfig, MemoryView
    from stateflow.memory.planes import ExtraRoot
    from stateflow.validators import compiled

    schema = {"type": "object", "properties": {"level": {"type": "integer"}}}
    service = StatesService(store)
    service.declare(
        "levels", {"schema": schema, "subject_kinds": ["thread"], "default_subject_kind": "thread"}
    )
    service.replace("levels", {**SUBJECT, "kind": "thread"}, {"level": 1})
    states_validator = compiled(schema)
    roots = (ExtraRoot("levels", schema),)
    view = MemoryView(store, Identity.of("alice", "/tmp", "s1"), config=MemoryConfig(extra_roots=roots))
    view.patch_state({"session": {"levels": {"level": 2}}})
    assert compiled(schema) is states_validator  # compiled once, for both


def test_a_fold_of_a_state_not_declared_is_refused_and_leaves_no_row(
    service: StatesService, store: SqlStore
) -> None:
    subject = {"target_kind": "agent", "target_name": "a", "kind": "c", "key": "k"}
    with store._read_tx() as tx:
        before = tx.all("SELECT state, subject FROM documents ORDER BY doc_id")
    with pytest.raises(StateflowError) as refused:
        service.fold("nope", subject, {**subject, "key": "k2"}, "merge")
    assert refused.value.code == "state-not-found"
    with store._read_tx() as tx:
        assert tx.all("SELECT state, subject FROM documents ORDER BY doc_id") == before


def test_a_set_op_value_holding_a_lone_surrogate_is_the_ops_refusal(service: StatesService) -> None:
    # as such a string nested in a value is, and before the store, whose refusal named the
    # record by its stored subject (a JSON array); HTTP and the CLI refuse it as they decode
    service.replace("tickets", SUBJECT, {"status": "a"})
    for value, where in (("\udcff", "value"), ({"x": ["\udcff"]}, "value.x[0]")):
        with pytest.raises(OpError) as refused:
            service.apply("tickets", SUBJECT, [{"op": "set", "path": ["status"], "value": value}])
        assert refused.value.message == (
            f"ops[0]: {where}: a string holding a lone surrogate (\\udcff) is not Unicode text"
        )
    assert service.apply("tickets", SUBJECT, [{"op": "set", "path": ["status"], "value": "é"}]).written


def test_an_op_that_cannot_run_is_named_by_its_index_and_path_at_every_door(
    service: StatesService, client: TestClient
) -> None:
    # the batch is refused whole; the refusal names the op as a malformed op is named (its index
    # in the batch as given, a guard's skip before it included) and its path, which the engine's
    # own words name only in part ("index 5"), so a caller of many ops knows which one it was
    service.replace("tickets", SUBJECT, {"status": "a", "outer": {"z": [1, 2]}})
    skipped = {"op": "set", "path": ["n"], "value": 0, "guard": {"path": ["status"], "expected": "b"}}
    ops = [skipped, *({"op": "set", "path": ["n"], "value": i} for i in range(1, 5))]
    cases = [
        (
            {"op": "set", "path": ["outer", "z", 5], "value": 1},
            """ops[5] at ["outer", "z", 5]: index 5 is past the end of the list (len 2); use '-' to append""",
        ),
        (
            {"op": "set", "path": ["outer", "z", 0, "k"], "value": 1},
            """ops[5] at ["outer", "z", 0, "k"]: key 'k' requires an object, found number""",
        ),
        (
            {"op": "set_by_key", "path": ["status"], "key_field": "id", "value": [{"id": 1}]},
            'ops[5] at ["status"]: set_by_key needs a list there, found string',
        ),
    ]
    for bad, message in cases:
        with pytest.raises(OpError) as refused:
            service.apply("tickets", SUBJECT, [*ops, bad])
        assert refused.value.message == message
        with pytest.raises(OpError) as refused:
            service.apply_batch([{"state": "tickets", "subject": SUBJECT, "ops": [*ops, bad]}])
        assert refused.value.message == f"items[0]: {message}"
        r = client.post(f"{REC}/t1/deltas", json={"ops": [*ops, bad]})
        assert (r.status_code, r.json()) == (422, {"error": message, "code": "invalid-ops"})
    record = service.read("tickets", SUBJECT)
    assert record is not None and record["revision"] == 1
