"""The MCP door through the official SDK client: tools, structured results, errors, resources, prompts."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from stateflow.store import SqlStore, open_store

from . import servers


async def exercise(client: ClientSession) -> dict[str, Any]:
    """The same conversation over any transport."""
    out: dict[str, Any] = {"tools": {t.name: t for t in (await client.list_tools()).tools}}
    out["patched"] = await client.call_tool("patch_state", {"session": {"tactics": {"next": "review"}}})
    out["read"] = await client.call_tool("read_state", {"path": "effective.tactics"})
    out["missing"] = await client.call_tool("read_state", {"path": "session.tactics.nope"})
    out["response"] = await client.call_tool("patch_state", {"session": {"response": "forged"}})
    out["resources"] = [r.uri for r in (await client.list_resources()).resources]
    out["context"] = (await client.read_resource("stateflow://memory/context")).contents[0]
    out["context_json"] = (await client.read_resource("stateflow://memory/context.json")).contents[0]
    out["prompts"] = [p.name for p in (await client.list_prompts()).prompts]
    out["prompt"] = (await client.get_prompt("memory_context")).messages
    try:
        await client.read_resource("stateflow://memory/nope")
    except MCPError as exc:
        out["bad_resource"] = exc.message
    return out


def check_conversation(out: dict[str, Any]) -> None:
    tools = out["tools"]
    assert list(tools) == ["read_state", "patch_state"]
    read_tool, patch_tool = tools["read_state"], tools["patch_state"]
    assert (read_tool.title, patch_tool.title) == ("Read memory", "Change memory")
    assert read_tool.annotations.read_only_hint is True and read_tool.annotations.idempotent_hint is True
    assert patch_tool.annotations.destructive_hint is True and patch_tool.annotations.open_world_hint is False
    assert patch_tool.output_schema["required"] == ["message"]

    patched = out["patched"]
    assert not patched.is_error
    assert patched.structured_content["message"] == "State materialized atomically at session scope."
    assert patched.content[0].text.startswith(patched.structured_content["message"] + "\n")
    assert out["read"].structured_content == {"value": {"next": "review"}}
    assert out["read"].content[0].text == '{"value":{"next":"review"}}'
    missing = out["missing"]
    assert missing.is_error and missing.structured_content is None
    assert missing.content[0].text.startswith("error[path-not-found]: read path does not exist")
    assert (
        out["response"].content[0].text.startswith("error[invalid-input]: response is written by the runtime")
    )

    assert out["resources"] == ["stateflow://memory/context", "stateflow://memory/context.json"]
    context = out["context"]
    assert isinstance(context, types.TextResourceContents) and context.mime_type == "text/plain"
    assert '"tactics":{"next":"review"}' in context.text and "State Flow projection: p" in context.text
    head = json.loads(out["context_json"].text)
    assert head["head"]["state"] == {"tactics": {"next": "review"}}
    assert f"State Flow projection: {head['projection']}\n" in context.text
    assert out["prompts"] == ["memory_context"]
    (message,) = out["prompt"]
    assert message.role == "user" and message.content.text == context.text
    assert out["bad_resource"].startswith("error[not-found]: no resource stateflow://memory/nope")


def test_stdio_server_through_the_sdk_client(backend: str, store: SqlStore, tmp_path: Path) -> None:
    async def run() -> dict[str, Any]:
        params = StdioServerParameters(
            command="stateflow",
            args=["--store", backend, "mcp", "--cwd", str(tmp_path), "--session", "s"],
            env=dict(os.environ),  # the SDK passes only a few variables by default
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            init = await client.initialize()
            out = await exercise(client)
            out["instructions"] = init.instructions
            return out

    out = anyio.run(run)
    check_conversation(out)
    assert "patch_state" in out["instructions"]  # the protocol and the context at start


# ------------------------------------------------------------------------------ streamable HTTP

FULL, ALICE, READER = "full-access-token-0001", "alice-only-token-0001", "read-only-token-00001"


@pytest.fixture
def served(backend: str, tmp_path: Path) -> Iterator[str]:
    """A real ``stateflow serve`` on loopback with three tokens; yields its /mcp URL."""
    env = dict(os.environ, STATEFLOW_STORE=backend, XDG_DATA_HOME=str(tmp_path / "data"), STATEFLOW_TOKENS="")
    assert subprocess.run(["stateflow", "migrate"], env=env, capture_output=True, timeout=60).returncode == 0
    port = servers.free_port()
    tokens = ["--token", FULL, "--token", f"{ALICE}@agent/alice", "--token", f"{READER}:read"]
    proc = subprocess.Popen(
        ["stateflow", "serve", "--host", "127.0.0.1", "--port", str(port), *tokens],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a loaded machine can take long to import the server
        while True:
            try:
                urllib.request.urlopen(url + "/api/health", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, "stateflow serve exited"
                assert time.monotonic() < deadline, "stateflow serve did not answer"
                time.sleep(0.2)
        yield url + "/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@asynccontextmanager
async def http_client(url: str, token: str | None, **identity: str) -> AsyncIterator[ClientSession]:
    headers = {f"X-Stateflow-{k.capitalize()}": v for k, v in identity.items()}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def test_streamable_http_through_the_sdk_client(served: str, tmp_path: Path) -> None:
    async def run() -> dict[str, Any]:
        async with http_client(served, FULL, agent="bob", cwd=str(tmp_path), session="s") as client:
            return await exercise(client)

    check_conversation(anyio.run(run))


def test_http_tenancy_and_read_only_tokens(served: str) -> None:
    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with http_client(served, FULL, agent="bob", session="s") as bob:
            await bob.call_tool("patch_state", {"global": {"strategy": {"secret": "bob's"}}})
        async with http_client(served, ALICE, agent="alice", session="s") as alice:
            out["alice_patch"] = await alice.call_tool("patch_state", {"session": {"tactics": {"a": 1}}})
            out["alice_read"] = await alice.call_tool("read_state", {"path": "effective"})
        async with http_client(served, ALICE, agent="bob", session="s") as intruder:
            out["intruder_read"] = await intruder.call_tool("read_state", {"path": "global.strategy"})
            out["intruder_patch"] = await intruder.call_tool(
                "patch_state", {"global": {"strategy": {"secret": None}}}
            )
            try:
                await intruder.read_resource("stateflow://memory/context")
            except MCPError as exc:
                out["intruder_context"] = exc.message
        async with http_client(served, READER, agent="bob", session="s") as reader:
            out["reader_tools"] = [t.name for t in (await reader.list_tools()).tools]
            out["reader_read"] = await reader.call_tool("read_state", {"path": "global.strategy.secret"})
            out["reader_patch"] = await reader.call_tool(
                "patch_state", {"global": {"strategy": {"secret": None}}}
            )
        async with http_client(served, FULL, agent="bob", session="s") as bob:
            out["bob_after"] = await bob.call_tool("read_state", {"path": "global.strategy.secret"})
        return out

    out = anyio.run(run)
    assert not out["alice_patch"].is_error
    assert out["alice_read"].structured_content == {"value": {"tactics": {"a": 1}}}
    for refused in (out["intruder_read"], out["intruder_patch"]):
        assert refused.is_error
        assert refused.content[0].text == "error[forbidden]: this token may not use the memory of agent 'bob'"
    assert out["intruder_context"].startswith("error[forbidden]:")
    assert out["reader_tools"] == ["read_state"]
    assert out["reader_read"].structured_content == {"value": "bob's"}
    assert out["reader_patch"].content[0].text.startswith("error[forbidden]: patch_state writes")
    assert out["bob_after"].structured_content == {"value": "bob's"}


def test_http_a_read_only_token_is_taught_reading_only(served: str) -> None:
    # it is offered read_state alone: no text it gets may tell the model to write
    async def run(token: str) -> list[str]:
        headers = {"X-Stateflow-Agent": "bob", "X-Stateflow-Session": "s", "Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(served, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            init = await client.initialize()
            context = (await client.read_resource("stateflow://memory/context")).contents[0]
            (prompt,) = (await client.get_prompt("memory_context")).messages
            return [init.instructions or "", context.text, prompt.content.text]  # type: ignore[union-attr]

    for text in anyio.run(run, READER):
        assert text.startswith("State Flow memory is available read-only: read it with read_state;")
        assert "patch_state" not in text and "WRITE" not in text
    for text in anyio.run(run, FULL):
        assert text.startswith("State Flow memory is active:") and "WRITE with patch_state" in text


def test_http_a_readers_context_is_not_what_a_writers_receipt_is_relative_to(served: str) -> None:
    async def run() -> Any:
        async with http_client(served, FULL, agent="bob", session="w") as writer:
            await writer.call_tool("patch_state", {"global": {"strategy": {"db": "sqlite"}}})
            await writer.read_resource("stateflow://memory/context")  # its model is shown db = sqlite
        async with http_client(served, FULL, agent="bob", session="other") as other:
            await other.call_tool("patch_state", {"global": {"strategy": {"db": "postgres"}}})
        async with http_client(served, READER, agent="bob", session="w") as reader:  # a dashboard
            await reader.read_resource("stateflow://memory/context")
            await reader.read_resource("stateflow://memory/context.json")
            await reader.get_prompt("memory_context")
        async with http_client(served, FULL, agent="bob", session="w") as writer:
            return await writer.call_tool("patch_state", {"session": {"tactics": {"next": "go"}}})

    receipt = anyio.run(run)
    assert not receipt.is_error
    # the writer's model was never shown postgres: its receipt tells it
    assert receipt.structured_content["state_updates"]["effective"] == [
        {"path": ["strategy", "db"], "value": "postgres"},
        {"path": ["tactics"], "value": {"next": "go"}},
    ]


def test_http_refusals_quote_the_identity_headers_as_sent(served: str) -> None:
    # headers arrive as bytes: UTF-8 text is quoted as such, never as its Latin-1 reading
    async def call(**identity: bytes) -> str:
        headers = {f"X-Stateflow-{k.capitalize()}".encode(): v for k, v in identity.items()}
        headers[b"Authorization"] = f"Bearer {FULL}".encode()
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(served, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            result = await client.call_tool("read_state", {"path": "tactics"})
            assert result.is_error
            return str(result.content[0].text)  # type: ignore[union-attr]

    assert anyio.run(functools.partial(call, session="sé".encode())).startswith(
        "error[invalid-input]: session id 'sé' must be"
    )
    assert anyio.run(functools.partial(call, agent="café".encode())).startswith(
        "error[invalid-input]: agent name 'café' must be"
    )
    assert anyio.run(functools.partial(call, session="caf\xe9".encode("latin-1"))) == (
        "error[bad-request]: X-Stateflow-Session must be UTF-8 (the text's own bytes, not percent-encoded)"
    )


def test_http_a_view_without_a_cwd_header_is_never_told_about_cwd(served: str, tmp_path: Path) -> None:
    # the instructions, the tools and the context name the scopes of the request's own view (its
    # headers name it): the instructions are its context's protocol, not a text for every view
    async def run(**cwd: str) -> dict[str, Any]:
        headers = {f"X-Stateflow-{k.capitalize()}": v for k, v in {"session": "s", **cwd}.items()}
        async with (
            httpx2.AsyncClient(headers={**headers, "Authorization": f"Bearer {FULL}"}, timeout=30) as http,
            streamable_http_client(served, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            init = await client.initialize()
            tools = {t.name: t for t in (await client.list_tools()).tools}
            context = (await client.read_resource("stateflow://memory/context")).contents[0]
            return {
                "instructions": init.instructions,
                "read_description": tools["read_state"].description,
                "context": context.text.split("\n\nState Flow runtime context")[0],  # type: ignore[union-attr]
            }

    default = anyio.run(run)
    assert "cwd" not in default["context"] and "cwd" not in default["read_description"]
    assert 'WRITE with patch_state {"session": {...}, "global": {...}}' in default["context"]
    assert default["instructions"] == default["context"]
    every = anyio.run(functools.partial(run, cwd=str(tmp_path)))
    assert 'WRITE with patch_state {"session": {...}, "cwd": {...}, "global": {...}}' in every["context"]
    assert every["instructions"] == every["context"]
    single = anyio.run(functools.partial(run, cwd=str(tmp_path), scopes="session"))
    assert 'WRITE with patch_state {"tactics": {...}, ...}' in single["context"]
    assert single["instructions"] == single["context"]


def test_http_mcp_needs_a_token(served: str) -> None:
    request = urllib.request.Request(
        served, data=b"{}", method="POST", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        # the first /mcp request loads the MCP layer: seconds on a loaded machine
        urllib.request.urlopen(request, timeout=60)
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["code"] == "unauthorized"


def test_http_mcp_with_a_trailing_slash_is_served_as_mcp(served: str) -> None:
    # clients are often configured with ".../mcp/": the same door, the same token rules
    slashed = served + "/"

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with http_client(slashed, FULL, agent="bob", session="s") as bob:
            out["patch"] = await bob.call_tool("patch_state", {"global": {"strategy": {"tone": "dry"}}})
        async with http_client(slashed, READER, agent="bob", session="s") as reader:
            out["reader_tools"] = [t.name for t in (await reader.list_tools()).tools]
            out["reader_read"] = await reader.call_tool("read_state", {"path": "global.strategy.tone"})
            out["reader_patch"] = await reader.call_tool(
                "patch_state", {"global": {"strategy": {"tone": None}}}
            )
        async with http_client(slashed, ALICE, agent="bob", session="s") as intruder:
            out["intruder_read"] = await intruder.call_tool("read_state", {"path": "global.strategy"})
        return out

    out = anyio.run(run)
    assert not out["patch"].is_error
    assert out["reader_tools"] == ["read_state"]
    assert out["reader_read"].structured_content == {"value": "dry"}
    assert out["reader_patch"].content[0].text.startswith("error[forbidden]: patch_state writes")
    assert out["intruder_read"].content[0].text.startswith("error[forbidden]: this token may not use")
    request = urllib.request.Request(
        slashed, data=b"{}", method="POST", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=60)
    assert caught.value.code == 401 and json.loads(caught.value.read())["code"] == "unauthorized"


NOTES = {
    "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "subject_kinds": ["session"],
    "default_subject_kind": "session",
}
# an input program (a read) and an update program (a write) over the record's "todo" list
TODO = {
    "schema": {"type": "object", "properties": {"items": {"type": "array"}}},
    "template_jq": {
        "count": {"purpose": "input", "jq": {"content": ".items | length"}},
        "add": {
            "purpose": "update",
            "params": ["item"],
            "jq": {"content": '[{"op": "set", "path": ["items"], "value": [$input.item]}]'},
        },
    },
}


def test_http_declared_state_tools_on_request_with_tenancy(served: str, backend: str) -> None:
    for setup in (
        ["states", "put", "notes", "--data", json.dumps(NOTES)],
        ["state-templates", "put", "todo", "--data", json.dumps(TODO)],
        ["states", "attach", "notes", "todo", "--data", '{"path": ["todo"]}'],
    ):
        done = subprocess.run(
            ["stateflow", "--store", backend, *setup], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
    bobs = {"target_kind": "agent", "target_name": "bob", "kind": "session", "key": "s"}

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with http_client(served, FULL, agent="bob", session="s") as plain:
            out["plain_tools"] = [t.name for t in (await plain.list_tools()).tools]
        async with http_client(served, FULL, agent="bob", session="s", states="notes") as bob:
            tools = {t.name: t for t in (await bob.list_tools()).tools}
            out["tools"] = list(tools)
            out["enum"] = tools["state_merge"].input_schema["properties"]["state"]["enum"]
            out["merge"] = await bob.call_tool("state_merge", {"state": "notes", "patch": {"text": "hi"}})
            out["add"] = await bob.call_tool(
                "state_template_jq", {"state": "notes", "program": "add", "input": {"item": 1}}
            )
            out["read"] = await bob.call_tool("state_read", {"state": "notes"})
            out["memory_write"] = await bob.call_tool(
                "state_merge", {"state": "memory", "patch": {"tactics": {"x": 1}}}
            )
        async with http_client(served, ALICE, agent="alice", session="s", states="*") as alice:
            out["alice_own"] = await alice.call_tool(
                "state_merge", {"state": "notes", "patch": {"text": "a"}}
            )
            out["alice_bobs"] = await alice.call_tool("state_read", {"state": "notes", "subject": bobs})
            out["alice_write_bobs"] = await alice.call_tool(
                "state_merge", {"state": "notes", "subject": bobs, "patch": {"text": "mine now"}}
            )
        async with http_client(served, READER, agent="bob", session="s", states="notes") as reader:
            out["reader_tools"] = [t.name for t in (await reader.list_tools()).tools]
            out["reader_merge"] = await reader.call_tool(
                "state_merge", {"state": "notes", "patch": {"text": "x"}}
            )
            # an input program reads (as GET …/template-jq/count does for this token); an
            # update program writes; a tool that does not exist is unknown, not a write
            out["reader_count"] = await reader.call_tool(
                "state_template_jq", {"state": "notes", "program": "count"}
            )
            out["reader_add"] = await reader.call_tool(
                "state_template_jq", {"state": "notes", "program": "add", "input": {"item": 2}}
            )
            out["reader_search"] = await reader.call_tool("state_search", {"state": "notes"})
        async with http_client(served, FULL, agent="bob", session="s", states="nope") as unknown:
            try:
                await unknown.list_tools()
            except MCPError as exc:
                out["unknown"] = exc.message
        async with http_client(served, FULL, agent="bob", session="s", states="notes") as bob:
            out["bob_after"] = await bob.call_tool("state_read", {"state": "notes"})
        return out

    out = anyio.run(run)
    assert out["plain_tools"] == ["read_state", "patch_state"]
    assert set(out["tools"]) == {
        "read_state",
        "patch_state",
        "state_read",
        "state_replace",
        "state_merge",
        "state_apply",
        "state_template_jq",
    }
    assert out["enum"] == ["notes"]
    assert not out["merge"].is_error, out["merge"].content[0].text
    assert not out["add"].is_error, out["add"].content[0].text
    assert out["read"].structured_content["result"]["data"] == {"text": "hi", "todo": {"items": [1]}}
    assert (
        out["memory_write"].content[0].text.startswith("error[state-not-found]: state 'memory' is not served")
    )
    assert not out["alice_own"].is_error, out["alice_own"].content[0].text
    for refused in (out["alice_bobs"], out["alice_write_bobs"]):
        assert (
            refused.content[0].text == "error[forbidden]: this token may not use the records of agent 'bob'"
        )
    assert out["reader_tools"] == ["read_state", "state_read", "state_template_jq"]
    assert out["reader_merge"].content[0].text.startswith("error[forbidden]: state_merge writes")
    assert out["reader_count"].structured_content["result"]["value"] == 1, out["reader_count"].content[0].text
    assert out["reader_add"].content[0].text == (
        "error[forbidden]: template_jq 'add' is an update program: it writes, and this token is read-only"
    )
    assert out["reader_search"].content[0].text.startswith("error[unknown-tool]: unknown tool 'state_search'")
    assert out["unknown"].startswith("error[state-not-found]:")
    assert out["bob_after"].structured_content["result"]["data"] == {"text": "hi", "todo": {"items": [1]}}


# A handshake-era client on purpose: ``resources/subscribe`` is that era's way to subscribe (the
# SDK marks it deprecated because the 2026-07-28 era replaced it; the next test covers that era).
@pytest.mark.filterwarnings("ignore::mcp.MCPDeprecationWarning")
def test_stdio_resource_subscriptions_notify_every_context_change(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    base = ["--store", db]

    async def run() -> dict[str, Any]:
        updates: list[str] = []
        arrived = anyio.Event()

        async def on_message(message: Any) -> None:
            note = getattr(message, "root", message)
            if isinstance(note, types.ResourceUpdatedNotification):
                updates.append(str(note.params.uri))
                arrived.set()

        params = StdioServerParameters(
            command="stateflow",
            args=[*base, "mcp", "--cwd", str(tmp_path), "--session", "s"],
            env=dict(os.environ),
        )
        out: dict[str, Any] = {}
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, message_handler=on_message) as client,
        ):
            init = await client.initialize()
            assert init.capabilities.resources is not None
            out["subscribe"] = init.capabilities.resources.subscribe
            await client.subscribe_resource("stateflow://memory/context")
            await client.call_tool("patch_state", {"session": {"tactics": {"next": "review"}}})
            with anyio.fail_after(30):
                await arrived.wait()
            out["own"] = list(updates)
            arrived = anyio.Event()
            # another process writes the shared cwd scope: the subscriber hears of it too
            other = await anyio.run_process(
                [
                    "stateflow",
                    *base,
                    "tool",
                    "patch_state",
                    '{"cwd": {"strategy": {"db": "pg"}}}',
                    "--session",
                    "other",
                    "--cwd",
                    str(tmp_path),
                ],
                check=False,
            )
            assert other.returncode == 0, other.stderr
            with anyio.fail_after(30):
                await arrived.wait()
            out["other"] = list(updates)
            try:
                await client.subscribe_resource("stateflow://memory/nope")
            except MCPError as exc:
                out["bad"] = exc.message
        return out

    out = anyio.run(run)
    assert out["subscribe"] is True
    assert out["own"] == ["stateflow://memory/context"]
    assert out["other"] == ["stateflow://memory/context", "stateflow://memory/context"]
    assert out["bad"].startswith("error[not-found]: no resource stateflow://memory/nope")


def test_stdio_listen_streams_notify_a_2026_client_of_every_context_change(tmp_path: Path) -> None:
    """A 2026-07-28 client has no ``resources/subscribe``: it opens a ``subscriptions/listen``
    stream naming the resources, and hears of its own patches and of other processes' writes."""
    from mcp import Client

    db = str(tmp_path / "m.db")
    base = ["--store", db]
    uri = "stateflow://memory/context"

    async def next_event(sub: Any) -> Any:
        with anyio.fail_after(30):
            async for event in sub:
                return event

    async def run() -> dict[str, Any]:
        params = StdioServerParameters(
            command="stateflow",
            args=[*base, "mcp", "--cwd", str(tmp_path), "--session", "s"],
            env=dict(os.environ),
        )
        out: dict[str, Any] = {}
        async with Client(params) as client:
            out["version"] = client.protocol_version
            resources = client.server_capabilities.resources
            out["subscribe"] = resources is not None and resources.subscribe
            async with client.listen(resource_subscriptions=[uri]) as sub:
                out["honored"] = sub.honored.resource_subscriptions
                await client.call_tool("patch_state", {"session": {"tactics": {"next": "review"}}})
                out["own"] = await next_event(sub)
                write = ["tool", "patch_state", '{"cwd": {"strategy": {"db": "pg"}}}']
                where = ["--session", "other", "--cwd", str(tmp_path)]
                other = await anyio.run_process(["stateflow", *base, *write, *where], check=False)
                assert other.returncode == 0, other.stderr
                out["other"] = await next_event(sub)
            try:
                async with client.listen(resource_subscriptions=["stateflow://memory/nope"]):
                    out["bad"] = "opened"
            except MCPError as exc:
                out["bad"] = exc.message
        return out

    out = anyio.run(run)
    assert out["version"] == "2026-07-28"
    assert out["subscribe"] is True
    assert out["honored"] == [uri]
    assert out["own"].uri == uri and out["other"].uri == uri
    assert out["bad"].startswith("error[not-found]: no resource stateflow://memory/nope")


def test_http_never_looks_at_the_servers_files_under_a_clients_cwd(tmp_path: Path) -> None:
    """The cwd header is the client's claim (``/`` included): this machine's files under it are no
    artifact sources; the server's own knowledge roots, hot budget and runtime directory apply."""
    from . import servers

    project, notes = tmp_path / "project", tmp_path / "notes"
    project.mkdir()
    notes.mkdir()
    (project / "secret.txt").write_text("secret")
    (notes / "db.md").write_text("# Databases\n")
    env = servers.base_env(
        tmp_path,
        str(tmp_path / "s.db"),
        STATEFLOW_KNOWLEDGE_ROOTS=str(notes),
        STATEFLOW_HOT_BUDGET="4096",
        STATEFLOW_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    assert subprocess.run(["stateflow", "migrate"], env=env, capture_output=True, timeout=60).returncode == 0
    server = servers.start(env)
    probes = [str(project / "secret.txt"), "secret.txt", "/etc/passwd"]

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {"probes": []}
        for cwd in (str(project), "/"):
            async with http_client(
                server.url + "/mcp", servers.TOKEN, agent="eve", cwd=cwd, session="s"
            ) as c:
                for source in probes:
                    card = {"cwd": {"artifacts": {source: {"description": "probe"}}}}
                    out["probes"].append(await c.call_tool("patch_state", card))
        async with http_client(server.url + "/mcp", servers.TOKEN, agent="eve", session="s") as c:
            card = {"global": {"artifacts": {str(notes / "db.md"): {"description": "database notes"}}}}
            out["card"] = await c.call_tool("patch_state", card)
            (notes / "db.md").write_text("# Databases, changed\n")
            (context,) = (await c.read_resource("stateflow://memory/context.json")).contents
            assert isinstance(context, types.TextResourceContents)
            out["head"] = json.loads(context.text)["head"]
            out["big"] = await c.call_tool("patch_state", {"session": {"tactics": {"big": "x" * 5000}}})
        return out

    try:
        out = anyio.run(run)
    finally:
        server.stop()
    for refused in out["probes"]:
        assert refused.is_error and refused.content[0].text.startswith("error[outside-roots]:"), refused
        # the rule of this door: the client's cwd is no directory here, only knowledge roots admit
        assert refused.content[0].text.endswith(
            "this door's working directory is the client's, not a directory of this machine, so sources "
            f"must lie inside one of the server's knowledge roots (STATEFLOW_KNOWLEDGE_ROOTS) ({notes})"
        ), refused
    assert not out["card"].is_error
    assert "changed" in out["head"]["state"]["artifacts"][str(notes / "db.md")]["hint"]
    assert out["head"]["knowledge_sources"][0]["root"] == str(notes)
    assert out["big"].content[0].text.startswith("error[hot-budget]:")
    assert list((tmp_path / "runtime" / "shown").iterdir())  # every worker compares against it
    store = open_store(str(tmp_path / "s.db"))
    try:
        patches = [t for t in store.transitions(limit=1000) if t.origin.get("tool") == "patch_state"]
        assert len(patches) == 1  # only the knowledge card was written: no probe left a trace
    finally:
        store.close()


def test_http_refuses_a_request_naming_a_member_twice(served: str) -> None:
    # the SDK's parser keeps the last value of a repeated name; every other door refuses such
    # text: so does /mcp, with the parse error the SDK gives a body it cannot read, for its id
    headers = {
        "Authorization": f"Bearer {FULL}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "X-Stateflow-Agent": "dup",
        "X-Stateflow-Session": "s",
    }
    body = (
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"patch_state",'
        b'"arguments":{"global":{"strategy":{"a":{"text":"one"},"a":{"text":"two"}}}}}}'
    )
    request = urllib.request.Request(served, data=body, headers=headers, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 400
    assert json.loads(refused.value.read()) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": types.PARSE_ERROR,
            "message": "Parse error: member name 'a' is given more than once in one object: "
            "which value was meant is not guessed",
        },
    }

    async def run() -> Any:
        async with http_client(served, FULL, agent="dup", session="s") as client:
            return await client.call_tool("read_state", {"path": "global.strategy"})

    assert anyio.run(run).structured_content == {"value": None}  # nothing was written


def test_http_refuses_json_that_is_not_a_json_rpc_message_by_its_id(served: str) -> None:
    # the SDK answered such a body -32602 with its validator's raw report (four union branches
    # and a link to pydantic's pages) and the id null; it is refused as over stdio
    headers = {
        "Authorization": f"Bearer {FULL}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "X-Stateflow-Agent": "a",
        "X-Stateflow-Session": "s",
    }
    for body, rid, reason in (
        (
            b'{"jsonrpc":"2.0","id":8}',
            8,
            'a JSON-RPC message is a request (with "method" and "id"), a notification (with "method") '
            'or a response (with "result" or "error")',
        ),
        (b"[1]", None, "a JSON-RPC message is an object, not an array"),
        (b'{"jsonrpc":"2.0","id":"m","method":5}', "m", '"method" is a string'),
    ):
        request = urllib.request.Request(served, data=body, headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 400
        assert json.loads(refused.value.read()) == {
            "jsonrpc": "2.0",
            "id": rid,
            "error": {"code": types.INVALID_REQUEST, "message": f"Invalid Request: {reason}"},
        }


def test_http_refuses_arguments_that_are_not_an_object_naming_the_problem(served: str) -> None:
    # the SDK's schema check would answer a bare -32602 before the tool runs: the tool refuses
    # them as it refuses any other bad argument, and as the CLI's `stateflow tool` does
    headers = {
        "Authorization": f"Bearer {FULL}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "X-Stateflow-Agent": "shapes",
        "X-Stateflow-Session": "s",
    }

    def call(rid: int, arguments: str) -> Any:
        body = (
            f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call",'
            f'"params":{{"name":"patch_state","arguments":{arguments}}}}}'
        )
        request = urllib.request.Request(served, data=body.encode(), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())

    for rid, arguments in enumerate(('"global"', '[{"global":{}}]', "5", "null"), start=1):
        assert call(rid, arguments) == {
            "jsonrpc": "2.0",
            "id": rid,
            "result": {
                "content": [{"type": "text", "text": "error[invalid-input]: patch_state requires an object"}],
                "isError": True,
            },
        }, arguments

    async def run() -> Any:
        async with http_client(served, FULL, agent="shapes", session="s") as client:
            return await client.call_tool("read_state", {"path": "global"})

    assert anyio.run(run).structured_content == {"value": {}}  # nothing was written


def test_http_takes_bodies_up_to_the_servers_limit_and_names_it_beyond(backend: str, tmp_path: Path) -> None:
    # the SDK's own limit (4 MiB) answered a larger body with a plain-text 413 its client reads as
    # a bare -32603: /mcp takes what STATEFLOW_MAX_BODY_BYTES allows, and beyond it the client
    # reads a JSON-RPC error naming the limit, as the API's routes name it
    from . import servers

    limit = 6 * 1024 * 1024
    env = servers.base_env(tmp_path, backend, STATEFLOW_MAX_BODY_BYTES=str(limit))
    assert subprocess.run(["stateflow", "migrate"], env=env, capture_output=True, timeout=60).returncode == 0
    server = servers.start(env)

    async def run() -> tuple[Any, str, Any]:
        async with http_client(server.url + "/mcp", servers.TOKEN, agent="big", session="s") as client:
            taken = await client.call_tool("patch_state", {"session": {"lazy": {"doc": "q" * 5_000_000}}})
            with pytest.raises(MCPError) as refused:
                await client.call_tool("patch_state", {"session": {"lazy": {"doc": "r" * 7_000_000}}})
            kept = await client.call_tool("read_state", {"path": "session.lazy.doc"})
            return taken, refused.value.error.message, kept

    try:
        taken, refusal, kept = anyio.run(run)
    finally:
        server.stop()
    assert not taken.is_error, taken
    assert refusal == (
        f"error[payload-too-large]: the request body is larger than the limit of {limit} bytes "
        "(the server's STATEFLOW_MAX_BODY_BYTES)"
    )
    assert kept.structured_content == {"value": "q" * 5_000_000}  # the refused write left nothing


# ------------------------------------------------------------------ a number past a double's range

BEYOND_DOUBLE = "__beyond_double__"
"""Written on the wire as ``1e400`` (the SDK client writes no such literal: it sends a float it
cannot hold as ``null``), so the real client sends what a client of another language may."""

BEYOND_REFUSAL = (
    "error[invalid-json]: session.tactics.n: 1e400 is not a JSON number this store holds "
    "(beyond a double's range: it reads as Infinity)"
)


def _literal_on_the_wire(body: bytes) -> bytes:
    return body.replace(f'"{BEYOND_DOUBLE}"'.encode(), b"1e400")


def _text(result: types.CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def _call_with_the_literal(client: ClientSession) -> tuple[types.CallToolResult, types.CallToolResult]:
    refused = await client.call_tool("patch_state", {"session": {"tactics": {"n": [1, BEYOND_DOUBLE]}}})
    read = await client.call_tool("read_state", {"path": "session.tactics"})
    return refused, read


def test_stdio_names_a_number_past_a_doubles_range_by_its_literal(
    backend: str, store: SqlStore, tmp_path: Path
) -> None:
    # the SDK's parser reads 1e400 as Infinity, and the refusal said "inf", a value the caller
    # never wrote, where the HTTP API, the CLI and Python name the literal
    sed = f's/"{BEYOND_DOUBLE}"/1e400/g'

    async def run() -> tuple[types.CallToolResult, types.CallToolResult]:
        params = StdioServerParameters(
            command="sh",
            args=[
                "-c",
                'sed -u "$1" | exec stateflow --store "$2" mcp --cwd "$3" --session s',
                "sh",
                sed,
                backend,
                str(tmp_path),
            ],
            env=dict(os.environ),
        )
        with anyio.fail_after(300):  # (should the server end, sed would keep the pipe open)
            async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                return await _call_with_the_literal(client)

    refused, read = anyio.run(run)
    assert refused.is_error and _text(refused) == BEYOND_REFUSAL.replace(
        "session.tactics.n:", "session.tactics.n[1]:"
    )
    assert read.structured_content == {"value": None}  # nothing was written
    # the CLI's door says the same of the same text
    done = subprocess.run(
        ["stateflow", "--store", backend, "tool", "patch_state", '{"session": {"tactics": {"n": 1e400}}}'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (1, BEYOND_REFUSAL + "\n")


class _LiteralTransport(httpx2.AsyncBaseTransport):
    """HTTP as the SDK client sends it, with :data:`BEYOND_DOUBLE` written as ``1e400``."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        if BEYOND_DOUBLE.encode() in body:
            headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
            request = httpx2.Request(
                request.method, request.url, headers=headers, content=_literal_on_the_wire(body)
            )
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def test_http_names_a_number_past_a_doubles_range_by_its_literal(served: str) -> None:
    headers = {"Authorization": f"Bearer {FULL}", "X-Stateflow-Agent": "big", "X-Stateflow-Session": "s"}

    async def run() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30, transport=_LiteralTransport()) as http,
            streamable_http_client(served, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            return await _call_with_the_literal(client)

    refused, read = anyio.run(run)
    assert refused.is_error and _text(refused) == BEYOND_REFUSAL.replace(
        "session.tactics.n:", "session.tactics.n[1]:"
    )
    assert read.structured_content == {"value": None}  # nothing was written
    # a number the SDK reads as written (Infinity, NaN) is named as it reads it, as before
    request = urllib.request.Request(
        served,
        data=b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"patch_state",'
        b'"arguments":{"session":{"tactics":{"n":Infinity}}}}}',
        headers={
            **headers,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        text = json.loads(answer.read())["result"]["content"][0]["text"]
    assert text.startswith("error[invalid-json]: session.tactics.n: inf is not a JSON number"), text
    # text the door's own parser refused (NaN, 1e400) skipped its check of member names given
    # twice, and the SDK kept the last value: refused as any other such text
    request = urllib.request.Request(
        served,
        data=b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"patch_state",'
        b'"arguments":{"session":{"tactics":{"n":NaN,"a":1,"a":2}}}}}',
        headers={
            **headers,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused_body:
        urllib.request.urlopen(request, timeout=60)
    assert refused_body.value.code == 400
    assert json.loads(refused_body.value.read())["id"] == 6
