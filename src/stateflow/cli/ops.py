"""Operator commands: ``stateflow check`` (and, next to it, backups and portability)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import BinaryIO

import click

from stateflow.cli import progress as progress_
from stateflow.cli.common import Context, Interrupted, counted, echo_json, pass_context, refusals, visible
from stateflow.cli.examples import decorate
from stateflow.cli.memory import RootsPath
from stateflow.cli.memory import knowledge_roots as memory_roots
from stateflow.errors import CorruptStore, InvalidInput, UnsupportedStore
from stateflow.files import refuse_unreplaceable, write_private
from stateflow.store import SqlStore, resolve_store_url
from stateflow.store.open import display_location, sqlite_file


@click.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@progress_.option
@pass_context
@refusals
def check(ctx: Context, as_json: bool, progress: bool | None) -> None:
    """Check the store: the file's integrity (SQLite), the schema, every revision it keeps,
    that no load into it was left unfinished, and that every record of memory and of the
    LangGraph store keeps its state's record rule (one an earlier version let through — a null
    or an index-form key in memory, an item the LangGraph store cannot read back — is named:
    rewrite it with `stateflow states replace`).

    Reads only. Exit status 0 when the store is whole, 1 when anything is damaged or refused."""
    import stateflow.states.checks  # noqa: F401  (registers the states layer's checks)
    from stateflow.store.check import CheckReport, check_store, sqlite_file_integrity

    location = resolve_store_url(ctx.store_location)
    path = sqlite_file(location)
    with (
        _interrupted("the check did not finish (it only reads: nothing was changed)"),
        progress_.reporting("check", progress) as reporter,
    ):
        # (its counts go to the progress too: the file's pages are shown as the store's rows are)
        report = CheckReport(display_location(location, absolute=True), progress=reporter)
        if path is not None and path.exists():
            reporter.phase("the file's pages")
            sqlite_file_integrity(str(path), report)
        if report.ok:  # a file that failed its own check is not opened
            reporter.phase("the store")
            try:
                full = check_store(_sql(ctx.reader(whole=True)), progress=reporter)
            except CorruptStore as exc:
                report.problem(f"open: {exc.message}", advised=exc.advised)
            else:
                full.checked = {**report.checked, **full.checked}
                report = full
    if as_json:
        echo_json(report.to_json())
    else:
        counts = ", ".join(f"{n} {what}" for what, n in report.checked.items())
        click.echo(f"{visible(report.store)}: checked {counts or 'nothing'}")
        for problem in report.problems:
            click.echo(f"  damaged: {visible(problem)}")
        if report.more_problems:
            click.echo(f"  … and {report.more_problems} more")
        for refused in report.refused_records:
            click.echo(f"  refused record: {visible(refused)}")
        if report.more_refused_records:
            click.echo(f"  … and {report.more_refused_records} more refused records")
    if report.problems:
        found = len(report.problems) + report.more_problems
        # the advice fits the backend, and is left out where each problem says its own fix
        if report.advised == found:
            advice = "each line above says what fixes it"
        elif path is not None:
            advice = "restore the store from a backup that passes `stateflow check` (make them with `stateflow backup`)"
        else:
            advice = (
                "restore the database from a backup that passes `stateflow check` "
                "(make them with pg_dump, or `stateflow dump`)"
            )
        click.echo(f"error[corrupt-store]: {found} problem(s) found; {advice}", err=True)
    if report.refused_records:
        # not damage: a record an earlier version accepted, which its state refuses now
        click.echo(
            f"error[invalid-document]: {len(report.refused_records) + report.more_refused_records} record(s) "
            "hold what their state refuses now (written by an earlier version); rewrite each without it: "
            "`stateflow states read` it, then `stateflow states replace` it",
            err=True,
        )
    if not report.ok:
        sys.exit(1)


def _sql(store: object) -> SqlStore:
    if not isinstance(store, SqlStore):
        raise UnsupportedStore(f"{type(store).__name__} stores cannot be checked or dumped")
    return store


@click.command("backup")
@click.argument(
    "given", metavar="TARGET", type=click.Path(dir_okay=False)
)  # (as typed: a Path reads ./- as -)
@click.option(
    "--force",
    is_flag=True,
    help="Replace TARGET when it exists (a regular file; never the store's own file, a device, a pipe or a link).",
)
@progress_.option
@pass_context
@refusals
def backup(ctx: Context, given: str, force: bool, progress: bool | None) -> None:
    """Copy a live SQLite store to TARGET: a consistent snapshot (the store as the copy began),
    taken with SQLite's online backup while writers carry on, without the free pages deletes
    left when they are more than a quarter of it. (PostgreSQL: use pg_dump, or `stateflow dump`.)"""
    from stateflow.store.backup import sqlite_backup

    if given == "-":
        # (`-` is stdout for dump and load; a backup is a SQLite file, which needs a file)
        raise click.BadParameter(
            "'-' would be stdout, and a backup is a SQLite file: name a file (./- for one named -), "
            "or stream a portable copy with `stateflow dump -`",
            param_hint="'TARGET'",
        )
    target = Path(given)
    location = resolve_store_url(ctx.store_location)
    path = sqlite_file(location)
    if path is None:
        raise UnsupportedStore(
            "stateflow backup copies SQLite files; back PostgreSQL up with pg_dump "
            "(or `stateflow dump` for a portable copy)"
        )
    left = f"no backup was made: {target} was left as it was" if target.exists() else "no backup was made"
    with _interrupted(left), progress_.reporting("backup", progress) as reporter:
        reporter.phase("copying")
        pages = sqlite_backup(path, target, replace=force, progress=reporter)
    click.echo(
        f"backed up {visible(display_location(location, absolute=True))} to {visible(given)} "
        f"({pages} pages, checked)",
        err=True,
    )


@click.command("import-state-flow", short_help="Import a State Flow store into agent memory.")
@click.argument("root", type=click.Path(file_okay=False, path_type=Path))
@click.option("--agent", default=None, help="Whose memory receives the scopes [default: 'default'].")
@click.option(
    "--knowledge-root",
    "knowledge_roots",
    multiple=True,
    type=RootsPath(file_okay=False, path_type=Path),  # (its variable: read by knowledge_roots)
    help="A directory artifact sources may live in besides a scope's working directory "
    "(repeatable) [env STATEFLOW_KNOWLEDGE_ROOTS].",
)
@pass_context
@refusals
def import_state_flow(ctx: Context, root: Path, agent: str | None, knowledge_roots: tuple[Path, ...]) -> None:
    """Import a State Flow store (ROOT, e.g. ~/.pi/agent/state-flow) into agent memory: its
    global, cwd and session scopes, checkpoint then every patch in order as history.

    The whole tree is checked first, every patch against memory's rules: an unknown layout, a
    patch memory refuses or two scopes that are one memory scope is refused and nothing is
    written. A run cut short is finished by running it again."""
    from stateflow.state_flow_import import check_tree, import_tree, read_tree

    roots = tuple(str(p.expanduser().resolve()) for p in memory_roots(knowledge_roots))
    scopes = read_tree(root.expanduser())
    check_tree(scopes, agent or "default", roots)  # before the store is opened (or created)
    results = import_tree(ctx.store(), scopes, agent or "default")
    echo_json(results)


@click.command("dump")
@click.argument("target", required=False, type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option(
    "--no-history",
    is_flag=True,
    help="Documents only (a load then writes them at revision 1, each record's updated_at the load's time).",
)
@progress_.option
@pass_context
@refusals
def dump(ctx: Context, target: Path | None, no_history: bool, progress: bool | None) -> None:
    """Write the store as JSON Lines to TARGET (default, or `-`: stdout): catalog, templates,
    attachments, records, memory and, unless --no-history, every transition; the last line counts
    the others, so a copy cut short is refused by `load`. Read from one snapshot: writers may carry
    on. TARGET is written whole, then put in place: one that exists must be a regular file (a
    device, a named pipe or a symbolic link is refused; write those from stdout). With TARGET, a
    summary goes to stderr."""
    from stateflow.store.portable import dump as dump_store

    if target == Path("-"):
        target = None
    if target is not None:
        _refuse_store_file(ctx.store_location, target)
        refuse_unreplaceable(target)  # before the store is read
    left = (
        "the dump on stdout is cut short: it has no end line, so `stateflow load` refuses it"
        if target is None
        else f"nothing was dumped: {target} was left as it was"
    )
    with _interrupted(left), progress_.reporting("dump", progress) as reporter:
        lines = dump_store(_sql(ctx.reader(whole=True)), history=not no_history, progress=reporter)
        if target is None:
            out = click.get_binary_stream("stdout")
            for line in lines:
                out.write(line)
            return
        write_private(target, lines)  # whole or not at all: a refused dump leaves TARGET as it was
    n = reporter.counts
    click.echo(
        f"dumped {counted(n.get('transitions', 0), 'transition')}, {counted(n.get('ops', 0), 'op id')} "
        f"and {counted(n.get('documents', 0), 'document')} to {visible(str(target))}",
        err=True,
    )


def _refuse_store_file(location: str | None, target: Path) -> None:
    """A dump written over the store's own file (or its -wal, -shm or -writer file) would
    replace the store with its dump."""
    from stateflow.store.sqlite import store_files

    path = sqlite_file(location)
    if path is not None and target.expanduser().resolve() in store_files(path.resolve()):
        raise InvalidInput(f"{target} is a file of the store being dumped; dump to another file")


@click.command("load")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path))
@progress_.option
@pass_context
@refusals
def load(ctx: Context, source: Path, progress: bool | None) -> None:
    """Load a dump into an empty store (run `stateflow migrate` first on PostgreSQL).

    SOURCE is a dump file, or - for stdin (`stateflow dump | stateflow --store new.db load -`);
    a pipe is read once, into a private temporary file. The whole dump is checked before the
    store is opened: one that is not a whole dump (one cut short included) creates and changes
    nothing. A SQLite store the load created is removed if the load is refused; an existing one
    keeps a mark that `stateflow check` reports."""
    from stateflow.store.portable import check as check_dump
    from stateflow.store.portable import load as load_store
    from stateflow.store.sqlite import first_missing_folder, remove_created

    name = "stdin" if str(source) == "-" else str(source)
    with (
        _interrupted("nothing was loaded: the store was not opened"),
        _rereadable(source) as fh,
        progress_.reporting("load", progress) as reporter,
    ):
        size = os.fstat(fh.fileno()).st_size
        reporter.phase("checking the dump", size)
        checked = check_dump(_read(fh, reporter))
        if not checked.complete:
            click.echo(
                f"warning: {visible(name)} was written by an earlier stateflow, without an end line: whether it "
                "is complete cannot be fully checked; compare the loaded store with its source",
                err=True,
            )
        fh.seek(0)
        path = sqlite_file(ctx.store_location)
        created = path is not None and not path.exists()
        top = first_missing_folder(path) if path is not None else None
        try:
            reporter.phase("loading", size)
            counts = load_store(_sql(ctx.store(whole=True)), _read(fh, reporter), progress=reporter)
        except BaseException as exc:
            if created and path is not None:
                ctx.close()
                remove_created(path, top)
                if isinstance(exc, KeyboardInterrupt):
                    raise Interrupted("nothing was loaded: the store the load created was removed") from None
            elif isinstance(exc, KeyboardInterrupt):
                raise Interrupted(
                    "the store holds part of the dump and is marked unfinished (`stateflow check` reports "
                    "it); load the dump again into an empty store"
                ) from None
            raise
    echo_json(counts)


@contextmanager
def _interrupted(left: str) -> Iterator[None]:
    """A Ctrl-C inside says ``left``: what the command leaves (one a step inside raised, saying
    more, goes through as it is)."""
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise Interrupted(left) from None


@contextmanager
def _rereadable(source: Path) -> Iterator[BinaryIO]:
    """``source`` (``-``: stdin) open to be read twice, as a load does (checked whole, then
    loaded): a file as it is; a pipe, FIFO or terminal, which can be read only once, first copied
    into a private temporary file (removed on close)."""
    with ExitStack() as stack:
        given = sys.stdin.buffer if str(source) == "-" else stack.enter_context(source.open("rb"))
        if given.seekable():
            yield given
            return
        spool = stack.enter_context(tempfile.TemporaryFile())
        # what each read returns, not copyfileobj's whole buffered chunks: a buffered read
        # blocks again after a Ctrl-C caught between its reads, leaving it unnoticed
        while chunk := os.read(given.fileno(), 1 << 20):
            spool.write(chunk)
        spool.seek(0)
        yield spool


def _read(lines: Iterable[bytes], reporter: progress_.Reporter) -> Iterator[bytes]:
    for line in lines:
        reporter("bytes", len(line))
        yield line


decorate(check, "check")
decorate(backup, "backup")
decorate(import_state_flow, "import-state-flow")
decorate(dump, "dump")
decorate(load, "load")
