"""Two `stateflow serve` (one of them with two worker processes) on one PostgreSQL: concurrent
writers and readers on both lose no update, and a read on one server right after a write
acknowledged by the other sees it."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from . import servers

STATE = {
    "schema": {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "items": {"type": "array"}},
    },
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
RECORD = "/api/states/c/records/agent/a/thread/shared"
WRITERS = 4
WRITES = 15


@pytest.mark.slow
def test_two_servers_on_one_postgresql_lose_nothing_and_read_each_others_writes(
    tmp_path: Path, pg_schema_url: str
) -> None:
    env = servers.base_env(tmp_path, pg_schema_url)
    assert subprocess.run(["stateflow", "migrate"], env=env, capture_output=True, timeout=120).returncode == 0
    pair = [servers.start(env), servers.start(env, "--workers", "2")]  # three processes in all
    errors: list[str] = []
    increments = [0] * WRITERS
    try:
        assert pair[0].call("PUT", "/api/states/c", STATE)[0] == 200
        assert pair[1].call("PUT", RECORD, {"n": 0, "items": []})[0] == 200

        def writer(w: int) -> None:
            mine, other = pair[w % 2], pair[(w + 1) % 2]
            for i in range(WRITES):
                item = f"w{w}-{i}"
                # a keyed insert: never conflicts, so every acknowledged one must stay
                status, body, _ = mine.call(
                    "POST",
                    RECORD + "/deltas",
                    {
                        "ops": [
                            {
                                "op": "set_by_key",
                                "path": ["items"],
                                "key_field": "id",
                                "value": [{"id": item}],
                            }
                        ]
                    },
                )
                if status != 200:
                    errors.append(f"{item}: {status} {body}")
                    continue
                # read-your-writes across servers: the other one sees it at once
                status, body, _ = other.call("GET", RECORD)
                if item not in {x["id"] for x in body["data"]["data"]["items"]}:
                    errors.append(f"{item} missing on the other server right after its write")
                # a guarded read-modify-write counter, retried on a lost race
                while True:
                    n = mine.call("GET", RECORD)[1]["data"]["data"]["n"]
                    status, body, _ = other.call(
                        "POST",
                        RECORD + "/deltas",
                        {
                            "ops": [
                                {
                                    "op": "set",
                                    "path": ["n"],
                                    "value": n + 1,
                                    "guard": {"path": ["n"], "expected": n},
                                }
                            ]
                        },
                    )
                    if status != 200:
                        errors.append(f"counter: {status} {body}")
                        break
                    if not body["data"]["skipped"]:
                        increments[w] += 1
                        break

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        readers_stop = threading.Event()

        def reader(server: servers.Server) -> None:
            last = -1
            while not readers_stop.is_set():
                n = server.call("GET", RECORD)[1]["data"]["data"]["n"]
                if n < last:
                    errors.append(f"a reader saw the counter go back from {last} to {n}")
                last = n

        readers = [threading.Thread(target=reader, args=(s,)) for s in pair]
        for t in [*threads, *readers]:
            t.start()
        for t in threads:
            t.join(timeout=600)
        readers_stop.set()
        for t in readers:
            t.join(timeout=60)
        assert errors == []
        for server in pair:
            final = server.call("GET", RECORD)[1]["data"]["data"]
            assert final["n"] == sum(increments) == WRITERS * WRITES  # 0 lost updates
            assert len(final["items"]) == WRITERS * WRITES
            assert {x["id"] for x in final["items"]} == {
                f"w{w}-{i}" for w in range(WRITERS) for i in range(WRITES)
            }
    finally:
        for server in pair:
            server.stop()
