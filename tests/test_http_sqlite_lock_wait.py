"""On SQLite, a lone record write that would wait for the file's write lock — another process
holds it — does not wait on the HTTP event loop's thread: other requests are answered meanwhile."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from stateflow import aio
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.store import open_store

ADMIN = "admin-secret-0123456789"
DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
RECORD = "/api/states/tickets/records/agent/a/thread/t"
HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


def test_a_lone_write_waiting_for_another_processs_write_lock_leaves_the_loop_answering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a lone write would run on the loop's thread whatever the machine's load and however long
    # the calls before it took (the edge's load sample each call, no long-call hold)
    monkeypatch.setattr(aio, "SAMPLE_SECONDS", 0.0)
    monkeypatch.setattr(aio, "CONTENDED_SHARE", float("inf"))
    monkeypatch.setattr(aio, "LONG_SECONDS", float("inf"))
    path = tmp_path / "store.db"
    store = open_store(path, wait_seconds=60)
    service = StatesService(store)
    auth = {"Authorization": f"Bearer {ADMIN}"}
    try:
        with TestClient(create_app(service, TokenSet([parse_token(ADMIN)]))) as client:
            assert client.put("/api/states/tickets", json=DECL, headers=auth).status_code == 200
            for n in range(3):  # (the edge's first load sample, then writes on the loop)
                assert client.put(RECORD, json={"n": n}, headers=auth).status_code == 200
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLD, str(path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            answers: list[int] = []
            try:
                assert holder.stdout is not None and holder.stdout.readline() == "held\n"
                turns = store._group.queue  # type: ignore[attr-defined]
                writer = threading.Thread(
                    target=lambda: answers.append(client.put(RECORD, json={"n": 9}, headers=auth).status_code)
                )
                writer.start()
                # the write has taken its turn in the writers' queue (its last ticket again: it
                # wrote alone before): it waits for the lock now
                deadline = time.monotonic() + 60
                while not turns.held and time.monotonic() < deadline:
                    time.sleep(0.001)
                assert turns.held
                assert client.get("/api/health").status_code == 200
                assert client.get(RECORD, headers=auth).json()["data"]["data"] == {"n": 2}
                assert answers == []  # answered while the write still waits for the lock
            finally:
                assert holder.stdin is not None
                holder.stdin.write("go\n")
                holder.stdin.close()
                holder.wait()
            writer.join()
            assert answers == [200]
            assert client.get(RECORD, headers=auth).json()["data"]["data"] == {"n": 9}
    finally:
        service.close()
        store.close()
