"""What a record of the LangGraph store's state must hold to be an item, and how an item's
address is spelt — needing no LangGraph: the states door applies :func:`item_refusal` to every
write of that state (``stateflow.states.builtin.record_rule``) in processes that never load
the adapter (the CLI, the API server). It lives in the states layer, which the adapter
(``stateflow.langgraph``, an edge above it) imports: imports point down only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote, unquote

import orjson

from stateflow.doc.canonical import checked_copy
from stateflow.errors import InvalidInput

STATE: Final = "langgraph_store"
"""The state the LangGraph store keeps its items in (unless given another)."""
CHECKPOINTS_DESCRIPTION: Final = (
    "LangGraph checkpoints (kind checkpoint) and their pending writes (kind writes), "
    "one record per thread, namespace and checkpoint"
)
"""The description the LangGraph saver declares its state with (every version has): with its
subject kinds, how the retention sweep knows a saver's state an earlier version declared before
states could be ``retention_exempt`` (``stateflow.states.retention``)."""
CHECKPOINT_KINDS: Final = ("checkpoint", "writes")
MAX_KEY = 512
MAX_TTL_MINUTES: Final = 52_596_000
"""The longest TTL an item takes, in minutes (100 years): its expiry stays a time."""


def part(text: str, where: str) -> str:
    """``text`` percent-encoded as one part of a subject key (``where`` names it: see :func:`join`)."""
    return _quoted([text], lambda _: where)


def unpart(text: str) -> str:
    return unquote(text)


def _namespace(i: int) -> str:
    return f"namespace[{i}]"


class KeyTooLong(InvalidInput):
    """A subject key whose encoding is longer than :data:`MAX_KEY`: no item has it (a put of
    it is refused; a read of it finds nothing)."""


def join(parts: Sequence[str], names: Callable[[int], str] = _namespace) -> str:
    """The subject key spelling ``parts``, each percent-encoded. A part holding a lone surrogate,
    which a Python ``str`` can and no UTF-8 spells, is refused as every write refuses one
    (``invalid-json``), by its place (``names(i)``, asked only then), before anything is read or
    written."""
    key = _quoted(parts, names)
    if len(key) > MAX_KEY:
        raise KeyTooLong(
            f"the encoded subject key is {len(key)} characters long (at most {MAX_KEY}): "
            "use shorter namespaces, keys or thread ids"
        )
    return key


def _quoted(parts: Sequence[str], names: Callable[[int], str]) -> str:
    try:
        return "/".join(quote(p, safe="") for p in parts)
    except UnicodeEncodeError:
        for i, p in enumerate(parts):
            checked_copy(p, names(i))
        raise


SUBJECT_KEYS_KEPT: Final = 16384
"""Subject keys ``subject_key`` keeps encoded, at most (then it forgets them all)."""
KEPT_SUBJECT_KEYS: dict[tuple[tuple[str, ...], str], str] = {}


def subject_key(namespace: tuple[str, ...], key: str) -> str:
    """An item's subject key, kept encoded (items are read and written again and again)."""
    where = (namespace, key)
    made = KEPT_SUBJECT_KEYS.get(where)
    if made is None:
        made = join([*namespace, key], lambda i: "key" if i == len(namespace) else _namespace(i))
        if len(KEPT_SUBJECT_KEYS) >= SUBJECT_KEYS_KEPT:
            KEPT_SUBJECT_KEYS.clear()  # bounded; a miss only encodes the key again
        KEPT_SUBJECT_KEYS[where] = made
    return made


def item_refusal(data: Any, address: str) -> str | None:
    """Why a record at subject key ``address`` is not an item the store can answer (None when
    it is): its times must parse and its namespace and key must be the ones its subject key
    encodes — what the declared schema cannot say. The states door refuses such a write with
    this reason; the store names one an earlier version let through, rather than crash on it."""
    if type(data) is not dict:
        return "it is not an object"
    namespace, key = data.get("namespace"), data.get("key")
    if type(namespace) is not list or not all(type(p) is str for p in namespace) or type(key) is not str:
        return "its namespace is not a list of strings or its key not a string"
    if not isinstance(data.get("value"), dict):
        return "its value is not an object"
    for name in ("created_at", "expires_at", "updated_at"):
        text = data.get(name)
        if (text is not None or name == "created_at") and not _is_time(text):
            return f"its {name} {orjson.dumps(text).decode()} is not an ISO 8601 time"
    ttl = data.get("ttl_minutes")
    if ttl is not None and (type(ttl) not in (int, float) or abs(ttl) > MAX_TTL_MINUTES):
        # a refresh adds it to the time: beyond what a put takes, that fails (0 or less, which
        # older puts took, passes: such an item expired at once, and is swept as any other)
        return (
            f"its ttl_minutes {orjson.dumps(ttl).decode()} is not a number of minutes a TTL holds "
            f"(at most {MAX_TTL_MINUTES})"
        )
    try:
        encoded = subject_key(tuple(namespace), key)
    except InvalidInput:
        encoded = None
    if encoded != address:
        return f"it names namespace {namespace} and key {key!r}, not the item its subject key addresses"
    return None


def _is_time(text: Any) -> bool:
    try:
        datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return False
    return True
