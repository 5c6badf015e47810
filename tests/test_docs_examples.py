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
