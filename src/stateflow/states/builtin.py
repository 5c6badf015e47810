"""Built-in declarations: agent memory scopes are records of the ``memory`` state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from stateflow.doc.canonical import JSON
from stateflow.doc.merge import stored_index_key, stored_null
from stateflow.states.langgraph_items import STATE as ITEMS_STATE
from stateflow.states.langgraph_items import item_refusal

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


def memory_record_refusal(record: JSON, address: str = "") -> str | None:
    """Why memory cannot hold ``record`` as a whole, by the rules its JSON Schema does not say
    (``patch_state`` refuses the same in a patch), or None: a stored ``null`` reads as an absent
    value and shows as a deletion in a patch, and a key of index form is reserved. (``address``,
    the record's subject key, plays no part.)"""
    at = stored_null(record, False)
    if at is not None:
        return f"memory cannot store null (at {at.lstrip('.')}); leave the key out instead"
    at = stored_index_key(record, False)
    if at is not None:
        return f"memory cannot store an index key as an object key (at {at.lstrip('.')})"
    return None


RecordRule = Callable[[JSON, str], str | None]
"""``(record, its subject key) → why the state cannot hold it, or None``."""

RULES: Final[dict[str, RecordRule]] = {"langgraph_item": item_refusal}
"""The rules a declaration may name for its records (``record_rule``): the LangGraph store's,
whose records the adapter must read back as items — the adapter's own rule
(:mod:`stateflow.states.langgraph_items`, which needs no LangGraph); its declaration names it,
under whatever name the store was given."""

RECORD_RULES: Final[dict[str, RecordRule]] = {"memory": memory_record_refusal, ITEMS_STATE: item_refusal}
"""The rules of states by name: built-in memory's, and the LangGraph store's default state's
(declared by earlier versions without naming its rule)."""


def record_rule(state: str, declaration: Mapping[str, Any]) -> RecordRule | None:
    """A state's rule for a whole record beyond its schema, checked on every record write
    through the states door (and by ``stateflow check`` on the records held): the one its
    declaration names, else its name's (:data:`RECORD_RULES`), else None."""
    named = declaration.get("record_rule")
    if named is not None:
        return RULES.get(named)
    return RECORD_RULES.get(state)
