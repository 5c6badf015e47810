"""``stateflow setup claude-code``: wire memory into a Claude Code project.

Writes (or, with ``--dry-run``, prints) the project-scoped MCP server entry in ``.mcp.json`` and
the ``SessionStart`` / ``UserPromptSubmit`` command hooks in ``.claude/settings.json`` that add
the memory context of Claude Code's own conversation (``stateflow hook claude-code`` reads its
``session_id`` from the hook input) to the model's context; the server follows the session the
hooks name (formats: https://code.claude.com/docs/en/mcp and https://code.claude.com/docs/en/hooks).
Existing entries of other servers and hooks are kept; our own entries are replaced, so running it
again is harmless (a hook is ours when it runs a ``stateflow`` executable, whatever path names
it, with ``hook claude-code``), and a full path the user gave the server's command is kept. A
store URL holding a password is refused (both files are meant to be
committed), and so is a store path, agent or session that is not UTF-8 (a folder's name holding
other bytes: JSON can only hold it escaped, naming nothing); both files are checked before either
is written.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from stateflow.cli.common import IntRange, refusals, visible
from stateflow.cli.examples import decorate
from stateflow.doc.canonical import utf8_text
from stateflow.errors import InvalidInput, TargetUnwritable
from stateflow.files import unwritable
from stateflow.store.open import absolute_location, display_location, holds_secret

SERVER = "stateflow"
EXECUTABLE = "stateflow"
HOOK_EVENTS = ("SessionStart", "UserPromptSubmit")


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        value = json.loads(path.read_text())
    except OSError as exc:  # a directory, or no permission: setup could not write it either
        raise unwritable(path, exc) from exc
    except ValueError as exc:
        raise InvalidInput(f"{path} is not valid JSON ({exc}); fix or move it, then run setup again") from exc
    if not isinstance(value, dict):
        raise InvalidInput(f"{path} must hold a JSON object")
    return value


def _check_writable(path: Path, project: Path) -> None:
    """Refuse ``path`` as the operating system would, before anything is written: setup writes
    two files, and one refused half-way would wire the server without the hooks. A path that
    a symbolic link leads out of ``project`` (a cloned repository's ``.mcp.json`` or
    ``.claude``, dangling or not) is refused too: setup writes into the project only."""
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(project):
        raise TargetUnwritable(
            f"cannot write {path}: a symbolic link leads it out of the project, to {real}; "
            "remove the link (or write the file there yourself), then run setup again"
        )
    level = path.parent
    while not os.path.lexists(level):  # the folders setup would create
        level = level.parent
    if not level.is_dir():
        raise TargetUnwritable(
            f"cannot write {path}: {level} is not a directory; move it, then run setup again"
        )
    if path.is_dir():
        raise TargetUnwritable(f"cannot write {path}: it is a directory")
    if not os.access(path, os.W_OK) if path.exists() else not os.access(level, os.W_OK | os.X_OK):
        raise TargetUnwritable(f"cannot write {path}: permission denied")


def plan(
    project: Path, agent: str, session: str, store: str | None, hot_budget: int | None = None
) -> dict[Path, dict[str, Any]]:
    """The two files' new contents (existing content merged)."""
    mcp_path, settings_path = project / ".mcp.json", project / ".claude" / "settings.json"
    if store and holds_secret(store):
        # both files are meant to be committed, and the store would sit on every command line
        raise InvalidInput(
            f"the store {display_location(store)} holds a password, which setup would copy into "
            f"{mcp_path} and {settings_path} (files meant to be committed) and onto the command line "
            "of the server and every hook; nothing was written. Take it out of the URL (libpq reads "
            "it from ~/.pgpass, or from PGPASSWORD in the environment Claude Code runs in) and run "
            "setup again, or run setup with --no-store: the server and hooks then use the store "
            "STATEFLOW_STORE or stateflow.toml names when Claude Code starts them"
        )
    for what, value in (("the store path", store), ("--agent", agent), ("--session", session)):
        if value and not utf8_text(value):
            # JSON holds such a name only escaped (\udce9), which names no file and no identity
            # (a folder's name, or an argument, holding bytes that are not UTF-8)
            shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise InvalidInput(
                f"{what} '{shown}' is not UTF-8 text, which {mcp_path.name} and {settings_path.name} "
                "(JSON) can hold only escaped, naming nothing that exists; nothing was written. "
                + (
                    "Name a store whose path is UTF-8 with --store, or run setup with --no-store: the "
                    "server and hooks then use the store STATEFLOW_STORE or stateflow.toml names"
                    if what == "the store path"
                    else f"Give {what} as UTF-8 text"
                )
            )
    common = ["--agent", agent, "--session", session]
    if hot_budget is not None:
        common += ["--hot-budget", str(hot_budget)]
    if store:
        common = ["--store", store, *common]
    mcp = _load(mcp_path)
    servers = mcp.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise InvalidInput(f"{mcp_path}: mcpServers must be an object")
    store_args = common[:2] if store else []
    settings = _load(settings_path)
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InvalidInput(f"{settings_path}: hooks must be an object")
    executable = _kept_executable(servers.get(SERVER), hooks) or EXECUTABLE
    servers[SERVER] = {
        "command": executable,
        # no --cwd: Claude Code starts project servers in the project, and the file stays portable
        "args": [*store_args, "mcp", *common[len(store_args) :], "--follow-hook-session"],
    }
    context = shlex.join([executable, *store_args, "hook", "claude-code", *common[len(store_args) :]])
    command = f'{context} --cwd "$CLAUDE_PROJECT_DIR"'
    for event in HOOK_EVENTS:
        groups = hooks.get(event) or []
        if not isinstance(groups, list):
            raise InvalidInput(f"{settings_path}: hooks.{event} must be a list")
        for i, group in enumerate(groups):
            # Claude Code refuses a settings file with a malformed group as a whole: our hooks
            # added beside it would never run, so it is refused here, before anything is written
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list) or not all(isinstance(h, dict) for h in inner):
                raise InvalidInput(
                    f'{settings_path}: hooks.{event}[{i}] must be an object with a "hooks" list of objects'
                )
        previous = [kept for g in groups if (kept := _without_ours(g, command)) is not None]
        hooks[event] = [*previous, {"hooks": [{"type": "command", "command": command}]}]
    return {mcp_path: mcp, settings_path: settings}


def _names_stateflow(executable: str) -> bool:
    """Whether ``executable`` is stateflow's, whatever path names it (``/opt/venv/bin/stateflow``)."""
    return os.path.basename(executable) == EXECUTABLE


def _hook_words(hook: Any) -> list[str] | None:
    """A hook's command, split as its shell would, when it runs stateflow's own ``hook
    claude-code`` (or an earlier setup's ``context``); None for any other hook."""
    if not isinstance(hook, dict) or not isinstance(hook.get("command"), str):
        return None
    try:
        words = shlex.split(hook["command"])
    except ValueError:  # (unbalanced quotes: not a command setup wrote)
        return None
    if not words or not _names_stateflow(words[0]):
        return None
    rest = words[1:]
    hooked = any(rest[i : i + 2] == ["hook", "claude-code"] for i in range(len(rest)))
    return words if hooked or "context" in rest else None


def _kept_executable(server: Any, hooks: dict[str, Any]) -> str | None:
    """The stateflow executable the files already name — the server entry's ``command``, else
    the first of setup's own hooks' — kept as it is: a user who wrote its full path (Claude Code
    starts servers and hooks from the PATH of its own environment, where a virtual
    environment's ``bin`` is often missing) keeps it when setup runs again."""
    command = server.get("command") if isinstance(server, dict) else None
    if isinstance(command, str) and _names_stateflow(command):
        return command
    for event in HOOK_EVENTS:
        groups = hooks.get(event)
        for group in groups if isinstance(groups, list) else []:
            inner = group.get("hooks") if isinstance(group, dict) else None  # (checked in plan)
            for hook in inner if isinstance(inner, list) else []:
                if (words := _hook_words(hook)) is not None:
                    return words[0]
    return None


def _ours(hook: Any, command: str) -> bool:
    """A hook this or an earlier setup wrote (any agent, session, store or path naming the
    executable): replaced, never duplicated."""
    return isinstance(hook, dict) and (hook.get("command") == command or _hook_words(hook) is not None)


def _without_ours(group: dict[str, Any], command: str) -> dict[str, Any] | None:
    """``group`` without our hooks: a group holds several hooks (and a ``matcher``), and the
    user's own ones in it stay where they are; None when only ours were in it."""
    hooks = group["hooks"]
    if not any(_ours(h, command) for h in hooks):
        return group
    kept = [h for h in hooks if not _ours(h, command)]
    return {**group, "hooks": kept} if kept else None


def _not_on_path() -> str:
    """The warning for a bare ``stateflow`` command that does not resolve here (run from a
    virtual environment not on PATH): Claude Code would fail to start the server and hooks."""
    running = sys.argv[0] if _names_stateflow(sys.argv[0]) else None
    full = os.path.abspath(running) if running and os.path.isfile(running) else None
    return (
        f"warning: {EXECUTABLE} is not on PATH here, and Claude Code starts the server and the hooks "
        f'with the PATH of its own environment: "command": "{EXECUTABLE}" may fail there (spawn '
        f"{EXECUTABLE} ENOENT). Put its directory on that PATH, or set the {SERVER} server's "
        f'"command" in .mcp.json to its full path{f" ({visible(full)})" if full else ""} and run setup again: '
        "setup keeps that path, and gives it to the hooks too"
    )


@click.group("setup")
def setup() -> None:
    """Wire memory into an agent runtime."""


@setup.command("claude-code")
@click.option(
    "--project",
    type=click.Path(exists=True, file_okay=False, path_type=Path),  # a typo creates no tree
    default=".",
    show_default=True,
    help="The project directory (where .mcp.json and .claude/ live).",
)
@click.option("--agent", default="claude-code", show_default=True)
@click.option(
    "--session",
    default="claude-code",
    show_default=True,
    help="The session used until a hook names Claude Code's own (and when its input has none).",
)
@click.option(
    "--hot-budget",
    type=IntRange(min=1),
    default=None,
    help="Give the server a hot budget (bytes): Claude Code cuts a hook's context at 10,000 "
    "characters, so keep the hot state well below.",
)
@click.option(
    "--no-store",
    is_flag=True,
    help="Pass no store to the server and hooks: they use the one STATEFLOW_STORE or "
    "stateflow.toml names when Claude Code starts them (a store whose URL holds a password is "
    "never written into the files).",
)
@click.option("--dry-run", is_flag=True, help="Print the files instead of writing them.")
@click.pass_obj
@refusals
def claude_code(
    obj: Any,
    project: Path,
    agent: str,
    session: str,
    hot_budget: int | None,
    no_store: bool,
    dry_run: bool,
) -> None:
    """Add the MCP server and the context hooks to a Claude Code project (.mcp.json, .claude/settings.json).

    Both run "stateflow" from Claude Code's PATH (a warning says when it is not on this one); a
    full path you set as the server's "command" in .mcp.json is kept, and the hooks use it too.
    """
    project = project.expanduser().resolve()
    store = None if no_store else getattr(obj, "store_location", None)
    # Claude Code starts the server and the hooks in the project: a path relative to here would
    # name another (new, empty) store there
    files = plan(project, agent, session, absolute_location(store) if store else None, hot_budget)
    if not dry_run:
        for path in files:
            _check_writable(path, project)
    executable = files[project / ".mcp.json"]["mcpServers"][SERVER]["command"]
    if executable == EXECUTABLE and shutil.which(EXECUTABLE) is None:
        click.echo(_not_on_path(), err=True)
    for path, content in files.items():
        text = json.dumps(content, indent=2) + "\n"
        if dry_run:
            click.echo(f"# {visible(str(path))}")
            click.echo(text, nl=False)
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as exc:  # checked above: only a full disk or a race gets here
            raise unwritable(path, exc) from exc
        click.echo(f"wrote {visible(str(path))}", err=True)


decorate(setup, "setup")
