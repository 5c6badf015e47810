"""docs/memory.md's copy-paste setups work as written: every shell block runs whole (not only its
``stateflow`` lines) and shows what it says, the client configurations start real servers through
the official MCP SDK client, and the Claude Code files are the ones ``stateflow setup`` writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from . import servers

PAGE = (Path(__file__).resolve().parent.parent / "docs" / "memory.md").read_text()
DOC_URL = "http://127.0.0.1:8765"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE, re.DOTALL)


def json_blocks() -> list[Any]:
    return [json.loads(block) for block in blocks("json")]


def config_block(name: str) -> Any:
    """The JSON block printed right after the line naming the file ``name``."""
    match = re.search(rf"^`{re.escape(name)}`\n\n```json\n(.*?)```", PAGE, re.DOTALL | re.MULTILINE)
    assert match, f"docs/memory.md shows no {name}"
    return json.loads(match.group(1))


def doc_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(
        os.environ,
        STATEFLOW_STORE=str(tmp_path / "docs.db"),
        STATEFLOW_RUNTIME_DIR=str(tmp_path / "runtime"),
        XDG_STATE_HOME=str(tmp_path / "state"),
    )
    env.update(extra)
    return env


def test_every_shell_block_runs_whole_in_order_and_shows_what_it_says(tmp_path: Path) -> None:
    env = doc_env(tmp_path)
    (tmp_path / "request.json").write_text('{"path": "tactics"}')
    outputs = []
    for block in blocks("bash"):
        out = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == 0, f"{block}\n{out.stderr}"
        outputs.append((block, out.stdout))

    # the receipt example: the last receipt is the one its comment shows
    block, stdout = next(o for o in outputs if "--session mine" in o[0])
    shown = re.search(r'^# \{"state_updates":.*"effective":(\[.*\])\}\}$', block, re.MULTILINE)
    assert shown is not None
    receipt = json.loads(stdout.strip().splitlines()[-1])
    assert receipt["state_updates"]["effective"] == json.loads(shown.group(1))

    # the knowledge example: the card was written, went stale, and was pruned with its source
    block, stdout = next(o for o in outputs if "stateflow knowledge scan" in o[0])
    card = str(tmp_path / "notes" / "db.md")
    assert '"hint":"the source changed since this card was written' in stdout
    scanned = json.loads(stdout.strip().splitlines()[-1])
    assert scanned["pruned"] == [{"scope": "global", "source": card}]

    # the hook example prints Claude Code's hook output shape
    block, stdout = next(o for o in outputs if "stateflow hook claude-code" in o[0])
    hook = json.loads(stdout)["hookSpecificOutput"]
    assert hook["hookEventName"] == "SessionStart"
    assert "State Flow runtime context" in hook["additionalContext"]


def test_the_claude_code_files_shown_are_the_ones_setup_writes(tmp_path: Path) -> None:
    env = dict(os.environ)
    env.pop("STATEFLOW_STORE", None)  # a configured store would be passed on to the server
    out = subprocess.run(
        ["stateflow", "setup", "claude-code", "--project", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / ".mcp.json").read_text()) == config_block(".mcp.json")
    settings = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    assert settings == config_block(".claude/settings.json")


def test_the_stdio_client_configuration_starts_the_two_tools(tmp_path: Path) -> None:
    (config,) = [c for c in json_blocks() if c.get("mcpServers", {}).get("memory", {}).get("command")]
    server = config["mcpServers"]["memory"]

    async def run() -> list[str]:
        params = StdioServerParameters(
            command=server["command"], args=server["args"], env=doc_env(tmp_path), cwd=str(tmp_path)
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            return [t.name for t in (await client.list_tools()).tools]

    assert anyio.run(run) == ["read_state", "patch_state"]


def test_the_http_setups_reach_a_real_server(tmp_path: Path) -> None:
    env = servers.base_env(tmp_path, str(tmp_path / "http.db"))
    assert subprocess.run(["stateflow", "migrate"], env=env, capture_output=True, timeout=60).returncode == 0
    server = servers.start(env)
    try:
        # the Python example, as written but for the port
        (code,) = [b for b in blocks("python") if "streamable_http_client" in b]
        namespace: dict[str, Any] = {}
        exec(compile(code.replace(DOC_URL, server.url), "<doc example>", "exec"), namespace)
        anyio.run(namespace["remember"], servers.TOKEN)
        status, body, _ = server.call("GET", "/api/states/memory/records/agent/coder/session/s1")
        assert status == 200 and body["data"]["data"] == {"tactics": {"next": "review"}}

        # the client configuration, with the token its ${STATEFLOW_TOKEN} names
        (config,) = [c for c in json_blocks() if c.get("mcpServers", {}).get("memory", {}).get("url")]
        entry = config["mcpServers"]["memory"]
        assert entry["type"] == "http"
        headers = {k: v.replace("${STATEFLOW_TOKEN}", servers.TOKEN) for k, v in entry["headers"].items()}

        async def configured() -> tuple[Any, Any]:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=30) as http,
                streamable_http_client(entry["url"].replace(DOC_URL, server.url), http_client=http) as (r, w),
                ClientSession(r, w) as client,
            ):
                await client.initialize()
                patched = await client.call_tool("patch_state", {"cwd": {"strategy": {"db": "postgres"}}})
                read = await client.call_tool("read_state", {"path": "cwd.strategy.db"})
                return patched, read

        patched, read = anyio.run(configured)
        assert not patched.is_error, patched.content
        assert read.structured_content == {"value": "postgres"}
        status, body, _ = server.call(
            "GET", "/api/states/memory/records/agent/coder/cwd/" + "%2Fhome%2Fme%2Fproject"
        )
        assert status == 200 and body["data"]["data"] == {"strategy": {"db": "postgres"}}
    finally:
        server.stop()
