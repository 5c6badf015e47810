"""Every Python example in the README and docs/ runs as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)

EXAMPLES = [
    pytest.param(code, id=f"{page.name}-{i}")
    for page in PAGES
    for i, code in enumerate(BLOCK.findall(page.read_text()))
]


@pytest.mark.parametrize("code", EXAMPLES)
def test_python_example_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a reader runs it: twice in one directory (a reader tries it again after reading on),
    and never into the reader's own default store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATEFLOW_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    for _ in range(2):
        exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})
    assert not (tmp_path / "data" / "stateflow" / "stateflow.db").exists(), "wrote the default store"


def test_there_are_examples_to_run() -> None:
    assert len(EXAMPLES) >= 5
    assert os.path.exists(ROOT / "docs" / "architecture.md")


SHELL_BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)


def _commands(page: Path) -> list[str]:
    lines = []
    for block in SHELL_BLOCK.findall(page.read_text()):
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            if command.startswith("stateflow ") and "postgresql://" not in command:
                lines.append(command)
    return lines


@pytest.mark.parametrize("page", ["memory.md", "store.md", "states.md", "operations.md"])
def test_shell_examples_run_in_order(page: str, tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "request.json").write_text('{"path": "tactics"}')
    env = dict(os.environ, STATEFLOW_STORE=str(tmp_path / "docs.db"))
    for command in _commands(ROOT / "docs" / page):
        out = subprocess.run(
            command,
            shell=True,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == 0, f"{command}\n{out.stderr}"


CURL = re.compile(r"curl -s(?: -X (\w+))? localhost:8765(\S+)[^\n]*?(?: -d '([^']*)')?$", re.MULTILINE)


def _curl_calls(page: Path) -> list[tuple[str, str, str | None]]:
    """The README's ``curl`` calls against ``stateflow serve``: method, path and body."""
    text = page.read_text().replace("\\\n", " ")  # (continued lines joined)
    return [(method or "GET", path, body or None) for method, path, body in CURL.findall(text)]


def _serve_readme_calls(location: Path) -> None:
    """The README's server example, on the real HTTP app over the store at ``location``."""
    from fastapi.testclient import TestClient

    from stateflow.api import states_service
    from stateflow.http.app import create_app
    from stateflow.http.auth import TokenSet, parse_token
    from stateflow.store import open_store

    token = "readme-token-0123456789"
    store = open_store(location)
    try:
        app = create_app(states_service(store), TokenSet([parse_token(token)]))
        with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as http:
            calls = _curl_calls(ROOT / "README.md")
            assert len(calls) >= 3
            for method, path, body in calls:
                answer = http.request(method, path, content=body)
                assert answer.status_code == 200, f"{method} {path}: {answer.text}"
    finally:
        store.close()


def test_readme_quick_start_commands_run(tmp_path: Path) -> None:
    """The README's server example, then its commands, in order on one store (as a user who
    tries them all on the default store)."""
    import subprocess

    _serve_readme_calls(tmp_path / "readme.db")
    env = dict(os.environ, STATEFLOW_STORE=str(tmp_path / "readme.db"))
    commands = _commands(ROOT / "README.md")
    assert commands
    for command in commands:
        out = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, f"{command}\n{out.stderr}"


def test_langgraph_commands_read_what_its_example_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/langgraph.md's commands, run after its Python examples in the same directory (and
    no store configured), read the item the example stored."""
    import subprocess

    page = ROOT / "docs" / "langgraph.md"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATEFLOW_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    for code in BLOCK.findall(page.read_text()):
        exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})
    commands = _commands(page)
    assert len(commands) >= 2
    outputs = []
    for command in commands:
        out = subprocess.run(
            command,
            shell=True,
            cwd=tmp_path,
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, f"{command}\n{out.stderr}"
        outputs.append(out.stdout)
    assert '"likes tea"' in outputs[0]
