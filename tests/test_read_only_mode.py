"""``?mode=ro`` on both backends: reads are served, every write is refused with
`store-read-only` and nothing changes. On PostgreSQL the sessions themselves are read-only
(``default_transaction_read_only``), so even a write that got past our own check is refused
by the server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from stateflow.errors import StoreReadOnly
from stateflow.store import DocKey, Write, open_store
from stateflow.store.base import SqlStore
from tests.servers import base_env, start


def sf(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATEFLOW_STORE=store)
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, env=env)


def read_only(location: str) -> str:
    if location.startswith("postgres"):
        return location + ("&" if "?" in location else "?") + "mode=ro"
    return f"sqlite://{location}?mode=ro"


def test_mode_ro_serves_reads_and_refuses_every_write(backend: str) -> None:
    store = open_store(backend, auto_migrate=True)
    try:
        store.commit([Write.between(DocKey("notes", "n1"), None, {"n": 1}, 0)], {"door": "test"})
    finally:
        store.close()
    ro = read_only(backend)

    out = sf(ro, "doc", "get", "notes", "n1")
    assert out.returncode == 0 and json.loads(out.stdout) == {"n": 1}, out.stderr
    out = sf(ro, "states", "list")
    assert out.returncode == 0, out.stderr
    for args in (
        ["doc", "put", "notes", "n1", '{"n": 2}'],
        ["doc", "put", "notes", "n2", '{"n": 2}'],
        ["tool", "patch_state", '{"session": {"tactics": {"x": 1}}}', "--agent", "a"],
    ):
        out = sf(ro, *args)
        assert out.returncode == 1, (args, out.stdout)
        assert out.stderr.startswith("error[store-read-only]: "), (args, out.stderr)
        # refused by our own check, before anything is sent: not the server's own refusal
        assert "is open read-only" in out.stderr, (args, out.stderr)

    store = open_store(backend)
    try:
        assert store.get(DocKey("notes", "n1")).revision == 1
        assert store.get(DocKey("notes", "n2")).revision == 0
        assert len(store.transitions(limit=10)) == 1
    finally:
        store.close()


def test_postgresql_sessions_are_read_only_on_the_server(pg_schema_url: str) -> None:
    open_store(pg_schema_url, auto_migrate=True).close()
    store = open_store(read_only(pg_schema_url))
    assert isinstance(store, SqlStore)
    try:
        with store._read_tx() as tx:
            assert tx.all("SHOW default_transaction_read_only") == [("on",)]
        # past our own check (as a write path that forgot it would be): the server refuses
        with pytest.raises(StoreReadOnly, match="read-only"), store._tx(False) as tx:  # type: ignore[attr-defined]
            tx.run("INSERT INTO stateflow_meta (key, value) VALUES ('sneaked', 'in')")
        with pytest.raises(StoreReadOnly):
            store.migrate()
    finally:
        store.close()
    writable = open_store(pg_schema_url)
    assert isinstance(writable, SqlStore)
    try:
        with writable._read_tx() as tx:
            assert tx.all("SELECT key FROM stateflow_meta WHERE key = 'sneaked'") == []
    finally:
        writable.close()


def test_a_read_only_store_written_only_by_memory_tools_has_the_memory_state(
    backend: str, tmp_path: Path
) -> None:
    """Agent memory scopes are records of the built-in state ``memory``; a store written only
    through ``patch_state`` holds no row declaring it, which a read-only open cannot write: the
    states doors still know it (they answered state-not-found)."""
    assert sf(backend, "migrate").returncode == 0
    out = sf(backend, "tool", "patch_state", '{"session": {"tactics": {"a": 1}}}')
    assert out.returncode == 0, out.stderr
    assert sf(backend, "doc", "get", "_states", "memory").stdout.strip() == "null"  # no row
    ro = read_only(backend)
    subject = ("--target-name", "default", "--kind", "session", "--key", "default")
    out = sf(ro, "states", "read", "memory", *subject)
    assert out.returncode == 0 and json.loads(out.stdout)["data"] == {"tactics": {"a": 1}}, out.stderr
    out = sf(ro, "states", "list", "--json")
    assert out.returncode == 0 and [d["name"] for d in json.loads(out.stdout)] == ["memory"], out.stderr
    out = sf(ro, "states", "get", "memory")
    assert out.returncode == 0 and json.loads(out.stdout)["subject_kinds"] == ["global", "cwd", "session"]

    server = start(base_env(tmp_path, ro))
    try:
        status, body, _ = server.call("GET", "/api/states/memory/records/agent/default/session/default")
        assert status == 200 and body["data"]["data"] == {"tactics": {"a": 1}}, body
    finally:
        server.stop()
    assert sf(backend, "doc", "get", "_states", "memory").stdout.strip() == "null"  # nothing written


def test_knowledge_scan_and_the_hook_with_nothing_to_prune_answer_on_a_read_only_store(
    backend: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "db.md").write_text("# Databases\n")
    assert sf(backend, "migrate").returncode == 0
    card = json.dumps({"global": {"artifacts": {str(notes / "db.md"): {"description": "databases"}}}})
    out = sf(backend, "tool", "patch_state", card, "--knowledge-root", str(notes))
    assert out.returncode == 0, out.stderr
    ro = read_only(backend)
    scan = sf(ro, "knowledge", "scan", "--knowledge-root", str(notes))
    assert scan.returncode == 0 and json.loads(scan.stdout)["pruned"] == [], scan.stderr
    hook = subprocess.run(
        [
            "stateflow",
            "--store",
            ro,
            "hook",
            "claude-code",
            "--knowledge-root",
            str(notes),
            "--cwd",
            str(tmp_path),
        ],
        input='{"session_id": "s1", "hook_event_name": "SessionStart"}',
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "STATEFLOW_RUNTIME_DIR": str(tmp_path / "runtime")},
    )
    assert hook.returncode == 0, hook.stderr
    assert "databases" in json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    (notes / "db.md").unlink()  # now there is a card to prune: a write, refused
    refused = sf(ro, "knowledge", "scan", "--knowledge-root", str(notes))
    assert refused.returncode == 1 and refused.stderr.startswith("error[store-read-only]: "), refused.stderr
