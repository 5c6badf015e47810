"""What a command imports: memory reads must start without the layers other commands need.

The timings live in benchmarks/bench_cold_start.py; these check the cause, not the clock.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks.bench_cold_start import CLI, environment, heavy_modules, imports, prepare


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("cold") / "memory.db")
    prepare(path)
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["tool", "read_state", '{"path": "effective"}'],
        ["tool", "read_state", '{"paths": ["cwd.lazy.notes[0:2]", "session[1].tactics"]}'],
        ["tool", "patch_state", '{"session": {"tactics": {"next": "ship"}}}'],
        ["context"],
        ["history", "list"],
    ],
    ids=["read_state", "read_state-history", "patch_state", "context", "history"],
)
def test_a_memory_command_loads_no_heavy_layer(store: str, command: list[str]) -> None:
    argv = [sys.executable, "-c", CLI, "--store", store, *command]
    imported = imports(argv, environment())
    assert "stateflow.store.sqlite" in imported  # it did run against the store
    assert heavy_modules(imported) == []


def test_import_stateflow_loads_only_the_package() -> None:
    imported = imports([sys.executable, "-c", "import stateflow"], environment())
    assert [m for m in imported if m.startswith("stateflow")] == ["stateflow"]


def test_connect_loads_no_heavy_layer(tmp_path: Path) -> None:
    code = f"import stateflow; stateflow.connect({str(tmp_path / 'x.db')!r}).close()"
    imported = imports([sys.executable, "-c", code], environment())
    assert "stateflow.api" in imported
    assert heavy_modules(imported) == []


def test_the_states_layer_loads_no_edge_above_it() -> None:
    # imports point down only: the states door's record rules (the LangGraph store's item rule
    # among them) load nothing of the LangGraph adapters, nor of another edge
    code = "import stateflow.states.service, stateflow.states.batch, stateflow.states.checks"
    imported = imports([sys.executable, "-c", code], environment())
    assert "stateflow.states.builtin" in imported
    edges = ("stateflow.langgraph", "stateflow.cli", "stateflow.http", "stateflow.mcp", "stateflow.studio")
    assert [m for m in imported if m.startswith(edges)] == []


def test_state_tools_still_load_the_states_layer_when_called(store: str) -> None:
    argv = [sys.executable, "-c", CLI, "--store", store, "tool", "state_read", '{"state": "memory"}']
    imported = imports(argv, environment())
    assert "stateflow.states.service" in imported


def test_help_lists_the_commands_loaded_on_use() -> None:
    out = subprocess.run(
        ["stateflow", "--help"], capture_output=True, text=True, timeout=60, env=dict(os.environ), check=True
    )
    for name in ("serve", "states", "state-templates", "tool", "context", "mcp"):
        assert f"  {name} " in out.stdout
