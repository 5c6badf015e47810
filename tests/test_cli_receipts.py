"""Receipts against what the model was shown, when the context and the patch run in different
processes (``stateflow context`` from a hook, ``stateflow tool patch_state`` later), both backends."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stateflow.store import SqlStore


@pytest.fixture
def url(backend: str, store: SqlStore) -> str:
    """A migrated store of each backend, by the location the CLI takes."""
    return backend


def sf(store: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["stateflow", "--store", store, *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def patch(store: str, session: str, body: dict[str, Any], cwd: Path) -> tuple[str, dict[str, Any] | None]:
    done = sf(store, "tool", "patch_state", json.dumps(body), "--session", session, cwd=cwd)
    assert done.returncode == 0, done.stderr
    ack, _, extra = done.stdout.rstrip("\n").partition("\n")
    return ack, (json.loads(extra)["state_updates"] if extra else None)


def context(store: str, session: str, cwd: Path) -> dict[str, Any]:
    done = sf(store, "context", "--json", "--session", session, cwd=cwd)
    assert done.returncode == 0, done.stderr
    head: dict[str, Any] = json.loads(done.stdout)["head"]
    return head


def test_another_sessions_shared_write_appears_in_the_next_cli_receipt(url: str, tmp_path: Path) -> None:
    patch(url, "other", {"cwd": {"strategy": {"db": "sqlite"}}}, tmp_path)
    assert context(url, "mine", tmp_path)["state"] == {"strategy": {"db": "sqlite"}}
    # another session changes the shared cwd scope after "mine" was shown its context
    patch(url, "other", {"cwd": {"strategy": {"db": "postgres"}}}, tmp_path)
    ack, updates = patch(url, "mine", {"session": {"tactics": {"next": "migrate"}}}, tmp_path)
    assert ack == "State materialized atomically at session scope."
    assert updates is not None
    assert updates["effective"] == [
        {"path": ["strategy", "db"], "value": "postgres"},
        {"path": ["tactics"], "value": {"next": "migrate"}},
    ]
    # that receipt is now what the model was shown: the drift is not repeated
    _, again = patch(url, "mine", {"session": {"tactics": {"then": "test"}}}, tmp_path)
    assert again is not None
    assert again["effective"] == [{"path": ["tactics", "then"], "value": "test"}]


def test_drift_alone_makes_a_current_patch_report(url: str, tmp_path: Path) -> None:
    patch(url, "mine", {"session": {"tactics": {"next": "x"}}}, tmp_path)
    context(url, "mine", tmp_path)
    patch(
        url,
        "other",
        {"global": {"strategy": {"style": "terse"}}, "cwd": {"lazy": {"notes": ["n"]}}},
        tmp_path,
    )
    ack, updates = patch(url, "mine", {"session": {"tactics": {"next": "x"}}}, tmp_path)
    assert ack == "State already current."
    assert updates is not None
    assert updates["effective"] == [
        {"path": ["strategy"], "value": {"style": "terse"}},
        {"path": ["tactics", "next"], "value": "x"},
    ]
    # lazy_navigation is reported against the navigation the model was shown, too
    assert updates["lazy_navigation"] == {
        "available": True,
        "path": "effective.lazy",
        "keys": {"notes": "array"},
    }


def test_a_write_hidden_by_a_narrower_scope_reports_the_hiding_value(url: str, tmp_path: Path) -> None:
    patch(url, "mine", {"session": {"tactics": {"mode": "session value"}}}, tmp_path)
    context(url, "mine", tmp_path)
    ack, updates = patch(url, "mine", {"global": {"tactics": {"mode": "global value"}}}, tmp_path)
    assert ack == "State materialized atomically at global scope."
    assert updates is not None
    assert updates["effective"] == [{"path": ["tactics", "mode"], "value": "session value"}]


def test_a_lost_view_falls_back_to_the_patch_basis(url: str, tmp_path: Path, monkeypatch: Any) -> None:
    patch(url, "other", {"cwd": {"strategy": {"db": "sqlite"}}}, tmp_path)
    context(url, "mine", tmp_path)
    patch(url, "other", {"cwd": {"strategy": {"db": "postgres"}}}, tmp_path)
    monkeypatch.setenv("STATEFLOW_RUNTIME_DIR", str(tmp_path / "elsewhere"))  # the kept view is gone
    _, updates = patch(url, "mine", {"session": {"tactics": {"next": "migrate"}}}, tmp_path)
    assert updates is not None
    assert updates["effective"] == [{"path": ["tactics"], "value": {"next": "migrate"}}]
