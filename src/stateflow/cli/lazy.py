"""A command group whose heavier subcommands are imported only when they run.

Every CLI call starts a fresh interpreter, so what the entry module imports is paid by every
command: a memory read must not wait for the HTTP server, the states layer or the MCP SDK to
load. Commands listed here are named by ``module:attribute`` and loaded on first use (listing
them, as ``--help`` does, loads them all).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click


class LazyGroup(click.Group):
    def __init__(self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy_commands])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_commands.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            # click suggests from the commands loaded; the lazy ones count too (by name: none loads)
            names = [*self.commands, *self.lazy_commands]
            raise click.exceptions.NoSuchCommand(exc.command_name, possibilities=names, ctx=ctx) from None
