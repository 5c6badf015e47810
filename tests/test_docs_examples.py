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
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STATEFLOW_STORE", str(tmp_path / "default.db"))
    exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})


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


def test_readme_quick_start_commands_run(tmp_path: Path) -> None:
    import subprocess

    env = dict(os.environ, STATEFLOW_STORE=str(tmp_path / "readme.db"))
    commands = _commands(ROOT / "README.md")
    assert commands
    for command in commands:
        out = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, f"{command}\n{out.stderr}"
