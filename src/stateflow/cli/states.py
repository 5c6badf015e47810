"""``stateflow states …``: declared states from the command line.

Commands work on the configured store directly, or with ``--url`` against a running
``stateflow serve`` (token from ``--token`` or ``STATEFLOW_TOKEN``).
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import click

from stateflow.cli.common import Context, echo_json, pass_context, read_json_arg, refusals
from stateflow.doc.canonical import decode, encode
from stateflow.errors import InvalidInput, NotFound, StateflowError, StoreUnavailable
from stateflow.states import DoorContext, StatesService


class RemoteError(StateflowError):
    def __init__(self, message: str, code: str, status: int) -> None:
        super().__init__(message)
        self.code = code
        self.http_status = status


class Remote:
    """The same calls as :class:`StatesService`, over HTTP."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        self.token = token

    def _call(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        url = self.url + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else encode(body)
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return decode(response.read())["data"]
        except urllib.error.HTTPError as exc:
            try:
                payload = decode(exc.read())
            except StateflowError:
                payload = {"error": exc.reason, "code": "http-error"}
            raise RemoteError(
                payload.get("error", str(exc)), payload.get("code", "http-error"), exc.code
            ) from exc
        except urllib.error.URLError as exc:
            raise StoreUnavailable(f"cannot reach {self.url}: {exc.reason}") from exc

    @staticmethod
    def _record(name: str, subject: dict[str, str]) -> str:
        parts = [subject["target_kind"], subject["target_name"], subject["kind"], subject["key"]]
        return f"/api/states/{quote(name, safe='')}/records/" + "/".join(quote(p, safe="") for p in parts)

    def list_declarations(self) -> Any:
        return self._call("GET", "/api/states")

    def get_declaration(self, name: str) -> Any:
        return self._call("GET", f"/api/states/{quote(name, safe='')}")

    def declare(self, name: str, body: Any) -> Any:
        return self._call("PUT", f"/api/states/{quote(name, safe='')}", body)

    def delete_declaration(self, name: str) -> Any:
        return self._call("DELETE", f"/api/states/{quote(name, safe='')}")

    def stats(self, name: str) -> Any:
        return self._call("GET", f"/api/states/{quote(name, safe='')}/stats")

    def consumers(self, name: str) -> Any:
        return self._call("GET", f"/api/states/{quote(name, safe='')}/consumers")

    def subjects(self, name: str, kind: str | None, limit: int | None, cursor: str | None) -> Any:
        query = {"kind": kind, "limit": limit, "cursor": cursor}
        return self._call("GET", f"/api/states/{quote(name, safe='')}/subjects", query=query)

    def search(self, name: str, filters: Any, limit: int | None, cursor: str | None) -> Any:
        body = {
            "filters": filters,
            **({"limit": limit} if limit else {}),
            **({"cursor": cursor} if cursor else {}),
        }
        return self._call("POST", f"/api/states/{quote(name, safe='')}/records/search", body)

    def read(self, name: str, subject: dict[str, str]) -> Any:
        return self._call("GET", self._record(name, subject))

    def replace(self, name: str, subject: dict[str, str], body: Any) -> Any:
        return self._call("PUT", self._record(name, subject), body)

    def merge(self, name: str, subject: dict[str, str], body: Any) -> Any:
        return self._call("PATCH", self._record(name, subject), body)

    def apply(self, name: str, subject: dict[str, str], ops: Any, op_id: str | None) -> Any:
        body: dict[str, Any] = {"ops": ops, **({"op_id": op_id} if op_id else {})}
        return self._call("POST", self._record(name, subject) + "/deltas", body)

    def erase(self, name: str, subject: dict[str, str]) -> Any:
        return self._call("DELETE", self._record(name, subject))

    def fold(self, name: str, subject: dict[str, str], into: Any, mode: str) -> Any:
        return self._call("POST", self._record(name, subject) + "/fold", {"into": into, "mode": mode})

    def writes(self, name: str, subject: dict[str, str], limit: int | None, cursor: str | None) -> Any:
        return self._call(
            "GET", self._record(name, subject) + "/writes", query={"limit": limit, "cursor": cursor}
        )

    def prune(self) -> Any:
        return self._call("POST", "/api/state-retention/prune")

    def list_templates(self) -> Any:
        return self._call("GET", "/api/state-templates")

    def get_template(self, name: str) -> Any:
        return self._call("GET", f"/api/state-templates/{quote(name, safe='')}")

    def put_template(self, name: str, body: Any, replace: bool) -> Any:
        query = {"replace": "true"} if replace else None
        return self._call("PUT", f"/api/state-templates/{quote(name, safe='')}", body, query=query)

    def delete_template(self, name: str) -> Any:
        return self._call("DELETE", f"/api/state-templates/{quote(name, safe='')}")

    def attachments(self, name: str) -> Any:
        return self._call("GET", f"/api/states/{quote(name, safe='')}/attachments")

    def _attachment(self, name: str, template: str) -> str:
        return f"/api/states/{quote(name, safe='')}/attachments/{quote(template, safe='')}"

    def get_attachment(self, name: str, template: str) -> Any:
        return self._call("GET", self._attachment(name, template))

    def attach(self, name: str, template: str, body: Any) -> Any:
        return self._call("PUT", self._attachment(name, template), body)

    def update_attachment(self, name: str, template: str, body: Any) -> Any:
        return self._call("PATCH", self._attachment(name, template), body)

    def detach(self, name: str, template: str) -> Any:
        return self._call("DELETE", self._attachment(name, template))

    def template_jq_input(
        self, name: str, subject: dict[str, str], program: str, params: dict[str, Any]
    ) -> Any:
        query = {k: encode(v).decode() for k, v in params.items()}
        return self._call(
            "GET", self._record(name, subject) + f"/template-jq/{quote(program, safe='')}", query=query
        )

    def template_jq_update(
        self, name: str, subject: dict[str, str], program: str, value: Any, op_id: str | None
    ) -> Any:
        body: dict[str, Any] = {"input": value, **({"op_id": op_id} if op_id else {})}
        return self._call(
            "POST", self._record(name, subject) + f"/template-jq/{quote(program, safe='')}", body
        )


class Local:
    """The service on the configured store, as the ``operator`` door."""

    def __init__(self, service: StatesService) -> None:
        self.s = service
        self.ctx = DoorContext(door="operator", actor=_whoami())

    def list_declarations(self) -> Any:
        return self.s.list_declarations()

    def get_declaration(self, name: str) -> Any:
        return self.s.get_declaration(name)

    def declare(self, name: str, body: Any) -> Any:
        return self.s.declare(name, body, context=self.ctx)

    def delete_declaration(self, name: str) -> Any:
        return self.s.delete_declaration(name, context=self.ctx)

    def stats(self, name: str) -> Any:
        return self.s.stats(name)

    def consumers(self, name: str) -> Any:
        self.s.get_declaration(name)
        return self.s.consumers(name)

    def subjects(self, name: str, kind: str | None, limit: int | None, cursor: str | None) -> Any:
        return self.s.subjects(name, kind=kind, limit=limit, cursor=cursor)

    def search(self, name: str, filters: Any, limit: int | None, cursor: str | None) -> Any:
        return self.s.search(name, filters, limit=limit, cursor=cursor)

    def read(self, name: str, subject: dict[str, str]) -> Any:
        return self.s.read(name, subject)

    def replace(self, name: str, subject: dict[str, str], body: Any) -> Any:
        return self.s.replace(name, subject, body, context=self.ctx)

    def merge(self, name: str, subject: dict[str, str], body: Any) -> Any:
        return self.s.merge(name, subject, body, context=self.ctx)

    def apply(self, name: str, subject: dict[str, str], ops: Any, op_id: str | None) -> Any:
        return self.s.apply(name, subject, ops, op_id=op_id, context=self.ctx).to_json()

    def erase(self, name: str, subject: dict[str, str]) -> Any:
        return self.s.erase(name, subject, context=self.ctx)

    def fold(self, name: str, subject: dict[str, str], into: Any, mode: str) -> Any:
        return self.s.fold(name, subject, into, mode, context=self.ctx)

    def writes(self, name: str, subject: dict[str, str], limit: int | None, cursor: str | None) -> Any:
        return self.s.writes(name, subject, limit=limit, cursor=cursor)

    def prune(self) -> Any:
        if not sys.stderr.isatty():
            return self.s.prune(context=self.ctx)
        from rich.console import Console

        # a sweep erases record by record: show how far it got (on the terminal only)
        with Console(stderr=True).status("pruning…") as status:

            def shown(state: str, erased: int) -> None:
                if erased % 100 == 0:
                    status.update(f"pruning {state}: {erased:,} expired records erased")

            return self.s.prune(context=self.ctx, progress=shown)

    def list_templates(self) -> Any:
        return self.s.list_templates()

    def get_template(self, name: str) -> Any:
        return self.s.get_template(name)

    def put_template(self, name: str, body: Any, replace: bool) -> Any:
        return self.s.put_template(name, body, replace=replace, context=self.ctx)

    def delete_template(self, name: str) -> Any:
        return self.s.delete_template(name, context=self.ctx)

    def attachments(self, name: str) -> Any:
        return self.s.attachments(name)

    def get_attachment(self, name: str, template: str) -> Any:
        return self.s.get_attachment(name, template)

    def attach(self, name: str, template: str, body: Any) -> Any:
        return self.s.attach(name, template, body, context=self.ctx)

    def update_attachment(self, name: str, template: str, body: Any) -> Any:
        return self.s.update_attachment(name, template, body, context=self.ctx)

    def detach(self, name: str, template: str) -> Any:
        return self.s.detach(name, template, context=self.ctx)

    def template_jq_input(
        self, name: str, subject: dict[str, str], program: str, params: dict[str, Any]
    ) -> Any:
        return self.s.template_jq_input(name, subject, program, params)

    def template_jq_update(
        self, name: str, subject: dict[str, str], program: str, value: Any, op_id: str | None
    ) -> Any:
        return self.s.template_jq_update(name, subject, program, value, op_id=op_id, context=self.ctx)


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


def client(ctx: Context) -> Local | Remote:
    url, token = click.get_current_context().meta.get("states_remote", (None, None))
    if url:
        return Remote(url, token)
    service = StatesService(ctx.store(), ctx.config)
    service.install_builtins()
    return Local(service)


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
    api: Local | Remote, name: str, target_kind: str, target_name: str, kind: str | None, key: str
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
    if rows is not None and columns is not None and sys.stdout.isatty():
        _table(rows, columns)
    else:
        echo_json(value)


@states.command("list")
@pass_context
@refusals
def list_states(ctx: Context) -> None:
    """Declared states."""
    items = client(ctx).list_declarations()
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
    echo_json(client(ctx).get_declaration(name))


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
    echo_json(client(ctx).stats(name))


@states.command("consumers")
@click.argument("name")
@pass_context
@refusals
def consumers(ctx: Context, name: str) -> None:
    """What uses the state (guards its deletion)."""
    echo_json(client(ctx).consumers(name))


def _subject_rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
    page = client(ctx).subjects(name, kind, limit, cursor)
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
@pass_context
@refusals
def search(ctx: Context, name: str, filters: str, limit: int | None, cursor: str | None) -> None:
    """Records whose document contains FILTERS."""
    page = client(ctx).search(name, decode(filters), limit, cursor)
    _out(page, _subject_rows(page["matches"]), SUBJECT_COLUMNS)


@states.command("read")
@click.argument("name")
@subject_options
@pass_context
@refusals
def read(ctx: Context, name: str, target_kind: str, target_name: str, kind: str | None, key: str) -> None:
    """A record (null when there is none)."""
    api = client(ctx)
    echo_json(api.read(name, _subject(api, name, target_kind, target_name, kind, key)))


@states.command("replace")
@click.argument("name")
@subject_options
@data_options
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
) -> None:
    """Replace a record's whole document."""
    api = client(ctx)
    echo_json(
        api.replace(name, _subject(api, name, target_kind, target_name, kind, key), _payload(data, file))
    )


@states.command("merge")
@click.argument("name")
@subject_options
@data_options
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
) -> None:
    """Shallow-merge top-level fields into a record (null is stored as null)."""
    api = client(ctx)
    echo_json(api.merge(name, _subject(api, name, target_kind, target_name, kind, key), _payload(data, file)))


@states.command("apply")
@click.argument("name")
@subject_options
@data_options
@click.option("--op-id", default=None, help="Idempotency key (a payload op_id wins).")
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
) -> None:
    """Apply an op batch: a JSON array of ops, or {"ops": [...], "op_id": "..."}."""
    payload = _payload(data, file)
    if isinstance(payload, dict):
        if set(payload) - {"ops", "op_id"} or "ops" not in payload:
            raise InvalidInput('the payload is a list of ops or {"ops": [...], "op_id"?: "..."}')
        op_id = payload.get("op_id") or op_id
        payload = payload["ops"]
    api = client(ctx)
    echo_json(api.apply(name, _subject(api, name, target_kind, target_name, kind, key), payload, op_id))


@states.command("erase")
@click.argument("name")
@subject_options
@pass_context
@refusals
def erase(ctx: Context, name: str, target_kind: str, target_name: str, kind: str | None, key: str) -> None:
    """Delete a record (its audit trail stays)."""
    api = client(ctx)
    echo_json(api.erase(name, _subject(api, name, target_kind, target_name, kind, key)))


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
    api = client(ctx)
    page = api.writes(name, _subject(api, name, target_kind, target_name, kind, key), limit, cursor)
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
    echo_json(client(ctx).prune())


@states.command("attachments")
@click.argument("name")
@pass_context
@refusals
def attachments(ctx: Context, name: str) -> None:
    """Templates attached to a state."""
    echo_json(client(ctx).attachments(name))


@states.command("get-attachment")
@click.argument("name")
@click.argument("template")
@pass_context
@refusals
def get_attachment(ctx: Context, name: str, template: str) -> None:
    """One attachment."""
    echo_json(client(ctx).get_attachment(name, template))


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
    api = client(ctx)
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
    echo_json(api.template_jq_update(name, subject, program, None if value is None else decode(value), op_id))


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
    items = client(ctx).list_templates()
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
    echo_json(client(ctx).get_template(name))


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
    echo_json(client(ctx).put_template(name, _payload(data, file), replace))


@state_templates.command("delete")
@click.argument("name")
@pass_context
@refusals
def templates_delete(ctx: Context, name: str) -> None:
    """Delete a template that is attached nowhere."""
    echo_json(client(ctx).delete_template(name))


__all__ = ["NotFound", "state_templates", "states"]
