"""``stateflow states …``: declared states from the command line.

Commands work on the configured store directly, or with ``--url`` against a running
``stateflow serve`` (token from ``--token`` or ``STATEFLOW_TOKEN``).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from stateflow.api import states_service
from stateflow.cli.common import (
    Context,
    Interrupted,
    IntRange,
    decode_arg,
    echo_json,
    exclusive,
    file_option,
    pass_context,
    read_json_arg,
    refusals,
    visible,
)
from stateflow.cli.examples import decorate, output_mode
from stateflow.cli.progress import status_line
from stateflow.client import StatesClient
from stateflow.doc.canonical import encode
from stateflow.errors import InvalidInput
from stateflow.states import DoorContext, StatesService
from stateflow.states.api import StatesAPI
from stateflow.states.service import parse_declaration
from stateflow.states.template_jq import template_jq_params


def _whoami() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


def remote_options(fn: Any) -> Any:
    """``--url``/``--token`` of a command group: its commands then talk to a running server."""

    @click.pass_context
    @functools.wraps(fn)
    def group(click_ctx: click.Context, url: str | None, token: str | None) -> None:
        typed = click_ctx.get_parameter_source("url") == ParameterSource.COMMANDLINE
        click_ctx.meta["states_remote"] = Remote(url, token, typed)

    group = click.option(
        "--token", envvar="STATEFLOW_TOKEN", help="Bearer token for --url [env STATEFLOW_TOKEN]."
    )(group)
    return click.option(
        "--url",
        envvar="STATEFLOW_URL",
        help="Use a running `stateflow serve` at this base URL, http(s)://host[:port], e.g. http://127.0.0.1:8765 "
        "[env STATEFLOW_URL; a --store on the command line outranks it, --url with --store is refused].",
    )(group)


@dataclass(frozen=True)
class Remote:
    """The server ``--url``/``--token`` name; ``typed``: the URL was given on the command line
    (not taken from STATEFLOW_URL)."""

    url: str | None = None
    token: str | None = None
    typed: bool = False


def _set_remote(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--url``/``--token`` given after a subcommand: they override the group's (or its
    environment variables'), which ran first."""
    if value is not None:
        remote = ctx.meta.get("states_remote", Remote())
        if param.name == "url":
            ctx.meta["states_remote"] = dataclasses.replace(remote, url=value, typed=True)
        else:
            ctx.meta["states_remote"] = dataclasses.replace(remote, token=value)


def remote_on_each(command: click.Command, group: str = "") -> None:
    """Accept ``--url``/``--token`` after every subcommand of a group too, as ``--store`` is."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            remote_on_each(sub, group or f"stateflow {command.name}")
        return
    for flag, what in (("--url", "URL"), ("--token", "SECRET")):
        command.params.append(
            click.Option(
                [flag],
                metavar=what,
                expose_value=False,
                callback=_set_remote,
                # named with its group: `stateflow --url` is no option, so "before the
                # subcommand" read as right after `stateflow` sent users to a usage error
                help=f"As `{group} {flag}`; accepted here too.",
            )
        )


@click.group("states")
@remote_options
def states() -> None:
    """Declared states: declarations, records, audit trail, search, retention."""


def client(ctx: Context, *, reads: bool = False) -> StatesAPI:
    """The service on the configured store (as the ``operator`` door, actor = your user name),
    or the HTTP client of a running server: one API either way. ``reads``: the command only
    reads, so a missing store is refused (``store-not-found``), never created.

    Which one follows the configuration's precedence (flags, then the environment): a typed
    ``--url`` or, without a typed ``--store``, STATEFLOW_URL names the server; a typed ``--store``
    outranks STATEFLOW_URL, so a shell that exports it never sends a command meant for a local
    store to the server; ``--url`` with ``--store`` on one command line is refused as ambiguous."""
    remote: Remote = click.get_current_context().meta.get("states_remote", Remote())
    if remote.url and remote.typed and ctx.store_given:
        raise click.UsageError("give --url (a running server) or --store (a store), not both")
    if remote.url and not ctx.store_given:
        return StatesClient(remote.url, remote.token)
    # (a write's store is opened, or created, by its first use: a call refused for its
    # arguments first creates nothing)
    service = states_service(ctx.reader() if reads else ctx.deferred(), ctx.config)
    return service.acting_as(DoorContext(door="operator", actor=_whoami()))


def api_command(*, reads: bool = False) -> Callable[[Any], Any]:
    """The command's ``api`` (see :func:`client`) in place of the CLI context, and refusals
    printed as ``error[code]: …``. ``reads``: the command only reads."""

    def decorator(fn: Any) -> Any:
        @pass_context
        @refusals
        @functools.wraps(fn)
        def command(ctx: Context, *args: Any, **kwargs: Any) -> Any:
            for given in kwargs.values():  # decoded (or refused) before the store is opened or created
                if isinstance(given, Payload):
                    given.read()
                elif isinstance(given, Write):
                    given.origin()
            return fn(client(ctx, reads=reads), *args, **kwargs)

        return command

    return decorator


def _options(fn: Any, options: Sequence[Callable[[Any], Any]]) -> Any:
    for option in reversed(options):
        fn = option(fn)
    return fn


@dataclass(frozen=True)
class Write:
    """What ``--expect-revision``, ``--consumer``, ``--run-id`` and ``--meta`` gave."""

    expect_revision: int | None
    consumer: str | None
    run_id: str | None
    meta: str | None

    def origin(self) -> dict[str, Any] | None:
        """The consumer half of the origin (``--meta`` decoded here, inside the refusals)."""
        return self._origin

    @functools.cached_property
    def _origin(self) -> dict[str, Any] | None:
        origin = {
            "consumer": self.consumer,
            "run_id": self.run_id,
            "meta": None if self.meta is None else decode_arg(self.meta, "--meta"),
        }
        kept = {k: v for k, v in origin.items() if v is not None}
        return kept or None


def write_options(fn: Any) -> Any:
    """Compare-and-set and the consumer half of the origin, for every record write: the
    command gets them as one ``write`` (:class:`Write`)."""

    @functools.wraps(fn)
    def command(
        *args: Any,
        expect_revision: int | None,
        consumer: str | None,
        run_id: str | None,
        meta: str | None,
        **kwargs: Any,
    ) -> Any:
        return fn(*args, write=Write(expect_revision, consumer, run_id, meta), **kwargs)

    return _options(
        command,
        [
            click.option(
                "--expect-revision",
                type=IntRange(0),
                default=None,
                help="Write only if the record is at this revision (0: absent); else refused, nothing changes.",
            ),
            click.option(
                "--consumer",
                default=None,
                help="Who writes (recorded in the audit trail's origin; ≤ 256 characters).",
            ),
            click.option(
                "--run-id", default=None, help="The run this write belongs to (origin; ≤ 256 characters)."
            ),
            click.option("--meta", default=None, help="A JSON object recorded with the origin (≤ 4 KiB)."),
        ],
    )


@dataclass(frozen=True)
class Subject:
    """What ``--target-kind``, ``--target-name``, ``--kind`` and ``--key`` gave."""

    target_kind: str
    target_name: str
    kind: str | None
    key: str

    def of(self, api: StatesAPI, name: str) -> dict[str, str]:
        """The subject in state ``name`` (no ``--kind``: the state's default kind)."""
        kind = self.kind if self.kind is not None else api.get_declaration(name)["default_subject_kind"]
        return {
            "target_kind": self.target_kind,
            "target_name": self.target_name,
            "kind": kind,
            "key": self.key,
        }


def subject_options(fn: Any) -> Any:
    """The record's subject, given to the command as one ``subject`` (:class:`Subject`)."""

    @functools.wraps(fn)
    def command(
        *args: Any, target_kind: str, target_name: str, kind: str | None, key: str, **kwargs: Any
    ) -> Any:
        return fn(*args, subject=Subject(target_kind, target_name, kind, key), **kwargs)

    return _options(
        command,
        [
            click.option(
                "--target-kind", type=click.Choice(["agent", "tool"]), default="agent", show_default=True
            ),
            click.option("--target-name", required=True, help="The tenant's name (an agent or tool)."),
            click.option("--kind", default=None, help="Subject kind [default: the state's default kind]."),
            click.option("--key", required=True, help="Subject key."),
        ],
    )


@dataclass(frozen=True)
class Payload:
    """What ``--data`` or ``--file`` gave (stdin when neither). ``exact_integers``: an op batch,
    whose values the service checks (see :func:`~stateflow.cli.common.decode_arg`)."""

    data: str | None
    file: Path | None
    exact_integers: bool = False

    def read(self) -> Any:
        """The JSON payload (read and decoded here, inside the refusals; stdin once)."""
        return self._value

    @functools.cached_property
    def _value(self) -> Any:
        if self.data is None and self.file is None and sys.stdin.isatty():
            # nothing would be piped in: reading the terminal would wait, silently, for a payload
            # the caller most likely forgot to give
            raise click.UsageError(
                "the payload is required: give --data JSON or --file PATH ('-' for either reads "
                "stdin), or pipe it in"
            )
        data = "-" if self.data is None and self.file is None else self.data
        return read_json_arg(
            data, self.file, "the payload", "with --data", "--data", exact_integers=self.exact_integers
        )


def data_options(fn: Any, *, exact_integers: bool = False) -> Any:
    """The command's JSON payload, given as one ``payload`` (:class:`Payload`)."""

    @functools.wraps(fn)
    def command(*args: Any, data: str | None, file: Path | None, **kwargs: Any) -> Any:
        return fn(*args, payload=Payload(data, file, exact_integers), **kwargs)

    return _options(
        command,
        [
            click.option("--data", "data", help="JSON payload ('-' reads stdin)."),
            file_option("the JSON payload"),
        ],
    )


def ops_options(fn: Any) -> Any:
    """:func:`data_options` for an op batch (its values are the service's to check)."""
    return data_options(fn, exact_integers=True)


def page_options(fn: Any) -> Any:
    """``--limit`` and ``--cursor`` of a paged listing."""
    return _options(
        fn,
        [
            # (a larger limit answers a page of at most 500 and its cursor, as from Python and
            # over HTTP: not refused here)
            click.option(
                "--limit",
                type=IntRange(1),
                default=None,
                help="Page size (pages hold at most 500: a larger limit answers 500 and a cursor).",
            ),
            click.option(
                "--cursor", default=None, help="Continue a listing where its last page ended (its `cursor`)."
            ),
        ],
    )


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    from rich.console import Console
    from rich.table import Column, Table
    from rich.text import Text

    def cell(value: Any) -> Text:
        # plain text, never markup: a key such as "[/x]" is shown as written (markup would
        # style it, or fail the whole table), and its controls as escapes (``visible``)
        if value is None:
            return Text("—")
        if isinstance(value, dict | list):
            return Text(visible(encode(value).decode()))
        return Text(visible(str(value)))

    def build(names: list[str], data: Column | None = None) -> Table:
        table = Table(*names, *([data] if data else []))
        for row in rows:
            table.add_row(*[cell(row.get(c)) for c in names], *([cell(row["data"])] if data else []))
        return table

    console = Console()
    if "data" not in columns:
        console.print(build(columns))
        return
    # a document is one line cut to the width the other columns leave it (the table would keep
    # an unwrapped column whole and squeeze the others to nothing; wrapped, it reads as several)
    others = [c for c in columns if c != "data"]
    left = console.width - console.measure(build(others)).maximum - 3  # (its padding and border)
    data = Column("data", no_wrap=True, overflow="ellipsis", max_width=max(left, DATA_MIN_WIDTH))
    console.print(build(others, data))


DATA_MIN_WIDTH = 20
"""the narrowest a search's data column is cut to (on a narrow terminal the others give way)"""


def _short(text: str, limit: int = 60) -> str:
    """``text`` cut at a word to fit ``limit`` characters, marked with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:") + "…"


def _out(value: Any, rows: list[dict[str, Any]] | None = None, columns: list[str] | None = None) -> None:
    mode = output_mode()
    table = mode == "table" or (mode is None and sys.stdout.isatty())
    if rows is not None and columns is not None and table:
        _table(rows, columns)
        if isinstance(value, dict) and value.get("next_cursor"):  # a page's JSON carries it; a table says so
            click.echo(f"more: --cursor {value['next_cursor']}", err=True)
    else:
        echo_json(value)


@states.command("list")
@api_command(reads=True)
def list_states(api: StatesAPI) -> None:
    """Declared states."""
    items = api.list_declarations()
    rows = [
        {
            "name": d["name"],
            "kinds": ",".join(d["subject_kinds"]),
            "retention_days": "exempt" if d.get("retention_exempt") else d.get("retention_days"),
            "updated_at": d.get("updated_at"),
            "description": _short(d.get("description", "")),
        }
        for d in items
    ]
    _out(items, rows, ["name", "kinds", "retention_days", "updated_at", "description"])


@states.command("get")
@click.argument("name")
@api_command(reads=True)
def get_state(api: StatesAPI, name: str) -> None:
    """One declaration, with its effective schema."""
    echo_json(api.get_declaration(name))


@states.command("put")
@click.argument("name")
@data_options
@click.option(
    "--create-only", is_flag=True, help="Refuse (state-exists) if NAME is declared already, changing nothing."
)
@pass_context
@refusals
def put_state(ctx: Context, name: str, payload: Payload, create_only: bool) -> None:
    """Declare (or additively re-declare) a state as NAME (a `name` in the declaration must be NAME)."""
    declaration = payload.read()
    parse_declaration(name, declaration)  # its shape is refused before the store is opened (or created)
    echo_json(client(ctx).declare(name, declaration, replace=not create_only))


@states.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Confirm: the records and their audit trail are deleted too.")
@pass_context
@refusals
def delete_state(ctx: Context, name: str, yes: bool) -> None:
    """Delete a state with its records and audit trail."""
    if not yes:  # refused before the store is opened (or created)
        raise click.UsageError(f"deleting {name!r} deletes all its records and audit; pass --yes to confirm")
    echo_json(client(ctx).delete_declaration(name))


@states.command("stats")
@click.argument("name")
@api_command(reads=True)
def stats(api: StatesAPI, name: str) -> None:
    """Record counts per field and per kind."""
    echo_json(api.stats(name))


@states.command("consumers")
@click.argument("name")
@api_command(reads=True)
def consumers(api: StatesAPI, name: str) -> None:
    """What uses the state (guards its deletion)."""
    items = api.consumers(name)
    _out(items, [dict(c) for c in items], ["kind", "name", "detail", "unavailable"])


def _subject_rows(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **i["subject"],
            "updated_at": i.get("updated_at"),
            "revision": i.get("revision"),
            **({"data": _cut(encode(i["data"]).decode(), DATA_MAX_CHARS)} if "data" in i else {}),
        }
        for i in items
    ]


DATA_MAX_CHARS = 1000
"""a search's data cell (compact JSON) holds no more than a line can show: the table cuts it further"""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


SUBJECT_COLUMNS = ["target_kind", "target_name", "kind", "key", "revision", "updated_at"]


@states.command("subjects")
@click.argument("name")
@click.option("--kind", default=None, help="Only subjects of this kind (one the state declares).")
@page_options
@api_command(reads=True)
def subjects(api: StatesAPI, name: str, kind: str | None, limit: int | None, cursor: str | None) -> None:
    """Subjects that have a record (keyset-paginated)."""
    page = api.subjects(name, kind=kind, limit=limit, cursor=cursor)
    _out(page, _subject_rows(page["subjects"]), SUBJECT_COLUMNS)


@states.command("search")
@click.argument("name")
@click.option(
    "--filters",
    "--data",
    "filters",
    required=True,
    help='A containment document, e.g. \'{"status": "open"}\' (--data is accepted too).',
)
@page_options
@click.option("--sort", default=None, help='e.g. \'[{"path": ["priority"], "order": "desc"}]\'.')
@click.option("--include-data", is_flag=True, help="Return each match's document as data.")
@api_command(reads=True)
def search(
    api: StatesAPI,
    name: str,
    filters: str,
    limit: int | None,
    cursor: str | None,
    sort: str | None,
    include_data: bool,
) -> None:
    """Records whose document contains FILTERS (with $eq $ne $gt $gte $lt $lte $in $exists)."""
    page = api.search(
        name,
        decode_arg(filters, "--filters", exact_integers=True),  # (the service checks its values)
        limit=limit,
        cursor=cursor,
        sort=None if sort is None else decode_arg(sort, "--sort"),
        include_data=include_data,
    )
    _out(page, _subject_rows(page["matches"]), SUBJECT_COLUMNS + (["data"] if include_data else []))


@states.command("read")
@click.argument("name")
@subject_options
@click.option("--revision", type=IntRange(0), default=None, help="Read it as of this revision.")
@click.option("--seq", type=IntRange(0), default=None, help="Read it as of this transition seq.")
@exclusive("revision", "seq")
@api_command(reads=True)
def read(api: StatesAPI, name: str, subject: Subject, revision: int | None, seq: int | None) -> None:
    """A record (null when there is none), now or as of a revision or seq."""
    echo_json(api.read(name, subject.of(api, name), revision=revision, seq=seq))


@states.command("diff")
@click.argument("name")
@subject_options
@click.option("--from", "from_revision", type=IntRange(0), required=True, help="Older revision.")
@click.option(
    "--to", "to_revision", type=IntRange(0), default=None, help="Newer revision [default: current]."
)
@api_command(reads=True)
def diff(api: StatesAPI, name: str, subject: Subject, from_revision: int, to_revision: int | None) -> None:
    """What changed in a record between two revisions: {from, to, edits, patch}.

    patch is left out where no merge patch makes the change (a value set to null, a member
    named like "[0]"); edits always holds it."""
    echo_json(api.diff(name, subject.of(api, name), from_revision, to_revision))


@states.command("revert")
@click.argument("name")
@subject_options
@click.option("--revision", type=IntRange(0), required=True, help="The revision to go back to.")
@write_options
@api_command()
def revert(api: StatesAPI, name: str, subject: Subject, revision: int, write: Write) -> None:
    """Make a record what it was at --revision again, as a new write (history keeps all)."""
    echo_json(
        api.revert(
            name,
            subject.of(api, name),
            revision,
            origin=write.origin(),
            expect_revision=write.expect_revision,
        )
    )


@states.command("replace")
@click.argument("name")
@subject_options
@data_options
@write_options
@api_command()
def replace(api: StatesAPI, name: str, subject: Subject, payload: Payload, write: Write) -> None:
    """Replace a record's whole document."""
    echo_json(
        api.replace(
            name,
            subject.of(api, name),
            payload.read(),
            origin=write.origin(),
            expect_revision=write.expect_revision,
        )
    )


@states.command("merge")
@click.argument("name")
@subject_options
@data_options
@write_options
@api_command()
def merge(api: StatesAPI, name: str, subject: Subject, payload: Payload, write: Write) -> None:
    """Shallow-merge top-level fields into a record (null is stored as null)."""
    echo_json(
        api.merge(
            name,
            subject.of(api, name),
            payload.read(),
            origin=write.origin(),
            expect_revision=write.expect_revision,
        )
    )


@states.command("apply")
@click.argument("name")
@subject_options
@ops_options
@click.option("--op-id", default=None, help="Idempotency key, ≤ 256 characters (a payload op_id wins).")
@write_options
@api_command()
def apply(
    api: StatesAPI, name: str, subject: Subject, payload: Payload, op_id: str | None, write: Write
) -> None:
    """Apply an op batch: a JSON array of ops, or {"ops": [...], "op_id": "..."}."""
    ops = payload.read()
    if isinstance(ops, dict):
        if set(ops) - {"ops", "op_id"} or "ops" not in ops:
            raise InvalidInput('the payload is a list of ops or {"ops": [...], "op_id"?: "..."}')
        op_id = ops.get("op_id") or op_id
        ops = ops["ops"]
    result = api.apply(
        name,
        subject.of(api, name),
        ops,
        op_id=op_id,
        origin=write.origin(),
        expect_revision=write.expect_revision,
    )
    echo_json(result.to_json())


@states.command("erase")
@click.argument("name")
@subject_options
@write_options
@api_command()
def erase(api: StatesAPI, name: str, subject: Subject, write: Write) -> None:
    """Delete a record (its audit trail stays)."""
    echo_json(
        api.erase(name, subject.of(api, name), origin=write.origin(), expect_revision=write.expect_revision)
    )


@states.command("fold")
@click.argument("name")
@subject_options
@click.option(
    "--into", "into", required=True, help='The survivor: {"target_kind", "target_name", "kind", "key"}.'
)
@click.option(
    "--mode",
    type=click.Choice(["switch", "merge"]),
    required=True,
    help="switch: the survivor's record wins; merge: this record is merged into it.",
)
@write_options
@api_command()
def fold(api: StatesAPI, name: str, subject: Subject, into: str, mode: str, write: Write) -> None:
    """Fold this subject into another: its reads and writes land on the survivor."""
    echo_json(
        api.fold(
            name,
            subject.of(api, name),
            decode_arg(into, "--into"),
            mode,
            origin=write.origin(),
            expect_revision=write.expect_revision,
        )
    )


@states.command("writes")
@click.argument("name")
@subject_options
@page_options
@api_command(reads=True)
def writes(api: StatesAPI, name: str, subject: Subject, limit: int | None, cursor: str | None) -> None:
    """A record's audit trail, newest first."""
    page = api.writes(name, subject.of(api, name), limit=limit, cursor=cursor)
    rows = [
        {
            "seq": w["seq"],
            "at": w["at"],
            "action": w.get("action"),
            "door": w["origin"].get("door"),
            "actor": w["origin"].get("actor"),
            "paths": w["paths"],
        }
        for w in page["items"]
    ]
    _out(page, rows, ["seq", "at", "action", "door", "actor", "paths"])


@states.command("prune")
@api_command()
def prune(api: StatesAPI) -> None:
    """Delete expired records and expired op_id keys (retention).

    A record expires after its state's retention_days, else STATEFLOW_DEFAULT_RETENTION_DAYS;
    the default never applies to agent memory (the built-in memory state), and a
    retention_exempt state (the LangGraph saver's checkpoints) is never swept."""
    if not isinstance(api, StatesService):
        echo_json(api.prune())  # (the server sweeps: a Ctrl-C here stops only the waiting)
        return
    erased: dict[str, int] = {}

    def counted(state: str, count: int) -> None:
        erased[state] = count

    try:
        if not sys.stderr.isatty():
            echo_json(api.prune(progress=counted))
            return
        # a sweep erases record by record: show how far it got (on the terminal only); the
        # answer is printed once the live line is gone (on a terminal that is stdout too, it
        # would be printed under the line, whose text would stay before it)
        with status_line("pruning…") as show:

            def shown(state: str, count: int) -> None:
                counted(state, count)
                if count % 100 == 0:
                    show(f"pruning {state}: {count:,} expired records erased")

            answer = api.prune(progress=shown)
        echo_json(answer)
    except KeyboardInterrupt:
        # each erase is its own write: those made stay made
        total = sum(erased.values())
        raise Interrupted(
            f"{total:,} expired record{'' if total == 1 else 's'} erased before the interrupt stay erased; "
            "run prune again to finish the sweep"
        ) from None


@states.command("attachments")
@click.argument("name")
@api_command(reads=True)
def attachments(api: StatesAPI, name: str) -> None:
    """Templates attached to a state."""
    items = api.attachments(name)
    rows = [
        {
            "template": a["template"],
            "path": a["path"],
            "parameters": _cut(encode(a["parameters"]).decode(), 60),
            "declarations": _cut(encode(a["declarations"]).decode(), 60),
        }
        for a in items
    ]
    _out(items, rows, ["template", "path", "parameters", "declarations"])


@states.command("get-attachment")
@click.argument("name")
@click.argument("template")
@api_command(reads=True)
def get_attachment(api: StatesAPI, name: str, template: str) -> None:
    """One attachment."""
    echo_json(api.get_attachment(name, template))


@states.command("attach")
@click.argument("name")
@click.argument("template")
@data_options
@api_command()
def attach(api: StatesAPI, name: str, template: str, payload: Payload) -> None:
    """Attach TEMPLATE: {"path": [...], "parameters": {...}, "declarations": {...}}."""
    echo_json(api.attach(name, template, payload.read()))


@states.command("update-attachment")
@click.argument("name")
@click.argument("template")
@click.option("--declarations", required=True, help="The new declarations (JSON object).")
@click.option(
    "--options",
    "options",
    default=None,
    help='Reconcile directives, e.g. {"orphans": "close", "resolution": "..."}.',
)
@api_command()
def update_attachment(
    api: StatesAPI, name: str, template: str, declarations: str, options: str | None
) -> None:
    """Change an attachment's declarations (running the template's reconcile)."""
    body: dict[str, Any] = {"declarations": decode_arg(declarations, "--declarations")}
    if options:
        body["options"] = decode_arg(options, "--options")
    echo_json(api.update_attachment(name, template, body))


@states.command("detach")
@click.argument("name")
@click.argument("template")
@api_command()
def detach(api: StatesAPI, name: str, template: str) -> None:
    """Detach TEMPLATE (records keep their data)."""
    echo_json(api.detach(name, template))


@states.group("template-jq")
def template_jq() -> None:
    """Evaluate a template's jq programs on a record."""


@template_jq.command("eval")
@click.argument("name")
@subject_options
@click.argument("program")
@click.option("--param", "params", multiple=True, help="key=<JSON value> (repeatable).")
@api_command(reads=True)
def template_jq_eval(
    api: StatesAPI, name: str, subject: Subject, program: str, params: tuple[str, ...]
) -> None:
    """Run an input PROGRAM (template.program or program) and print its value."""
    pairs = []
    for item in params:
        k, sep, raw = item.partition("=")
        if not sep:
            raise click.UsageError(f"--param {item!r} must be key=<JSON value>")
        pairs.append((k, raw))
    values = template_jq_params(pairs)  # (refused as the HTTP route refuses a query parameter)
    echo_json(api.template_jq_input(name, subject.of(api, name), program, values))


@template_jq.command("apply")
@click.argument("name")
@subject_options
@click.argument("program")
@click.option("--input", "value", default=None, help="The program's $input (JSON).")
@click.option(
    "--op-id", default=None, help="Idempotency key, ≤ 256 characters: a retry with it is answered once."
)
@write_options
@api_command()
def template_jq_apply(
    api: StatesAPI,
    name: str,
    subject: Subject,
    program: str,
    value: str | None,
    op_id: str | None,
    write: Write,
) -> None:
    """Run an update PROGRAM and apply the op batch it returns."""
    echo_json(
        api.template_jq_update(
            name,
            subject.of(api, name),
            program,
            None if value is None else decode_arg(value, "--input"),
            op_id=op_id,
            origin=write.origin(),
            expect_revision=write.expect_revision,
        )
    )


@click.group("state-templates")
@remote_options
def state_templates() -> None:
    """State templates: reusable schema fragments with regimes and jq programs."""


@state_templates.command("list")
@api_command(reads=True)
def templates_list(api: StatesAPI) -> None:
    """Templates, with how many states each is attached to."""
    items = api.list_templates()
    rows = [
        {
            "name": t["name"],
            "attached_to": t["attached_to"],
            "shipped": t["shipped_default"],
            "description": _short(t.get("description", "")),
        }
        for t in items
    ]
    _out(items, rows, ["name", "attached_to", "shipped", "description"])


@state_templates.command("get")
@click.argument("name")
@api_command(reads=True)
def templates_get(api: StatesAPI, name: str) -> None:
    """One template document."""
    echo_json(api.get_template(name))


@state_templates.command("put")
@click.argument("name")
@data_options
@click.option(
    "--replace", is_flag=True, help="Overwrite an existing template (its attachments are re-validated)."
)
@api_command()
def templates_put(api: StatesAPI, name: str, payload: Payload, replace: bool) -> None:
    """Upload a template document as NAME (a `name` in the document must be NAME)."""
    echo_json(api.put_template(name, payload.read(), replace=replace))


@state_templates.command("delete")
@click.argument("name")
@api_command()
def templates_delete(api: StatesAPI, name: str) -> None:
    """Delete a template that is attached nowhere."""
    echo_json(api.delete_template(name))


LISTINGS = frozenset(
    {
        "states list",
        "states subjects",
        "states search",
        "states writes",
        "states attachments",
        "states consumers",
        "state-templates list",
    }
)
decorate(states, "states", LISTINGS)
decorate(state_templates, "state-templates", LISTINGS)
remote_on_each(states)
remote_on_each(state_templates)

__all__ = ["state_templates", "states"]
