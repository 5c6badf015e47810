"""The one cache of compiled JSON Schema validators (jsonschema-rs, draft 2020-12) in a process,
shared by the declared-states service and agent memory's extra roots: a schema is compiled
once, whichever service asks, by its canonical bytes (bounded, least recently used out)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

import orjson

SIZE: Final = 256
_items: OrderedDict[bytes, Any] = OrderedDict()
_lock = threading.Lock()


def compiled(schema: Any) -> Any:
    """The compiled validator of ``schema`` (a JSON object)."""
    key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    with _lock:
        found = _items.get(key)
        if found is not None:
            _items.move_to_end(key)
            return found
    import jsonschema_rs  # loaded by the first validation, not by reads

    validator = jsonschema_rs.Draft202012Validator(orjson.loads(key))
    with _lock:
        _items[key] = validator
        while len(_items) > SIZE:
            _items.popitem(last=False)
    return validator


def cached() -> int:
    """How many validators the cache holds (for tests and diagnostics)."""
    with _lock:
        return len(_items)
