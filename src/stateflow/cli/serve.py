"""``stateflow serve``: the HTTP API on the configured store."""

from __future__ import annotations

import click

from stateflow.cli.common import Context, pass_context, refusals
from stateflow.cli.examples import decorate
from stateflow.errors import StoreNotMigrated
from stateflow.extras import needs_extra
from stateflow.http.auth import TokenSet, load_or_create_token, parse_token, token_specs_from_env


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--token",
    "tokens",
    multiple=True,
    help="SECRET[:read|:write][@kind/name,...] (repeatable) [env STATEFLOW_TOKENS]. "
    "Without any, a token is created once and kept in the data directory.",
)
@pass_context
@refusals
def serve(ctx: Context, host: str, port: int, tokens: tuple[str, ...]) -> None:
    """Serve the declared-states HTTP API (the records of every state, agent memory included)."""
    with needs_extra("server", "stateflow serve"):
        import uvicorn

        from stateflow.http.app import create_app
    from stateflow.states import StatesService

    specs = list(tokens) or token_specs_from_env()
    if specs:
        token_set = TokenSet([parse_token(s) for s in specs])
    else:
        token, created = load_or_create_token()
        if created:
            click.echo(f"created an API token (kept in your data directory): {token.secret}", err=True)
        else:
            click.echo("using the API token kept in your data directory (stateflow serve --help)", err=True)
        token_set = TokenSet([token])
    service = StatesService(ctx.store(), ctx.config)
    try:
        service.install_builtins()
    except StoreNotMigrated as exc:  # serve anyway: every route answers 501 until migrated
        click.echo(f"warning: {exc.message}", err=True)
    app = create_app(service, token_set, ctx.config.http)
    click.echo(f"stateflow API on http://{host}:{port}/api/states (store: {ctx.store().url})", err=True)
    click.echo(f"studio on http://{host}:{port}/studio, API docs on http://{host}:{port}/docs", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


decorate(serve, "serve")
