"""The SQLite-only install, and the refusal that names the extra a command needs.

Each case runs the real CLI in a fresh interpreter in which the extra's libraries cannot be
imported (as in an install without that extra).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stateflow.extras import EXTRAS

DECLARATION = (
    '{"schema": {"type": "object", "properties": {"text": {"type": "string"}}}, '
    '"subject_kinds": ["thread"], "default_subject_kind": "thread"}'
)
EVERY_EXTRA = [module for modules in EXTRAS.values() for module in modules]


def cli_without(missing: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        f"for name in {missing!r}: sys.modules[name] = None  # not installed\n"
        "from stateflow.cli.main import main\n"
        "sys.argv[0] = 'stateflow'\n"
        "sys.exit(main())\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_memory_and_states_work_without_any_extra(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    patch = cli_without(
        EVERY_EXTRA,
        "--store",
        db,
        "tool",
        "patch_state",
        '{"session": {"tactics": {"next": "a"}}}',
        cwd=tmp_path,
    )
    assert patch.returncode == 0, patch.stderr
    read = cli_without(
        EVERY_EXTRA, "--store", db, "tool", "read_state", '{"path": "session.tactics"}', cwd=tmp_path
    )
    assert read.stdout == '{"value":{"next":"a"}}\n'
    declare = cli_without(
        EVERY_EXTRA,
        "--store",
        db,
        "states",
        "put",
        "notes",
        "--data",
        DECLARATION,
        cwd=tmp_path,
    )
    assert declare.returncode == 0, declare.stderr
    state_read = cli_without(
        EVERY_EXTRA, "--store", db, "tool", "state_read", '{"state": "memory"}', cwd=tmp_path
    )
    assert state_read.returncode == 0, state_read.stderr


@pytest.mark.parametrize(
    ("extra", "args", "feature"),
    [
        (
            "postgres",
            ["--store", "postgresql://nobody@127.0.0.1:9/none", "doc", "get", "a", "b"],
            "a PostgreSQL store",
        ),
        ("server", ["--store", "s.db", "serve", "--port", "9"], "stateflow serve"),
        ("mcp", ["--store", "s.db", "mcp"], "stateflow mcp"),
    ],
)
def test_a_missing_extra_is_named_with_the_command_that_installs_it(
    tmp_path: Path, extra: str, args: list[str], feature: str
) -> None:
    for missing in EXTRAS[extra]:
        out = cli_without([missing], *args, cwd=tmp_path)
        assert out.returncode == 1
        assert out.stderr == (
            f"error[missing-extra]: {feature} needs the '{extra}' extra ({missing} is not installed): "
            f"python3 -m pip install 'stateflow[{extra}]'\n"
        )
