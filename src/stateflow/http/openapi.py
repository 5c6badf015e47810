"""The OpenAPI document of the HTTP API, from typed models.

Every operation declares its request body, its query parameters, its success answer
(``{"data": …}`` with the typed model) and every failure status with the error envelope
``{"error", "code"}``; the bearer scheme is declared so ``/docs`` can authorize. Record routes
are served by one raw-path route at run time (so a key may hold ``%2F``) but documented here
one path per sub-route.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from stateflow.states.listing import PAGE_DEFAULT, PAGE_MAX
from stateflow.states.models import META_MAX_BYTES, ORIGIN_TEXT_MAX_CHARS, subject_schema_properties

# ---------------------------------------------------------------------- typed models


class _Open(BaseModel):
    """Answers may gain fields (additions only), so every model admits more."""

    model_config = ConfigDict(extra="allow")


class Subject(_Open):
    target_kind: str
    target_name: str
    kind: str
    key: str


class Record(_Open):
    state: str
    subject: Subject
    data: dict[str, Any]
    seq: int | None
    revision: int
    updated_at: str | None
    canonical_subject: Subject
    folded_from: list[Subject]


class Attachment(_Open):
    template: str
    path: list[str]
    parameters: dict[str, Any]
    declarations: dict[str, Any]


class Declaration(_Open):
    name: str
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    subject_kinds: list[str]
    default_subject_kind: str
    retention_days: int | None = None
    retention_exempt: bool = False
    record_rule: str | None = None
    effective_schema: dict[str, Any] | None = None
    regimes: list[dict[str, Any]] | None = None
    attachments: list[Attachment] = []
    updated_at: str | None = None
    version: int | None = None


class ApplyResult(_Open):
    applied: bool
    data: dict[str, Any] | None
    seq: int | None
    skipped: list[dict[str, Any]]
    replayed: bool | None = None
    replayed_seq: int | None = None
    written: bool | None = None


class TemplateJqUpdate(ApplyResult):
    name: str


class TemplateJqValue(_Open):
    name: str
    purpose: str
    value: Any = None


class Listed(_Open):
    subject: Subject
    updated_at: str | None
    revision: int
    data: dict[str, Any] | None = None


class SubjectsPage(_Open):
    subjects: list[Listed]
    next_cursor: str | None


class SearchPage(_Open):
    matches: list[Listed]
    next_cursor: str | None


class WriteEntry(_Open):
    seq: int
    at: str
    origin: dict[str, Any]
    action: str | None
    paths: list[list[str | int]]
    revision: int
    folded_from: Subject | None = None


class WritesPage(_Open):
    items: list[WriteEntry]
    next_cursor: str | None


class Diff(_Open):
    from_: int = Field(alias="from")
    to: int
    edits: list[list[Any]]
    patch: Any = Field(
        default=None,
        description="the change as one merge patch; absent where no merge patch makes it "
        '(a value set to null, a member named like "[0]"): read edits',
    )


class Stats(_Open):
    records: int
    per_field: dict[str, int]
    per_kind: dict[str, int]
    consumers: int


class Error(BaseModel):
    error: str
    code: str
    reconcile: bool | None = None
    orphans: list[Any] | None = None


# a page's limit has no maximum: a larger one answers the fullest page and its cursor (Python,
# HTTP and the CLI alike), so a client that validates against the schema may send it
LIMIT_NOTE: Final = (
    f"page size (default {PAGE_DEFAULT}; over {PAGE_MAX} answers a page of {PAGE_MAX} and its cursor)"
)


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filters: dict[str, Any] = Field(min_length=1)
    limit: int | None = Field(default=None, ge=1, description=LIMIT_NOTE)
    cursor: str | None = None
    sort: list[dict[str, Any]] | dict[str, Any] | None = None
    include_data: bool = False


class DeltasBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ops: list[dict[str, Any]]
    op_id: str | None = Field(default=None, min_length=1, max_length=ORIGIN_TEXT_MAX_CHARS)


class FoldBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    into: Subject
    mode: str


class RevertBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    revision: int = Field(ge=0)


class TemplateJqBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: Any = None
    op_id: str | None = Field(default=None, min_length=1, max_length=ORIGIN_TEXT_MAX_CHARS)


MODELS: tuple[type[BaseModel], ...] = (
    Subject,
    Record,
    Attachment,
    Declaration,
    ApplyResult,
    TemplateJqUpdate,
    TemplateJqValue,
    Listed,
    SubjectsPage,
    SearchPage,
    WriteEntry,
    WritesPage,
    Diff,
    Stats,
    Error,
    SearchBody,
    DeltasBody,
    FoldBody,
    RevertBody,
    TemplateJqBody,
)

# ---------------------------------------------------------------------- the document

_REF = "#/components/schemas/{model}"
OBJECT: dict[str, Any] = {"type": "object"}
ANY_JSON: dict[str, Any] = {}
FAILURES = {
    "400": (
        "Malformed request (bad JSON, a body of the wrong shape, a path segment or header that is not "
        "UTF-8, an If-Match where no record revision is compared)"
    ),
    "401": "Missing or unknown bearer token",
    "403": "The token may not do this (read-only, or limited to other targets)",
    "404": "Unknown state, record revision, template or route",
    "405": "Method not allowed (the Allow header lists the allowed ones)",
    "408": "The request body did not arrive whole in time (request-timeout)",
    "409": "Conflict (non-additive re-declare, in use, fold refused, built-in state)",
    "413": "The request body is over the configured limit",
    "422": "Refused input (schema, subject, ops, unknown or repeated query parameter …); nothing changed",
    "500": "Corrupt store row or internal error",
    "501": "The store is not migrated (states-not-configured)",
    "503": "The store is unreachable",
}
CAS = {"412": "If-Match or If-None-Match named a revision the record is not at; nothing changed"}


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": _REF.format(model=model.__name__)}


def _data(schema: dict[str, Any], nullable: bool = False) -> dict[str, Any]:
    inner = {"anyOf": [schema, {"type": "null"}]} if nullable else schema
    return {"type": "object", "properties": {"data": inner}, "required": ["data"]}


def _list(model: type[BaseModel]) -> dict[str, Any]:
    return {"type": "array", "items": _ref(model)}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


INT0 = {"type": "integer", "minimum": 0}
INT1 = {"type": "integer", "minimum": 1}
STRING = {"type": "string"}
REVISION_PRECONDITION: Final = "RevisionPrecondition"
"""The one definition of what ``If-Match`` takes, in the document's components: both of its
parameters (a record's writes' and its read's) refer to it."""
IF_MATCH = {
    "name": "If-Match",
    "in": "header",
    "required": False,
    "schema": {"$ref": _REF.format(model=REVISION_PRECONDITION)},
    "description": 'Compare-and-set: "N", the revision from the record\'s ETag (0: absent — never written or erased); '
    "* : the record exists, at any revision.",
}
IF_MATCH_READ = {
    "name": "If-Match",
    "in": "header",
    "required": False,
    "schema": IF_MATCH["schema"],
    "description": 'The read answers only while the record is at revision "N" (*: exists), else 412 '
    "(RFC 9110); on the record's other reads it is 400.",
}
IF_NONE_MATCH_READ = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "schema": STRING,
    "description": 'ETags already held ("N", W/"N", comma-separated, or * for any existing revision): '
    "304 without a body when the read would answer one of them.",
}
IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "enum": ["*"]},
    "description": 'Create-only: * (as If-Match: "0"); with If-Match, or any other value, 400.',
}
JQ_PARAMS = {
    "name": "params",
    "in": "query",
    "required": False,
    "style": "form",
    "explode": True,
    "schema": {"type": "object", "additionalProperties": True},
    "description": "The program's params, one query parameter each, its value JSON "
    "(`?min=1&who=%22ann%22`): exactly the params the program declares (a missing or an "
    "undeclared one is 422; a value that is not JSON, 400).",
}
ORIGIN_TEXT = {"type": "string", "maxLength": ORIGIN_TEXT_MAX_CHARS}
ORIGIN_HEADERS = [
    {"name": "X-Stateflow-Consumer", "in": "header", "required": False, "schema": ORIGIN_TEXT},
    {"name": "X-Stateflow-Run-Id", "in": "header", "required": False, "schema": ORIGIN_TEXT},
    {
        "name": "X-Stateflow-Meta",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": "^\\{.*\\}$"},
        "description": f"A JSON object recorded with the write's origin (at most {META_MAX_BYTES} "
        "bytes serialized).",
    },
]


def _op(
    summary: str,
    data: dict[str, Any],
    *,
    body: dict[str, Any] | None = None,
    body_required: bool = True,
    query: list[dict[str, Any]] | None = None,
    cas: bool = False,
    write: bool = False,
    etag: bool = False,
    not_modified: bool = False,
) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "OK", "content": _json(data)}
    if etag:
        ok["headers"] = {
            "ETag": {"schema": STRING, "description": 'The record\'s revision, "N" ("0": absent or erased)'}
        }
    responses: dict[str, Any] = {"200": ok}
    for status, why in {**FAILURES, **(CAS if cas else {})}.items():
        responses[status] = {"description": why, "content": _json(_ref(Error))}
    responses["401"]["headers"] = {
        "WWW-Authenticate": {"schema": STRING, "description": 'Bearer realm="stateflow"'}
    }
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    params = list(query or [])
    if not_modified:
        responses["304"] = {
            "description": "If-None-Match named the ETag this read would answer: no body",
            "headers": ok["headers"],
        }
        params += (IF_MATCH_READ, IF_NONE_MATCH_READ)
        responses["412"] = {
            "description": "If-Match named a revision the record read is not at",
            "content": _json(_ref(Error)),
        }
    if cas:
        params += (IF_MATCH, IF_NONE_MATCH)
    if write:
        params.extend(ORIGIN_HEADERS)
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": body_required, "content": _json(body)}
    return op


EXAMPLES = {
    "name": "tickets",
    "target_kind": "agent",
    "target_name": "support-bot",
    "kind": "thread",
    "key": "t-1",
}


def _path_params(names: list[str]) -> list[dict[str, Any]]:
    subject = subject_schema_properties()  # (a subject's parts as its model bounds them)
    out = []
    for n in names:
        param: dict[str, Any] = {
            "name": n,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "minLength": 1, **subject.get(n, {})},
        }
        if n in EXAMPLES:
            param["example"] = EXAMPLES[n]
        out.append(param)
    return out


RECORD = "/api/states/{name}/records/{target_kind}/{target_name}/{kind}/{key}"


def paths() -> dict[str, dict[str, Any]]:
    record = _data(_ref(Record), nullable=True)
    declaration = _data(_ref(Declaration))
    out: dict[str, dict[str, Any]] = {
        "/api/health": {
            "get": {
                "summary": "Liveness (no token needed)",
                "security": [],
                "responses": {"200": {"description": "OK", "content": _json(_data(OBJECT))}},
            }
        },
        "/api/ready": {
            "get": {
                "summary": "Readiness: the store answers and is migrated to this version (no token needed)",
                "security": [],
                "responses": {
                    "200": {"description": "Ready", "content": _json(_data(OBJECT))},
                    "503": {
                        "description": "Not ready: the store does not answer, or is not at this "
                        "server's schema version (`code` says which)",
                        "content": _json(OBJECT),
                    },
                },
            }
        },
        "/api/states": {"get": _op("List declared states", _data(_list(Declaration)))},
        "/api/states/{name}": {
            "get": _op("Read a declaration", declaration),
            "put": _op(
                "Declare or additively re-declare a state",
                declaration,
                body=OBJECT,
                query=[
                    _query(
                        "replace",
                        STRING,
                        "false to only create: a state declared already is 409 state-exists, nothing changed "
                        "(default true: create or re-declare; true/false, 1/0, yes/no; anything else is 400)",
                    )
                ],
            ),
            "delete": _op("Delete a state with its records and audit", _data(OBJECT)),
        },
        "/api/states/{name}/stats": {"get": _op("Record counts", _data(_ref(Stats)))},
        "/api/states/{name}/consumers": {"get": _op("What uses the state", _data({"type": "array"}))},
        "/api/states/{name}/subjects": {
            "get": _op(
                "Subjects with a record",
                _data(_ref(SubjectsPage)),
                query=[
                    _query("kind", STRING, "only this subject kind"),
                    _query("limit", INT1, LIMIT_NOTE),
                    _query("cursor", STRING, "from a prior page"),
                ],
            )
        },
        "/api/states/{name}/records/search": {
            "post": _op(
                "Search records (containment and $ operators)", _data(_ref(SearchPage)), body=_ref(SearchBody)
            )
        },
        "/api/states/{name}/attachments": {
            "get": _op("Templates attached to a state", _data({"type": "array"}))
        },
        "/api/states/{name}/attachments/{template}": {
            "get": _op("One attachment", _data(OBJECT)),
            "put": _op("Attach a template", _data(OBJECT), body=OBJECT, body_required=False),
            "patch": _op("Change an attachment's declarations", _data(OBJECT), body=OBJECT),
            "delete": _op("Detach a template", _data(OBJECT)),
        },
        "/api/state-templates": {"get": _op("List templates", _data({"type": "array"}))},
        "/api/state-templates/{name}": {
            "get": _op("Read a template", _data(OBJECT)),
            "put": _op(
                "Store a template",
                _data(OBJECT),
                body=OBJECT,
                query=[
                    _query(
                        "replace",
                        STRING,
                        "true to replace an existing template (true/false, 1/0, yes/no; anything else is 400)",
                    )
                ],
            ),
            "delete": _op("Delete a template", _data(OBJECT)),
        },
        "/api/state-retention/prune": {
            "post": _op(
                "Retention sweep (no parameters: no body, or {})",
                _data(OBJECT),
                body={"type": "object", "maxProperties": 0},
                body_required=False,
            )
        },
        RECORD: {
            "get": _op(
                "Read a record (now, or as of a revision or seq)",
                record,
                query=[
                    _query("revision", INT0, "read it as of this revision"),
                    _query("seq", INT0, "read it as of this transition"),
                ],
                etag=True,
                not_modified=True,
            ),
            "put": _op("Replace a record", record, body=OBJECT, cas=True, write=True, etag=True),
            "patch": _op("Shallow-merge into a record", record, body=OBJECT, cas=True, write=True, etag=True),
            "delete": _op("Erase a record", _data(OBJECT), cas=True, write=True, etag=True),
        },
        RECORD + "/deltas": {
            "post": _op(
                "Apply an op batch",
                _data(_ref(ApplyResult)),
                body=_ref(DeltasBody),
                cas=True,
                write=True,
                etag=True,
            )
        },
        RECORD + "/fold": {
            "post": _op(
                "Fold into another subject (If-Match: only while this record is at that revision)",
                _data(OBJECT),
                body=_ref(FoldBody),
                write=True,
                cas=True,
            )
        },
        RECORD + "/writes": {
            "get": _op(
                "The record's audit trail (its revisions with origins)",
                _data(_ref(WritesPage)),
                query=[_query("limit", INT1, LIMIT_NOTE), _query("cursor", STRING, "from a prior page")],
            )
        },
        RECORD + "/diff": {
            "get": _op(
                "What changed between two revisions",
                _data(_ref(Diff)),
                query=[
                    _query("from", INT0, "older revision (required)"),
                    _query("to", INT0, "newer (default: current)"),
                ],
            )
        },
        RECORD + "/revert": {
            "post": _op(
                "Write a revision's document again, as a new transition",
                record,
                body=_ref(RevertBody),
                cas=True,
                write=True,
                etag=True,
            )
        },
        RECORD + "/template-jq/{program}": {
            "get": _op(
                "Run an input program (query = its params as JSON)",
                _data(_ref(TemplateJqValue)),
                query=[JQ_PARAMS],
            ),
            "post": _op(
                "Run an update program and apply its ops",
                _data(_ref(TemplateJqUpdate)),
                body=_ref(TemplateJqBody),
                body_required=False,
                cas=True,
                write=True,
                etag=True,
            ),
        },
    }
    for path, item in out.items():
        names = [seg[1:-1] for seg in path.split("/") if seg.startswith("{")]
        for op in item.values():
            if names:
                op["parameters"] = _path_params(names) + op.get("parameters", [])
    return out


def document(title: str, version: str, description: str) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in MODELS:
        schema = model.model_json_schema(ref_template=_REF, by_alias=True)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    # a subject as its model bounds it (a fold's target is refused past these, as a path's is)
    schemas["Subject"]["properties"] = {
        **schemas["Subject"]["properties"],
        **subject_schema_properties(),
    }
    schemas[REVISION_PRECONDITION] = {
        "type": "string",
        "pattern": '^("[0-9]+"|\\*)$',
        "description": 'A record revision as its ETag gives it, "N", or * (any revision of a record that exists)',
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "paths": paths(),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
