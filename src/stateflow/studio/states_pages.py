"""Declared states in the studio: the catalog, a state's records, one record (document,
timeline, as-of, diff, edit, template jq), and the template library."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from stateflow.doc.canonical import JSON
from stateflow.doc.diff import diff
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput, NotFound, StateflowError
from stateflow.memory.planes import RUNTIME, PlaneSet
from stateflow.memory.scopes import MEMORY_STATE
from stateflow.states.listing import check_kind
from stateflow.states.models import StateSubject
from stateflow.states.retention import retention_days
from stateflow.states.service import RevisionMismatch, subject_of
from stateflow.store import DocKey
from stateflow.studio.session import Session
from stateflow.studio.tree import diff_rows, json_text, path_text
from stateflow.studio.web import (
    NO_STORE,
    PREFIX,
    Pages,
    Studio,
    form_page,
    int_param,
    json_field,
    page,
    subject_from,
    subject_params,
    url,
)

RECORDS_PAGE: Final = 50
EDIT_INLINE_CHARS: Final = 1024 * 1024
"""The largest document (as the editor's indented JSON) the record page puts in its editor: a
browser takes tens of seconds to lay out a textarea of tens of MB. A larger one is offered as
a JSON download, to write back through the API or the CLI."""
HISTORY_PAGE: Final = 25
PLANES: Final = PlaneSet()
UNREAD_SCAN: Final = 1000
"""The most revisions a memory scope's compare scans for the paths it wrote to planes the
page does not read (one index range of the audit trail, no plane body)."""
UNREAD_PATHS: Final = 50


def pretty(value: JSON) -> str:
    """The editor's text of ``value`` (hidden characters escaped: the same JSON, drawn as it is)."""
    return json_text(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


# ---------------------------------------------------------------------- catalog


def retention_text(studio: Studio, decl: Mapping[str, Any], *, long: bool = False) -> str:
    """How long ``decl``'s records are kept, as the sweep will keep them: the deployment
    default named where it is what applies (a state without ``retention_days`` of its own is
    swept by it, unless built in or exempt)."""
    if decl.get("retention_exempt"):
        return "exempt: trimmed by the code that writes it, never by age" if long else "exempt"
    days = retention_days(decl, studio.service.config.retention.default_days)
    if days is None:
        return "kept until erased" if long else "kept"
    return f"{days} days" if decl.get("retention_days") else f"{days} days (the deployment default)"


def catalog(studio: Studio, request: Request, session: Session) -> Response:
    states = studio.service.list_declarations()
    retention = {s["name"]: retention_text(studio, s) for s in states}
    return studio.html("states.html", session=session, states=states, retention=retention, nav="states")


def state(studio: Studio, request: Request, session: Session) -> Response:
    name = request.path_params["name"]
    service, token = studio.service, session.token
    decl = service.get_declaration(name)
    q = request.query_params
    kind, filters_text, cursor = q.get("kind") or None, (q.get("filters") or "").strip(), q.get("cursor")
    sort_text = (q.get("sort") or "").strip()
    check_kind(name, decl["subject_kinds"], kind)
    tenants = None if token.targets is None else set(token.targets)
    search_error = None
    rows: Sequence[Mapping[str, Any]] = []
    next_cursor = None
    try:
        if filters_text:
            filters = json_field(filters_text, "the filter")
            sort = json_field(sort_text, "the sort") if sort_text else None
            found = service.search(
                name, filters, limit=RECORDS_PAGE, cursor=cursor, tenants=tenants, kind=kind, sort=sort
            )
            rows, next_cursor = found["matches"], found["next_cursor"]
        elif sort_text:  # (the subjects listing has one order: a sort orders a search)
            raise InvalidInput("a sort orders the matches of a filter: give a filter too")
        else:
            listed = service.subjects(name, kind=kind, limit=RECORDS_PAGE, cursor=cursor, tenants=tenants)
            rows, next_cursor = listed["subjects"], listed["next_cursor"]
    except InvalidInput as exc:
        search_error = exc.message
    stats = service.stats(name) if token.targets is None else None
    templates = {a["template"]: service.get_template(a["template"]) for a in decl["attachments"]}
    return studio.html(
        "state.html",
        session=session,
        nav="states",
        decl=decl,
        retention=retention_text(studio, decl, long=True),
        stats=stats,
        rows=rows,
        kind=kind,
        filters=filters_text,
        sort=sort_text,
        cursor=cursor,
        next_cursor=next_cursor,
        pages=Pages.at(cursor, q.get("back")),
        search_error=search_error,
        templates=templates,
    )


def templates_page(studio: Studio, request: Request, session: Session) -> Response:
    return studio.html(
        "templates.html", session=session, nav="templates", templates=studio.service.list_templates()
    )


# ---------------------------------------------------------------------- one record


class _Record:
    """The record as the page shows it. A memory scope's lazy planes are never read here:
    only their outlines (immediate keys and kinds), which the store keeps beside the body."""

    def __init__(self, studio: Studio, name: str, subject: StateSubject) -> None:
        self.name, self.subject = name, subject
        self.memory = name == MEMORY_STATE
        self.members: list[str] | None = [*PLANES.hot, RUNTIME] if self.memory else None
        service = studio.service
        self.lazy: dict[str, Any] = {}
        if self.memory:
            decl = service.get_declaration(name)
            if subject.kind not in decl["subject_kinds"]:
                service.read(name, subject)  # raises the service's own refusal
            self.canonical = subject
            doc = studio.store.get(DocKey(name, subject.encode()), self.members, outlines=PLANES.lazy)
            self.data: JSON = MISSING if doc.body is None else doc.body
            self.revision, self.updated_at = doc.revision, doc.at
            self.folded_from: Sequence[Mapping[str, Any]] = []
            self.lazy = {k: v for k, v in doc.outlines.items() if v is not None}
        else:
            rec = service.read(name, subject)
            self.canonical = subject if rec is None else StateSubject.model_validate(rec["canonical_subject"])
            self.data = MISSING if rec is None else rec["data"]
            self.revision = 0 if rec is None else rec["revision"]
            self.updated_at = None if rec is None else rec["updated_at"]
            self.folded_from = [] if rec is None else rec["folded_from"]
        self.key = DocKey(name, self.canonical.encode())
        # the newest revision in its history, which an erased record keeps (its own revision,
        # what an edit expects, is 0): the revisions the page can compare
        self.newest = self.revision or studio.store.get(self.key, members=()).revision

    def at_revision(self, studio: Studio, revision: int) -> JSON:
        body = studio.store.read_at(self.key, revision=revision, members=self.members).body
        return MISSING if body is None else body


def _jq_programs(studio: Studio, decl: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for attachment in decl["attachments"]:
        template = studio.service.get_template(attachment["template"])
        for pname, program in sorted((template.get("template_jq") or {}).items()):
            out.append(
                {
                    "ref": f"{template['name']}.{pname}",
                    "purpose": program.get("purpose"),
                    "params": program.get("params", []),
                    "description": program.get("description", ""),
                }
            )
    return out


def _record_values(studio: Studio, name: str, q: Mapping[str, str], session: Session) -> dict[str, Any]:
    subject = subject_from(q)
    studio.check_tenant(session.token, subject)
    decl = studio.service.get_declaration(name)
    rec = _Record(studio, name, subject)
    history = studio.service.writes(name, subject, limit=HISTORY_PAGE, cursor=q.get("cursor"))
    values: dict[str, Any] = {
        "nav": "states",
        "decl": decl,
        "rec": rec,
        "subject": subject,
        "sp": subject_params(subject),
        "history": history,
        "programs": [] if rec.memory else _jq_programs(studio, decl),
        "editable": not rec.memory,
        "edit_text": "",
        "edit_too_large": None,  # the document's size when it is too large for the editor
        "edit_error": None,
        "edit_conflict": False,
        # after a save: the revision it wrote, or the one it left as it was (it changed nothing)
        "saved": _revision_shown(q, "saved", name, subject, session),
        "unchanged": _revision_shown(q, "unchanged", name, subject, session),
        "asof": None,
        "diff": None,
    }
    if rec.data is not MISSING and not rec.memory:
        text = pretty(rec.data)
        if len(text) > EDIT_INLINE_CHARS:
            values["edit_too_large"] = len(text)
        else:
            values["edit_text"] = text
    rev = int_param(q, "rev")
    if rev is not None:
        values["asof"] = {"revision": rev, "value": rec.at_revision(studio, rev)}
    seq = int_param(q, "seq")
    if seq is not None and not rec.memory:
        # a revision of a subject folded into this record: its own record as of that write
        # (``of``: its kind and key, under this record's target — a fold never crosses one)
        if not q.get("of_kind") or not q.get("of_key"):
            raise InvalidInput(
                "seq names a write of a subject folded into this record: give that subject's "
                "of_kind and of_key too (a revision of this record itself is rev=N)"
            )
        of = subject_of({**subject.model_dump(), "kind": q.get("of_kind", ""), "key": q.get("of_key", "")})
        if subject_params(of) not in map(subject_params, rec.folded_from):
            raise InvalidInput(f"{of.kind}/{of.key} is not a subject folded into this record")
        then = studio.service.read(name, of, seq=seq)
        # after its fold a folded subject reads as the record it was folded into: that record's
        # revision, named as such, never as one of the folded subject's own
        into = None if then is None else StateSubject.model_validate(then["canonical_subject"])
        values["asof"] = {
            "revision": 0 if then is None else then["revision"],
            "value": MISSING if then is None else then["data"],
            "of": of,
            "seq": seq,
            "into": into if into is not None and subject_params(into) != subject_params(of) else None,
        }
    a, b = int_param(q, "a"), int_param(q, "b")
    if a is not None and b is not None:
        values["diff"] = _diff(studio, rec, a, b)
    return values


def _outcome(state: str, subject: StateSubject, what: str, revision: int) -> str:
    """The text a save's confirmation signs: what it did, to which record, at which revision."""
    return f"{what}.{state}.{subject.encode()}.{revision}"


def _revision_shown(
    q: Mapping[str, str], what: str, state: str, subject: StateSubject, session: Session
) -> int | None:
    """The revision a save's redirect carries for its confirmation (``what``: ``saved`` or
    ``unchanged``), shown only when this session's save signed it (``ok``): a link anyone
    else makes, or one naming another record or revision, shows no confirmation."""
    raw = q.get(what) or ""
    if not (raw.isascii() and raw.isdigit() and len(raw) < 20):
        return None
    revision = int(raw)
    return revision if session.stamped(_outcome(state, subject, what, revision), q.get("ok")) else None


def _diff(studio: Studio, rec: _Record, a: int, b: int) -> dict[str, Any]:
    old, new = rec.at_revision(studio, a), rec.at_revision(studio, b)
    rows, more = diff_rows(old, diff(old, new))
    out: dict[str, Any] = {"a": a, "b": b, "rows": rows, "more": more, "unread": None}
    if rec.members is not None:
        out["unread"] = _unread_writes(studio, rec, min(a, b), max(a, b))
    return out


def _unread_writes(studio: Studio, rec: _Record, low: int, high: int) -> dict[str, Any]:
    """The paths outside the members ``rec`` reads (a memory scope's lazy and extra planes)
    written after revision ``low`` up to ``high``, from the changes' paths: the planes
    themselves are never read here, so a compare can only list where they were written (a
    path written and later set back is listed too). ``complete``: every revision in between
    was scanned (not more than :data:`UNREAD_SCAN`, none pruned), so an empty list means
    those planes did not change."""
    members = set(rec.members or ())
    if high == low:
        return {"paths": [], "more": 0, "complete": True}
    top = studio.store.read_at(rec.key, revision=high, members=()).seq
    wanted = min(high - low, UNREAD_SCAN)
    changes = studio.store.history(
        [rec.key], limit=wanted, before_seq=None if top is None else top + 1, members=()
    )
    seen: dict[str, None] = {}
    revisions = set()
    for change in changes:
        if change.revision <= low:
            break
        revisions.add(change.revision)
        for path in change.paths:
            if not path or path[0] not in members:
                seen.setdefault(path_text(path), None)
    paths = list(seen)
    return {
        "paths": paths[:UNREAD_PATHS],
        "more": max(0, len(paths) - UNREAD_PATHS),
        "complete": len(revisions) == high - low,
    }


def record(studio: Studio, request: Request, session: Session) -> Response:
    values = _record_values(studio, request.path_params["name"], request.query_params, session)
    return studio.html("record.html", session=session, **values)


def record_json(studio: Studio, request: Request, session: Session) -> Response:
    """The record's document as a JSON file: how a person gets one too large for the editor."""
    name = request.path_params["name"]
    if name == MEMORY_STATE:
        raise InvalidInput("memory scopes are browsed on their scope page, not downloaded here")
    subject = subject_from(request.query_params)
    studio.check_tenant(session.token, subject)
    rec = _Record(studio, name, subject)
    if rec.data is MISSING:
        raise NotFound(f"state {name!r} has no record for this subject")
    return Response(
        orjson.dumps(rec.data, option=orjson.OPT_INDENT_2),
        media_type="application/json",
        headers={
            **NO_STORE,
            "Content-Disposition": f'attachment; filename="{name}-revision-{rec.revision}.json"',
        },
    )


def record_history(studio: Studio, request: Request, session: Session) -> Response:
    """One more page of the timeline (htmx appends it)."""
    name = request.path_params["name"]
    subject = subject_from(request.query_params)
    studio.check_tenant(session.token, subject)
    try:
        history = studio.service.writes(
            name, subject, limit=HISTORY_PAGE, cursor=request.query_params.get("cursor")
        )
    except StateflowError as exc:
        # in place of the "Older revisions" row it replaces, as a row: a bare alert there
        # would be squeezed into the table's first column
        return studio.html(
            "_history_rows.html",
            session=session,
            status=exc.http_status,
            history_error=exc.message,
            history_code=exc.code,
        )
    return studio.html(
        "_history_rows.html",
        session=session,
        history=history,
        decl={"name": name},
        sp=subject_params(subject),
        more_page=True,
    )


def record_edit(studio: Studio, request: Request, session: Session, form: dict[str, str]) -> Response:
    name = request.path_params["name"]
    subject = subject_from(form)
    studio.check_tenant(session.token, subject)
    studio.check_writer(session.token)
    if name == MEMORY_STATE:
        raise InvalidInput("memory scopes are written by their agents (patch_state), not edited here")
    text = form.get("document", "")
    edited = int_param(form, "revision")
    if edited is None:
        raise InvalidInput("the edit names no revision of the record; reload the page and edit again")
    try:
        document = json_field(text, "the document")
        # compare-and-set: the write lands only on the revision the person was looking at
        written = studio.service.replace(
            name, subject, document, context=studio.context(session), expect_revision=edited
        )
    except (InvalidInput, RevisionMismatch) as exc:  # shown inline, nothing written
        values = _record_values(studio, name, subject_params(subject), session)
        message = exc.message
        if isinstance(exc, RevisionMismatch):
            message = (
                f"This record changed while you were editing it: you edited revision {edited}, it "
                f"is now at revision {values['rec'].revision}. Nothing was saved. The current "
                "document is shown above and your text is kept below: apply your change to the "
                "current document and save again."
            )
        values.update(edit_text=text, edit_error=message, edit_conflict=isinstance(exc, RevisionMismatch))
        # the answer to a POST: the page takes the record page's address (base.html), so that
        # reload and Back load the record, never resubmit the form or open a POST-only URL
        address = url(f"/states/{name}/record", **subject_params(subject)) + "#edit"
        return studio.html("record.html", session=session, status=exc.http_status, address=address, **values)
    # the revision this save wrote, from the write's own answer: the page shown after the
    # redirect may already be at a later revision another writer made meanwhile. The same
    # document again writes nothing: the revision stays the one edited.
    outcome: dict[str, Any] = {}
    if written is not None:
        revision = written["revision"]
        what = "unchanged" if revision == edited else "saved"
        outcome = {what: revision, "ok": session.stamp(_outcome(name, subject, what, revision))}
    return RedirectResponse(
        url(f"/states/{name}/record", **subject_params(subject), **outcome), status_code=303
    )


def record_jq(studio: Studio, request: Request, session: Session, form: dict[str, str]) -> Response:
    """Run one template jq program on the record: ``input`` programs read, ``update`` ones write."""
    name = request.path_params["name"]
    subject = subject_from(form)
    studio.check_tenant(session.token, subject)
    program = form.get("program", "")
    service = studio.service
    raw_input = (form.get("input") or "").strip()
    try:
        purpose = service.template_jq_purpose(name, program)
        if purpose == "input":
            params = json_field(raw_input, "params") if raw_input else {}
            if not isinstance(params, dict):
                raise InvalidInput("params must be a JSON object")
            result: Any = service.template_jq_input(name, subject, program, params)
        else:
            studio.check_writer(session.token)
            value = json_field(raw_input, "input") if raw_input else None
            result = service.template_jq_update(
                name, subject, program, value, context=studio.context(session)
            )
    except StateflowError as exc:
        return studio.html("_jq_result.html", session=session, status=exc.http_status, error=exc.message)
    return studio.html("_jq_result.html", session=session, result=result, purpose=purpose, error=None)


def record_form_address(studio: Studio, request: Request, session: Session) -> Response:
    """A record form's own address opened as a page (pasted, a restored tab): the record — or,
    from a page older than the address naming it, the state's records."""
    name = request.path_params["name"]
    if not {"tk", "tn", "kind", "key"} <= set(request.query_params):
        return RedirectResponse(url(f"/states/{name}"), status_code=303)
    subject = subject_from(request.query_params)
    return RedirectResponse(url(f"/states/{name}/record", **subject_params(subject)), status_code=303)


def register(app: FastAPI, studio: Studio) -> None:
    gets = {
        "/states": catalog,
        "/states/{name}": state,
        "/states/{name}/record": record,
        "/states/{name}/record/history": record_history,
        "/states/{name}/record/json": record_json,
        "/states/{name}/record/edit": record_form_address,
        "/states/{name}/record/jq": record_form_address,
        "/templates": templates_page,
    }
    for path, fn in gets.items():
        app.add_api_route(PREFIX + path, page(studio, fn), methods=["GET"], include_in_schema=False)
    posts = {"/states/{name}/record/edit": record_edit, "/states/{name}/record/jq": record_jq}
    for path, form_fn in posts.items():
        app.add_api_route(
            PREFIX + path, form_page(studio, form_fn, _record_home), methods=["POST"], include_in_schema=False
        )


def _record_home(request: Request, form: dict[str, str]) -> str:
    """The record page both record forms are on."""
    return url(f"/states/{request.path_params['name']}/record", **subject_params(subject_from(form)))
