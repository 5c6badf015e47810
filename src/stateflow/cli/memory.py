"""Memory commands: ``stateflow tool``, ``context``, ``history``, ``respond``, ``session``."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import click

from stateflow.cli.common import (
    Context,
    IntRange,
    echo_json,
    file_option,
    pass_context,
    read_json_arg,
    refusals,
    visible,
)
from stateflow.config import Config, InvalidConfig
from stateflow.doc.canonical import ascii_digits
from stateflow.doc.diff import diff, to_patch
from stateflow.errors import InvalidInput
from stateflow.extras import needs_extra
from stateflow.memory import Identity, MemoryConfig, MemoryView, parse_scopes, shown
from stateflow.memory.scopes import DEFAULT_SESSION, SESSION_ENV
from stateflow.store.open import sqlite_file
from stateflow.tools import MEMORY_TOOLS, TITLES, ToolHost, offers_memory, unknown_tool, writes

KNOWLEDGE_ENV = "STATEFLOW_KNOWLEDGE_ROOTS"
HOT_BUDGET_ENV = "STATEFLOW_HOT_BUDGET"


class RootsPath(click.Path):
    """A knowledge root directory; in ``$STATEFLOW_KNOWLEDGE_ROOTS`` an empty entry (a stray
    separator, ``notes:``) names no root, as ``/mcp`` reads the variable — click would make it
    the current directory, which would silently widen the roots."""

    def split_envvar_value(self, rv: str) -> Sequence[str]:
        return [root for root in rv.split(os.pathsep) if root]


def hot_budget(given: int | None) -> int | None:
    """``--hot-budget``, else ``$STATEFLOW_HOT_BUDGET`` (unset or empty: none), read here rather
    than by click, whose refusal would name the flag the user never typed: a malformed value is
    ``invalid-config`` naming the variable, as every ``STATEFLOW_*`` setting's is."""
    raw = os.environ.get(HOT_BUDGET_ENV) if given is None else None
    if not raw:
        return given
    if not ascii_digits(raw) or int(raw) < 1:
        raise InvalidConfig(
            f"{HOT_BUDGET_ENV}: must be a positive whole number of bytes, not {visible(repr(raw))}"
        )
    return int(raw)


def knowledge_roots(given: Sequence[Path]) -> tuple[Path, ...]:
    """``--knowledge-root`` (each), else ``$STATEFLOW_KNOWLEDGE_ROOTS`` (``os.pathsep``-separated;
    an empty entry names no root), held to the flag's rule — a root that exists is a directory —
    and refused naming the variable (see :func:`hot_budget`)."""
    if given:
        return tuple(given)
    roots = tuple(Path(root) for root in RootsPath().split_envvar_value(os.environ.get(KNOWLEDGE_ENV, "")))
    for root in roots:
        if root.exists() and not root.is_dir():
            raise InvalidConfig(f"{KNOWLEDGE_ENV}: {visible(str(root))} is not a directory")
    return roots


def memory_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options that pick a memory view: agent, cwd, session, scopes, limits, mode."""
    options = [
        click.option("--agent", default="default", show_default=True, help="Agent whose memory this is."),
        click.option(
            "--cwd",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Working directory of the cwd scope [default: the current directory].",
        ),
        click.option(
            "--session",
            default=None,
            envvar=SESSION_ENV,  # read here, at the edge
            help=f"Session id [default: ${SESSION_ENV}, else {DEFAULT_SESSION!r}].",
        ),
        click.option("--scopes", default="global,cwd,session", show_default=True, help="Wanted scopes."),
        click.option(
            "--history-limit",
            type=IntRange(0, 100),
            default=7,
            show_default=True,
            help="Model-facing history depth.",
        ),
        click.option(
            "--mode",
            type=click.Choice(["active", "passive", "off"]),
            default="active",
            show_default=True,
            help="active: responses recorded and shown; passive: tools on, responses neither; "
            "off: no memory tools and no context.",
        ),
        click.option(
            "--hot-budget",
            type=IntRange(1),
            default=None,  # (its variable is read by make_view: a bad value names the variable)
            help=f"Refuse patches that grow the hot state beyond this many bytes [env {HOT_BUDGET_ENV}].",
        ),
        click.option(
            "--knowledge-root",
            "knowledge_roots",
            multiple=True,
            type=RootsPath(file_okay=False, path_type=Path),  # (its variable: see knowledge_roots)
            help=f"A directory of Markdown knowledge; artifact sources may live there or in the cwd "
            f"(repeatable) [env {KNOWLEDGE_ENV}, {os.pathsep}-separated].",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def make_view(
    ctx: Context,
    kw: dict[str, Any],
    *,
    reads: bool = False,
    existing: bool = False,
    deferred: bool = False,
    creator: str | None = None,
) -> MemoryView:
    """The memory view the options pick: on a store only read (``reads``), one that must exist
    already (``existing``), or one created if missing — when first used if ``deferred``, so a
    call refused for its arguments creates no store. ``creator`` (``"hook"``): a command that
    creates a missing SQLite store at once names the file it created on stderr."""
    budget = hot_budget(kw.pop("hot_budget"))
    roots = tuple(str(p.expanduser().resolve()) for p in knowledge_roots(kw.pop("knowledge_roots")))
    identity = Identity.of(kw.pop("agent"), kw.pop("cwd"), kw.pop("session"))
    config = MemoryConfig(
        history_limit=kw.pop("history_limit"),
        mode=kw.pop("mode"),
        knowledge_roots=roots,
        hot_budget=budget,
        runtime_dir=shown.default_dir(),  # one process shows the context, another takes the patch
    )
    scopes = parse_scopes(kw.pop("scopes"))
    identity.keys(scopes)  # a scope the identity cannot key (a cwd not UTF-8) opens no store
    new = sqlite_file(ctx.store_location) if creator is not None else None
    if new is not None and new.exists():
        new = None
    if reads:
        store = ctx.reader()
    else:
        store = ctx.existing() if existing else ctx.deferred() if deferred else ctx.store()
    if new is not None:
        # a command that must serve a project's first turn creates its store rather than refuse
        # it; a mistyped --store then shows as a new, empty store, so say which file it made
        click.echo(
            f"warning: no store was at {visible(str(new))}: this {creator} created it, empty. If the server and "
            "hooks should use another, fix the store they name (--store in .claude/settings.json "
            "and .mcp.json, or STATEFLOW_STORE)",
            err=True,
        )
    return MemoryView(store, identity, scopes, config)


_VIEW_OPTIONS = (
    "agent",
    "cwd",
    "session",
    "scopes",
    "history_limit",
    "mode",
    "knowledge_roots",
    "hot_budget",
)


def with_view(
    fn: Callable[..., Any],
    *,
    reads: bool = False,
    existing: bool = False,
    deferred: bool = False,
    creator: str | None = None,
    before: Callable[[], object] | None = None,
) -> Callable[..., Any]:
    """Turn ``fn(view, **own_options)`` into a command taking the memory options (``reads``:
    the command only reads, ``existing``: it changes memory already there — either way a
    missing store is refused, not created; ``deferred``, ``creator``: see :func:`make_view`;
    ``before``: a check that runs before the store is opened, such as a missing extra's, so
    that its refusal changes nothing)."""

    @functools.wraps(fn)
    def wrapper(ctx: Context, **kw: Any) -> Any:
        own = {k: kw.pop(k) for k in list(kw) if k not in _VIEW_OPTIONS}
        if before is not None:
            before()
        view = make_view(ctx, kw, reads=reads, existing=existing, deferred=deferred, creator=creator)
        return fn(view, **own)

    return memory_options(pass_context(cast(Callable[..., Any], refusals(wrapper))))


def reading_view(fn: Callable[..., Any]) -> Callable[..., Any]:
    return with_view(fn, reads=True)


def changing_view(fn: Callable[..., Any]) -> Callable[..., Any]:
    return with_view(fn, existing=True)


def tool_host(view: MemoryView, state_names: Sequence[str] | None = None) -> ToolHost:
    """The memory tools plus the declared-state tools (limited to ``state_names`` when given)."""
    from stateflow.api import states_service  # only the state_* tools need the states layer

    states = states_service(view.store, Config.from_env())  # the CLI edge parses it
    for name in state_names or ():
        states.get_declaration(name)  # an unknown name is refused before serving
    return ToolHost(view, states, state_names)


@click.command("tool")
# a plain name, not a choice: an unknown one is refused by the dispatcher, as at every door
# (error[unknown-tool], exit 1), not with a usage screen
@click.argument("name", metavar="TOOL")
@click.argument("arguments", required=False)
@file_option("the arguments")
@memory_options
@pass_context
@refusals
def tool(ctx: Context, /, name: str, arguments: str | None, file: Path | None, **kw: Any) -> None:
    """Call an LLM tool with ARGUMENTS (JSON; '-' reads stdin) and print exactly its result.

    TOOL is read_state or patch_state, or a declared-state tool: state_read, state_replace,
    state_merge, state_apply, state_template_jq.
    """
    # (read as the MCP doors read a call's arguments: the tool refuses a NaN naming its place)
    args = read_json_arg(arguments, file, "ARGUMENTS", exact_integers=True, nonfinite=True)
    if name not in TITLES:
        # every tool this command takes, memory and state tools alike (a host without the states
        # layer knows only its own two) — the memory tools not with memory off, as a host offers
        # them —, refused before any store is opened
        memory = offers_memory(kw["mode"])
        result = unknown_tool(name, [t for t in TITLES if memory or t not in MEMORY_TOOLS])
    else:
        # a read never creates a store, nor does a write its own arguments refuse
        view = make_view(ctx, kw, reads=not writes(name), deferred=True)
        host = tool_host(view) if name.startswith("state_") else ToolHost(view)
        result = host.call(name, args)
    if result.is_error:
        click.echo(f"error[{result.code}]: {visible(result.text, lines=True)}", err=True)
        sys.exit(1)
    sys.stdout.write(result.text + "\n")


@click.command("context")
@click.option("--json", "as_json", is_flag=True, help="Print {projection, head} as JSON instead of the text.")
@reading_view
def context(view: MemoryView, as_json: bool) -> None:
    """Print the baseline context a model sees at the start of a turn."""
    rendered = view.context()
    if as_json:
        echo_json({"projection": rendered.projection, "head": rendered.head, "hot_bytes": rendered.hot_bytes})
    else:
        sys.stdout.write(rendered.text())


@click.command("respond")
@click.argument("text")
@functools.partial(with_view, deferred=True)
def respond(view: MemoryView, text: str) -> None:
    """Record TEXT as the session's latest accepted answer ('-' reads stdin); an empty TEXT
    clears it.

    Refused when --scopes leaves out the session scope, or with --mode off; with --mode
    passive nothing is recorded, and it says so.
    """
    if text == "-":  # bytes that are not UTF-8 kept as surrogates, as in an argument: refused by name
        text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    changed = view.record_response(text)
    if view.config.mode == "passive":
        said = "response not recorded: passive mode records no responses"
    else:
        said = "response unchanged" if not changed else "response recorded" if text else "response cleared"
    click.echo(said, err=True)


@click.group("history")
def history() -> None:
    """Operators' view of memory history at any retained depth."""


@history.command("list")
@click.option(
    "--limit",
    type=IntRange(1, 10_000),
    default=20,
    show_default=True,
    help="Show at most this many transitions.",
)
@reading_view
def history_list(view: MemoryView, limit: int) -> None:
    """Transitions that changed the selected scopes, newest first, with their patches as the
    view shows them (passive mode leaves a response out). The transition at position N (from 0)
    leads from offset N+1 to offset N of `history show`."""
    echo_json(view.transitions(limit))


# Without --path the operator commands answer the whole effective state, lazy planes included
# (a lazy-only change would otherwise diff as {}, "unchanged"); a path reads as read_state does.
_WHOLE_STATE = (
    "A read_state path (no history offset); `effective` is the hot view, as read_state answers "
    "it. [default: the whole effective state, lazy planes included]"
)


@history.command("show")
@click.argument("offset", type=IntRange(0))
@click.option("--path", default=None, help=_WHOLE_STATE)
@reading_view
def history_show(view: MemoryView, offset: int, path: str | None) -> None:
    """The value at PATH as it was OFFSET transitions ago (any retained depth)."""
    echo_json(view.as_of(offset, path or "effective", lazy=path is None))


@history.command("diff")
@click.argument("older", type=IntRange(0))
@click.argument("newer", type=IntRange(0), default=0)
@click.option("--path", default=None, help=_WHOLE_STATE)
@reading_view
def history_diff(view: MemoryView, older: int, newer: int, path: str | None) -> None:
    """The semantic patch from OLDER to NEWER offsets (default: now) at PATH."""
    if older < newer:
        raise InvalidInput("OLDER must be an offset at least as deep as NEWER")
    at, lazy = path or "effective", path is None
    echo_json(to_patch(diff(view.as_of(older, at, lazy=lazy), view.as_of(newer, at, lazy=lazy))))


@click.group("session")
def session() -> None:
    """Fork a session or restore it to a retained boundary."""


@session.command("fork")
@click.argument("new_session")
@click.option(
    "--at",
    "offset",
    type=IntRange(0),
    default=0,
    show_default=True,
    help="History offset to copy (any retained depth).",
)
@changing_view
def session_fork(view: MemoryView, new_session: str, offset: int) -> None:
    """Start NEW_SESSION with this session's memory as of --at."""
    view.fork(new_session, offset)
    click.echo(f"forked {view.identity.session} → {new_session}", err=True)


@session.command("restore")
@click.argument("offset", type=IntRange(1))
@changing_view
def session_restore(view: MemoryView, offset: int) -> None:
    """Set the session back to its state OFFSET transitions ago, at any retained depth (as a new
    transition)."""
    changed = view.restore(offset)
    click.echo("restored" if changed else "already at that state", err=True)


COMMANDS = [tool, context, respond, history, session]


def _state_names(values: tuple[str, ...]) -> list[str] | None:
    """``--states a,b --states c`` → names; ``*`` → every declared state; none → no state tools."""
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if not names:
        return None
    return [] if names == ["*"] else names


def _mcp_server() -> ModuleType:
    """The MCP server module, or the refusal naming the extra it needs (before any store is
    opened: a command refused for a missing extra creates nothing)."""
    with needs_extra("mcp", "stateflow mcp"):
        import stateflow.mcp.server as server
    return server


@click.command("mcp")
@click.option(
    "--states",
    "states",
    multiple=True,
    metavar="NAME[,NAME…]",
    help="Also serve the declared-state tools (state_read, state_merge, …) for these states; "
    "'*' for every declared state. Agent memory stays writable only through patch_state.",
)
@click.option(
    "--follow-hook-session",
    is_flag=True,
    help="Serve the session the latest `stateflow hook claude-code` of this agent and cwd named "
    "(--session until a hook has run): Claude Code does not tell an MCP server its conversation.",
)
@functools.partial(with_view, creator="MCP server", before=_mcp_server)
def mcp_server(view: MemoryView, states: tuple[str, ...], follow_hook_session: bool) -> None:
    """Serve read_state and patch_state (and, with --states, declared-state tools) over stdio."""
    serve_stdio = _mcp_server().serve_stdio

    names = _state_names(states)

    def host(of: MemoryView) -> ToolHost:
        return ToolHost(of) if names is None else tool_host(of, names or None)

    if not follow_hook_session:
        serve_stdio(host(view))
        return
    from stateflow.cli.hooks import hook_session

    hosts: dict[str, ToolHost] = {}

    def host_for(_request: Any) -> ToolHost:
        ident = view.identity
        session = hook_session(view.store.url, ident.agent, ident.cwd) or ident.session
        if session not in hosts:
            identity = Identity.of(ident.agent, ident.cwd, session)
            hosts[session] = host(MemoryView(view.store, identity, view.scopes, view.config))
        return hosts[session]

    serve_stdio(host(view), host_for)


COMMANDS.append(mcp_server)


@click.group("knowledge")
def knowledge() -> None:
    """Knowledge sources: Markdown under the --knowledge-root directories and their cards."""


def _roots_given(view: MemoryView) -> None:
    if not view.config.knowledge_roots:
        raise InvalidInput(
            f"no knowledge root is configured: pass --knowledge-root DIR (repeatable) or set {KNOWLEDGE_ENV}"
        )


@knowledge.command("status")
@reading_view
def knowledge_status(view: MemoryView) -> None:
    """Per root: available (else freshness unknown), its *.md sources, those without a card,
    and the cards whose source changed (stale) or is missing."""
    _roots_given(view)
    echo_json(view.knowledge_status())


@knowledge.command("scan")
@changing_view
def knowledge_scan(view: MemoryView) -> None:
    """Prune the cards whose Markdown source inside an available root is confirmed missing (one
    transition; an unavailable root prunes nothing), then print the status."""
    _roots_given(view)
    pruned = view.prune_knowledge()
    echo_json({"pruned": pruned, "roots": view.knowledge_status()})


COMMANDS.append(knowledge)
