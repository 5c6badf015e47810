"""``stateflow states …``: declared states from the command line.

Commands work on the configured store directly, or with ``--url`` against a running
``stateflow serve`` (token from ``--token`` or ``STATEFLOW_TOKEN``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from stateflow.api import states_service
from stateflow.cli.common import Context, echo_json, pass_context, read_json_arg, refusals
from stateflow.cli.examples import decorate, output_mode
from stateflow.client import StatesClient
from stateflow.doc.canonical import decode, encode
from stateflow.errors import InvalidInput
from stateflow.states import DoorContext, StatesService
from stateflow.states.api import StatesAPI


def _whoami() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


@click.group("states")
@click.option(
    "--url", envvar="STATEFLOW_URL", help="Use a running `stateflow serve` at this URL [env STATEFLOW_URL]."
)
@click.option("--token", envvar="STATEFLOW_TOKEN", help="Bearer token for --url [env STATEFLOW_TOKEN].")
@click.pass_context
def states(click_ctx: click.Context, url: str | None, token: str | None) -> None:
    """Declared states: declarations, records, audit trail, search, retention."""
    click_ctx.meta["states_remote"] = (url, token)


def client(ctx: Context, *, reads: bool = False) -> StatesAPI:
    """The service on the configured store (as the ``operator`` door, actor = your user name),
    or the HTTP client of a running server: one API either way. ``reads``: the command only
    reads, so a missing store is refused (``store-not-found``), never created."""
    url, token = click.get_current_context().meta.get("states_remote", (None, None))
    if url:
        return StatesClient(url, token)
    service = states_service(ctx.reader() if reads else ctx.store(), ctx.config)
    return service.acting_as(DoorContext(door="operator", actor=_whoami()))


def write_options(fn: Any) -> Any:
    """Compare-and-set and the consumer half of the origin, for every record write."""
    for option in reversed(
        [
            click.option(
                "--expect-revision",
                type=click.IntRange(0),
                default=None,
                help="Write only if the record is at this revision (0: absent); else refused, nothing changes.",
            ),
            click.option(
                "--consumer", default=None, help="Who writes (recorded in the audit trail's origin)."
            ),
            click.option("--run-id", default=None, help="The run this write belongs to (origin)."),
            click.option("--meta", default=None, help="A JSON object recorded with the origin (≤ 4 KiB)."),
        ]
    ):
        fn = option(fn)
    return fn


def _origin(consumer: str | None, run_id: str | None, meta: str | None) -> dict[str, Any] | None:
    origin = {"consumer": consumer, "run_id": run_id, "meta": None if meta is None else decode(meta)}
    kept = {k: v for k, v in origin.items() if v is not None}
    return kept or None


def subject_options(fn: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--target-kind", type=click.Choice(["agent", "tool"]), default="agent", show_default=True
            ),
            click.option("--target-name", required=True, help="The tenant's name (an agent or tool)."),
            click.option("--kind", default=None, help="Subject kind [default: the state's default kind]."),
            click.option("--key", required=True, help="Subject key."),
        ]
    ):
        fn = option(fn)
    return fn


def _subject(
    api: StatesAPI, name: str, target_kind: str, target_name: str, kind: str | None, key: str
) -> dict[str, str]:
    if kind is None:
        kind = api.get_declaration(name)["default_subject_kind"]
    return {"target_kind": target_kind, "target_name": target_name, "kind": kind, "key": key}


def data_options(fn: Any) -> Any:
    fn = click.option("--file", "file", type=click.Path(exists=True, dir_okay=False, path_type=Path))(fn)
    return click.option("--data", "data", help="JSON payload ('-' reads stdin).")(fn)


def _payload(data: str | None, file: Path | None) -> Any:
    if data is None and file is None:
        data = "-"
    return read_json_arg(data, file, "the payload (--data, --file or stdin)")


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    def cell(value: Any) -> str:
        if value is None:
            return "—"
        if isinstance(value, dict | list):
            return encode(value).decode()
        return str(value)

    table = Table(*columns)
    for row in rows:
        table.add_row(*[cell(row.get(c)) for c in columns])
    Console().print(table)


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
    else:
        echo_json(value)


@states.command("list")
@pass_context
@refusals
def list_states(ctx: Context) -> None:
    """Declared states."""
    items = client(ctx, reads=True).list_declarations()
    rows = [
        {
            "name": d["name"],
            "kinds": ",".join(d["subject_kinds"]),
            "retention_days": d.get("retention_days"),
            "updated_at": d.get("updated_at"),
            "description": _short(d.get("description", "")),
        }
        for d in items
    ]
    _out(items, rows, ["name", "kinds", "retention_days", "updated_at", "description"])


@states.command("get")
@click.argument("name")
@pass_context
@refusals
def get_state(ctx: Context, name: str) -> None:
    """One declaration, with its effective schema."""
    echo_json(client(ctx, reads=True).get_declaration(name))


@states.command("put")
@click.argument("name")
@data_options
@pass_context
@refusals
def put_state(ctx: Context, name: str, data: str | None, file: Path | None) -> None:
    """Declare (or additively re-declare) a state."""
    echo_json(client(ctx).declare(name, _payload(data, file)))


@states.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Confirm: the records and their audit trail are deleted too.")
@pass_context
@refusals
def delete_state(ctx: Context, name: str, yes: bool) -> None:
    """Delete a state with its records and audit trail."""
    if not yes:
        raise click.UsageError(f"deleting {name!r} deletes all its records and audit; pass --yes to confirm")
    echo_json(client(ctx).delete_declaration(name))


@states.command("stats")
@click.argument("name")
@pass_context
@refusals
def stats(ctx: Context, name: str) -> None:
    """Record counts per field and per kind."""
    echo_json(client(ctx, reads=True).stats(name))


@states.command("consumers")
@click.argument("name")
@pass_context
@refusals
def consumers(ctx: Context, name: str) -> None:
    """What uses the state (guards its deletion)."""
    echo_json(client(ctx, reads=True).consumers(name))


def _subject_rows(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{**i["subject"], "updated_at": i.get("updated_at"), "revision": i.get("revision")} for i in items]


SUBJECT_COLUMNS = ["target_kind", "target_name", "kind", "key", "revision", "updated_at"]


@states.command("subjects")
@click.argument("name")
@click.option("--kind", default=None)
@click.option("--limit", type=click.IntRange(1, 500), default=None)
@click.option("--cursor", default=None)
@pass_context
@refusals
def subjects(ctx: Context, name: str, kind: str | None, limit: int | None, cursor: str | None) -> None:
    """Subjects that have a record (keyset-paginated)."""
    page = client(ctx, reads=True).subjects(name, kind=kind, limit=limit, cursor=cursor)
    _out(page, _subject_rows(page["subjects"]), SUBJECT_COLUMNS)
    if page.get("next_cursor") and sys.stdout.isatty():
        click.echo(f"more: --cursor {page['next_cursor']}", err=True)


@states.command("search")
@click.argument("name")
@click.option(
    "--filters",
    "--data",
    "filters",
    required=True,
    help='A containment document, e.g. \'{"status": "open"}\' (--data is accepted too).',
)
@click.option("--limit", type=click.IntRange(1, 500), default=None)
@click.option("--cursor", default=None)
@click.option("--sort", default=None, help='e.g. \'[{"path": ["priority"], "order": "desc"}]\'.')
@click.option("--include-data", is_flag=True, help="Return each match's document as data.")
@pass_context
@refusals
def search(
    ctx: Context,
    name: str,
    filters: str,
    limit: int | None,
    cursor: str | None,
    sort: str | None,
    include_data: bool,
) -> None:
    """Records whose document contains FILTERS (with $eq $ne $gt $gte $lt $lte $in $exists).

    \b
    Example:
      stateflow states search tickets --filters '{"priority": {"$gte": 2}}' --include-data
    """
    page = client(ctx, reads=True).search(
        name,
        decode(filters),
        limit=limit,
        cursor=cursor,
        sort=None if sort is None else decode(sort),
        include_data=include_data,
    )
    _out(page, _subject_rows(page["matches"]), SUBJECT_COLUMNS)


@states.command("read")
@click.argument("name")
@subject_options
@click.option("--revision", type=click.IntRange(0), default=None, help="Read it as of this revision.")
@click.option("--seq", type=click.IntRange(0), default=None, help="Read it as of this transition seq.")
@pass_context
@refusals
def read(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    revision: int | None,
    seq: int | None,
) -> None:
    """A record (null when there is none), now or as of a revision or seq."""
    api = client(ctx, reads=True)
    subject = _subject(api, name, target_kind, target_name, kind, key)
    echo_json(api.read(name, subject, revision=revision, seq=seq))


@states.command("diff")
@click.argument("name")
@subject_options
@click.option("--from", "from_revision", type=click.IntRange(0), required=True, help="Older revision.")
@click.option(
    "--to", "to_revision", type=click.IntRange(0), default=None, help="Newer revision [default: current]."
)
@pass_context
@refusals
def diff(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    from_revision: int,
    to_revision: int | None,
) -> None:
    """What changed in a record between two revisions: {from, to, edits, patch}."""
    api = client(ctx, reads=True)
    subject = _subject(api, name, target_kind, target_name, kind, key)
    echo_json(api.diff(name, subject, from_revision, to_revision))


@states.command("revert")
@click.argument("name")
@subject_options
@click.option("--revision", type=click.IntRange(0), required=True, help="The revision to go back to.")
@write_options
@pass_context
@refusals
def revert(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    revision: int,
    expect_revision: int | None,
    consumer: str | None,
    run_id: str | None,
    meta: str | None,
) -> None:
    """Make a record what it was at --revision again, as a new write (history keeps all)."""
    api = client(ctx)
    subject = _subject(api, name, target_kind, target_name, kind, key)
    echo_json(
        api.revert(
            name, subject, revision, origin=_origin(consumer, run_id, meta), expect_revision=expect_revision
        )
    )


@states.command("replace")
@click.argument("name")
@subject_options
@data_options
@write_options
@pass_context
@refusals
def replace(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    data: str | None,
    file: Path | None,
    expect_revision: int | None,
    consumer: str | None,
    run_id: str | None,
    meta: str | None,
) -> None:
    """Replace a record's whole document."""
    api = client(ctx)
    subject = _subject(api, name, target_kind, target_name, kind, key)
    origin = _origin(consumer, run_id, meta)
    echo_json(
        api.replace(name, subject, _payload(data, file), origin=origin, expect_revision=expect_revision)
    )


@states.command("merge")
@click.argument("name")
@subject_options
@data_options
@write_options
@pass_context
@refusals
def merge(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    data: str | None,
    file: Path | None,
    expect_revision: int | None,
    consumer: str | None,
    run_id: str | None,
    meta: str | None,
) -> None:
    """Shallow-merge top-level fields into a record (null is stored as null)."""
    api = client(ctx)
    subject = _subject(api, name, target_kind, target_name, kind, key)
    origin = _origin(consumer, run_id, meta)
    echo_json(api.merge(name, subject, _payload(data, file), origin=origin, expect_revision=expect_revision))


@states.command("apply")
@click.argument("name")
@subject_options
@data_options
@click.option("--op-id", default=None, help="Idempotency key (a payload op_id wins).")
@write_options
@pass_context
@refusals
def apply(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    data: str | None,
    file: Path | None,
    op_id: str | None,
    expect_revision: int | None,
    consumer: str | None,
    run_id: str | None,
    meta: str | None,
) -> None:
    """Apply an op batch: a JSON array of ops, or {"ops": [...], "op_id": "..."}."""
    payload = _payload(data, file)
    if isinstance(payload, dict):
        if set(payload) - {"ops", "op_id"} or "ops" not in payload:
            raise InvalidInput('the payload is a list of ops or {"ops": [...], "op_id"?: "..."}')
        op_id = payload.get("op_id") or op_id
        payload = payload["ops"]
    api = client(ctx)
    subject = _subject(api, name, target_kind, target_name, kind, key)
    result = api.apply(
        name,
        subject,
        payload,
        op_id=op_id,
        origin=_origin(consumer, run_id, meta),
        expect_revision=expect_revision,
    )
    echo_json(result.to_json())


@states.command("erase")
@click.argument("name")
@subject_options
@write_options
@pass_context
@refusals
def erase(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    expect_revision: int | None,
    consumer: str | None,
    run_id: str | None,
    meta: str | None,
) -> None:
    """Delete a record (its audit trail stays)."""
    api = client(ctx)
    subject = _subject(api, name, target_kind, target_name, kind, key)
    echo_json(
        api.erase(name, subject, origin=_origin(consumer, run_id, meta), expect_revision=expect_revision)
    )


@states.command("fold")
@click.argument("name")
@subject_options
@click.option(
    "--into", "into", required=True, help='The survivor: {"target_kind", "target_name", "kind", "key"}.'
)
@click.option("--mode", type=click.Choice(["switch", "merge"]), required=True)
@pass_context
@refusals
def fold(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    into: str,
    mode: str,
) -> None:
    """Fold this subject into another: its reads and writes land on the survivor."""
    api = client(ctx)
    echo_json(api.fold(name, _subject(api, name, target_kind, target_name, kind, key), decode(into), mode))


@states.command("writes")
@click.argument("name")
@subject_options
@click.option("--limit", type=click.IntRange(1, 500), default=None)
@click.option("--cursor", default=None)
@pass_context
@refusals
def writes(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    limit: int | None,
    cursor: str | None,
) -> None:
    """A record's audit trail, newest first."""
    api = client(ctx, reads=True)
    page = api.writes(
        name, _subject(api, name, target_kind, target_name, kind, key), limit=limit, cursor=cursor
    )
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
@pass_context
@refusals
def prune(ctx: Context) -> None:
    """Delete expired records and expired op_id keys (retention)."""
    api = client(ctx)
    if not isinstance(api, StatesService) or not sys.stderr.isatty():
        echo_json(api.prune())
        return
    from rich.console import Console

    # a sweep erases record by record: show how far it got (on the terminal only)
    with Console(stderr=True).status("pruning…") as status:

        def shown(state: str, erased: int) -> None:
            if erased % 100 == 0:
                status.update(f"pruning {state}: {erased:,} expired records erased")

        echo_json(api.prune(progress=shown))


@states.command("attachments")
@click.argument("name")
@pass_context
@refusals
def attachments(ctx: Context, name: str) -> None:
    """Templates attached to a state."""
    echo_json(client(ctx, reads=True).attachments(name))


@states.command("get-attachment")
@click.argument("name")
@click.argument("template")
@pass_context
@refusals
def get_attachment(ctx: Context, name: str, template: str) -> None:
    """One attachment."""
    echo_json(client(ctx, reads=True).get_attachment(name, template))


@states.command("attach")
@click.argument("name")
@click.argument("template")
@data_options
@pass_context
@refusals
def attach(ctx: Context, name: str, template: str, data: str | None, file: Path | None) -> None:
    """Attach TEMPLATE: {"path": [...], "parameters": {...}, "declarations": {...}}."""
    echo_json(client(ctx).attach(name, template, _payload(data, file)))


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
@pass_context
@refusals
def update_attachment(ctx: Context, name: str, template: str, declarations: str, options: str | None) -> None:
    """Change an attachment's declarations (running the template's reconcile)."""
    body: dict[str, Any] = {"declarations": decode(declarations)}
    if options:
        body["options"] = decode(options)
    echo_json(client(ctx).update_attachment(name, template, body))


@states.command("detach")
@click.argument("name")
@click.argument("template")
@pass_context
@refusals
def detach(ctx: Context, name: str, template: str) -> None:
    """Detach TEMPLATE (records keep their data)."""
    echo_json(client(ctx).detach(name, template))


@states.group("template-jq")
def template_jq() -> None:
    """Evaluate a template's jq programs on a record."""


@template_jq.command("eval")
@click.argument("name")
@subject_options
@click.argument("program")
@click.option("--param", "params", multiple=True, help="key=<JSON value> (repeatable).")
@pass_context
@refusals
def template_jq_eval(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    program: str,
    params: tuple[str, ...],
) -> None:
    """Run an input PROGRAM (template.program or program) and print its value."""
    values: dict[str, Any] = {}
    for item in params:
        k, sep, raw = item.partition("=")
        if not sep:
            raise click.UsageError(f"--param {item!r} must be key=<JSON value>")
        values[k] = decode(raw)
    api = client(ctx, reads=True)
    echo_json(
        api.template_jq_input(name, _subject(api, name, target_kind, target_name, kind, key), program, values)
    )


@template_jq.command("apply")
@click.argument("name")
@subject_options
@click.argument("program")
@click.option("--input", "value", default=None, help="The program's $input (JSON).")
@click.option("--op-id", default=None)
@pass_context
@refusals
def template_jq_apply(
    ctx: Context,
    name: str,
    target_kind: str,
    target_name: str,
    kind: str | None,
    key: str,
    program: str,
    value: str | None,
    op_id: str | None,
) -> None:
    """Run an update PROGRAM and apply the op batch it returns."""
    api = client(ctx)
    subject = _subject(api, name, target_kind, target_name, kind, key)
    echo_json(
        api.template_jq_update(name, subject, program, None if value is None else decode(value), op_id=op_id)
    )


@click.group("state-templates")
@click.option(
    "--url", envvar="STATEFLOW_URL", help="Use a running `stateflow serve` at this URL [env STATEFLOW_URL]."
)
@click.option("--token", envvar="STATEFLOW_TOKEN", help="Bearer token for --url [env STATEFLOW_TOKEN].")
@click.pass_context
def state_templates(click_ctx: click.Context, url: str | None, token: str | None) -> None:
    """State templates: reusable schema fragments with regimes and jq programs."""
    click_ctx.meta["states_remote"] = (url, token)


@state_templates.command("list")
@pass_context
@refusals
def templates_list(ctx: Context) -> None:
    """Templates, with how many states each is attached to."""
    items = client(ctx, reads=True).list_templates()
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
@pass_context
@refusals
def templates_get(ctx: Context, name: str) -> None:
    """One template document."""
    echo_json(client(ctx, reads=True).get_template(name))


@state_templates.command("put")
@click.argument("name")
@data_options
@click.option(
    "--replace", is_flag=True, help="Overwrite an existing template (its attachments are re-validated)."
)
@pass_context
@refusals
def templates_put(ctx: Context, name: str, data: str | None, file: Path | None, replace: bool) -> None:
    """Upload a template document."""
    echo_json(client(ctx).put_template(name, _payload(data, file), replace=replace))


@state_templates.command("delete")
@click.argument("name")
@pass_context
@refusals
def templates_delete(ctx: Context, name: str) -> None:
    """Delete a template that is attached nowhere."""
    echo_json(client(ctx).delete_template(name))


LISTINGS = frozenset(
    {"states list", "states subjects", "states search", "states writes", "state-templates list"}
)
decorate(states, "states", LISTINGS)
decorate(state_templates, "state-templates", LISTINGS)

__all__ = ["state_templates", "states"]
