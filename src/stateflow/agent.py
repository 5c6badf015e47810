"""The two memory tools for your own LLM loop: tool definitions, a dispatcher, per-turn context.

``MemoryAgent(view)`` gives ``read_state`` and ``patch_state`` in the OpenAI (Chat Completions and
Responses ``function`` tools) and Anthropic (Messages ``tools``) formats, runs the calls a model
makes through the same dispatcher as every other door, and renders the context to show at the
start of each turn. Nothing here talks to a network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from stateflow.doc.canonical import decode
from stateflow.errors import InvalidJSON
from stateflow.memory import MemoryView
from stateflow.tools import ToolHost, ToolResult


class MemoryAgent:
    def __init__(self, view: MemoryView) -> None:
        self.view = view
        self.host = ToolHost(view)

    def openai_tools(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {"name": d.name, "description": d.description, "parameters": d.input_schema},
            }
            for d in self.host.definitions()
        ]

    def anthropic_tools(self) -> list[dict[str, Any]]:
        return [
            {"name": d.name, "description": d.description, "input_schema": d.input_schema}
            for d in self.host.definitions()
        ]

    def context(self) -> str:
        """The baseline context for this turn (show it as user-level data, not instructions)."""
        return self.view.context().text()

    def call(self, name: str, arguments: str | Mapping[str, Any]) -> ToolResult:
        """Run one tool call; ``arguments`` may be the JSON text a model produced."""
        if isinstance(arguments, str):
            try:
                arguments = decode(arguments)
            except InvalidJSON as exc:
                return ToolResult(f"the tool arguments are not JSON: {exc.message}", True, exc.code)
        return self.host.call(name, arguments)

    def openai_results(self, tool_calls: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """``role: tool`` messages answering Chat Completions ``tool_calls``, in order."""
        out = []
        for call in tool_calls:
            function = call["function"]
            result = self.call(function["name"], function.get("arguments") or "{}")
            out.append({"role": "tool", "tool_call_id": call["id"], "content": result.error_text()})
        return out

    def anthropic_results(self, content: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """``tool_result`` blocks answering the ``tool_use`` blocks of an assistant message."""
        out = []
        for block in content:
            if block.get("type") != "tool_use":
                continue
            result = self.call(block["name"], block.get("input") or {})
            answer: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": block["id"],
                "content": result.error_text(),
            }
            if result.is_error:
                answer["is_error"] = True
            out.append(answer)
        return out
