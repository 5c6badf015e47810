"""A write of a large record body never runs on the server's event loop: while it is in flight,
other requests are read and answered. The app as ``stateflow serve`` builds it on PostgreSQL,
under uvicorn, called over HTTP, on a machine taken to have CPU to spare (where a lone record
call on SQLite may run on the loop; on PostgreSQL none does); the large write is held in flight
by a row lock another session keeps until the other request's answer has come."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import uvicorn

from stateflow import aio
from stateflow.config import Config, StoreSettings
from stateflow.http.server import build_app, service_for
from stateflow.store import open_store

from . import servers

STATE = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
BIG = "/api/states/big/records/agent/a/thread/x"
SMALL = "/api/states/small/records/agent/a/thread/y"


@contextmanager
def serving(url: str) -> Iterator[servers.Server]:
    """The app on a PostgreSQL store under uvicorn, on a thread of its own (its event loop)."""
    # (a write held on the loop would end at this limit; the small read's client waits less)
    config = Config(store=StoreSettings(url=url, statement_timeout_seconds=40))
    store = open_store(url, auto_migrate=True, statement_timeout=40)
    service = service_for(store, config)
    port = servers.free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(service, config, [servers.TOKEN]), host="127.0.0.1", port=port, log_level="error"
        )
    )
    thread = threading.Thread(target=server.run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield servers.Server(f"http://127.0.0.1:{port}", None)  # type: ignore[arg-type]
    finally:
        server.should_exit = True
        thread.join()
        service.close()
        store.close()


def test_a_large_write_in_flight_does_not_hold_up_other_requests(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CPU to spare at every ask, and no call counted as holding the loop long: a lone call on
    # one record may run on the loop's thread (as on a quiet machine)
    monkeypatch.setattr(aio, "SAMPLE_SECONDS", 0.0)
    monkeypatch.setattr(aio, "CONTENDED_SHARE", math.inf)
    monkeypatch.setattr(aio, "LONG_SECONDS", math.inf)
    with serving(pg_schema_url) as server:
        for name in ("big", "small"):
            assert server.call("PUT", f"/api/states/{name}", STATE)[0] == 200
        assert server.call("PUT", BIG, {"n": 1})[0] == 200
        assert server.call("PUT", SMALL, {"n": 2})[0] == 200
        large = {"n": 3, **{f"m{i}": i for i in range(10_000)}}  # ~130 KB
        answers: dict[str, Any] = {}
        with psycopg.connect(pg_schema_url) as holder:
            holder.execute("SELECT doc_id FROM documents WHERE state = 'big' FOR UPDATE")
            writer = threading.Thread(
                target=lambda: answers.update(big=server.call("PUT", BIG, large, timeout=60))
            )
            writer.start()
            with psycopg.connect(pg_schema_url, autocommit=True) as watch:
                waiting = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
                deadline = time.monotonic() + 60
                while watch.execute(waiting, (holder.info.backend_pid,)).fetchone() != (1,):
                    assert time.monotonic() < deadline, "the large write never reached the database"
                    time.sleep(0.05)
            # the large write's call is in flight, waiting for the row: a read is answered meanwhile
            status, body, _ = server.call("GET", SMALL, timeout=20)
            assert (status, body["data"]["data"]) == (200, {"n": 2})
            assert "big" not in answers
            holder.rollback()
        writer.join(timeout=60)
        assert answers["big"][0] == 200, answers["big"]
        assert server.call("GET", BIG)[1]["data"]["data"] == large
