"""One runnable example per command, shown at the end of its ``--help``, and the options every
command shares: ``--store`` after the subcommand too, and ``--json``/``--table`` where a command
prints a listing."""

from __future__ import annotations

from typing import Final

import click

R: Final = "--target-name bot --key t-1"
EXAMPLES: Final = {
    "context": "stateflow context --agent coder --json",
    "doc get": "stateflow doc get notes n-1 --revision 1",
    "doc history": "stateflow doc history notes n-1 --limit 5",
    "doc patch": "stateflow doc patch notes n-1 '{\"done\": true}' --expect 1",
    "doc put": 'stateflow doc put notes n-1 \'{"title": "hello"}\'',
    "history diff": "stateflow history diff 3 --path effective.tactics",
    "hook claude-code": 'stateflow hook claude-code --agent coder < hook-input.json  # {"session_id": …, "hook_event_name": "SessionStart"}',
    "knowledge scan": "stateflow knowledge scan --knowledge-root ~/notes",
    "knowledge status": "stateflow knowledge status --knowledge-root ~/notes",
    "history list": "stateflow history list --limit 10",
    "backup": "stateflow backup ./stateflow-backup.db",
    "check": "stateflow check --json",
    "config show": "stateflow config show",
    "dump": "stateflow dump store.jsonl",
    "history show": "stateflow history show 2 --path effective",
    "import-state-flow": "stateflow import-state-flow ~/.state-flow --agent coder",
    "load": "stateflow --store postgresql://localhost/stateflow load store.jsonl",
    "token create": "stateflow token create --read --target agent/alice",
    "token revoke": "stateflow token revoke token:1a2b3c4d5e6f  # a fingerprint as `stateflow token show` lists it",
    "token show": "stateflow token show",
    "mcp": "stateflow mcp --agent coder",
    "migrate": "stateflow --store postgresql://localhost/stateflow migrate",
    "respond": "stateflow respond 'Done: the tests pass.'",
    "serve": 'stateflow serve --port 8765 --token "$SECRET"',
    "session fork": "stateflow session fork try-2 --at 3",
    "setup claude-code": "stateflow setup claude-code --agent coder --dry-run",
    "session restore": "stateflow session restore 2",
    "state-templates delete": "stateflow state-templates delete checklist",
    "state-templates get": "stateflow state-templates get checklist",
    "state-templates list": "stateflow state-templates list --table",
    "state-templates put": "stateflow state-templates put checklist --file checklist.json --replace",
    "states apply": f'stateflow states apply tickets {R} --data \'[{{"op": "set", "path": ["status"], "value": "closed"}}]\' --op-id close-t-1',
    "states attach": 'stateflow states attach tickets checklist --data \'{"path": ["todo"]}\'',
    "states attachments": "stateflow states attachments tickets",
    "states consumers": "stateflow states consumers tickets",
    "states delete": "stateflow states delete tickets --yes",
    "states detach": "stateflow states detach tickets checklist",
    "states diff": f"stateflow states diff tickets {R} --from 1 --to 3",
    "states erase": f"stateflow states erase tickets {R} --expect-revision 4",
    "states fold": f'stateflow states fold tickets {R} --into \'{{"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "t-0"}}\' --mode merge',
    "states get": "stateflow states get tickets",
    "states get-attachment": "stateflow states get-attachment tickets checklist",
    "states list": "stateflow states list --table",
    "states merge": f'stateflow states merge tickets {R} --data \'{{"status": "open"}}\' --expect-revision 2 --consumer triage',
    "states prune": "stateflow states prune",
    "states put": "stateflow states put tickets --file tickets.json",
    "states read": f"stateflow states read tickets {R} --revision 1",
    "states replace": f'stateflow states replace tickets {R} --data \'{{"status": "open"}}\'',
    "states revert": f"stateflow states revert tickets {R} --revision 1",
    "states search": 'stateflow states search tickets --filters \'{"priority": {"$gte": 2}}\' --include-data',
    "states stats": "stateflow states stats tickets",
    "states subjects": "stateflow states subjects tickets --kind thread --limit 50",
    "states template-jq apply": f'stateflow states template-jq apply tickets {R} checklist.add --input \'{{"id": "a"}}\'',
    "states template-jq eval": f"stateflow states template-jq eval tickets {R} checklist.size",
    # (a template whose document has a ``declarations`` section: ``labels``, not ``checklist``)
    "states update-attachment": 'stateflow states update-attachment tickets labels --declarations \'{"kinds": ["bug"]}\'',
    "states writes": f"stateflow states writes tickets {R} --limit 20 --table",
    "tool": 'stateflow tool read_state \'{"path": "effective.tactics"}\'',
}


def _set_store(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        from stateflow.cli.common import Context

        obj = ctx.find_object(Context)
        if obj is not None:
            obj.store_location = value


def _set_output(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta["stateflow_output"] = param.name


STORE_OPTION: Final = "--store"


def decorate(command: click.Command, path: str = "", listing: frozenset[str] = frozenset()) -> None:
    """Give every leaf command under ``command`` its example and the shared options (once)."""
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            decorate(sub, f"{path} {name}".strip(), listing)
        return
    if getattr(command, "_stateflow_decorated", False):
        return
    command._stateflow_decorated = True  # type: ignore[attr-defined]
    example = EXAMPLES.get(path)
    if example is not None:
        command.epilog = f"\b\nExample:\n  {example}"
    command.params.append(
        click.Option(
            [STORE_OPTION],
            metavar="PATH|URL",
            expose_value=False,
            is_eager=True,
            callback=_set_store,
            help="The store (as `stateflow --store`; accepted here too).",
        )
    )
    if path in listing:
        for flag, what in (
            ("--json", "JSON (the default when piped)"),
            ("--table", "a table (the default on a terminal)"),
        ):
            command.params.append(
                click.Option(
                    [flag], is_flag=True, expose_value=False, callback=_set_output, help=f"Print {what}."
                )
            )


def output_mode() -> str | None:
    """``"json"``, ``"table"`` or None (decide by the terminal), from ``--json``/``--table``."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get("stateflow_output")
