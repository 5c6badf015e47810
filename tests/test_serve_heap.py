"""A served process's heap: what it holds once started is out of the cyclic collector's reach."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from stateflow.errors import StateflowError
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.http.server import settle_heap
from stateflow.states import StatesService
from stateflow.store import SqlStore

from .collector_helpers import left_to_collector

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


def test_a_refused_write_is_freed_without_the_collector(store: SqlStore) -> None:
    """A write refused at the schema check answers 422, and its error (with the frames it was
    raised through, which hold the request's body) is freed as soon as it is answered: no
    reference cycle left for the collector."""
    service = StatesService(store)
    service.declare(
        "tickets",
        {
            "subject_kinds": ["ticket"],
            "default_subject_kind": "ticket",
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    )
    app = create_app(service, TokenSet([parse_token(TOKEN)]))
    url = "/api/states/tickets/records/agent/a/ticket/t1"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(app) as client:
        assert client.put(url, json={"n": 1}, headers=headers).status_code == 200
        with left_to_collector(StateflowError) as kept:
            for _ in range(3):
                answer = client.put(url, json={"n": "not a number"}, headers=headers)
                assert answer.status_code == 422
    assert kept == []
