"""Built-in declarations: agent memory scopes are records of the ``memory`` state."""

from __future__ import annotations

from typing import Any, Final

_OBJECT: Final = {"type": "object"}

BUILTIN_STATES: Final = ("memory",)
"""States every store has: never deleted, re-declared only additively, and outside the
deployment's default retention."""

MEMORY_DECLARATION: Final[dict[str, Any]] = {
    "description": (
        "Agent memory scopes (State Flow): one record per agent and scope — global, cwd (keyed by "
        "the working directory) and session (keyed by the session id). Written by patch_state."
    ),
    "schema": {
        "type": "object",
        "properties": {
            "intents": _OBJECT,
            "strategy": _OBJECT,
            "tactics": _OBJECT,
            "artifacts": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "required": ["description"],
                    "properties": {"description": {"type": "string", "minLength": 1}},
                },
            },
            "response": {"type": "string"},
            "lazy": _OBJECT,
            "_runtime": _OBJECT,
        },
    },
    "subject_kinds": ["global", "cwd", "session"],
    "default_subject_kind": "session",
}
