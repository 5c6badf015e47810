"""The packaged Skills are generated from the tool descriptions and cannot drift from them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from stateflow.skills import HERE, render, write
from stateflow.tools import PATCH_STATE_DESCRIPTION, READ_STATE_DESCRIPTION


def test_the_packaged_skills_are_exactly_what_the_descriptions_generate() -> None:
    rendered = render()
    packaged = {p.parent.name: p.read_text() for p in HERE.glob("*/SKILL.md")}
    assert packaged == rendered, "regenerate with: python -m stateflow.skills"
    assert READ_STATE_DESCRIPTION in rendered["state-flow-memory"]
    assert PATCH_STATE_DESCRIPTION in rendered["state-flow-memory"]


def test_each_skill_has_agent_skills_front_matter(tmp_path: Path) -> None:
    for path in write(tmp_path):
        text = path.read_text()
        assert text.startswith("---\n")
        name_line, description_line = text.split("---\n")[1].splitlines()
        front = {
            "name": name_line.removeprefix("name: "),
            "description": json.loads(description_line.removeprefix("description: ")),
        }
        assert name_line.startswith("name: ") and description_line.startswith("description: ")
        assert front["name"] == path.parent.name
        assert 0 < len(front["description"]) <= 1024


def test_help_prints_usage_and_writes_nothing(tmp_path: Path) -> None:
    """`--help` is not a directory name: it prints the usage and leaves the directory empty; an
    unknown option is refused the same way, and a directory argument still gets the skills."""
    for flag in ("--help", "-h"):
        out = subprocess.run(
            [sys.executable, "-m", "stateflow.skills", flag], capture_output=True, text=True, cwd=tmp_path
        )
        assert out.returncode == 0 and out.stdout.startswith("usage: python3 -m stateflow.skills"), out
        assert "python3 -m stateflow.skills .claude/skills" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "stateflow.skills", "--into"], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 2 and "unrecognized arguments: --into" in out.stderr
    assert list(tmp_path.iterdir()) == []
    out = subprocess.run(
        [sys.executable, "-m", "stateflow.skills", "skills"], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0 and (tmp_path / "skills" / "state-flow-memory" / "SKILL.md").is_file()


def test_a_directory_that_cannot_be_written_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").touch()
    out = subprocess.run(
        [sys.executable, "-m", "stateflow.skills", "a-file"], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith(
        "python3 -m stateflow.skills: error: cannot write a-file/state-flow-memory: "
    )
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
