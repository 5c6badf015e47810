"""Many writers at once — replays, refusals and acceptances mixed — on both backends: every
accepted apply lands exactly once with its audit row, a replayed op id lands nothing, a refused
batch lands nothing and leaves its op id unused."""

from __future__ import annotations

import random
import threading
from typing import Any

from stateflow.errors import StateflowError
from stateflow.states import StatesService

from .conftest import StoreFactory
from .threads import run_threads

DECL = {
    "schema": {
        "type": "object",
        "properties": {
            "seen": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}}}},
            "n": {"type": "integer"},
        },
    },
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def subject(k: int) -> dict[str, str]:
    return {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": f"k{k}"}


def test_mixed_concurrent_applies_land_exactly_once(open_migrated: StoreFactory) -> None:
    service = StatesService(open_migrated())
    service.declare("s", DECL)
    lock = threading.Lock()
    landed: dict[int, set[str]] = {k: set() for k in range(3)}
    replays: list[str] = []

    def writer(w: int) -> None:
        rng = random.Random(w)
        for i in range(20):
            k = rng.randrange(3)
            item = f"{w}-{i}"
            if rng.random() < 0.2:  # refused by the schema: lands nothing, keeps its op id
                bad = [{"op": "set", "path": ["n"], "value": "not an integer"}]
                try:
                    service.apply("s", subject(k), bad, op_id=f"op-{item}")
                except StateflowError:
                    pass
                else:
                    raise AssertionError("a schema violation was accepted")
            ops = [{"op": "set_by_key", "path": ["seen"], "key_field": "id", "value": {"id": item}}]
            first = service.apply("s", subject(k), ops, op_id=f"op-{item}")
            again = service.apply("s", subject(k), ops, op_id=f"op-{item}")
            assert first.applied and not again.applied
            with lock:
                landed[k].add(item)
                replays.append(item)

    assert run_threads(writer, 6) == []
    for k, items in landed.items():
        record = service.read("s", subject(k))
        got = {p["id"] for p in (record or {"data": {"seen": []}})["data"].get("seen", [])}
        assert got == items
        writes: list[Any] = []
        cursor = None
        while True:
            page = service.writes("s", subject(k), limit=500, cursor=cursor)
            writes += page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(w["origin"]["op_id"] for w in writes) == sorted(f"op-{i}" for i in items)
    assert len(replays) == 120
