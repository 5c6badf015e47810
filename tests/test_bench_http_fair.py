"""The fair floor of ``benchmarks/bench_http.py`` (``PUT /fair/records/…``): writers served in
arrival order with a group commit by hand must still be the floor's write — one audit row and
one revision per write, every change kept — or the benchmark compares against a write that
loses work. Checked through the app's route on a real SQLite file."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import orjson
import pytest
from benchmarks import http_baseline
from fastapi.testclient import TestClient


def test_fair_writes_keep_every_revision_and_audit_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "fair.db"
    monkeypatch.setattr(http_baseline, "DB", str(db))
    monkeypatch.setattr(http_baseline, "TOKEN", "Bearer t")
    monkeypatch.setattr(http_baseline, "_local", threading.local())
    client = TestClient(http_baseline.app)
    writers, each = 8, 15
    revisions: dict[str, list[int]] = {f"k{k}": [] for k in range(3)}
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def write(w: int) -> None:
        try:
            start.wait()
            for i in range(each):
                key = f"k{(w + i) % 3}"
                answer = client.put(
                    f"/fair/records/{key}",
                    json={"count": i, "text": f"{w}"},
                    headers={"Authorization": "Bearer t"},
                )
                assert answer.status_code == 200, answer.text
                assert answer.json()["data"] == {"count": i, "text": f"{w}"}
                revisions[key].append(answer.json()["revision"])
        except BaseException as exc:  # (reported below, in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for key, seen in revisions.items():  # every write its own revision, none lost or repeated
        assert sorted(seen) == list(range(1, len(seen) + 1)), key
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM audit").fetchone()[0] == writers * each
    rows = conn.execute("SELECT key, revision, seq, body FROM changes").fetchall()
    assert len(rows) == writers * each
    assert len({seq for _, _, seq, _ in rows}) == writers * each  # one audit row per change
    assert all(orjson.loads(body)["text"] in {str(w) for w in range(writers)} for *_, body in rows)
    heads = dict(conn.execute("SELECT key, revision FROM heads").fetchall())
    assert heads == {key: len(seen) for key, seen in revisions.items()}
    # a refused write queues nothing
    refused = client.put("/fair/records/k0", json={"count": "x"}, headers={"Authorization": "Bearer t"})
    assert refused.status_code == 422
    assert conn.execute("SELECT count(*) FROM audit").fetchone()[0] == writers * each
