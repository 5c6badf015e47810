"""``stateflow [--store PATH|URL] <command>``."""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

import click
from click.core import ParameterSource

from stateflow import __version__
from stateflow.cli.common import (
    INTEGER,
    Context,
    IntRange,
    echo_json,
    exclusive,
    file_option,
    on_sigterm,
    pass_context,
    read_json_arg,
    refusals,
    visible,
)
from stateflow.cli.examples import decorate
from stateflow.cli.lazy import LazyGroup
from stateflow.cli.memory import COMMANDS as MEMORY_COMMANDS
from stateflow.doc.canonical import JSON
from stateflow.doc.merge import merge_patch
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict, InvalidInput
from stateflow.store import DocKey, Document, Write
from stateflow.store.open import display_location

# Commands whose modules load heavy layers (the HTTP server, the states layer) import on use:
# a memory command must start as fast as the interpreter allows.
LAZY_COMMANDS = {
    "serve": "stateflow.cli.serve:serve",
    "states": "stateflow.cli.states:states",
    "state-templates": "stateflow.cli.states:state_templates",
    "check": "stateflow.cli.ops:check",
    "token": "stateflow.cli.tokens:token",
    "backup": "stateflow.cli.ops:backup",
    "config": "stateflow.cli.configuration:config",
    "import-state-flow": "stateflow.cli.ops:import_state_flow",
    "dump": "stateflow.cli.ops:dump",
    "load": "stateflow.cli.ops:load",
    "setup": "stateflow.cli.setup:setup",
    "hook": "stateflow.cli.hooks:hook",
}


@click.group(
    cls=LazyGroup,
    lazy_commands=LAZY_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--store",
    metavar="PATH|URL",
    envvar="STATEFLOW_STORE",
    help="SQLite file path, sqlite:///path?synchronous=normal, or postgresql://… (a URL, not libpq's "
    "host=… dbname=… form) "
    "[env STATEFLOW_STORE; default: stateflow.db in your data directory]",
)
@click.option(
    "--config",
    "config_path",
    metavar="PATH",
    type=click.Path(dir_okay=False, path_type=Path),
    # (its variable is read with the configuration, so a bad one is refused naming it)
    help="Configuration file [env STATEFLOW_CONFIG; default: stateflow.toml in the working "
    "directory, else in your data directory]",
)
@click.version_option(__version__, prog_name="stateflow")
@click.pass_context
def cli(ctx: click.Context, store: str | None, config_path: Path | None) -> None:
    """Durable, versioned, schema-aware JSON state for LLM agents."""
    given = ctx.get_parameter_source("store") == ParameterSource.COMMANDLINE
    obj = Context(store, config_path, store_given=given)
    ctx.obj = obj
    ctx.call_on_close(obj.close)


@cli.command()
@pass_context
@refusals
def migrate(ctx: Context) -> None:
    """Create or upgrade the store schema (idempotent)."""
    before, after = ctx.unmigrated().migrate()
    where = visible(display_location(ctx.store_location, absolute=True))
    if before == after:
        click.echo(f"{where}: schema is current (version {after})")
    else:
        click.echo(f"{where}: migrated schema version {before} → {after}")


@cli.group()
def doc() -> None:
    """Low-level documents: read, write, patch and inspect history by (state, subject)."""


def _key(state: str, subject: str) -> DocKey:
    return DocKey(state, subject)


@doc.command("get")
@click.argument("state")
@click.argument("subject")
@click.option("--revision", type=INTEGER, help="Read the document as of this revision.")
@click.option("--seq", type=INTEGER, help="Read the document as of this transition seq.")
@click.option("--meta", is_flag=True, help="Print {revision, seq, body} instead of the body.")
@exclusive("revision", "seq")
@pass_context
@refusals
def doc_get(
    ctx: Context, state: str, subject: str, revision: int | None, seq: int | None, meta: bool
) -> None:
    """Print a document's body (null when it does not exist)."""
    store = ctx.reader()
    key = _key(state, subject)
    if revision is not None or seq is not None:
        document = store.read_at(key, revision=revision, seq=seq)
    else:
        document = store.get(key)
    if meta:
        echo_json({"revision": document.revision, "seq": document.seq, "body": document.body})
    else:
        echo_json(document.body)


class DeclaredDocument(InvalidInput):
    code = "declared-state"


RAW_HELP = (
    "Write a document of a declared state (or of the _states/_aliases/_templates catalogs) as "
    "given: no declaration, subject-kind, JSON Schema or regime check, no _trace stamp. "
    "For repairs; use `stateflow states replace/merge/apply` otherwise."
)


CATALOGS = ("_states", "_aliases", "_templates")
"""the catalogs the states layer keeps (named here: a doc command does not load that layer)"""


def _refuse_declared(ctx: Context, key: DocKey, raw: bool) -> None:
    """Low-level writes bypass every rule of a declared state; they need ``--raw``."""
    if raw:
        return
    if key.state in CATALOGS:
        raise DeclaredDocument(
            f"{key.state!r} is a reserved catalog; its documents are written by `stateflow states` "
            "commands (pass --raw to write it anyway, skipping every check)"
        )
    if key.state.startswith("_"):
        raise DeclaredDocument(
            f"{key.state!r}: state names starting with '_' are reserved for the store's own catalogs; "
            "pick another name (or pass --raw to write it anyway)"
        )
    if ctx.store().get(DocKey("_states", key.state)).body is not None:
        raise DeclaredDocument(
            f"{key.state!r} is a declared state: write its records with `stateflow states "
            "replace/merge/apply`, which check the subject kind and the schema (pass --raw to "
            "write the document anyway, skipping every check)"
        )


def _write(ctx: Context, key: DocKey, transform: Callable[[JSON], JSON], expect: int | None) -> None:
    """Read-modify-write one document under lock; print ``{revision, seq}`` on stdout (seq
    null when nothing changed) and say it on stderr."""

    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        current = docs[key]
        if expect is not None and current.revision != expect:
            raise Conflict(f"{key} is at revision {current.revision}, not {expect}")
        new = transform(current.value)
        return [Write.between(key, current.value, new, current.revision)], None

    commit, _ = ctx.store().update([key], compute, {"door": "operator"})
    echo_json({"revision": commit.revisions[key], "seq": commit.seq})
    if commit.changed:
        click.echo(f"{visible(str(key))}: revision {commit.revisions[key]} (seq {commit.seq})", err=True)
    else:
        click.echo(f"{visible(str(key))}: unchanged (revision {commit.revisions[key]})", err=True)


@doc.command("put")
@click.argument("state")
@click.argument("subject")
@click.argument("body", required=False)
@file_option("BODY")
@click.option("--expect", type=INTEGER, help="Refuse unless the document is at this revision.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
@pass_context
@refusals
def doc_put(
    ctx: Context,
    state: str,
    subject: str,
    body: str | None,
    file: Path | None,
    expect: int | None,
    raw: bool,
) -> None:
    """Replace a document with BODY (a JSON object; '-' reads stdin)."""
    value = read_json_arg(body, file, "BODY")
    if not isinstance(value, dict):
        raise InvalidInput("a document must be a JSON object")
    _refuse_declared(ctx, _key(state, subject), raw)
    _write(ctx, _key(state, subject), lambda _current: value, expect)


@doc.command("patch")
@click.argument("state")
@click.argument("subject")
@click.argument("patch", required=False)
@file_option("PATCH")
@click.option("--expect", type=INTEGER, help="Refuse unless the document is at this revision.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
@pass_context
@refusals
def doc_patch(
    ctx: Context,
    state: str,
    subject: str,
    patch: str | None,
    file: Path | None,
    expect: int | None,
    raw: bool,
) -> None:
    """Merge PATCH into a document (objects merge, null deletes, "[N]" patches array items)."""
    value = read_json_arg(patch, file, "PATCH")
    if not isinstance(value, dict):
        raise InvalidInput("a patch must be a JSON object")
    _refuse_declared(ctx, _key(state, subject), raw)

    def apply(current: JSON) -> JSON:
        result = merge_patch(current, value)
        return {} if result is MISSING else result

    _write(ctx, _key(state, subject), apply, expect)


@doc.command("history")
@click.argument("state")
@click.argument("subject")
@click.option(
    "--limit",
    type=IntRange(1, 10_000),
    default=20,
    show_default=True,
    help="Show at most this many revisions.",
)
@pass_context
@refusals
def doc_history(ctx: Context, state: str, subject: str, limit: int) -> None:
    """Print the document's changes, newest first."""
    changes = ctx.reader().history([_key(state, subject)], limit=limit)
    echo_json(
        [
            {
                "seq": c.seq,
                "at": c.at,
                "revision": c.revision,
                "origin": c.origin,
                "edits": [e.to_json() for e in c.edits],
            }
            for c in changes
        ]
    )


for command in MEMORY_COMMANDS:
    cli.add_command(command)
for name, command in cli.commands.items():
    decorate(command, name)


OUTPUT_ERRORS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""what writing stdout may fail with (a full disk, a quota, a file too large, a device's error);
a command's other files answer their own refusal, and a closed pipe ends the command quietly"""


def main() -> None:
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # (one a parent set to ignore is kept)
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        try:
            cli(prog_name="stateflow")
        finally:
            # what is still buffered is written here, where its failure can be answered (at exit
            # it would be a traceback-like "Exception ignored" and status 120)
            sys.stdout.flush()
    except OSError as exc:
        if exc.errno not in OUTPUT_ERRORS:
            raise
        # the answer is lost: drop what is left of it, so the exit does not try again
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (the process ends now)
        click.echo(f"error[target-unwritable]: cannot write stdout: {exc.strerror or exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":  # ``python3 -m stateflow.cli.main``, as the ``stateflow`` command
    main()
