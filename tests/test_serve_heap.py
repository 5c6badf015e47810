"""A served process's heap: what it holds once started is out of the cyclic collector's reach."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.http.server import settle_heap
from stateflow.states import StatesService
from stateflow.store import SqlStore

TOKEN = "heap-secret-0123456789"


@pytest.fixture
def restored_collector() -> Iterator[None]:
    try:
        yield
    finally:
        gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def test_settled_heap_is_frozen_and_later_cycles_are_still_collected(restored_collector: None) -> None:
    held = Node()
    settle_heap()
    assert gc.get_freeze_count() > 0
    assert not any(o is held for o in gc.get_objects())  # frozen: no collection walks it again
    later = Node()
    gone = weakref.ref(later)
    del later
    gc.collect()
    assert gone() is None  # what the server makes after it settled is collected as before


def test_loaded_runs_once_the_mcp_sdk_has_loaded(store: SqlStore) -> None:
    service = StatesService(store)
    service.install_builtins()
    loaded = threading.Event()
    calls: list[int] = []

    def on_loaded() -> None:
        calls.append(1)
        loaded.set()

    app = create_app(service, TokenSet([parse_token(TOKEN)]), loaded=on_loaded)
    with TestClient(app) as client:
        assert loaded.wait(60)
        answer = client.get("/api/states", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200
    assert calls == [1]
