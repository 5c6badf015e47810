"""``stateflow token show|create|revoke``: the API tokens kept in a token file.

The file is the one ``stateflow serve`` reads, found the same way (``--token-file``,
``STATEFLOW_TOKEN_FILE``, ``[server] token_file``; else ``api-token`` in the data directory, the
one serve keeps when no token is configured); it holds one spec per line and is written 0600. Secrets are printed only
when asked (``create`` prints the new one once; ``show --secrets``), never needed as arguments.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from stateflow.cli.common import Context, pass_context, refusals, visible
from stateflow.cli.examples import decorate
from stateflow.errors import InvalidInput, NotFound

token_file_option = click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The token file [env STATEFLOW_TOKEN_FILE; stateflow.toml [server] token_file; "
    "default: api-token in the data directory].",
)


def _file(ctx: Context, token_file: Path | None) -> tuple[Path, str | None]:
    """The token file `stateflow serve` reads, found as serve finds it (flag > environment >
    configuration file > the kept file), and the setting that named it (None: the kept file).
    The environment is read with the configuration, not by click, so a refusal names the
    setting as serve's does."""
    from stateflow.http.auth import token_file_in_effect

    config, _ = ctx.settings({"server": {"token_file": str(token_file) if token_file else None}})
    path, source = token_file_in_effect(config)
    if config.server.tokens:  # (specs given as such win over any file: serve reads none)
        given = config.sources.get("server.tokens", "the configuration")
        click.echo(
            f"warning: stateflow serve uses the API tokens given by {given}, not {visible(str(path))}",
            err=True,
        )
    return path, source


@click.group("token")
def token() -> None:
    """API tokens kept in a token file (what `stateflow serve` accepts)."""


@token.command("show")
@token_file_option
@click.option("--secrets", is_flag=True, help="Print the specs, secrets included.")
@pass_context
@refusals
def show(ctx: Context, token_file: Path | None, secrets: bool) -> None:
    """List the kept tokens: fingerprint (as the audit trail shows it), access, targets."""
    from stateflow.http.auth import read_token_file

    path, source = _file(ctx, token_file)
    tokens = read_token_file(path, source)
    click.echo(f"# {visible(str(path))}", err=True)
    for kept in tokens:
        # (a target name may hold a control character, as the API lets it)
        click.echo(visible(kept.spec if secrets else kept.describe()))


@token.command("create")
@token_file_option
@click.option("--read", "read_only", is_flag=True, help="Read and search only.")
@click.option(
    "--target", "targets", multiple=True, metavar="KIND/NAME", help="Limit to this tenant (repeatable)."
)
@pass_context
@refusals
def create(ctx: Context, token_file: Path | None, read_only: bool, targets: tuple[str, ...]) -> None:
    """Add a new random token to the file and print its secret once."""
    from stateflow.http.auth import new_secret, parse_token, read_token_file, write_token_file

    for target in targets:
        _check_target(target)
    path, source = _file(ctx, token_file)
    kept = read_token_file(path, source) if os.path.exists(path) else []  # (never raises: the write refuses)
    spec = new_secret() + (":read" if read_only else "") + ("@" + ",".join(targets) if targets else "")
    new = parse_token(spec)  # validates the targets
    write_token_file(path, [t.spec for t in kept] + [new.spec])
    click.echo(
        f"created {visible(new.describe())} in {visible(str(path))}; the secret (shown once):", err=True
    )
    click.echo(new.secret)


def _check_target(given: str) -> None:
    """Refuse a ``--target`` no record can have (the API's target_name rule: 1 to
    TARGET_NAME_MAX_CHARS characters of Unicode text) or the token file cannot keep as given: a
    spec is one line, its targets split at commas and its end trimmed. A comma separates
    targets here too (``agent/a,tool/b``); any other character the API takes in a name is kept."""
    from stateflow.doc.canonical import utf8_text
    from stateflow.states.models import TARGET_NAME_MAX_CHARS

    for item in given.split(","):
        kind, _, name = item.partition("/")
        if kind not in ("agent", "tool") or not name:
            continue  # (its shape is parse_token's to refuse)
        shown = visible(item.encode("utf-8", "backslashreplace").decode())
        if len(name) > TARGET_NAME_MAX_CHARS:
            problem = (
                f"names a target of {len(name)} characters; a target_name has at most {TARGET_NAME_MAX_CHARS}"
            )
        elif not utf8_text(name):
            problem = "is not UTF-8 text"
        elif name.splitlines() != [name]:
            problem = "holds a line break, which the token file (one spec a line) cannot keep"
        elif name != name.rstrip():
            problem = "ends with white space, which the token file trims"
        else:
            continue
        raise InvalidInput(f"--target '{shown}' {problem}")


@token.command("revoke")
@click.argument("fingerprint")
@token_file_option
@pass_context
@refusals
def revoke(ctx: Context, fingerprint: str, token_file: Path | None) -> None:
    """Remove the token with this fingerprint (``token:<12 hex>``, as `show` lists it)."""
    from stateflow.http.auth import read_token_file, write_token_file

    path, source = _file(ctx, token_file)
    wanted = fingerprint if fingerprint.startswith("token:") else f"token:{fingerprint}"
    kept = read_token_file(path, source)
    left = [t for t in kept if t.principal != wanted]
    if len(left) == len(kept):
        raise NotFound(f"no token {wanted} in {path} (stateflow token show lists them)")
    if not left:
        raise InvalidInput(f"{wanted} is the last token in {path}; create another one first")
    write_token_file(path, [t.spec for t in left])
    click.echo(f"revoked {wanted}; restart stateflow serve to apply", err=True)


decorate(token, "token")
