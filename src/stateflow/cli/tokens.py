"""``stateflow token show|create|revoke``: the API tokens kept in a token file.

The file (default: ``api-token`` in the data directory, the one ``stateflow serve`` uses when
no token is configured) holds one spec per line and is written 0600. Secrets are printed only
when asked (``create`` prints the new one once; ``show --secrets``), never needed as arguments.
"""

from __future__ import annotations

from pathlib import Path

import click

from stateflow.cli.common import refusals
from stateflow.cli.examples import decorate
from stateflow.errors import InvalidInput, NotFound

token_file_option = click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="STATEFLOW_TOKEN_FILE",
    help="The token file [env STATEFLOW_TOKEN_FILE; default: api-token in the data directory].",
)


def _file(token_file: Path | None) -> Path:
    from stateflow.http.auth import default_token_file

    return token_file or default_token_file()


@click.group("token")
def token() -> None:
    """API tokens kept in a token file (what `stateflow serve` accepts)."""


@token.command("show")
@token_file_option
@click.option("--secrets", is_flag=True, help="Print the specs, secrets included.")
@refusals
def show(token_file: Path | None, secrets: bool) -> None:
    """List the kept tokens: fingerprint (as the audit trail shows it), access, targets."""
    from stateflow.http.auth import read_token_file

    path = _file(token_file)
    tokens = read_token_file(path)
    click.echo(f"# {path}", err=True)
    for kept in tokens:
        click.echo(kept.spec if secrets else kept.describe())


@token.command("create")
@token_file_option
@click.option("--read", "read_only", is_flag=True, help="Read and search only.")
@click.option(
    "--target", "targets", multiple=True, metavar="KIND/NAME", help="Limit to this tenant (repeatable)."
)
@refusals
def create(token_file: Path | None, read_only: bool, targets: tuple[str, ...]) -> None:
    """Add a new random token to the file and print its secret once."""
    from stateflow.http.auth import new_secret, parse_token, read_token_file, write_token_file

    path = _file(token_file)
    kept = read_token_file(path) if path.exists() else []
    spec = new_secret() + (":read" if read_only else "") + ("@" + ",".join(targets) if targets else "")
    new = parse_token(spec)  # validates the targets
    write_token_file(path, [t.spec for t in kept] + [new.spec])
    click.echo(f"created {new.describe()} in {path}; the secret (shown once):", err=True)
    click.echo(new.secret)


@token.command("revoke")
@click.argument("fingerprint")
@token_file_option
@refusals
def revoke(fingerprint: str, token_file: Path | None) -> None:
    """Remove the token with this fingerprint (``token:<12 hex>``, as `show` lists it)."""
    from stateflow.http.auth import read_token_file, write_token_file

    path = _file(token_file)
    wanted = fingerprint if fingerprint.startswith("token:") else f"token:{fingerprint}"
    kept = read_token_file(path)
    left = [t for t in kept if t.principal != wanted]
    if len(left) == len(kept):
        raise NotFound(f"no token {wanted} in {path} (stateflow token show lists them)")
    if not left:
        raise InvalidInput(f"{wanted} is the last token in {path}; create another one first")
    write_token_file(path, [t.spec for t in left])
    click.echo(f"revoked {wanted}; restart stateflow serve to apply", err=True)


decorate(token, "token")
