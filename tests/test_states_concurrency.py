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


def test_writes_racing_folds_and_redeclares_neither_deadlock_nor_fail(open_migrated: StoreFactory) -> None:
    """Folds and re-declares lock the declaration and aliases exclusively while writers share
    them (locked or optimistic): every writer gets through, every write lands on the subject it
    resolves to."""
    service = StatesService(open_migrated())
    service.declare("s", DECL)
    for k in range(6):
        service.apply("s", subject(k), [{"op": "set", "path": ["n"], "value": 0}])
    done = threading.Event()

    def worker(w: int) -> None:
        if w == 0:  # folds k1 → k0, k3 → k2, k5 → k4, re-declaring in between
            try:
                for k in (1, 3, 5):
                    service.fold("s", subject(k), subject(k - 1), "switch")
                    service.declare("s", {**DECL, "description": f"after folding k{k}"})
            finally:
                done.set()
            return
        rng = random.Random(w)
        i = 0
        while not done.is_set() or i < 30:
            k = rng.randrange(6)
            item = f"{w}-{i}"
            ops = [{"op": "set_by_key", "path": ["seen"], "key_field": "id", "value": {"id": item}}]
            assert service.apply("s", subject(k), ops, op_id=f"op-{item}").applied
            i += 1

    assert run_threads(worker, 5) == []
    for k in (1, 3, 5):  # each folded subject now reads as its survivor
        record = service.read("s", subject(k))
        assert record is not None and record["canonical_subject"]["key"] == f"k{k - 1}"
