"""LLM tool definitions and the one dispatcher that returns exactly what a model receives."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from stateflow.doc.canonical import encode
from stateflow.errors import Forbidden, StateflowError
from stateflow.memory import MemoryView
from stateflow.memory.protocol import for_scopes

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
    "of that same scope owns that key: deleting the intent clears it (refs into other scopes never own)."
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
    plane = {"type": ["object", "null"], "description": "A semantic patch of this plane; null deletes it."}
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


READ_STATE_OUTPUT: dict[str, Any] = {
    "type": "object",
    "description": "One projection's fields: value; meta and keys; or patch (hint only with a null value).",
    "properties": {
        "value": {},
        "meta": {},
        "keys": {},
        "patch": {},
        "hint": {"type": "array", "items": {"type": "object"}},
    },
    "additionalProperties": False,
}
PATCH_STATE_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "The acknowledgement line."},
        "state_updates": {
            "type": "object",
            "description": "Effective changes relative to what this session was last shown.",
        },
        "hints": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["message"],
    "additionalProperties": False,
}
STATE_TOOL_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {"result": {}},
    "required": ["result"],
    "additionalProperties": False,
}
TITLES: dict[str, str] = {
    "read_state": "Read memory",
    "patch_state": "Change memory",
    "state_read": "Read a record",
    "state_replace": "Replace a record",
    "state_merge": "Merge into a record",
    "state_template_jq": "Run a template program",
    "state_apply": "Apply ops to a record",
}
"""Every tool by name, in the order a host offers them."""
MEMORY_TOOLS: Final = frozenset(("read_state", "patch_state"))


def offers_memory(mode: str) -> bool:
    """Whether a host of memory in ``mode`` offers the memory tools (not with memory off): what
    it lists and what an unknown tool's refusal names, at every door."""
    return mode != "off"


def writes(name: str) -> bool:
    """Whether the tool called ``name`` may write (all but ``read_state`` and ``state_read``):
    what may create a store where there is none."""
    return name in TITLES and name not in ("read_state", "state_read")  # (no tool: a refusal)


READ_ONLY_OFFERS: Final = frozenset(("read_state", "state_read", "state_template_jq"))
"""The tools a read-only host offers: those that never write, and ``state_template_jq``, whose
``input`` programs only read (an ``update`` program is refused when called, as over HTTP)."""


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool
    destructive: bool
    output_schema: dict[str, Any] | None = None

    @property
    def title(self) -> str:
        return TITLES.get(self.name, self.name)


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False
    code: str | None = None
    structured: dict[str, Any] | None = None
    """The same result as an object matching the tool's output schema (None for errors)."""

    def error_text(self) -> str:
        """A refusal as every door prints it: ``error[code]: message``."""
        return f"error[{self.code}]: {self.text}" if self.is_error else self.text


class ToolHost:
    """Every LLM tool of one agent turn: the memory tools and, when asked for, the declared-state tools.

    The state tools act through the ``tool`` door with the agent as the ambient target and
    the view's scopes as subject candidates (so ``state_read {"state": "memory"}`` reads the
    session scope). They never write agent memory: that changes only through ``patch_state``.
    ``state_names`` limits them to those declared states (None: every state). A read-only host
    (a read-only API token) offers and runs only what never writes: the reading tools, and
    ``state_template_jq`` for ``input`` programs.
    """

    def __init__(
        self,
        view: MemoryView,
        states: StatesService | None = None,
        state_names: Sequence[str] | None = None,
        *,
        read_only: bool = False,
        allows_target: Callable[[tuple[str, str]], bool] | None = None,
    ) -> None:
        self.view = view
        self.read_only = read_only
        self.allows_target = allows_target
        """Whether the caller may use records of an explicitly named target (a token's tenancy);
        the ambient target — the view's agent — is the caller's to check before."""
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
        """The tools offered: the memory tools unless memory is off (then they are refused, so
        a model is not offered them), named with the view's own scopes; the state tools."""
        out: list[ToolDefinition] = []
        if offers_memory(self.view.config.mode):
            read = for_scopes(READ_STATE_DESCRIPTION, self.view.scopes)
            out.append(
                ToolDefinition("read_state", read, read_state_schema(), True, False, READ_STATE_OUTPUT)
            )
            out.append(
                ToolDefinition(
                    "patch_state",
                    PATCH_STATE_DESCRIPTION,
                    patch_state_schema(self.view),
                    False,
                    True,
                    PATCH_STATE_OUTPUT,
                )
            )
        if self.states is not None:
            from stateflow.states.tools import state_tool_schemas

            for name, (description, schema, read_only, destructive) in state_tool_schemas().items():
                if self.state_names is not None:
                    state = {**schema["properties"]["state"], "enum": list(self.state_names)}
                    schema = {**schema, "properties": {**schema["properties"], "state": state}}
                out.append(
                    ToolDefinition(name, description, schema, read_only, destructive, STATE_TOOL_OUTPUT)
                )
        if not self.read_only:
            return out
        # here state_template_jq only reads: annotated as such
        return [replace(d, read_only=True, destructive=False) for d in out if d.name in READ_ONLY_OFFERS]

    def _check_served(self, args: Any) -> None:
        state = args.get("state") if isinstance(args, dict) else None
        if self.state_names is not None and isinstance(state, str) and state not in self.state_names:
            from stateflow.states.service import StateNotFound  # (loaded: these tools hold a service)

            served = ", ".join(self.state_names) or "none"
            # the code an undeclared state gets with every state served: one code at every door
            raise StateNotFound(f"state {state!r} is not served by these tools (served: {served})")
        subject = args.get("subject") if isinstance(args, dict) else None
        if self.allows_target is not None and isinstance(subject, dict):
            kind, name = subject.get("target_kind"), subject.get("target_name")
            if isinstance(kind, str) and isinstance(name, str) and not self.allows_target((kind, name)):
                raise Forbidden(f"this token may not use the records of {kind} {name!r}")

    def call(self, name: str, args: Any) -> ToolResult:
        """Run a tool; a refusal becomes an error result with a concise message, never an exception."""
        try:
            if name == "read_state":
                value = self.view.read_state(args)
                return ToolResult(encode(value).decode(), structured=value)
            if name == "patch_state":
                if self.read_only:
                    raise Forbidden(f"{name} writes, and this token is read-only")
                receipt = self.view.patch_state(args)
                return ToolResult(
                    receipt.text(), structured={"message": receipt.message, **receipt.to_json()}
                )
            if self.states is not None and name.startswith("state_"):
                from stateflow.states.tools import STATE_TOOLS, call_state_tool

                if name not in STATE_TOOLS:  # unknown-tool, whatever the token may do
                    return self._unknown(name)
                self._check_served(args)
                result = call_state_tool(
                    self.states,
                    name,
                    args,
                    self.context,
                    self.view.identity.session,
                    read_only=self.read_only,
                )
                return ToolResult(encode({"result": result}).decode(), structured={"result": result})
        except StateflowError as exc:
            return ToolResult(exc.message, is_error=True, code=exc.code)
        return self._unknown(name)

    def _unknown(self, name: str) -> ToolResult:
        return unknown_tool(name, [d.name for d in self.definitions()])


def unknown_tool(name: str, known: Iterable[str]) -> ToolResult:
    """The refusal of a tool name no host has, listing the ``known`` ones (every door's wording)."""
    available = ", ".join(known) or "none"  # (memory off, no state tools served)
    return ToolResult(f"unknown tool {name!r}; available: {available}", True, "unknown-tool")


def memory_tools(view: MemoryView) -> list[ToolDefinition]:
    return ToolHost(view).definitions()


def dispatch(view: MemoryView, name: str, args: Any) -> ToolResult:
    """The memory tools alone (no declared-state tools)."""
    return ToolHost(view).call(name, args)
