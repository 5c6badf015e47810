"""LLM tool definitions and the one dispatcher that returns exactly what a model receives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stateflow.doc.canonical import encode
from stateflow.errors import NotFound, StateflowError
from stateflow.memory import MemoryView

if TYPE_CHECKING:  # the states layer loads only with a StatesService: memory tools never need it
    from stateflow.states import DoorContext, StatesService

READ_STATE_DESCRIPTION = (
    "Read memory progressively. Give one path or an ordered list of paths, and one projection: "
    '"value" (default) returns the exact value, "keys" returns {meta, keys} to navigate, "patch" '
    "returns the change made at a history boundary. Paths: effective.tactics.next, cwd.lazy.memory[4], "
    "cwd.lazy.memory[10:20] (half-open, must fit), session[2].lazy.x (history), cwd.patches[0]. "
    "Reads never change memory. A batch is all-or-error."
)
PATCH_STATE_DESCRIPTION = (
    "The only way to change memory. Recursive semantic patch per scope: objects merge, arrays and "
    'scalars replace, null deletes a key, {"[N]": v} patches existing array element N. Planes: '
    "intents, strategy, tactics, artifacts, lazy (response is runtime-owned). All scopes are "
    'accepted as one transition or nothing. A {"$ref": "<scope>.<plane>.<key>"} inside an intent '
    "owns that key: deleting the intent clears it."
)


def read_state_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "One read_state path."},
            "paths": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "Ordered paths, read from one captured view.",
            },
            "projection": {"type": "string", "enum": ["value", "keys", "patch"], "default": "value"},
        },
        "additionalProperties": False,
    }


def patch_state_schema(view: MemoryView) -> dict[str, Any]:
    plane = {"type": "object", "description": "A semantic patch of this plane."}
    planes = {name: plane for name in view.planes.patchable}
    scope_patch = {"type": "object", "properties": planes, "additionalProperties": False, "minProperties": 1}
    if view.single is not None:
        return {"type": "object", "properties": planes, "additionalProperties": False, "minProperties": 1}
    return {
        "type": "object",
        "properties": {scope: scope_patch for scope in view.scopes},
        "additionalProperties": False,
        "minProperties": 1,
    }


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool
    destructive: bool


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False
    code: str | None = None

    def error_text(self) -> str:
        """A refusal as every door prints it: ``error[code]: message``."""
        return f"error[{self.code}]: {self.text}" if self.is_error else self.text


class ToolHost:
    """Every LLM tool of one agent turn: the memory tools and, when asked for, the declared-state tools.

    The state tools act through the ``tool`` door with the agent as the ambient target and
    the view's scopes as subject candidates (so ``state_read {"state": "memory"}`` reads the
    session scope). They never write agent memory: that changes only through ``patch_state``.
    ``state_names`` limits them to those declared states (None: every state).
    """

    def __init__(
        self,
        view: MemoryView,
        states: StatesService | None = None,
        state_names: Sequence[str] | None = None,
    ) -> None:
        self.view = view
        self.states = states
        self.state_names = tuple(dict.fromkeys(state_names)) if state_names is not None else None
        self._context: DoorContext | None = None

    @property
    def context(self) -> DoorContext:
        """The door context of the state tools: the agent as target, the view's scopes as candidates."""
        if self._context is None:
            from stateflow.states import DoorContext

            ident = self.view.identity
            self._context = DoorContext(
                door="tool",
                actor=f"agent:{ident.agent}",
                target_kind="agent",
                target_name=ident.agent,
                candidates={"session": ident.session, "cwd": ident.cwd, "global": "global"},
            )
        return self._context

    def definitions(self) -> list[ToolDefinition]:
        out = [
            ToolDefinition("read_state", READ_STATE_DESCRIPTION, read_state_schema(), True, False),
            ToolDefinition(
                "patch_state", PATCH_STATE_DESCRIPTION, patch_state_schema(self.view), False, True
            ),
        ]
        if self.states is not None:
            from stateflow.states.tools import state_tool_schemas

            for name, (description, schema, read_only, destructive) in state_tool_schemas().items():
                if self.state_names is not None:
                    state = {**schema["properties"]["state"], "enum": list(self.state_names)}
                    schema = {**schema, "properties": {**schema["properties"], "state": state}}
                out.append(ToolDefinition(name, description, schema, read_only, destructive))
        return out

    def _check_served(self, args: Any) -> None:
        state = args.get("state") if isinstance(args, dict) else None
        if self.state_names is not None and isinstance(state, str) and state not in self.state_names:
            served = ", ".join(self.state_names) or "none"
            raise NotFound(f"state {state!r} is not served by these tools (served: {served})")

    def call(self, name: str, args: Any) -> ToolResult:
        """Run a tool; a refusal becomes an error result with a concise message, never an exception."""
        try:
            if name == "read_state":
                return ToolResult(encode(self.view.read_state(args)).decode())
            if name == "patch_state":
                return ToolResult(self.view.patch_state(args).text())
            if self.states is not None and name.startswith("state_"):
                from stateflow.states.tools import STATE_TOOLS, call_state_tool

                if name not in STATE_TOOLS:
                    return self._unknown(name)
                self._check_served(args)
                result = call_state_tool(self.states, name, args, self.context, self.view.identity.session)
                return ToolResult(encode({"result": result}).decode())
        except StateflowError as exc:
            return ToolResult(exc.message, is_error=True, code=exc.code)
        return self._unknown(name)

    def _unknown(self, name: str) -> ToolResult:
        known = ", ".join(d.name for d in self.definitions())
        return ToolResult(f"unknown tool {name!r}; available: {known}", True, "unknown-tool")


def memory_tools(view: MemoryView) -> list[ToolDefinition]:
    return ToolHost(view).definitions()


def dispatch(view: MemoryView, name: str, args: Any) -> ToolResult:
    """The memory tools alone (no declared-state tools)."""
    return ToolHost(view).call(name, args)
