"""What the store's caches really hold, in the allocator's measure (``tracemalloc``), not in the
encoded sizes they account: ``orjson.dumps`` hands back bytes that keep the whole buffer it
wrote into (1-4 KB, however small the value), so a value held for long must be a copy."""

from __future__ import annotations

import gc
import tracemalloc

from stateflow.langgraph import StateflowStore
from stateflow.states import StatesService
from stateflow.store import open_store

ITEMS = 400


def test_the_head_cache_holds_small_items_heads_at_their_own_size(backend: str) -> None:
    """Each small item's heads and body (an object member's outline among them) cost about
    1.3 KB: an outline that kept ``orjson``'s buffer cost 1 KB more per item, 4 KB from
    orjson 3.12 on."""
    store = open_store(backend, auto_migrate=True)
    service = StatesService(store)
    try:
        items = StateflowStore(service)
        items.put(("warm",), "up", {"n": 0})
        tracemalloc.start()
        try:
            for i in range(ITEMS):
                items.put(("notes", f"ns{i % 4}"), f"k{i}", {"n": i, "text": "remember this", "tags": ["a"]})
            gc.collect()
            filled = tracemalloc.get_traced_memory()[0]
            assert len(store._heads._entries) > ITEMS  # every item's heads are held
            store._heads.clear()
            gc.collect()
            held = filled - tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert held < ITEMS * 2048, f"the head cache held {held // ITEMS} bytes per item"
    finally:
        service.close()
        store.close()
