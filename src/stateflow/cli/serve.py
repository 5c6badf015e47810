"""``stateflow serve``: the HTTP API on the configured store.

Every option may also come from the environment or ``stateflow.toml`` (``[server]``, ``[jq]``,
``[store]``); flags win over the environment, which wins over the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from stateflow.cli.common import Context, IntRange, pass_context, refusals, visible
from stateflow.cli.examples import decorate
from stateflow.config import Config
from stateflow.extras import MCP_OVER_HTTP, missing_for, needs_extra
from stateflow.store import resolve_store_url
from stateflow.store.open import display_location

if TYPE_CHECKING:
    from stateflow.states import StatesService
    from stateflow.store import Store


@click.command("serve")
@click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", default=None, type=IntRange(1, 65535), help="[default: 8765]")
@click.option(
    "--token",
    "tokens",
    multiple=True,
    help="SECRET[:read|:write][@kind/name,...] (repeatable; prefer --token-file or STATEFLOW_TOKENS: "
    "a command line is visible to other users). Without any, a token is created once and kept "
    "in the data directory (stateflow token show).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file of token specs, one per line; it replaces tokens given in the environment "
    "[env STATEFLOW_TOKEN_FILE; env STATEFLOW_TOKENS holds specs one per line].",
)
@click.option(
    "--workers",
    type=IntRange(1, 64),
    default=None,
    help="Server processes sharing the port [env STATEFLOW_WORKERS; default: 1]. More than one "
    "needs PostgreSQL or SQLite on a local disk.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default=None,
    help="info logs one line per request (the access log) [env STATEFLOW_LOG_LEVEL; default: info].",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="json: one JSON object per line [env STATEFLOW_LOG_FORMAT; default: text].",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    metavar="ORIGIN",
    help="Allow browser calls from this origin, e.g. https://app.example.com (repeatable; "
    "off by default) [env STATEFLOW_CORS_ORIGINS, space- or comma-separated].",
)
@pass_context
@refusals
def serve(
    ctx: Context,
    host: str | None,
    port: int | None,
    tokens: tuple[str, ...],
    token_file: Path | None,
    workers: int | None,
    log_level: str | None,
    log_format: str | None,
    cors_origins: tuple[str, ...],
) -> None:
    """Serve the declared-states HTTP API (the records of every state, agent memory included)."""
    with needs_extra("server", "stateflow serve"):
        from stateflow.http import access, server
        from stateflow.http.app import create_app  # noqa: F401  (names a missing extra now)

    flags = {
        "server": {
            "host": host,
            "port": port,
            "tokens": list(tokens) or None,
            "token_file": str(token_file) if token_file else None,
            "workers": workers,
            "log_level": log_level,
            "log_format": log_format,
            "cors_origins": list(cors_origins) or None,
        }
    }
    config, _ = ctx.settings(flags)
    settings = config.server
    # bound before any output: a port in use is one refusal, no banner
    sock = server.bind(settings.host, settings.port)
    token_specs, note = _token_specs(config)
    if note:
        click.echo(visible(note), err=True)
    base = f"http://{settings.host}:{settings.port}"
    # the banner names the store served, whichever the number of processes (a service log
    # then tells which store a deployment uses)
    links = f"studio on {base}/studio, API docs on {base}/docs"
    no_mcp = missing_for("mcp", MCP_OVER_HTTP, "stateflow.mcp.http")
    if no_mcp is not None:  # (the API and the studio serve all the same; /mcp answers this)
        links += f"\nnote: {no_mcp}"
    if settings.workers > 1:
        store = visible(display_location(resolve_store_url(ctx.store_location), absolute=True))
        click.echo(
            f"stateflow API on {base}/api/states (store: {store}; {settings.workers} processes)", err=True
        )
        click.echo(links, err=True)
        server.run_workers(sock, config, ctx.store_location, token_specs)
        return
    access.configure(settings.log_level, json_lines=settings.log_format == "json")
    service = _service(ctx.store(), config)
    app = server.build_app(service, config, token_specs)
    click.echo(f"stateflow API on {base}/api/states (store: {visible(ctx.store().url)})", err=True)
    click.echo(links, err=True)
    try:
        server.run(app, sock, on_stop=service.close, log_level="warning")
    finally:
        service.close()


def _token_specs(config: Config) -> tuple[list[str], str | None]:
    """The token specs in effect (validated), and a line to tell the operator, if any."""
    from stateflow.http.auth import (
        load_or_create_token,
        parse_tokens,
        read_token_file,
        token_file_in_effect,
        token_specs,
    )

    # flags beat the environment, which beats the file (one token setting, in either form: see
    # Config.from_layers); the operator is told which source is in effect, and a refusal names it
    # each given line read as a token file's is: `#` comments, several specs split at commas
    specs = [spec for given in config.server.tokens for spec in token_specs(given)]
    if specs:
        source = config.sources.get("server.tokens", "the configuration")
        named = [(f"{source}, token {n} of {len(specs)}", spec) for n, spec in enumerate(specs, 1)]
        return [t.spec for t in parse_tokens(named)], f"using the API tokens given by {source}"
    # the file `stateflow token` manages too (one resolution for both)
    where, given = token_file_in_effect(config)
    if given is not None:
        tokens = read_token_file(where, given)
        return [t.spec for t in tokens], f"using the API tokens in {where} ({given})"
    kept, created = load_or_create_token(where)
    if created:
        return [kept[0].spec], f"created an API token (kept in your data directory): {kept[0].secret}"
    return [t.spec for t in kept], "using the API tokens kept in your data directory (stateflow token show)"


def _service(store: Store, config: Config) -> StatesService:
    from stateflow.http.server import service_for

    return service_for(store, config)


decorate(serve, "serve")
