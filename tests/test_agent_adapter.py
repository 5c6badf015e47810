"""stateflow.agent driven by a scripted model loop in both tool formats (no network; both backends)."""

from __future__ import annotations

import json
from typing import Any

from stateflow.agent import MemoryAgent
from stateflow.store import SqlStore
from tests.memory_helpers import view


def test_an_openai_style_loop(store: SqlStore) -> None:
    agent = MemoryAgent(view(store, session="openai"))
    tools = agent.openai_tools()
    assert [t["function"]["name"] for t in tools] == ["read_state", "patch_state"]
    script: list[list[dict[str, Any]]] = [
        [
            {
                "id": "c1",
                "function": {
                    "name": "patch_state",
                    "arguments": '{"session": {"tactics": {"next": "plan"}}}',
                },
            }
        ],
        [
            {"id": "c2", "function": {"name": "read_state", "arguments": '{"path": "tactics.next"}'}},
            {"id": "c3", "function": {"name": "read_state", "arguments": "{not json"}},
        ],
    ]
    transcript: list[dict[str, Any]] = []
    for tool_calls in script:
        transcript.append({"role": "user", "content": agent.context()})
        transcript.append({"role": "assistant", "tool_calls": tool_calls})
        transcript.extend(agent.openai_results(tool_calls))
    assert transcript[2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": transcript[2]["content"],
    } and transcript[2]["content"].startswith("State materialized atomically at session scope.")
    assert '"tactics":{"next":"plan"}' in transcript[3]["content"]  # the next turn's context
    assert json.loads(transcript[5]["content"]) == {"value": "plan"}
    assert transcript[6]["content"].startswith("error[invalid-json]: the tool arguments are not JSON")


def test_an_anthropic_style_loop(store: SqlStore) -> None:
    agent = MemoryAgent(view(store, session="anthropic"))
    assert [t["name"] for t in agent.anthropic_tools()] == ["read_state", "patch_state"]
    assistant: list[dict[str, Any]] = [
        {"type": "text", "text": "Saving the plan."},
        {"type": "tool_use", "id": "t1", "name": "patch_state", "input": {"session": {"strategy": {"a": 1}}}},
        {"type": "tool_use", "id": "t2", "name": "patch_state", "input": {"session": {"response": "x"}}},
    ]
    results = agent.anthropic_results(assistant)
    assert [r["tool_use_id"] for r in results] == ["t1", "t2"]
    assert "is_error" not in results[0]
    assert results[1]["is_error"] is True
    assert results[1]["content"].startswith("error[invalid-input]: response is written by the runtime")
    assert agent.view.read_state({"path": "effective"}) == {"value": {"strategy": {"a": 1}}}
