"""Numbers at the edges of what JSON stores, search by value, and odd input that must be refused
cleanly: through the real doors (the HTTP app, the CLI as a process) on both backends."""

from __future__ import annotations

import base64
import itertools
import json
import math
import operator
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateflow.doc.canonical import decode
from stateflow.errors import InvalidInput, InvalidJSON, NotFound, OpError
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.states.schema import SchemaInvalid
from stateflow.states.service import SubjectRefused
from stateflow.store import SqlStore
from stateflow.tools import ToolHost

ADMIN = "admin-secret-0123456789"
DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}, "v": {}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
BIG = 18446744073709551616  # 2**64: one past the largest integer stored
BELOW = -9223372036854775809  # -2**63 - 1


def subject(key: str) -> dict[str, str]:
    return {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": key}


def data(states: StatesService, key: str, **at: int) -> Any:
    record = states.read("t", subject(key), **at)
    assert record is not None
    return record["data"]


def sf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture
def states(store: SqlStore) -> StatesService:
    service = StatesService(store)
    service.install_builtins()
    service.declare("t", DECL)
    return service


@pytest.fixture
def client(states: StatesService) -> Iterator[TestClient]:
    app = create_app(states, TokenSet([parse_token(ADMIN)]))
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        yield client


def keys(found: Any) -> list[str]:
    return sorted(m["subject"]["key"] for m in found["matches"])


# -------------------------------------------------- integers beyond 64 bits in JSON text


def test_decode_refuses_an_integer_it_would_round_and_keeps_every_other_number_exact() -> None:
    for text, place in (
        (f'{{"n": {BIG}}}', "$.n"),
        (f'{{"a": [1, {BELOW}]}}', "$.a[1]"),
        (f'{{"a": "x", "b": {{"c": {BIG * 10**9}}}}}', "$.b.c"),
    ):
        for raw in (text, text.encode(), memoryview(text.encode())):
            with pytest.raises(InvalidJSON) as refused:
                decode(raw)
            assert refused.value.message.startswith(f"{place}: integer ")
            assert refused.value.message.endswith(" is outside the 64-bit range JSON stores")
    edge = f'[{2**64 - 1}, {-(2**63)}, 1e19, 1.8446744073709552e19, "{"9" * 40}", 0.{"1" * 30}]'
    value = decode(edge)
    assert value[:2] == [2**64 - 1, -(2**63)] and type(value[0]) is int and type(value[1]) is int
    assert value[2:5] == [1e19, 1.8446744073709552e19, "9" * 40] and type(value[2]) is float


def test_http_put_of_an_integer_beyond_64_bits_is_refused_and_writes_nothing(
    client: TestClient, states: StatesService
) -> None:
    path = "/api/states/t/records/agent/bot/thread/k"
    for n in (BIG, BELOW):
        r = client.put(path, content=f'{{"n": {n}}}'.encode(), headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()) == (
            422,
            {"error": f"$.n: integer {n} is outside the 64-bit range JSON stores", "code": "invalid-json"},
        )
    assert states.read("t", subject("k")) is None
    # a search filter of such an integer is refused as well (it was read as a float), named as
    # the service names it
    r = client.post("/api/states/t/records/search", content=f'{{"filters": {{"n": {BIG}}}}}'.encode())
    assert r.status_code == 422 and r.json()["code"] == "invalid-json"
    assert r.json()["error"] == f"filters.n: integer {BIG} is outside the 64-bit range JSON stores"
    # text that is not JSON stays a malformed request
    r = client.put(path, content=b'{"n": 1', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "bad-request"
    # the largest integers stored go in and come back exact
    r = client.put(
        path, content=f'{{"n": {2**64 - 1}}}'.encode(), headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 200 and data(states, "k") == {"n": 2**64 - 1}


def test_the_service_the_http_route_and_the_tools_name_a_refused_integer_alike(
    client: TestClient, states: StatesService
) -> None:
    # one refusal, one message: the place is named from the document's (the body's) root
    path = "/api/states/t/records/agent/bot/thread/k"
    host = ToolHost(MemoryView(states.store, Identity.of("bot", "/tmp", "s1")), states)
    for document, place in (({"n": BIG}, "$.n"), ({"v": [{"n": BIG}]}, "$.v[0].n")):
        expected = f"{place}: integer {BIG} is outside the 64-bit range JSON stores"
        body = encode_big(document)
        for method, write in (("PUT", states.replace), ("PATCH", states.merge)):
            with pytest.raises(InvalidJSON) as refused:
                write("t", subject("k"), document)
            assert refused.value.message == expected
            r = client.request(method, path, content=body, headers={"Content-Type": "application/json"})
            assert (r.status_code, r.json()) == (422, {"error": expected, "code": "invalid-json"})
        for tool, key in (("state_replace", "data"), ("state_merge", "patch")):
            result = host.call(tool, {"state": "t", "subject": "k", key: document})
            assert (result.code, result.text) == ("invalid-json", expected)
    assert states.read("t", subject("k")) is None


OP_VALUE = f"ops[0]: value[1]: integer {BIG} is outside the 64-bit range JSON stores"
FILTER = f"filters.v.w[0]: integer {BIG} is outside the 64-bit range JSON stores"


def test_an_op_value_and_a_filter_beyond_64_bits_are_named_alike_from_python_and_over_http(
    client: TestClient, states: StatesService
) -> None:
    # the service's check names the place (an op's value by its op, a filter from ``filters``);
    # the HTTP body hands the integer on to it instead of naming it from the body's root
    ops = [{"op": "set", "path": ["v"], "value": [1, BIG]}]
    with pytest.raises(OpError) as refused:
        states.apply("t", subject("k"), ops)
    assert (refused.value.code, refused.value.message) == ("invalid-ops", OP_VALUE)
    path = "/api/states/t/records/agent/bot/thread/k/deltas"
    r = client.post(path, content=encode_big({"ops": ops}), headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (422, {"error": OP_VALUE, "code": "invalid-ops"})
    filters = {"v": {"w": [BIG]}}
    with pytest.raises(InvalidJSON) as found:
        states.search("t", filters)
    assert found.value.message == FILTER
    r = client.post("/api/states/t/records/search", content=encode_big({"filters": filters}))
    assert (r.status_code, r.json()) == (422, {"error": FILTER, "code": "invalid-json"})
    assert states.read("t", subject("k")) is None
    # the other members of those bodies are still the service's to refuse, as from Python
    r = client.post(path, content=encode_big({"ops": [], "op_id": BIG}))
    assert r.status_code == 422 and r.json()["code"] == "invalid-input"


def test_the_cli_names_an_op_value_and_a_filter_beyond_64_bits_as_the_service_does(
    backend: str, states: StatesService, tmp_path: Path
) -> None:
    base = ["--store", backend]
    record = ["t", "--target-name", "bot", "--key", "k"]
    ops = encode_big([{"op": "set", "path": ["v"], "value": [1, BIG]}]).decode()
    for args in (
        ["states", "apply", *record, "--data", ops],
        ["states", "apply", *record, "--data", f'{{"ops": {ops}}}'],
        ["tool", "state_apply", f'{{"state": "t", "subject": "k", "ops": {ops}}}'],
    ):
        out = sf(*base, *args, cwd=tmp_path)
        assert (out.returncode, out.stderr) == (1, f"error[invalid-ops]: {OP_VALUE}\n"), args
    filters = encode_big({"v": {"w": [BIG]}}).decode()
    out = sf(*base, "states", "search", "t", "--filters", filters, cwd=tmp_path)
    assert (out.returncode, out.stderr) == (1, f"error[invalid-json]: {FILTER}\n")
    assert states.read("t", subject("k")) is None


BEYOND = "1e400 is not a JSON number this store holds (beyond a double's range: it reads as Infinity)"


def test_a_filter_or_op_value_past_a_doubles_range_is_named_by_its_literal(
    client: TestClient, states: StatesService, backend: str, tmp_path: Path
) -> None:
    # the search body and --filters text hand such a literal on for the service to name, as
    # they do an integer past 64 bits: it said "inf", a value the caller never wrote
    r = client.post("/api/states/t/records/search", content=b'{"filters": {"n": {"$gt": 1e400}}}')
    assert (r.status_code, r.json()) == (422, {"error": f"filters.n.$gt: {BEYOND}", "code": "invalid-json"})
    ops = b'{"ops": [{"op": "set", "path": ["v"], "value": [1, 1e400]}]}'
    r = client.post("/api/states/t/records/agent/bot/thread/k/deltas", content=ops)
    assert (r.status_code, r.json()) == (422, {"error": f"ops[0]: value[1]: {BEYOND}", "code": "invalid-ops"})
    out = sf("--store", backend, "states", "search", "t", "--filters", '{"n": 1e400}', cwd=tmp_path)
    assert (out.returncode, out.stderr) == (1, f"error[invalid-json]: filters.n: {BEYOND}\n")
    assert states.read("t", subject("k")) is None


def test_an_integer_of_100000_digits_is_refused_for_its_size_at_every_door(
    client: TestClient, states: StatesService, backend: str, tmp_path: Path
) -> None:
    # orjson reads such a literal as a double, out of range: it said "number is infinity"
    ones = "1" * 100_000
    huge = (10**100_000 - 1) // 9  # the same integer (Python writes out none past 4,300 digits)
    for document, text, place, sign in (
        ({"n": huge}, f'{{"n": {ones}}}', "$.n", ""),
        ({"v": [{"n": -huge}]}, f'{{"v": [{{"n": -{ones}}}]}}', "$.v[0].n", "negative "),
    ):
        expected = f"{place}: {sign}integer of 100,000 digits is outside the 64-bit range JSON stores"
        with pytest.raises(InvalidJSON) as refused:
            decode(text)
        assert refused.value.message == expected
        with pytest.raises(InvalidJSON) as refused:
            states.replace("t", subject("k"), document)
        assert refused.value.message == expected
        r = client.put("/api/states/t/records/agent/bot/thread/k", content=text.encode())
        assert (r.status_code, r.json()) == (422, {"error": expected, "code": "invalid-json"})
    host = ToolHost(MemoryView(states.store, Identity.of("bot", "/tmp", "s1")), states)
    result = host.call("state_replace", {"state": "t", "subject": "k", "data": {"n": huge}})
    assert (result.code, result.text) == (
        "invalid-json",
        "$.n: integer of 100,000 digits is outside the 64-bit range JSON stores",
    )
    subject_args = ["--target-name", "bot", "--key", "k"]
    out = sf(
        "--store",
        backend,
        "states",
        "replace",
        "t",
        *subject_args,
        "--data",
        f'{{"n": {ones}}}',
        cwd=tmp_path,
    )
    assert (out.returncode, out.stderr) == (
        1,
        "error[invalid-json]: $.n: integer of 100,000 digits is outside the 64-bit range JSON stores\n",
    )
    # an op's value is named by its op, as the service names any integer past 64 bits there
    ops = f'{{"ops": [{{"op": "set", "path": ["n"], "value": {ones}}}]}}'
    r = client.post("/api/states/t/records/agent/bot/thread/k/deltas", content=ops.encode())
    assert (r.status_code, r.json()) == (
        422,
        {
            "error": "ops[0]: value: integer of 100,000 digits is outside the 64-bit range JSON stores",
            "code": "invalid-ops",
        },
    )
    # a float literal past a double's range is named as what it is, too
    with pytest.raises(InvalidJSON, match=r"^\$\.n\[1\]: 1e400 is not a JSON number"):
        decode('{"n": [0, 1e400]}')
    assert states.read("t", subject("k")) is None


def encode_big(value: Any) -> bytes:
    """JSON text of ``value``, whose integers may be beyond 64 bits (orjson refuses to write them)."""
    return json.dumps(value).encode()


def test_cli_refuses_an_integer_beyond_64_bits_as_the_python_door_does(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    states = StatesService(store)
    states.install_builtins()
    states.declare("t", DECL)
    base = ["--store", backend]
    for n in (BIG, BELOW):
        out = sf(
            *base,
            "states",
            "replace",
            "t",
            "--target-name",
            "bot",
            "--key",
            "k",
            "--data",
            f'{{"n": {n}}}',
            cwd=tmp_path,
        )
        assert (out.returncode, out.stdout) == (1, "")
        assert (
            out.stderr == f"error[invalid-json]: $.n: integer {n} is outside the 64-bit range JSON stores\n"
        )
    with pytest.raises(InvalidJSON) as python_door:
        states.replace("t", subject("k"), {"n": BIG})
    assert python_door.value.message == f"$.n: integer {BIG} is outside the 64-bit range JSON stores"
    out = sf(*base, "tool", "patch_state", f'{{"session": {{"tactics": {{"x": {BIG}}}}}}}', cwd=tmp_path)
    assert (out.returncode, out.stdout) == (1, "")
    # (as the tool answers it over MCP and from Python: the patch's own place)
    assert out.stderr.startswith(f"error[invalid-json]: session.tactics.x: integer {BIG} is outside")
    assert states.read("t", subject("k")) is None  # nothing written by any of them
    read = sf(*base, "tool", "read_state", '{"path": "session.tactics"}', cwd=tmp_path)
    assert (read.returncode, read.stdout) == (0, '{"value":null}\n')


# -------------------------------------------------- search by value


def test_search_finds_a_string_holding_the_six_characters_backslash_u0000(states: StatesService) -> None:
    text = "\\u0000"  # backslash, u, four zeros: not a NUL
    states.replace("t", subject("e"), {"v": text})
    states.replace("t", subject("n"), {"v": "\x00"})
    states.replace("t", subject("x"), {"v": "\\u0000\x00"})
    for pattern, expected in ((text, ["e"]), ("\x00", ["n"]), ("\\u0000\x00", ["x"]), ("\\u0041", [])):
        assert keys(states.search("t", {"v": pattern})) == expected, pattern
        assert keys(states.search("t", {"v": {"$eq": pattern}})) == expected, pattern


VALUES: dict[str, int | float] = {
    "e": 9.223372036854776e18,  # the float that is exactly 2**63
    "i": 2**63,
    "f": 2**64 - 1,
    "g": 2**64 - 2,
    "h": 1.8446744073709552e19,  # the float that is exactly 2**64
    "j": -(2**63),
    "k": -9.223372036854776e18,
    "p": 2**60,
    "q": float(2**60),  # written 1.152921504606847e+18
    "r": 1152921504606847000,  # equal to that text as a decimal, not to the float
    "s": 2**53 + 1,
    "t": 1,
    "u": 1.0,
}


def test_search_compares_numbers_by_exact_value_as_eq_does(states: StatesService) -> None:
    for key, value in VALUES.items():
        states.replace("t", subject(key), {"v": value})
    for query in (*VALUES.values(), 2**53, float(2**53 + 2), 1152921504606846977):
        truth = sorted(k for k, v in VALUES.items() if v == query)
        plain = keys(states.search("t", {"v": query}))
        nested = keys(states.search("t", {"v": [query]}))  # a scalar in an array contains nothing
        eq = keys(states.search("t", {"v": {"$eq": query}}))
        assert plain == eq == truth and nested == [], (query, plain, eq, truth)
    states.replace("t", subject("box"), {"v": {"id": 2**64 - 1, "list": [2**63]}})
    assert keys(states.search("t", {"v": {"id": 2**64 - 1}})) == ["box"]
    assert keys(states.search("t", {"v": {"id": 1.8446744073709552e19}})) == []
    assert keys(states.search("t", {"v": {"list": [9.223372036854776e18]}})) == ["box"]


RANGES: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def test_range_operators_compare_numbers_by_exact_value(states: StatesService) -> None:
    # a float equal to a large integer bound (9.223372036854776e18 is 2**63) is within it,
    # whichever side of the bound its shortest text reads
    for key, value in VALUES.items():
        states.replace("t", subject(key), {"v": value})
    queries = {*VALUES.values(), 2**53, 2**63 - 1, 2**63 + 1, -(2**63) + 1, 2**64 - 1, 1152921504606846977}
    for query in queries:
        for op, holds in RANGES.items():
            truth = sorted(k for k, v in VALUES.items() if holds(v, query))
            assert keys(states.search("t", {"v": {op: query}})) == truth, (op, query)


_EDGES = [s * e + d for e in (2**53, 2**60, 2**63, 2**64, 10**18) for s in (1, -1) for d in (-1, 0, 1)]
edge_numbers = st.sampled_from([n for n in _EDGES if -(2**63) <= n < 2**64]).flatmap(
    lambda n: st.sampled_from([n, float(n), math.nextafter(float(n), math.inf)])
)
big_numbers = edge_numbers | st.integers(-(2**63), 2**64 - 1) | st.floats(-1e20, 1e20)
_ranged = itertools.count()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(edge_numbers | big_numbers, min_size=1, max_size=5), big_numbers)
def test_range_filters_agree_with_python_on_large_numbers(
    states: StatesService, stored: list[int | float], drawn: int | float
) -> None:
    # bounds equal in value to each stored number, of the other type where one is exact, and
    # one more: every range operator finds what Python's comparison finds
    state = f"r{next(_ranged)}"
    states.declare(state, DECL)
    for i, value in enumerate(stored):
        states.replace(state, subject(f"k{i}"), {"v": value})
    near = [int(v) if type(v) is float and v.is_integer() and -(2**63) <= v < 2**64 else v for v in stored]
    for bound in {*near, *stored, drawn}:
        for op, holds in RANGES.items():
            truth = sorted(f"k{i}" for i, v in enumerate(stored) if holds(v, bound))
            assert keys(states.search(state, {"v": {op: bound}})) == truth, (op, bound)


def test_search_by_an_integer_from_2_63_up_answers_over_http(
    client: TestClient, states: StatesService
) -> None:
    states.replace("t", subject("k"), {"n": 2**63})
    states.replace("t", subject("m"), {"n": 2**63 + 1})
    for body in (f'{{"filters": {{"n": {2**63}}}}}', f'{{"filters": {{"n": {{"$in": [{2**63}]}}}}}}'):
        r = client.post("/api/states/t/records/search", content=body.encode())
        assert r.status_code == 200, r.text
        assert [m["subject"]["key"] for m in r.json()["data"]["matches"]] == ["k"]


# -------------------------------------------------- huge seq and history offsets


def test_a_read_as_of_a_seq_past_64_bits_answers_the_current_record(
    client: TestClient, states: StatesService
) -> None:
    states.replace("t", subject("k"), {"v": 1})
    states.replace("t", subject("k"), {"v": 2})
    for seq in (2**63 - 1, 2**63, 2**64, 10**20):
        assert data(states, "k", seq=seq) == {"v": 2}
        r = client.get(f"/api/states/t/records/agent/bot/thread/k?seq={seq}")
        assert r.status_code == 200 and r.json()["data"]["data"] == {"v": 2}, r.text
        with pytest.raises(NotFound):
            states.read("t", subject("k"), revision=seq)


def test_history_offsets_past_64_bits_are_not_found_on_both_backends(
    backend: str, open_migrated: Any, tmp_path: Path
) -> None:
    open_migrated()
    base = ["--store", backend]
    assert (
        sf(*base, "tool", "patch_state", '{"session": {"tactics": {"x": 1}}}', cwd=tmp_path).returncode == 0
    )
    for offset in ("9999999999", str(2**63 - 1), str(2**64)):
        for command in ("show", "diff"):
            out = sf(*base, "history", command, offset, cwd=tmp_path)
            assert (out.returncode, out.stdout) == (1, "")
            assert out.stderr.startswith(
                f"error[not-found]: requested history offset {offset} predates the retained history"
            ), out.stderr


# -------------------------------------------------- odd input refused cleanly


def test_a_subject_key_with_a_lone_surrogate_is_refused_as_a_subject(
    states: StatesService, tmp_path: Path, backend: str
) -> None:
    for call in (
        lambda: states.read("t", subject("a\ud800b")),
        lambda: states.replace("t", subject("a\udcffb"), {"v": 1}),
        lambda: states.apply("t", subject("a\ud800b"), []),
    ):
        with pytest.raises(SubjectRefused) as refused:
            call()
        assert "subject key must be Unicode text" in refused.value.message
    # a byte that is not UTF-8 in a shell argument (a lone surrogate once decoded)
    out = subprocess.run(
        [
            b"stateflow",
            b"--store",
            backend.encode(),
            b"states",
            b"read",
            b"t",
            b"--target-name",
            b"bot",
            b"--key",
            b"a\xffb",
        ],
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert (out.returncode, out.stdout) == (1, b"")
    assert out.stderr.startswith(
        b"error[subject-refused]: invalid subject: key: subject key must be Unicode text"
    )


def test_cursors_of_non_ascii_digits_are_malformed(client: TestClient, states: StatesService) -> None:
    states.replace("t", subject("k"), {"v": 1})
    superscript = base64.urlsafe_b64encode("²".encode()).decode().rstrip("=")
    with pytest.raises(InvalidInput, match="writes cursor is malformed"):
        states.writes("t", subject("k"), cursor=superscript)
    r = client.get(f"/api/states/t/records/agent/bot/thread/k/writes?cursor={superscript}")
    assert r.status_code == 422 and r.json()["code"] == "invalid-input", r.text
    for offset in ("²", "٣"):  # a sorted search's cursor: an offset after its marker
        cursor = base64.urlsafe_b64encode(f"\x00sorted:{offset}".encode()).decode().rstrip("=")
        with pytest.raises(InvalidInput, match="cursor is malformed"):
            states.search("t", {"v": 1}, sort=[{"path": ["v"], "order": "asc"}], cursor=cursor)


def test_a_schema_ref_with_a_non_ascii_digit_does_not_resolve(
    client: TestClient, states: StatesService
) -> None:
    for segment in ("²", "٠"):
        decl = {
            "schema": {
                "type": "object",
                "properties": {"v": {"$ref": f"#/$defs/l/{segment}"}},
                "$defs": {"l": [{"type": "string"}]},
            },
            "subject_kinds": ["thread"],
            "default_subject_kind": "thread",
        }
        with pytest.raises(SchemaInvalid, match="does not resolve inside the schema"):
            states.declare("r", decl)
        r = client.put("/api/states/r", json=decl)
        assert r.status_code == 422 and r.json()["code"] == "invalid-schema", r.text
    assert client.get("/api/states/r").status_code == 404


def test_an_op_value_nested_too_deep_is_named_by_its_op(states: StatesService) -> None:
    deep: Any = 1
    for _ in range(254):
        deep = [deep]
    with pytest.raises(OpError) as refused:
        states.apply("t", subject("k"), [{"op": "set", "path": ["v"], "value": deep}])
    message = refused.value.message
    assert message.startswith("ops[0]: value[0][0]") and "nested deeper than 254 levels" in message
    assert '["agent"' not in message
    assert states.read("t", subject("k")) is None
    # one level less fits, as the same value does through replace
    states.apply("t", subject("k"), [{"op": "set", "path": ["v"], "value": deep[0]}])
    record = states.read("t", subject("k"))
    assert record is not None and record["revision"] == 1


# -------------------------------------------------- numbers through template jq programs

JQ_TEMPLATE: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"v": {}}},
    "template_jq": {
        "get": {"purpose": "input", "jq": {"content": ".v"}},
        "echo": {"purpose": "input", "params": ["x"], "jq": {"content": "$params.x"}},
        "put": {
            "purpose": "update",
            "params": ["x"],
            "jq": {"content": '[{"op": "set", "path": ["v"], "value": $input.x}]'},
        },
        "big": {"purpose": "input", "jq": {"content": "pow(2; 64)"}},
    },
}
THROUGH_JQ = [2**53 + 1, 2**63 - 1, 2**64 - 1, -(2**63), -0.0, 1.0, 1e16, 1e308, 5e-324, 0.1]


def test_a_number_a_template_jq_program_passes_through_comes_back_exactly(
    client: TestClient, states: StatesService
) -> None:
    # jq's binding handed every output number back as a double, an integral one as an int: an
    # update program wrote 2**53+1 as 2**53, 1.0 as 1 and -0.0 as 0, and 2**64-1 or 1e308 (a
    # 309-digit int) stopped the worker, reported as the program's memory limit
    states.put_template("edge", JQ_TEMPLATE)
    states.attach("t", "edge", {"path": ["at"]})
    records = "/api/states/t/records/agent/bot/thread"
    for n, value in enumerate(THROUGH_JQ):
        key = f"k{n}"
        states.template_jq_update("t", subject(key), "put", {"x": value})
        assert repr(data(states, key)["at"]["v"]) == repr(value)  # (the type and the sign too)
        assert repr(states.template_jq_input("t", subject(key), "get", {})["value"]) == repr(value)
        r = client.post(
            f"{records}/h{n}/template-jq/put", content=b'{"input": {"x": %s}}' % encode_big(value)
        )
        assert r.status_code == 200, r.text
        assert repr(data(states, f"h{n}")["at"]["v"]) == repr(value)
        r = client.get(f"{records}/{key}/template-jq/echo", params={"x": encode_big(value).decode()})
        assert r.status_code == 200 and repr(decode(r.content)["data"]["value"]) == repr(value), r.text
    # a number jq computes that no store holds is refused as what it is, not as a memory limit
    r = client.get(f"{records}/k0/template-jq/big")
    assert (r.status_code, r.json()["code"]) == (422, "invalid-template"), r.text
    assert "integer 18446744073709552000 is outside the 64-bit range JSON stores" in r.json()["error"]
