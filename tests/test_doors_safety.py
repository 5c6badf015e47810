"""Agent memory is written only through patch_state, from every door; artifact sources are confined."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from stateflow.errors import OutsideRoots, PatchError
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.memory import Identity, MemoryConfig, MemoryView
from stateflow.memory.confine import confine
from stateflow.states import StatesService
from stateflow.store import SqlStore
from stateflow.tools import ToolHost
from tests.memory_helpers import transitions, view

NOTES = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["session"],
    "default_subject_kind": "session",
}

MEMORY_WRITES: list[tuple[str, dict[str, Any]]] = [
    ("state_replace", {"state": "memory", "data": {}}),
    ("state_merge", {"state": "memory", "patch": {"response": "forged"}}),
    ("state_apply", {"state": "memory", "ops": [{"op": "set", "path": ["tactics"], "value": {}}]}),
    ("state_template_jq", {"state": "memory", "program": "anything", "input": 1}),
]


def sf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.fixture
def host(store: SqlStore) -> Iterator[ToolHost]:
    states = StatesService(store)
    states.install_builtins()
    states.declare("notes", NOTES)
    yield ToolHost(view(store), states)
    states.close()


@pytest.mark.parametrize(("name", "args"), MEMORY_WRITES)
def test_the_python_dispatcher_never_writes_memory_through_state_tools(
    host: ToolHost, store: SqlStore, name: str, args: dict[str, Any]
) -> None:
    host.call("patch_state", {"session": {"tactics": {"keep": 1}}, "global": {"strategy": {"g": 1}}})
    before = transitions(store)
    for subject in (None, {"kind": "global", "key": "global"}):
        call_args = dict(args, subject=subject) if subject else args
        result = host.call(name, call_args)
        assert result.is_error and result.code == "read-only-state", result.text
        assert "patch_state" in result.text
    assert transitions(store) == before
    assert host.view.read_state({"path": "effective"}) == {
        "value": {"strategy": {"g": 1}, "tactics": {"keep": 1}}
    }
    # reading memory through the state tools stays possible
    assert json.loads(host.call("state_read", {"state": "memory"}).text)["result"]["data"] == {
        "tactics": {"keep": 1}
    }


def test_state_tools_are_limited_to_the_served_states(store: SqlStore) -> None:
    states = StatesService(store)
    states.install_builtins()
    states.declare("notes", NOTES)
    states.declare("secrets", NOTES)
    limited = ToolHost(view(store), states, ["notes"])
    schema = {d.name: d for d in limited.definitions()}["state_merge"].input_schema
    assert schema["properties"]["state"]["enum"] == ["notes"]
    assert not limited.call("state_merge", {"state": "notes", "patch": {"a": 1}}).is_error
    refused = limited.call("state_merge", {"state": "secrets", "patch": {"a": 1}})
    assert refused.is_error and refused.code == "state-not-found" and "served: notes" in refused.text
    assert [d.name for d in ToolHost(view(store)).definitions()] == ["read_state", "patch_state"]
    states.close()


ALICE_TOKEN = "alice-only-token-0123456789"
RECORD = "/api/states/memory/records/agent/alice/session/s1"
RECORD_WRITES: list[tuple[str, str, Any]] = [
    ("PUT", RECORD, {"response": "forged"}),
    ("PATCH", RECORD, {"tactics": None}),
    ("DELETE", RECORD, None),
    ("POST", RECORD + "/deltas", {"ops": [{"op": "set", "path": ["response"], "value": "forged"}]}),
    ("POST", RECORD + "/revert", {"revision": 0}),
    ("POST", RECORD + "/template-jq/anything", {}),
    (
        "POST",
        RECORD + "/fold",
        {
            "into": {"target_kind": "agent", "target_name": "alice", "kind": "session", "key": "s2"},
            "mode": "merge",
        },
    ),
]


@pytest.mark.parametrize(("method", "path", "body"), RECORD_WRITES)
def test_the_record_routes_read_memory_but_never_write_it(
    store: SqlStore, method: str, path: str, body: Any
) -> None:
    """A token that reaches an agent could otherwise forge its response or wipe a scope over REST,
    skipping patch_state and the ownership cascade."""
    states = StatesService(store)
    states.install_builtins()
    alice = MemoryView(
        store, Identity.of("alice", "/tmp", "s1"), ("global", "cwd", "session"), MemoryConfig()
    )
    alice.patch_state({"session": {"tactics": {"keep": 1}}})
    before = transitions(store)
    app = create_app(states, TokenSet([parse_token(f"{ALICE_TOKEN}@agent/alice")]))
    with TestClient(app, headers={"Authorization": f"Bearer {ALICE_TOKEN}"}) as client:
        answer = client.request(method, path, json=body)
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "read-only-state"
        assert "patch_state" in answer.json()["error"]
        assert client.get(RECORD).json()["data"]["data"] == {"tactics": {"keep": 1}}  # reads stay open
    assert transitions(store) == before
    assert alice.read_state({"path": "session"}) == {"value": {"tactics": {"keep": 1}}}
    states.close()


def test_the_cli_tool_door_refuses_memory_writes(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    assert (
        sf(
            "--store", db, "tool", "patch_state", '{"session": {"tactics": {"a": 1}}}', cwd=tmp_path
        ).returncode
        == 0
    )
    forged = sf(
        "--store",
        db,
        "tool",
        "state_merge",
        '{"state": "memory", "patch": {"response": "forged"}}',
        cwd=tmp_path,
    )
    assert forged.returncode == 1 and forged.stdout == ""
    assert forged.stderr.startswith(
        "error[read-only-state]: agent memory is never written through the state tools"
    )
    wiped = sf("--store", db, "tool", "state_replace", '{"state": "memory", "data": {}}', cwd=tmp_path)
    assert wiped.returncode == 1 and "error[read-only-state]" in wiped.stderr
    read = sf("--store", db, "tool", "read_state", '{"path": "effective"}', cwd=tmp_path)
    assert json.loads(read.stdout) == {"value": {"tactics": {"a": 1}}}


def _mcp(db: str, cwd: Path, *extra: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    async def session() -> dict[str, Any]:
        params = StdioServerParameters(
            command="stateflow",
            args=["--store", db, "mcp", "--cwd", str(cwd), "--session", "s", *extra],
            env=dict(os.environ),  # the SDK passes only a few variables by default
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            tools = [t.name for t in (await client.list_tools()).tools]
            results = [await client.call_tool(name, args) for name, args in calls]
            return {"tools": tools, "results": results}

    return anyio.run(session)


def test_mcp_serves_the_two_memory_tools_by_default_and_state_tools_only_when_asked(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    assert sf("--store", db, "states", "put", "notes", "--data", json.dumps(NOTES)).returncode == 0
    plain = _mcp(db, tmp_path, calls=[("state_replace", {"state": "memory", "data": {}})])
    assert plain["tools"] == ["read_state", "patch_state"]
    assert plain["results"][0].content[0].text.startswith("error[unknown-tool]:")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("patch_state", {"session": {"tactics": {"a": 1}}}),
        *MEMORY_WRITES,
        ("state_merge", {"state": "notes", "patch": {"n": 1}}),
        ("read_state", {"path": "effective"}),
    ]
    asked = _mcp(db, tmp_path, "--states", "*", calls=calls)
    assert set(asked["tools"]) == {
        "read_state",
        "patch_state",
        "state_read",
        "state_replace",
        "state_merge",
        "state_apply",
        "state_template_jq",
    }
    results = asked["results"]
    assert not results[0].is_error
    for refused in results[1:5]:
        assert refused.is_error
        assert refused.content[0].text.startswith("error[read-only-state]:"), refused.content[0].text
    assert not results[5].is_error
    assert results[6].content[0].text == '{"value":{"tactics":{"a":1}}}'
    limited = _mcp(db, tmp_path, "--states", "notes", calls=[MEMORY_WRITES[0]])
    assert (
        limited["results"][0]
        .content[0]
        .text.startswith("error[state-not-found]: state 'memory' is not served")
    )
    unknown = sf("--store", db, "mcp", "--states", "nope", cwd=tmp_path)
    assert unknown.returncode == 1 and "error[state-not-found]" in unknown.stderr


# ---------------------------------------------------------------------------------- confinement


@pytest.fixture
def touched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path the confinement and fingerprint code hands to the operating system."""
    seen: list[str] = []

    def recording(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(path: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(os.fspath(path))
            return fn(path, *args, **kwargs)

        return wrapper

    for name in ("lstat", "stat", "readlink"):
        monkeypatch.setattr(os, name, recording(getattr(os, name)))
    return seen


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "shadow").write_text("secret")
    (work / "notes.md").write_text("notes")
    (work / "escape").symlink_to(outside)
    (work / "inner").symlink_to(work / "notes.md")
    return work, outside


@pytest.mark.parametrize(
    "source",
    ["../outside/shadow", "{outside}/shadow", "escape/shadow", "escape", "sub/../../outside/shadow"],
)
def test_artifact_sources_outside_the_roots_are_refused_untouched(
    store: SqlStore, tmp_path: Path, touched: list[str], source: str
) -> None:
    work, outside = _layout(tmp_path)
    source = source.format(outside=outside)
    m = view(store, cwd=str(work))
    before = transitions(store)
    touched.clear()
    with pytest.raises(OutsideRoots, match=r"outside|leaves them"):
        m.patch_state({"cwd": {"artifacts": {source: {"description": "stolen"}}}})
    assert all(p == str(work) or p.startswith(str(work) + os.sep) for p in touched), touched
    assert transitions(store) == before
    assert "artifacts" not in m.context().head["state"]


def test_sources_inside_the_cwd_or_a_knowledge_root_are_fingerprinted(
    store: SqlStore, tmp_path: Path
) -> None:
    work, outside = _layout(tmp_path)
    m = view(store, cwd=str(work), knowledge_roots=(str(outside),))
    m.patch_state(
        {
            "cwd": {
                "artifacts": {
                    "inner": {"description": "a link that stays inside"},
                    "escape/shadow": {"description": "inside a knowledge root"},
                    str(outside / "shadow"): {"description": "absolute, inside a root"},
                }
            }
        }
    )
    (outside / "shadow").write_text("changed secret")
    os.utime(outside / "shadow", ns=(1, 1))
    cards = m.context().head["state"]["artifacts"]
    assert "changed" in cards["escape/shadow"]["hint"] and "changed" in cards[str(outside / "shadow")]["hint"]
    assert "hint" not in cards["inner"]
    assert confine("inner", str(work)) == str(work / "notes.md")


@pytest.mark.parametrize(
    "source", ["notes.md", "{work}/notes.md", "/etc/passwd", "{outside}/../work/notes.md"]
)
def test_a_remote_clients_working_directory_is_no_root_here(
    store: SqlStore, tmp_path: Path, touched: list[str], source: str
) -> None:
    """Over HTTP the cwd is what a client says its directory is (``/`` included): it keys the cwd
    scope, but this machine's files under it are never examined; only knowledge roots admit."""
    work, outside = _layout(tmp_path)
    source = source.format(work=work, outside=outside)
    remote = view(store, cwd=str(work), knowledge_roots=(str(outside),), local_cwd=False)
    touched.clear()
    with pytest.raises(OutsideRoots, match=r"outside|relative"):
        remote.patch_state({"cwd": {"artifacts": {source: {"description": "probe"}}}})
    assert all(p == str(outside) or p.startswith(str(outside) + os.sep) for p in touched), touched
    assert transitions(store) == 0
    remote.patch_state({"cwd": {"artifacts": {str(outside / "shadow"): {"description": "in a root"}}}})
    (outside / "shadow").write_text("changed")
    os.utime(outside / "shadow", ns=(1, 1))
    assert "changed" in remote.context().head["state"]["artifacts"][str(outside / "shadow")]["hint"]


def test_a_card_recorded_before_confinement_is_never_examined(store: SqlStore, tmp_path: Path) -> None:
    work, outside = _layout(tmp_path)
    m = view(store, cwd=str(work), knowledge_roots=(str(outside),))
    m.patch_state({"cwd": {"artifacts": {"escape/shadow": {"description": "while the root was configured"}}}})
    (outside / "shadow").unlink()
    narrower = view(store, cwd=str(work))
    assert narrower.context().head["state"]["artifacts"]["escape/shadow"] == {
        "description": "while the root was configured"
    }
    narrower.patch_state({"cwd": {"artifacts": {"escape/shadow": None}}})  # deleting it stays possible
    assert "artifacts" not in narrower.context().head["state"]


@pytest.mark.parametrize("swapped", ["notes.md", "sub"])
def test_a_source_swapped_for_a_link_leaving_the_roots_gets_a_hint_untouched(
    store: SqlStore, tmp_path: Path, touched: list[str], swapped: str
) -> None:
    """The card's file was inside the cwd; the source itself, or a directory on its path, is
    replaced by a link out of it: the card says so, and the outside target is never examined."""
    work, outside = _layout(tmp_path)
    (work / "sub").mkdir()
    (work / "sub" / "notes.md").write_text("notes")
    (outside / "notes.md").write_text("something else")
    source = "notes.md" if swapped == "notes.md" else "sub/notes.md"
    m = view(store, cwd=str(work))
    m.patch_state({"cwd": {"artifacts": {source: {"description": "my notes"}}}})
    assert "hint" not in m.context().head["state"]["artifacts"][source]
    if swapped == "notes.md":
        (work / "notes.md").unlink()
        (work / "notes.md").symlink_to(outside / "notes.md")
    else:
        (work / "sub" / "notes.md").unlink()
        (work / "sub").rmdir()
        (work / "sub").symlink_to(outside)
    touched.clear()
    card = m.context().head["state"]["artifacts"][source]
    assert card["hint"].startswith("the source now leads outside the working directory")
    assert all(p == str(work) or p.startswith(str(work) + os.sep) for p in touched), touched


def test_the_cli_refuses_an_escaping_artifact(tmp_path: Path) -> None:
    work, _ = _layout(tmp_path)
    db = str(tmp_path / "m.db")
    out = sf(
        "--store",
        db,
        "tool",
        "patch_state",
        '{"cwd": {"artifacts": {"../outside/shadow": {"description": "x"}}}}',
        cwd=work,
    )
    assert out.returncode == 1 and out.stderr.startswith(
        "error[outside-roots]: artifact source '../outside/shadow'"
    )


def test_an_empty_artifact_card_is_refused_like_any_card_without_a_description(store: SqlStore) -> None:
    m = view(store)
    with pytest.raises(PatchError, match="empty card has no description"):
        m.patch_state({"session": {"artifacts": {"a.md": {}}}})
    assert transitions(store) == 0


def test_a_template_program_on_memory_is_refused_for_the_store_it_cannot_reach() -> None:
    """Whether the program only reads is asked of the store; a store that does not answer is
    that refusal (``store-unavailable``), not ``read-only-state`` for a program it could not look
    up."""
    out = sf(
        "--store",
        "postgresql://stateflow@127.0.0.1:1/none?connect_timeout=2",
        "tool",
        "state_template_jq",
        json.dumps({"state": "memory", "program": "anything", "input": 1}),
    )
    assert out.returncode == 1
    assert out.stderr.startswith("error[store-unavailable]: cannot connect to"), out.stderr
