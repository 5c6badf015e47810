"""What the MCP door tells a model about its memory view, through the official SDK client over stdio:
artifact sources by scope, modes, the scopes a view has, projections and the state_* op schema."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import jsonschema_rs
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_REQUEST, PARSE_ERROR

from stateflow.doc.ops import OP_KINDS
from stateflow.memory import Identity
from stateflow.memory.planes import RUNTIME
from stateflow.store import DocKey, Document, SqlStore, Write

INITIALIZE: Final = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
"""The first line a client sends over stdio, for the tests that write raw JSON-RPC lines."""


@asynccontextmanager
async def stdio(backend: str, cwd: Path, *args: str) -> AsyncIterator[tuple[ClientSession, Any]]:
    """A ``stateflow mcp`` server over stdio and an initialized client: ``(client, initialize result)``."""
    params = StdioServerParameters(
        command="stateflow",
        args=["--store", backend, "mcp", "--cwd", str(cwd), *args],
        env=dict(os.environ),  # the SDK passes only a few variables by default
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        yield client, await client.initialize()


def text(result: Any) -> str:
    return str(result.content[0].text)


async def context_head(client: ClientSession) -> dict[str, Any]:
    contents = (await client.read_resource("stateflow://memory/context.json")).contents[0]
    return dict(json.loads(contents.text)["head"])  # type: ignore[union-attr]


# ------------------------------------------------------------------------------ artifact sources


def test_a_relative_artifact_source_is_refused_outside_the_cwd_scope(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    # the global scope is seen from every directory and a session may be resumed from another:
    # a relative source there would name another file elsewhere, and be called missing or changed
    proj_a, proj_b = tmp_path / "projA", tmp_path / "projB"
    for project in (proj_a, proj_b):
        project.mkdir()
        (project / "notes.md").write_text(f"# {project.name}\n")
    card = {"description": "projA notes"}
    absolute = str(proj_a / "notes.md")

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with stdio(backend, proj_a, "--session", "s") as (client, _):
            for scope in ("global", "session"):
                out[scope] = await client.call_tool("patch_state", {scope: {"artifacts": {"notes.md": card}}})
            out["cwd"] = await client.call_tool("patch_state", {"cwd": {"artifacts": {"notes.md": card}}})
            out["absolute"] = await client.call_tool(
                "patch_state", {"global": {"artifacts": {absolute: card}}}
            )
        async with stdio(backend, proj_b, "--session", "s") as (client, _):
            out["elsewhere"] = await context_head(client)
        return out

    out = anyio.run(run)
    assert text(out["global"]) == (
        "error[invalid-input]: artifact source 'notes.md' is relative, and the global scope is seen "
        f"from every working directory: name it by its absolute path ({absolute!r}) or write the "
        "card in the cwd scope"
    )
    assert out["session"].is_error and "the session scope is seen from other working" in text(out["session"])
    assert not out["cwd"].is_error and not out["absolute"].is_error
    # from projB (same session): projA's cwd card is not in view, the absolute card is fresh
    assert out["elsewhere"]["state"]["artifacts"] == {absolute: card}


def test_a_stored_relative_global_card_gets_no_freshness_hint(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    # a card stored before relative sources were refused outside the cwd scope: its freshness is
    # unknown from any directory, so it is shown as it is, never as missing or changed
    (tmp_path / "notes.md").write_text("# here, but not the file the card was written for\n")
    key: DocKey = Identity.of(None, tmp_path, "s").key("global")
    body = {
        "artifacts": {"notes.md": {"description": "another project's notes"}},
        RUNTIME: {"artifacts": {"notes.md": {"size": 1, "mtime_ns": 1}}},
    }

    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].body, body, docs[key].revision)], None

    store.update([key], compute, {"door": "test"}, members=["artifacts", RUNTIME])

    async def run() -> dict[str, Any]:
        async with stdio(backend, tmp_path, "--session", "s") as (client, _):
            return await context_head(client)

    assert anyio.run(run)["state"]["artifacts"] == {"notes.md": {"description": "another project's notes"}}


# ------------------------------------------------------------------------------ modes


def memory_cli(backend: str, cwd: Path, *args: str) -> None:
    done = subprocess.run(
        ["stateflow", "--store", backend, *args, "--cwd", str(cwd), "--session", "s"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_passive_reads_omit_the_response_as_the_context_does(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    memory_cli(backend, tmp_path, "tool", "patch_state", '{"session": {"tactics": {"n": 1}}}')
    memory_cli(backend, tmp_path, "respond", "the previous answer")
    reads = [
        {"path": "effective"},
        {"path": "session"},
        {"path": "response"},
        {"path": "session.response"},
        {"path": "session", "projection": "keys"},
        {"path": "session[0]", "projection": "patch"},
        {"path": "session.patches[0]", "projection": "patch"},
    ]

    async def run(mode: str) -> dict[str, Any]:
        async with stdio(backend, tmp_path, "--session", "s", "--mode", mode) as (client, _):
            head = await context_head(client)
            return {
                "context": head["state"],
                "reads": [(await client.call_tool("read_state", r)).structured_content for r in reads],
            }

    passive = anyio.run(run, "passive")
    assert passive["context"] == {"tactics": {"n": 1}}
    assert passive["reads"] == [
        {"value": {"tactics": {"n": 1}}},
        {"value": {"tactics": {"n": 1}}},
        {"value": None},
        {"value": None},
        {"meta": {"type": "object", "size": 1}, "keys": {"tactics": "object"}},
        {"patch": {}},
        {"patch": {}},
    ]
    active = anyio.run(run, "active")
    assert active["context"]["response"] == active["reads"][2]["value"] == "the previous answer"
    assert active["reads"][5] == {"patch": {"response": "the previous answer"}}


def test_mode_off_offers_no_memory_tools_and_says_memory_is_off(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    async def run() -> dict[str, Any]:
        async with stdio(backend, tmp_path, "--session", "s", "--mode", "off") as (client, init):
            return {
                "instructions": init.instructions,
                "tools": (await client.list_tools()).tools,
                "read": await client.call_tool("read_state", {"path": "effective"}),
                "unknown": await client.call_tool("nosuch", {}),
                "json": (await client.read_resource("stateflow://memory/context.json")).contents[0],
            }

    memory_cli(backend, tmp_path, "tool", "patch_state", '{"session": {"tactics": {"secret": "kept"}}}')
    out = anyio.run(run)
    assert out["instructions"] == "State Flow memory is off for this session: there are no memory tools.\n"
    assert out["tools"] == []
    assert json.loads(out["json"].text)["head"] == {}  # no memory shown, as the text shows none
    assert text(out["read"]) == "error[invalid-input]: memory tools are off for this session (mode off)"
    # the refusal lists what is served: nothing here (it said "available: " and no name)
    assert text(out["unknown"]) == "error[unknown-tool]: unknown tool 'nosuch'; available: none"


# ------------------------------------------------------------------------------ the view's scopes


def protocol_part(context_text: str) -> str:
    """The protocol of a context text (the runtime context that follows it is data)."""
    return context_text.split("\n\nState Flow runtime context")[0]


def test_a_view_without_the_cwd_scope_is_never_told_about_cwd(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    async def run(scopes: str) -> dict[str, Any]:
        async with stdio(backend, tmp_path, "--session", "s", "--scopes", scopes) as (client, init):
            tools = {t.name: t for t in (await client.list_tools()).tools}
            context = (await client.read_resource("stateflow://memory/context")).contents[0]
            prompt = (await client.get_prompt("memory_context")).messages[0].content
            return {
                "instructions": protocol_part(str(init.instructions)),
                "context": protocol_part(context.text),  # type: ignore[union-attr]
                "prompt": protocol_part(prompt.text),  # type: ignore[union-attr]
                "read_description": tools["read_state"].description,
                "patch_scopes": list(tools["patch_state"].input_schema["properties"]),
                "written": await client.call_tool(
                    "patch_state", {"session": {"tactics": {"a": 1}}, "global": {"strategy": {"b": 2}}}
                ),
            }

    two = anyio.run(run, "global,session")
    assert two["instructions"] == two["context"] == two["prompt"]
    assert "cwd" not in two["instructions"] and "cwd" not in two["read_description"]
    assert 'WRITE with patch_state {"session": {...}, "global": {...}}' in two["instructions"]
    assert "effective = global overlaid by session:" in " ".join(two["instructions"].split())
    assert "session.lazy.memory[4]" in two["read_description"]
    assert two["patch_scopes"] == ["global", "session"] and not two["written"].is_error
    three = anyio.run(run, "global,cwd,session")
    assert 'WRITE with patch_state {"session": {...}, "cwd": {...}, "global": {...}}' in three["instructions"]
    assert "cwd.lazy.memory[4]" in three["read_description"]


# ------------------------------------------------------------------------------ projections


def test_a_scope_patch_path_answers_under_each_projections_key(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    async def run() -> list[Any]:
        async with stdio(backend, tmp_path, "--session", "s") as (client, _):
            await client.call_tool("patch_state", {"session": {"tactics": {"n": 1}}})
            reads = [
                {"path": "session.patches[0]"},
                {"path": "session.patches[0]", "projection": "value"},
                {"path": "session.patches[0]", "projection": "patch"},
                {"path": "session.patches[0]", "projection": "keys"},
            ]
            return [(await client.call_tool("read_state", r)).structured_content for r in reads]

    assert anyio.run(run) == [
        {"value": {"tactics": {"n": 1}}},
        {"value": {"tactics": {"n": 1}}},
        {"patch": {"tactics": {"n": 1}}},
        {"meta": {"type": "object", "size": 1}, "keys": {"tactics": "object"}},
    ]


# ------------------------------------------------------------------------------ the state_* tools


def test_state_apply_input_schema_gives_each_op_its_shape(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    # generated from the op engine's own field lists: a model that follows it writes valid ops
    declaration = {
        "schema": {"type": "object", "properties": {"todo": {"type": "object"}}},
        "subject_kinds": ["session"],
        "default_subject_kind": "session",
    }
    done = subprocess.run(
        ["stateflow", "--store", backend, "states", "put", "notes", "--data", json.dumps(declaration)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    ops = [
        {"op": "set", "path": ["todo"], "value": {"items": []}},
        {"op": "set_by_key", "path": ["todo", "items"], "key_field": "id", "value": [{"id": "a", "n": 1}]},
        {"op": "merge_by_key", "path": ["todo", "items"], "key_field": "id", "value": [{"id": "a", "n": 2}]},
        {
            "op": "set",
            "path": ["todo", "items", 0, "done"],
            "value": True,
            "guard": {"path": ["todo"], "expected": None},
        },
    ]

    async def run() -> tuple[Any, Any, Any]:
        async with stdio(backend, tmp_path, "--session", "s", "--states", "notes") as (client, _):
            tools = {t.name: t for t in (await client.list_tools()).tools}
            applied = await client.call_tool("state_apply", {"state": "notes", "ops": ops})
            dotted = {"op": "set", "path": "todo.n", "value": 1}
            refused = await client.call_tool("state_apply", {"state": "notes", "ops": [dotted]})
            return tools["state_apply"], applied, refused

    tool, applied, refused = anyio.run(run)
    assert not applied.is_error, text(applied)
    # the op engine checks each op, as at every door: its code, and a message that shows the shape
    assert text(refused) == (
        'error[invalid-ops]: ops[0]: path must be a non-empty list of segments, such as ["todo", "items", 0]'
    )
    assert applied.structured_content["result"]["data"] == {
        "todo": {"items": [{"id": "a", "n": 2, "done": True}]}
    }
    kinds = [
        alt["properties"]["op"]["const"] for alt in tool.input_schema["properties"]["ops"]["items"]["oneOf"]
    ]
    assert kinds == list(OP_KINDS)
    assert ", ".join(OP_KINDS) in str(tool.description) and '"path": ["todo", "items", 0, "done"]' in str(
        tool.description
    )
    validator = jsonschema_rs.Draft202012Validator(tool.input_schema)
    assert validator.is_valid({"state": "notes", "ops": ops})
    for guess in (
        {"op": "set", "path": "/text", "value": "v"},  # a JSON Pointer
        {"op": "set", "path": "text", "value": "v"},  # a dotted path
        {"op": "set", "path": ["text"]},  # no value
        {"op": "remove", "path": ["text"], "value": 1},  # a field the kind does not take
        {"op": "insert", "path": ["text"], "value": 1},  # no such op
        {"op": "remove_by_key", "path": ["items"], "key_field": "id"},  # no key
    ):
        assert not validator.is_valid({"state": "notes", "ops": [guess]}), guess


def test_an_unknown_read_state_field_gets_advice_that_fits_it(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    async def run() -> list[str]:
        async with stdio(backend, tmp_path, "--session", "s") as (client, _):
            reads: list[dict[str, Any]] = [
                {"path": "session", "limit": 10},
                {"path": "session", "cursor": "x"},
                {"path": "cwd", "offset": 1},
            ]
            return [text(await client.call_tool("read_state", r)) for r in reads]

    limit, cursor, offset = anyio.run(run)
    assert limit == (
        "error[invalid-input]: read_state does not accept limit (it takes path or paths, and projection); "
        "a read returns exactly what it selects, never a page: select a range such as lazy.notes[0:10], "
        "or a deeper path"
    )
    assert cursor.startswith("error[invalid-input]: read_state does not accept cursor (it takes")
    assert "never a page" in cursor
    assert offset == (
        "error[invalid-input]: read_state does not accept offset (it takes path or paths, and projection); "
        "history and scope belong in the path (e.g. cwd[1].lazy.memory)"
    )


# ------------------------------------------------------------------------------ the stdio transport

DEEP: Final = 230
"""Deeper than the SDK's JSON parser takes (about 200 levels), shallower than its client writes
(about 255) and than a value may be (254)."""


def test_stdio_answers_a_request_the_transport_cannot_parse(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    # the SDK's parser refuses the line before the server sees it: the request is answered with
    # a parse error for its id (the client's call fails at once instead of waiting forever)
    deep: Any = 1
    for _ in range(DEEP):
        deep = {"a": deep}

    async def run() -> tuple[Any, Any]:
        async with stdio(backend, tmp_path, "--session", "s") as (client, _):
            try:
                # (a bound on a regression, which would leave the call unanswered: not a wait)
                await client.call_tool("patch_state", {"session": {"tactics": {"d": deep}}}, 60)
            except MCPError as exc:
                refused: Any = exc
            after = await client.call_tool("read_state", {"path": "session"})
            return refused, after

    refused, after = anyio.run(run)
    assert refused.code == PARSE_ERROR and refused.message.startswith("Parse error: ")
    assert after.structured_content == {"value": {}}  # nothing written, and the session goes on


def test_stdio_answers_unparsable_lines_by_id_and_logs_them(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    deep = '{"a":' * DEEP + "1" + "}" * DEEP
    lines = [
        json.dumps(INITIALIZE),
        '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"patch_state","arguments":'
        + '{"session":{"tactics":{"d":'
        + deep
        + "}}}}}",
        '{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"read_state","arguments":'
        '{"path":"tactics.\\ud800"}}}',
        "not json at all",
        '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read_state","arguments":{"path":"session"}}}',
    ]
    server = subprocess.Popen(
        ["stateflow", "--store", backend, "mcp", "--cwd", str(tmp_path), "--session", "s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("".join(line + "\n" for line in lines))
    server.stdin.flush()
    answers: dict[Any, Any] = {}
    while 4 not in answers:  # (the lines are answered in order; stdin stays open until then)
        line = server.stdout.readline()
        assert line, "the server stopped before answering the last request"
        message = json.loads(line)
        answers[message.get("id")] = message
    _, stderr = server.communicate(timeout=120)
    for rid in (2, "three", None):
        assert answers[rid]["error"]["code"] == PARSE_ERROR, answers
    assert "recursion limit" in answers[2]["error"]["message"]
    assert answers[4]["result"]["structuredContent"] == {"value": {}}
    assert "stateflow mcp: unparsable message (id 2)" in stderr
    assert "stateflow mcp: unparsable message (id None)" in stderr


def test_stdio_refuses_a_line_that_is_not_utf8_and_writes_nothing(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    # a client writing Latin-1: its bytes are refused as unparsable, never replaced with U+FFFD
    # and stored as if the client had sent that
    server = subprocess.Popen(
        ["stateflow", "--store", backend, "mcp", "--cwd", str(tmp_path), "--session", "s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None

    def answer(*lines: bytes) -> dict[str, Any]:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(b"".join(line + b"\n" for line in lines))
        server.stdin.flush()
        return dict(json.loads(server.stdout.readline()))

    answer(json.dumps(INITIALIZE).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    call = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}'
    latin1 = answer(call % (2, b"patch_state", b'{"session":{"tactics":{"name":"caf\xe9"}}}'))
    utf8 = answer(call % (3, b"patch_state", '{"session":{"tactics":{"other":"café"}}}'.encode()))
    read = answer(call % (4, b"read_state", b'{"path":"session"}'))
    _, stderr = server.communicate(timeout=120)
    assert latin1["id"] == 2 and latin1["error"]["code"] == PARSE_ERROR, latin1
    assert "invalid unicode code point" in latin1["error"]["message"]
    assert utf8["id"] == 3 and not utf8["result"].get("isError")
    # UTF-8 text is served as before; the refused line wrote nothing
    assert read["result"]["structuredContent"] == {"value": {"tactics": {"other": "café"}}}
    assert b"stateflow mcp: unparsable message (id 2)" in stderr


def test_stdio_refuses_a_line_naming_a_member_twice_and_writes_nothing(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    # the SDK's parser keeps the last value of a repeated name, where every other door (the
    # CLI's `stateflow tool`, HTTP) refuses such text: refused as a line that cannot be parsed
    server = subprocess.Popen(
        ["stateflow", "--store", backend, "mcp", "--cwd", str(tmp_path), "--session", "s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None

    def answer(*lines: bytes) -> dict[str, Any]:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(b"".join(line + b"\n" for line in lines))
        server.stdin.flush()
        return dict(json.loads(server.stdout.readline()))

    answer(json.dumps(INITIALIZE).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    call = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}'
    twice = answer(call % (2, b"patch_state", b'{"session":{"tactics":{"a":"one","a":"two"}}}'))
    once = answer(call % (3, b"patch_state", b'{"session":{"tactics":{"b":"one"}}}'))
    read = answer(call % (4, b"read_state", b'{"path":"session"}'))
    _, stderr = server.communicate(timeout=120)
    assert twice["id"] == 2 and twice["error"] == {
        "code": PARSE_ERROR,
        "message": "Parse error: member name 'a' is given more than once in one object: "
        "which value was meant is not guessed",
    }, twice
    assert once["id"] == 3 and not once["result"].get("isError")
    assert read["result"]["structuredContent"] == {"value": {"tactics": {"b": "one"}}}
    assert b"stateflow mcp: unparsable message (id 2)" in stderr


NOT_A_MESSAGE: Final = (
    'a JSON-RPC message is a request (with "method" and "id"), a notification (with "method") or a '
    'response (with "result" or "error")'
)


def test_stdio_answers_a_json_line_that_is_not_a_json_rpc_message_by_its_id(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    # the transport hands such a line on as an exception, which the server dropped: no answer,
    # nothing on stderr, and a client waiting on id 8 waited for ever
    server = subprocess.Popen(
        ["stateflow", "--store", backend, "mcp", "--cwd", str(tmp_path), "--session", "s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None

    lines = [
        json.dumps(INITIALIZE).encode(),
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        b'{"jsonrpc":"2.0","id":8}',
        b"[1]",
        b"null",
        b'{"jsonrpc":"1.0","id":"x","method":"ping"}',
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read_state","arguments":{"path":"session"}}}',
    ]
    server.stdin.write(b"".join(line + b"\n" for line in lines))
    server.stdin.flush()
    answers: list[dict[str, Any]] = []
    while not answers or answers[-1].get("id") != 9:  # (answered in order; the last one always)
        line = server.stdout.readline()
        assert line, "the server stopped before answering the last request"
        answers.append(json.loads(line))
    refused, after = answers[1:-1], answers[-1]
    _, stderr = server.communicate(timeout=120)
    assert [(r["id"], r["error"]) for r in refused] == [
        (8, {"code": INVALID_REQUEST, "message": f"Invalid Request: {NOT_A_MESSAGE}"}),
        (
            None,
            {
                "code": INVALID_REQUEST,
                "message": "Invalid Request: a JSON-RPC message is an object, not an array",
            },
        ),
        (
            None,
            {
                "code": INVALID_REQUEST,
                "message": "Invalid Request: a JSON-RPC message is an object, not null",
            },
        ),
        (
            "x",
            {
                "code": INVALID_REQUEST,
                "message": 'Invalid Request: a JSON-RPC message names "jsonrpc": "2.0"',
            },
        ),
    ]
    assert after["id"] == 9 and not after["result"].get("isError")  # the session goes on
    assert f"stateflow mcp: invalid message (id 8): {NOT_A_MESSAGE}".encode() in stderr
    assert b"stateflow mcp: invalid message (id None): a JSON-RPC message is an object, not null" in stderr


def test_stdio_refuses_arguments_that_are_not_an_object_naming_the_problem(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    # the SDK's schema check would answer a bare -32602 before the tool runs: the tool refuses
    # them as it refuses any other bad argument, and as the CLI's `stateflow tool` does
    shapes = ['"session"', '[{"session":{}}]', "5", "null", "true"]
    call = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}'
    lines = [json.dumps(INITIALIZE), '{"jsonrpc": "2.0", "method": "notifications/initialized"}']
    lines += [call % (rid, "patch_state", shape) for rid, shape in enumerate(shapes, start=2)]
    lines += [call % (10, "read_state", '"session"'), call % (11, "read_state", '{"path":"session"}')]
    server = subprocess.Popen(
        ["stateflow", "--store", backend, "mcp", "--cwd", str(tmp_path), "--session", "s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("".join(line + "\n" for line in lines))
    server.stdin.flush()
    answers: dict[Any, Any] = {}
    # (stdin stays open until every request is answered; the server answers them concurrently,
    # so not necessarily in order)
    while not {*range(2, 2 + len(shapes)), 10, 11} <= answers.keys():
        line = server.stdout.readline()
        assert line, "the server stopped before answering the last request"
        message = json.loads(line)
        answers[message.get("id")] = message
    server.communicate(timeout=120)
    for rid, tool in [*((r, "patch_state") for r in range(2, 2 + len(shapes))), (10, "read_state")]:
        assert answers[rid]["result"] == {
            "content": [{"type": "text", "text": f"error[invalid-input]: {tool} requires an object"}],
            "isError": True,
        }, answers[rid]
    assert answers[11]["result"]["structuredContent"] == {"value": {}}  # nothing was written
