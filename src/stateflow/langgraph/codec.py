"""Values LangGraph hands over, as JSON a stateflow record can hold.

Plain JSON (objects with string keys, lists, strings, booleans, null, finite floats and
integers within ±2^53) is stored as is, under ``{"json": value}``, so a record reads as
the data it holds through every door. Anything else (messages, tuples, bytes, …) goes through
the saver's serializer and is stored as ``{"type": serializer type, "b64": bytes}``. A
serializer other than LangGraph's default (an encrypting one, say) gets every value, plain or
not.
"""

from __future__ import annotations

import base64
import math
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

_MAX_INT = 2**53


def is_plain(value: Any, depth: int = 0) -> bool:
    if depth > 64:
        return False
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_MAX_INT <= value <= _MAX_INT)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        for k, v in value.items():
            # (text, integers and null inline: most values are leaves — a checkpoint's channel
            # versions, steps and counters are integers — and a call each would double the
            # walk's cost)
            if type(k) is not str:
                return False
            leaf = type(v)
            if leaf is int and depth < 64:  # (deeper: the call's depth limit refuses it)
                if not -_MAX_INT <= v <= _MAX_INT:
                    return False
            elif not (leaf is str or v is None or is_plain(v, depth + 1)):
                return False
        return True
    if kind is list:
        for v in value:
            leaf = type(v)
            if leaf is int and depth < 64:
                if not -_MAX_INT <= v <= _MAX_INT:
                    return False
            elif not (leaf is str or v is None or is_plain(v, depth + 1)):
                return False
        return True
    return False


class Codec:
    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde
        self.readable = type(serde) is JsonPlusSerializer

    def encode(self, value: Any) -> dict[str, Any]:
        if self.readable and is_plain(value):
            return {"json": value}
        kind, data = self.serde.dumps_typed(value)
        return {"type": kind, "b64": base64.b64encode(data).decode()}

    def decode(self, stored: dict[str, Any]) -> Any:
        if "json" in stored:
            return stored["json"]
        return self.serde.loads_typed((stored["type"], base64.b64decode(stored["b64"])))
