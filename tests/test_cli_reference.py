"""The command line as documented: every command appears in the docs and shows an example in
its --help; shared options work after the subcommand."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import click
import click.testing
import pytest

from stateflow.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def _commands(command: click.Command, path: list[str], ctx: click.Context) -> list[str]:
    if isinstance(command, click.Group):
        out = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            out += _commands(sub, [*path, name], ctx)
        return out
    return [" ".join(path)]


COMMANDS = _commands(cli, [], click.Context(cli))


def test_there_are_commands() -> None:
    assert "states read" in COMMANDS and "doc put" in COMMANDS and len(COMMANDS) > 30


@pytest.mark.parametrize("path", COMMANDS)
def test_every_command_is_documented_and_shows_an_example(path: str) -> None:
    assert f"stateflow {path}" in DOCS, f"`stateflow {path}` appears in no page of the docs"
    result = click.testing.CliRunner().invoke(cli, [*path.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert re.search(r"Example:\n\s+stateflow ", result.output), f"`stateflow {path} --help` shows no example"
    assert result.output.count("Example:") == 1, f"`stateflow {path} --help` shows its example twice"
    assert "--store PATH|URL" in result.output


def test_help_texts_read_whole(tmp_path: Path) -> None:
    """Summaries in `stateflow --help` are whole sentences (click cuts one at "e.g."), every
    memory command describes --mode, the token revoke example names a fingerprint in the form
    `token show` lists, and a payload given twice gets a sentence that says so."""
    ctx = click.Context(cli)
    assert isinstance(cli, click.Group)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        summary = command.get_short_help_str(limit=500)
        assert summary.count("(") == summary.count(")") and not summary.endswith("e.g."), (name, summary)
    runner = click.testing.CliRunner()
    for path in ("context", "tool", "respond", "mcp", "hook claude-code"):
        mode = next(p for p in cli_command(path).params if p.name == "mode")
        assert isinstance(mode, click.Option) and mode.help and "passive" in mode.help, path
    revoke = runner.invoke(cli, ["token", "revoke", "--help"]).output
    assert re.search(r"stateflow token revoke token:[0-9a-f]{12}\b", revoke), revoke
    both = subprocess.run(
        [
            "stateflow",
            "--store",
            str(tmp_path / "s.db"),
            "states",
            "put",
            "t",
            "--data",
            "{}",
            "--file",
            __file__,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        both.returncode == 2 and "Error: give the payload with --data or with --file, not both" in both.stderr
    )


def cli_command(path: str) -> click.Command:
    command: click.Command | None = cli
    for name in path.split():
        assert isinstance(command, click.Group)
        command = command.get_command(click.Context(cli), name)
    assert command is not None
    return command


def test_store_after_the_subcommand_and_the_output_switch(tmp_path: Path) -> None:
    db = str(tmp_path / "after.db")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60)

    assert run("migrate", "--store", db).returncode == 0
    listed = run("states", "list", "--store", db, "--json")
    assert listed.returncode == 0 and [d["name"] for d in json.loads(listed.stdout)] == ["memory"]
    table = run("states", "list", "--store", db, "--table")
    assert table.returncode == 0 and "┃ name" in table.stdout and "memory" in table.stdout
    put = run("doc", "put", "notes", "n-1", '{"a": 1}', "--store", db)
    assert put.returncode == 0 and json.loads(run("--store", db, "doc", "get", "notes", "n-1").stdout) == {
        "a": 1
    }
