"""``stateflow hook claude-code``: the context hook Claude Code runs at session start and on
every prompt.

Claude Code runs a command hook with a JSON object on standard input naming its conversation
(``session_id``), its working directory (``cwd``) and the event (``hook_event_name``); a
``SessionStart`` or ``UserPromptSubmit`` hook adds context by printing
``{"hookSpecificOutput": {"hookEventName": …, "additionalContext": …}}`` (reference:
https://code.claude.com/docs/en/hooks). The hook shows the memory of that conversation and
records it as the project's current Claude Code session, which ``stateflow mcp
--follow-hook-session`` then serves: Claude Code does not tell an MCP server which conversation
it belongs to.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

import click

from stateflow.cli.common import Context, pass_context, refusals, visible
from stateflow.cli.examples import decorate
from stateflow.cli.memory import make_view, memory_options
from stateflow.errors import InvalidInput
from stateflow.memory import Identity, shown

CONTEXT_EVENTS: Final = ("SessionStart", "UserPromptSubmit")
CLAUDE_CODE_CAP: Final = 10_000
"""Claude Code's cap on the context a hook adds (characters): a longer text is saved to a file
and the model gets a preview and the file's path instead (hooks reference, "Hook output")."""


def _record_path(store_url: str, agent: str, cwd: str) -> Path:
    # (a cwd that is not UTF-8 is refused only for the cwd scope: a session-only hook records too)
    name = hashlib.sha256(f"{store_url}\0{agent}\0{cwd}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return Path(shown.default_dir()) / "hook-sessions" / f"{name}.json"


def record_session(store_url: str, identity: Identity) -> None:
    """Remember ``identity.session`` as the current conversation of this agent and project.

    A runtime directory that cannot be written costs only that record: the hook warns and still
    gives the turn its context (without it the model would see no memory at all)."""
    path = _record_path(store_url, identity.agent, identity.cwd)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".session-")
        with os.fdopen(fd, "w") as out:
            json.dump({"session": identity.session}, out)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        click.echo(
            f"warning: cannot record the session in {visible(str(path.parent))} ({exc.strerror or exc}), so "
            f"stateflow mcp --follow-hook-session cannot follow it; set {shown.DIR_ENV} to a "
            "writable directory",
            err=True,
        )


def hook_session(store_url: str, agent: str, cwd: str) -> str | None:
    """The session the latest context hook of this agent and project named, if any."""
    try:
        value = json.loads(_record_path(store_url, agent, cwd).read_text()).get("session")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _hook_input() -> dict[str, Any]:
    text = sys.stdin.buffer.read()  # bytes: a text stream may fail to decode them before json can refuse
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError as exc:  # (UnicodeDecodeError included)
        raise InvalidInput(f"the hook input on stdin is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise InvalidInput("the hook input on stdin must be a JSON object")
    return value


@click.group("hook")
def hook() -> None:
    """Hooks an agent runtime runs (they read its event from stdin)."""


@hook.command("claude-code")
@memory_options
@pass_context
@refusals
def claude_code_hook(ctx: Context, /, **kw: Any) -> None:
    """Print the memory context of the Claude Code conversation named on stdin, as Claude Code's
    hookSpecificOutput.additionalContext (SessionStart, UserPromptSubmit).

    A missing store is created, as by patch_state (a warning on stderr names it)."""
    event = _hook_input()
    name = event.get("hook_event_name", "SessionStart")
    if name not in CONTEXT_EVENTS:
        raise InvalidInput(f"hook event {name!r} cannot add context; use it for {', '.join(CONTEXT_EVENTS)}")
    if isinstance(event.get("session_id"), str) and event["session_id"]:
        kw["session"] = event["session_id"]
    if kw.get("cwd") is None and isinstance(event.get("cwd"), str) and event["cwd"]:
        kw["cwd"] = Path(event["cwd"])
    # The first hook of a new project creates the store (and its directories), as its server
    # does: refusing a missing one would fail a project's first turn, which may well come before
    # the server's first write (``make_view`` names the file it created).
    view = make_view(ctx, dict(kw), reads=False, creator="hook")
    record_session(view.store.url, view.identity)
    if view.config.knowledge_roots:
        view.prune_knowledge()  # before inference, as a scan would: cards of deleted Markdown go
    context = view.context()
    text = context.text(max_chars=CLAUDE_CODE_CAP)
    if len(text) > CLAUDE_CODE_CAP:
        click.echo(
            f"warning: the memory context is {len(text)} characters, over Claude Code's "
            f"{CLAUDE_CODE_CAP}-character cap for hook output (it shows the model a preview and a "
            f"file path instead): the hot state alone is {context.hot_bytes} bytes; move large "
            "values to lazy, and give the server and hooks a hot budget "
            "(stateflow setup claude-code --hot-budget 5000)",
            err=True,
        )
    output = {"hookEventName": name, "additionalContext": text}
    click.echo(json.dumps({"hookSpecificOutput": output}))


decorate(hook, "hook")
