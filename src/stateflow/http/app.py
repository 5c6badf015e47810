"""The HTTP API (FastAPI): declared states under ``/api/states…``.

Every route needs a bearer token. Success is ``{"data": …}``; failure is
``{"error": message, "code": code}`` with the status of the error (400 malformed request,
401/403 auth, 404 unknown, 409 conflict, 422 refused, 501 store not migrated, 503 unreachable).
Record routes take the subject as four raw path segments, so a key holding ``%2F`` or ending in
``/writes`` stays one segment.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, Final, Literal
from urllib.parse import unquote_to_bytes

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateflow import __version__
from stateflow.aio import EdgeCalls
from stateflow.config import HttpConfig
from stateflow.doc.canonical import ascii_digits, decode, encode_trusted
from stateflow.errors import (
    NO_ROUTE,
    BadRequest,
    Forbidden,
    InvalidInput,
    InvalidJSON,
    MissingExtra,
    NotJSON,
    ReadOnlyState,
    StateflowError,
    StoreNotMigrated,
)
from stateflow.extras import MCP_OVER_HTTP, missing_for
from stateflow.http.auth import Token, TokenSet, Unauthorized
from stateflow.http.docs import ASSETS_URL, mount_docs
from stateflow.http.gone import watched
from stateflow.http.headers import header_text
from stateflow.http.limits import BodyLimit
from stateflow.http.openapi import document as openapi_document
from stateflow.http.telemetry import quicken as quicken_telemetry
from stateflow.memory.scopes import MEMORY_STATE
from stateflow.states import DoorContext, StatesService
from stateflow.states.models import StateSubject, WriteOrigin
from stateflow.states.pipeline import RevisionMismatch
from stateflow.states.service import origin_of, subject_from
from stateflow.states.template_jq import template_jq_params
from stateflow.states.templates import unknown_keys
from stateflow.store.migrations import SCHEMA_VERSION
from stateflow.studio import mount_studio
from stateflow.subjects import record_name

OWN_AUTH = (ASSETS_URL + "/", "/studio/")

MCP_PATH = "/mcp"
MCP_SLASHED: Final = MCP_PATH + "/"

# Agent memory changes only through patch_state (intent ownership, no forged response): the
# record routes read it but never write it, as the state tools and the studio do not.
MEMORY_RECORD_REFUSAL: Final = (
    "agent memory is never written through the record routes: the agent changes it with patch_state "
    f"(MCP at {MCP_PATH}); the response plane is written by the runtime only"
)


class MethodNotAllowed(StateflowError):
    code = "method-not-allowed"
    http_status = 405

    def __init__(self, message: str, allow: list[str]) -> None:
        super().__init__(message)
        self.allow = allow


class _Answer(Response):
    """A JSON answer with the headers ``Response`` gives it, in its order (the caller's, then
    ``content-length``, then ``content-type``), set straight: ``Response.__init__`` renders the
    body and passes over the headers in general, a cost on every request."""

    media_type = "application/json"

    def __init__(self, body: bytes, status_code: int, raw_headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status_code
        self.background = None
        self.body = body
        if not (status_code < 200 or status_code in (204, 304)):
            raw_headers.append((b"content-length", str(len(body)).encode("latin-1")))
        raw_headers.append((b"content-type", b"application/json"))
        self.raw_headers = raw_headers


def _json(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    # Answers carry what the service returned: values checked as JSON on their way into the store
    # and views built from them, so they are encoded without walking them again.
    if headers is None:
        return _Answer(encode_trusted(payload), status, [])
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    if any(k in (b"content-length", b"content-type") for k, _ in raw):  # (none of ours do)
        return Response(
            encode_trusted(payload), status_code=status, media_type="application/json", headers=headers
        )
    return _Answer(encode_trusted(payload), status, raw)


def _segment(raw: str) -> str:
    """One percent-decoded path segment; bytes that are not UTF-8 are refused, never replaced
    (so ``%C3%28`` and ``%FF%28`` can never name the same record)."""
    if "%" not in raw and raw.isascii():
        return raw  # nothing to decode: what the decoding would give
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"path segment {raw!r} does not percent-decode to UTF-8 text") from exc


def _utf8_segments(raw_path: bytes) -> None:
    """Refuse a path with a segment that does not percent-decode to UTF-8 (400), on every route
    alike: the router's own decoding would turn the bad bytes into U+FFFD, and the request
    would then name a state, template or attachment that is not the one it sent."""
    for raw in raw_path.split(b"?", 1)[0].split(b"/"):
        if b"%" in raw:
            _segment(raw.decode("latin-1"))


# Query parameters each (non-record) route takes; any other is refused (422), never ignored.
ROUTE_QUERY: Final = {
    "put_template": ("replace",),
    "put_state": ("replace",),
    "subjects": ("kind", "limit", "cursor"),
}

# The one POST route that only reads: classified by the matched route, never by the path text.
READING_POST_ROUTES = frozenset({"search_records"})


def _error(exc: StateflowError) -> Response:
    status, code = exc.http_status, exc.code
    if isinstance(exc, StoreNotMigrated):
        code = "states-not-configured"
    body: dict[str, Any] = {"error": exc.message, "code": code}
    orphans = getattr(exc, "orphans", None)
    if orphans is not None:
        body.update(reconcile=True, orphans=orphans)
    headers = {"Allow": ", ".join(exc.allow)} if isinstance(exc, MethodNotAllowed) else None
    retry_after = getattr(exc, "retry_after", None)  # jq-busy: when to try again
    if retry_after is not None:
        headers = {**(headers or {}), "Retry-After": str(retry_after)}
    if isinstance(exc, Unauthorized):
        headers = {**(headers or {}), "WWW-Authenticate": exc.challenge}
    return _json(status, body, headers)


async def _body(request: Request, *, required: bool = True, exact_integers: bool = False) -> Any:
    """The request's body as JSON, read from the server's messages directly: ``Request.body``
    streams it through an async generator, a cost on every write for a body that is one
    message. ``required=False``: no body at all reads as ``{}`` (no parameters); a body of
    ``null`` is a body, answered as None for the route to refuse (it never means "none").
    ``exact_integers``: an integer beyond 64 bits is handed on for the service to refuse (an
    op batch's, a filter's: named as the service names it from every door, see ``decode``)."""
    chunks = []
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    request._body = raw  # what Request.body answers from now on, as if it had read it
    if not raw:
        if required:
            raise BadRequest("the request body must be JSON")
        return {}
    encoding = request.headers.get("content-encoding")
    if encoding is not None and encoding.strip().lower() != "identity":
        raise BadRequest(f"Content-Encoding {encoding!r} is not supported: send the body as plain UTF-8 JSON")
    try:
        return decode(raw, exact_integers=exact_integers)
    except NotJSON as exc:  # (a value no document holds is refused as a write of it is: 422)
        if _not_utf8(raw):
            raise BadRequest(
                "the request body must be UTF-8 JSON (RFC 8259); it is not UTF-8"
                + _charset_named(request.headers.get("content-type"))
            ) from exc
        raise BadRequest(f"the request body is not valid JSON: {exc.message}") from exc


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _charset_named(content_type: str | None) -> str:
    """What the request said its body's charset was, when it named one other than UTF-8."""
    for part in (content_type or "").split(";")[1:]:
        key, _, value = part.strip().partition("=")
        charset = value.strip().strip('"')
        if key.strip().lower() == "charset" and charset.lower() not in ("utf-8", "utf8"):
            return f" (its Content-Type names charset {charset!r}, which is not read)"
    return ""


async def _object_body(request: Request) -> dict[str, Any]:
    body = await _body(request)
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def only(request: Request, *names: str) -> None:
    """Refuse query parameters the route does not take (never silently ignore one)."""
    if not request.scope["query_string"]:
        return
    once(request)
    unknown = sorted(set(request.query_params) - set(names))
    if unknown:
        takes = f"it takes {', '.join(names)}" if names else "it takes none"
        raise InvalidInput(
            f"unknown query parameter(s) {unknown} for {request.method} {request.url.path}; {takes}"
        )


def _replace(request: Request, default: str) -> bool:
    """A ``?replace=`` flag: ``true``/``false`` (``1``/``0``, ``yes``/``no``), else 400."""
    given = request.query_params.get("replace", default)
    if given.lower() in ("1", "true", "yes"):
        return True
    if given.lower() not in ("0", "false", "no"):
        raise BadRequest(f"'replace' must be true or false, got {given!r}")
    return False


def once(request: Request) -> None:
    """Refuse a query parameter given more than once: which value was meant is not for the
    server to guess (reading one would silently ignore the others)."""
    keys = [key for key, _ in request.query_params.multi_items()]
    if len(keys) != len(set(keys)):
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        raise InvalidInput(
            f"query parameter(s) {repeated} given more than once for {request.method} {request.url.path}; "
            "give each once"
        )


ORIGIN_HEADERS: Final = {
    "x-stateflow-consumer": "consumer",
    "x-stateflow-run-id": "run_id",
    "x-stateflow-meta": "meta",
}


def write_headers(request: Request) -> tuple[WriteOrigin, int | Literal["*"] | None]:
    """What a write's headers say, read in one pass over them: the consumer half of its origin
    — from ``X-Stateflow-Consumer``, ``X-Stateflow-Run-Id`` and ``X-Stateflow-Meta`` (a JSON
    object); door and actor are stamped from the token — and the compare-and-set its
    preconditions name: ``If-Match: "N"`` (at revision N), ``If-Match: *`` (exists, at any
    revision) or ``If-None-Match: *`` (absent: create-only, as ``If-Match: "0"``)."""
    raw: dict[str, Any] = {}
    match: bytes | None = None
    none_match: bytes | None = None
    for name, given in request.scope["headers"]:  # most requests carry none of them
        if name == b"if-match":
            if match is None:  # (the first, as ``Headers.get`` gives it)
                match = given
        elif name == b"if-none-match":
            if none_match is None:
                none_match = given
        elif name.startswith(b"x-stateflow-"):
            _origin_header(raw, name, given)
    origin = origin_of(raw) if raw else origin_of(None)
    if none_match is not None:
        if match is not None:
            raise BadRequest("send one of If-Match and If-None-Match, not both")
        if none_match.strip() != b"*":
            raise BadRequest(
                f"If-None-Match on a write must be * (create-only: refused when the record exists), "
                f'got {none_match.decode("latin-1")!r}; to write at a known revision send If-Match: "N"'
            )
        return origin, 0
    return origin, (None if match is None else _revision_matched(match.decode("latin-1")))


def _not_modified(request: Request, answer: Response) -> Response | None:
    """A 304 in place of a record read whose ETag the request's ``If-None-Match`` already names
    (RFC 9110: weak comparison, ``W/"N"`` matches ``"N"``; ``*`` matches a record that exists):
    a client polling a record gets its body only when the record changed."""
    given = next((v for k, v in request.scope["headers"] if k == b"if-none-match"), None)
    if given is None:
        return None
    tag = answer.raw_headers[0][1]  # (the ETag, first of a record answer's headers)
    for candidate in given.split(b","):
        candidate = candidate.strip().removeprefix(b"W/")
        if candidate == tag or (candidate == b"*" and tag != b'"0"'):
            return _Answer(b"", 304, [(b"etag", tag)])
    return None


def _origin_header(raw: dict[str, Any], name: bytes, given: bytes) -> None:
    key = ORIGIN_HEADERS.get(name.decode("latin-1"))
    if key is None or key in raw:  # the first of repeated headers, as Headers.get gives it
        return
    value = header_text(name.decode("latin-1"), given)
    if key == "meta":
        try:
            raw[key] = decode(value)
        except InvalidJSON as exc:
            raise BadRequest(f"X-Stateflow-Meta must be a JSON object: {exc.message}") from exc
    else:
        raw[key] = value


def _read_if_match(request: Request) -> int | Literal["*"] | None:
    given = next((v for k, v in request.scope["headers"] if k == b"if-match"), None)
    return None if given is None else _revision_matched(given.decode("latin-1"))


def _if_match_elsewhere(request: Request) -> BadRequest:
    """The refusal of an ``If-Match`` where no record revision is compared: never ignored, as a
    precondition that did not hold must not let a change through (RFC 9110 §13.1.1)."""
    return BadRequest(
        f"If-Match conditions a record's read and writes, not {request.method} {request.url.path}"
    )


async def _no_if_match(request: Request) -> None:
    """Every route but the record routes (a plain route of their own): none of them compares a
    record revision, and a declaration's ``version`` is not checked on a re-declare or a delete."""
    if any(k == b"if-match" for k, _ in request.scope["headers"]):
        raise _if_match_elsewhere(request)


def _read_matched(answer: Response, expect: int | Literal["*"], subject: StateSubject, name: str) -> None:
    """412, as a write's, unless the record read is at the revision ``If-Match`` names (``*``:
    a record exists)."""
    now = int(answer.raw_headers[0][1].strip(b'"'))  # (the ETag, first of a record answer's headers)
    if (now == 0) if expect == "*" else (now != expect):
        where = f"is at revision {now}" if now else "does not exist (revision 0)"
        raise RevisionMismatch(
            f"{record_name(name, subject.encode())} {where}, not {expect}"
            + ("" if expect != "*" else ', and "*" needs a current record')
        )


async def _no_body(request: Request) -> None:
    """Refuse a body on a request that takes none (a DELETE's): never read as if absent."""
    if await request.body():
        raise BadRequest(f"{request.method} takes no body")


def _revision_matched(raw: str) -> int | Literal["*"]:
    """The revision an ``If-Match`` names: the ETag exactly as served (``"N"``, quoted, no
    leading zero — RFC 9110's strong comparison, which ``If-None-Match`` applies to it too) or
    ``*``; any other spelling is refused rather than read as a number."""
    text = raw.strip()
    if text == "*":
        return "*"
    digits = text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else ""
    if not ascii_digits(digits) or (digits != "0" and digits.startswith("0")):
        raise BadRequest(f'If-Match must be a record revision as its ETag gives it ("N"), got {raw!r}')
    return int(digits)


def _etag(revision: int) -> tuple[bytes, bytes]:
    """A record answer's ``ETag`` header, raw as ``_Answer`` sends it: its revision, quoted."""
    return (b"etag", f'"{revision}"'.encode("latin-1"))


def _query_int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    # ASCII decimal only: ``int`` also reads "0_3" as 3, " 1 ", "+1", "١" and "１" as 1
    if not ascii_digits(raw[1:] if raw.startswith("-") else raw):
        raise BadRequest(f"{name!r} must be an integer")
    return int(raw)


class Authenticate:
    """Bearer-token check of every request but the open paths, as a plain ASGI middleware.

    (Starlette's ``@app.middleware("http")`` runs each request in a task group and streams the
    response through a memory channel: a cost paid on every call for a header check.)
    """

    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenSet,
        admit: Callable[[Scope, Token], None],
        shortcut: Callable[[Scope], ASGIApp | None] = lambda scope: None,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.admit = admit  # the route-level checks (read-only by route, query parameters)
        self.shortcut = shortcut  # the app a hot route's request goes to straight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"] if scope["type"] == "http" else ""
        if not path or path in OPEN_PATHS or path.startswith(OWN_AUTH):
            # the studio signs people in with its own session cookie
            await self.app(scope, receive, send)
            return
        try:
            token = self.tokens.authenticate(_header(scope, b"authorization"))
            raw_path: bytes | None = scope.get("raw_path")
            if raw_path is not None and b"%" in raw_path:
                _utf8_segments(raw_path)
            self.admit(scope, token)
        except StateflowError as exc:
            await _error(exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["token"] = token
        await (self.shortcut(scope) or self.app)(scope, receive, send)


RECORD_METHODS: Final = frozenset(("GET", "PUT", "PATCH", "DELETE", "POST"))

OPEN_PATHS: Final = frozenset(("/api/health", "/api/ready", "/openapi.json", "/docs", "/studio"))
"""Answered without a token: probes for load balancers and orchestrators, the API's description."""


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def create_app(
    service: StatesService,
    tokens: TokenSet,
    http: HttpConfig | None = None,
    *,
    loaded: Callable[[], None] | None = None,
) -> FastAPI:
    """The API app. ``loaded`` is called (on the event loop) once what the app loads in the
    background after it starts — the MCP SDK — has loaded."""
    http = http or service.config.http
    app = _Api(
        title="stateflow",
        version=__version__,
        description="Declared JSON states with an audit trail. Send `Authorization: Bearer <token>`.",
        docs_url=None,  # served by mount_docs from the package's own assets
        redoc_url=None,
        # a trailing slash is a 404 like any other unknown path: Starlette's redirect would be
        # a bodiless 307 to an absolute URL built from the request's Host header
        redirect_slashes=False,
        dependencies=[Depends(_no_if_match)],
    )
    quick = quicken_telemetry(app)  # (FastAPI's check for an OpenTelemetry provider, on every request)
    mount_docs(app)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app.title, app.version, app.description)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(StateflowError)
    async def _handle(_: Request, exc: StateflowError) -> Response:
        return _error(exc)

    def admit(scope: Scope, token: Token) -> None:
        if not token.read_only and not scope["query_string"]:
            return  # nothing to check: spare the request object and a pass over the routes
        request = Request(scope)
        # MCP carries reads and writes alike in POSTs: /mcp refuses writes per tool instead
        if token.read_only and not reading(request) and request.url.path != MCP_PATH:
            raise Forbidden("this token is read-only")
        if not scope["query_string"]:
            return
        route = route_of(request)
        name = getattr(route, "name", None)
        if route is not None and name != "record":  # record routes check their own
            only(request, *ROUTE_QUERY.get(str(name), ()))

    app.add_middleware(Authenticate, tokens=tokens, admit=admit, shortcut=lambda scope: shortcut(scope))

    def route_of(request: Request) -> BaseRoute | None:
        for route in app.router.routes:
            if route.matches(request.scope)[0] == Match.FULL:
                return route
        return None

    def reading(request: Request) -> bool:
        if request.method in ("GET", "HEAD"):
            return True
        return request.method == "POST" and getattr(route_of(request), "name", None) in READING_POST_ROUTES

    def token_of(request: Request) -> Token:
        token: Token = request.scope["state"]["token"]  # set by Authenticate (``request.state``)
        return token

    def context_of(request: Request) -> DoorContext:
        return _api_context(token_of(request).principal)

    def unrestricted(request: Request, what: str = "catalog changes need") -> None:
        """Refuse a target-limited token, saying why: ``what`` needs every target."""
        if token_of(request).targets is not None:
            raise Forbidden(f"this token is limited to some targets; {what} an unrestricted token")

    # Built-in declarations are the composition root's to install (`stateflow.api.states_service`:
    # at once, or — on a store not migrated yet — when the store is first found migrated).
    # On an async PostgreSQL store a call runs on the event loop, its round trips awaited
    # there (stateflow.aio.on_edge, told once for the store: EdgeCalls.hop); else on a worker
    # thread — or, on SQLite, a call on one record, on the loop when it is the only call in
    # flight (EdgeCalls.short). Calls that may run jq (template programs, attach checks and
    # reconciles) wait on the jq workers, which must not stall the loop: they always take a
    # thread (`blocking=True`). Every call is counted in flight.
    # On a store that can interrupt a call (PostgreSQL), a call is cancelled when its
    # request's client goes away (``http.gone``); none blocks the loop's thread, which watches
    # (EdgeCalls.short keeps the synchronous store's calls off it).
    calls = EdgeCalls(service.store)
    threaded: Callable[..., Any] = run_in_threadpool
    if getattr(service.store, "cancellable", False):
        calls.hop = watched(calls.hop)
        threaded = watched(run_in_threadpool)
    edge = calls.hop

    async def run(fn: Callable[..., Any], *args: Any, blocking: bool = False, **kwargs: Any) -> Any:
        if blocking:
            return await calls.run(threaded(fn, *args, **kwargs))
        return await calls.run(edge(fn, *args, **kwargs))

    async def call(fn: Callable[..., Any], *args: Any, blocking: bool = False, **kwargs: Any) -> Response:
        result = await run(fn, *args, blocking=blocking, **kwargs)
        return _json(200, {"data": result})

    async def call_record(
        fn: Callable[..., Any], *args: Any, body_size: int = 0, writes: bool = False, **kwargs: Any
    ) -> Response:
        """A record answer, with its revision as the ``ETag``: an absent record's is "0", what
        a create-only write's ``If-Match`` names (the service's ``expected_revision``).
        ``body_size``: a write's request body's, which decides whether it may run on the loop;
        a call that ``writes`` does not while the store's write lock is taken."""
        # (never blocking: not through run)
        if writes:
            result = await calls.write(body_size, fn, *args, **kwargs)
        else:
            result = await calls.sized(body_size, fn, *args, **kwargs)
        if result is None:
            return _Answer(encode_trusted({"data": None}), 200, [_etag(0)])
        return _Answer(encode_trusted({"data": result}), 200, [_etag(result["revision"])])

    @app.head("/api/health", include_in_schema=False)
    @app.get("/api/health")
    async def health() -> Response:
        """Liveness: the process answers. Says nothing about the store (see /api/ready)."""
        return _json(200, {"data": {"ok": True, "version": __version__}})

    @app.head("/api/ready", include_in_schema=False)
    @app.get("/api/ready")
    async def readiness() -> Response:
        """Readiness: the store answers and is migrated to this version (else 503)."""

        def probe() -> int | None:
            return service.store.schema_version()

        try:
            version = await run(probe)
        except StateflowError as exc:
            return _json(503, {"error": exc.message, "code": exc.code, "ready": False})
        if version != SCHEMA_VERSION:
            # the remedy differs: an older schema is migrated; a newer one only a newer
            # stateflow reads (migrate never downgrades)
            newer = (version or 0) > SCHEMA_VERSION
            message = (
                f"the store is at schema version {version or 0}, this server needs {SCHEMA_VERSION}; "
                + ("upgrade stateflow to serve it" if newer else "run `stateflow migrate`")
            )
            code = "store-too-new" if newer else "store-not-migrated"
            return _json(503, {"error": message, "code": code, "ready": False})
        return _json(200, {"data": {"ready": True, "schema_version": version}})

    # ------------------------------------------------------------------ templates

    @app.get("/api/state-templates")
    async def list_templates(request: Request) -> Response:
        return await call(service.list_templates)

    @app.get("/api/state-templates/{name}")
    async def get_template(name: str, request: Request) -> Response:
        return await call(service.get_template, name)

    @app.put("/api/state-templates/{name}")
    async def put_template(name: str, request: Request) -> Response:
        unrestricted(request)
        body = await _body(request)
        replace = _replace(request, "false")
        return await call(
            service.put_template, name, body, replace=replace, context=context_of(request), blocking=True
        )

    @app.delete("/api/state-templates/{name}")
    async def delete_template(name: str, request: Request) -> Response:
        unrestricted(request)
        await _no_body(request)
        return await call(service.delete_template, name, context=context_of(request))

    @app.get("/api/states/{name}/attachments")
    async def list_attachments(name: str, request: Request) -> Response:
        return await call(service.attachments, name)

    @app.get("/api/states/{name}/attachments/{template}")
    async def get_attachment(name: str, template: str, request: Request) -> Response:
        return await call(service.get_attachment, name, template)

    @app.put("/api/states/{name}/attachments/{template}")
    async def attach(name: str, template: str, request: Request) -> Response:
        unrestricted(request)
        body = await _body(request, required=False)
        return await call(
            service.attach,
            name,
            template,
            body,
            context=context_of(request),
            blocking=True,
        )

    @app.patch("/api/states/{name}/attachments/{template}")
    async def update_attachment(name: str, template: str, request: Request) -> Response:
        unrestricted(request)
        body = await _body(request)  # (an attachment update that is not an object: the service's 422)
        return await call(
            service.update_attachment, name, template, body, context=context_of(request), blocking=True
        )

    @app.delete("/api/states/{name}/attachments/{template}")
    async def detach(name: str, template: str, request: Request) -> Response:
        unrestricted(request)
        await _no_body(request)
        return await call(service.detach, name, template, context=context_of(request))

    # ------------------------------------------------------------------ catalog

    @app.post("/api/state-retention/prune")
    async def prune(request: Request) -> Response:
        unrestricted(request, "retention pruning spans every target and needs")
        body = await _body(request, required=False)
        if body != {}:  # (a {"dry_run": true} or a null must not run the real sweep)
            raise BadRequest("prune takes no parameters: send no body, or {}" + unknown_keys(body, set()))
        return await call(service.prune, context=context_of(request))

    @app.get("/api/states")
    async def list_states(request: Request) -> Response:
        return await call(service.list_declarations)

    @app.get("/api/states/{name}")
    async def get_state(name: str, request: Request) -> Response:
        return await call(service.get_declaration, name)

    @app.put("/api/states/{name}")
    async def put_state(name: str, request: Request) -> Response:
        unrestricted(request)
        # (without it: create or re-declare, as the published PUT; false: create only)
        replace = _replace(request, "true")
        body = await _body(request)  # (a declaration that is not an object: the service's 422)
        return await call(service.declare, name, body, replace=replace, context=context_of(request))

    @app.delete("/api/states/{name}")
    async def delete_state(name: str, request: Request) -> Response:
        unrestricted(request)
        await _no_body(request)
        return await call(service.delete_declaration, name, context=context_of(request))

    @app.get("/api/states/{name}/stats")
    async def stats(name: str, request: Request) -> Response:
        unrestricted(request, "a state's stats count every target's records and need")
        return await call(service.stats, name)

    @app.get("/api/states/{name}/consumers")
    async def consumers(name: str, request: Request) -> Response:
        await run(service.get_declaration, name)
        return await call(service.consumers, name)

    @app.get("/api/states/{name}/subjects")
    async def subjects(name: str, request: Request) -> Response:
        token = token_of(request)
        return await call(
            service.subjects,
            name,
            kind=request.query_params.get("kind"),
            limit=_query_int(request, "limit"),
            cursor=request.query_params.get("cursor"),
            tenants=token.targets,
        )

    @app.post("/api/states/{name}/records/search", name="search_records")
    async def search(name: str, request: Request) -> Response:
        body = await _body(request, exact_integers=True)
        if not isinstance(body, dict) or set(body) - {"filters", "limit", "cursor", "sort", "include_data"}:
            raise BadRequest(
                'body must be {"filters": {...}, "limit"?: int, "cursor"?: str, "sort"?: [...], '
                '"include_data"?: bool}'
                + unknown_keys(body, {"filters", "limit", "cursor", "sort", "include_data"})
            )
        # the members' values are the service's to check (422, as from Python): only the
        # envelope's shape is the door's
        return await call(
            service.search,
            name,
            body.get("filters"),
            limit=body.get("limit"),
            cursor=body.get("cursor"),
            tenants=token_of(request).targets,
            sort=body.get("sort"),
            include_data=body.get("include_data", False),
        )

    # ------------------------------------------------------------------ records (raw path)

    async def record(name: str, rest: str, request: Request) -> Response:
        raw_path: bytes = request.scope.get("raw_path") or request.url.path.encode()
        text = raw_path.decode("latin-1").split("?")[0]
        # ["", "api", "states", name, "records", tk, tn, kind, key, *suffix]
        segments = text.split("/")[5:]
        # (``_segment`` of each, where none has anything to decode: themselves)
        parts = segments if "%" not in text and text.isascii() else [_segment(s) for s in segments]
        if len(parts) < 4:
            if text.endswith("/"):  # 404 naming the path without it, as on every other path
                return _json(404, {"error": _no_route(request), "code": "not-found"})
            allow = allowed(request.scope)  # another route's path (the search route's)
            if allow:
                raise MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}", allow)
            raise BadRequest("a record path is /records/{target_kind}/{target_name}/{kind}/{key}")
        subject = _subject(parts[:4])
        suffix = parts[4:]
        token = token_of(request)
        if not token.allows_tenant(subject.tenant):
            raise Forbidden(f"this token may not use target {subject.target_kind}/{subject.target_name}")
        ctx = _api_context(token.principal)  # (context_of, with the token already at hand)
        method = request.scope["method"]
        if name == MEMORY_STATE and method != "GET":
            raise ReadOnlyState(MEMORY_RECORD_REFUSAL)
        allow = _allowed(suffix)
        if method not in allow:
            # the sub-route and its method first: the query parameters checked next are the
            # method's, and a method the path does not take is 405 whatever the query holds
            if allow:
                raise MethodNotAllowed(f"{method} is not allowed on {request.url.path}", allow)
            return _json(404, {"error": _no_route(request), "code": "not-found"})
        if request.scope["query_string"] and not (
            len(suffix) == 2 and suffix[0] == "template-jq" and method == "GET"
        ):  # (``only`` passes a request without a query at once)
            only(request, *_query_names(suffix, method))
        if method != "GET":
            origin, expect = write_headers(request)
        else:  # (RFC 9110 §13.1.1: If-Match conditions a read too, never ignored)
            origin, expect = None, _read_if_match(request)
            if expect is not None and suffix:
                raise _if_match_elsewhere(request)
        if not suffix:
            if method == "GET":
                answer = await call_record(
                    service.read,
                    name,
                    subject,
                    revision=_query_int(request, "revision"),
                    seq=_query_int(request, "seq"),
                )
                if expect is not None:
                    _read_matched(answer, expect, subject, name)
                return _not_modified(request, answer) or answer
            # the body is the document (the patch): the service refuses one that is not an
            # object (422, as from Python and the client)
            if method == "PUT" or method == "PATCH":
                body = await _body(request)
                return await call_record(
                    service.replace if method == "PUT" else service.merge,
                    name,
                    subject,
                    body,
                    origin=origin,
                    context=ctx,
                    expect_revision=expect,
                    body_size=len(request._body),
                    writes=True,
                )
            if method == "DELETE":
                await _no_body(request)
                erased = await run(
                    service.erase, name, subject, origin=origin, context=ctx, expect_revision=expect
                )
                # an erased record is absent: the ETag a read of it answers from now on
                return _Answer(encode_trusted({"data": erased}), 200, [_etag(0)])
        elif suffix == ["diff"] and method == "GET":
            return await call(
                service.diff, name, subject, _query_int(request, "from"), _query_int(request, "to")
            )
        elif suffix == ["revert"] and method == "POST":
            body = await _object_body(request)
            if set(body) != {"revision"}:
                raise BadRequest('body must be {"revision": N}')
            return await call_record(
                service.revert,
                name,
                subject,
                body["revision"],
                origin=origin,
                context=ctx,
                expect_revision=expect,
                writes=True,
            )
        elif suffix == ["deltas"] and method == "POST":
            body = await _body(request, exact_integers=True)
            if not isinstance(body, dict) or set(body) - {"ops", "op_id"}:
                raise BadRequest('body must be {"ops": [...], "op_id"?: string}')
            if not isinstance(body.get("ops"), list):  # (the published answer; op_id is the service's)
                raise BadRequest("body must contain a JSON array 'ops'")
            result = await run(
                service.apply,
                name,
                subject,
                body["ops"],
                op_id=body.get("op_id"),
                origin=origin,
                context=ctx,
                expect_revision=expect,
            )
            tag = [_etag(result.revision)] if result.revision is not None else []
            return _Answer(encode_trusted({"data": result.to_json()}), 200, tag)
        elif suffix == ["fold"] and method == "POST":
            body = await _body(request)
            if not isinstance(body, dict) or set(body) != {"into", "mode"}:
                raise BadRequest(
                    'body must be {"into": {target_kind, target_name, kind, key}, "mode": "switch"|"merge"}'
                )
            return await call(
                service.fold,
                name,
                subject,
                body["into"],
                body["mode"],
                origin=origin,
                context=ctx,
                expect_revision=expect,
            )
        elif len(suffix) == 2 and suffix[0] == "template-jq" and method == "GET":
            once(request)  # (its parameters are the program's own: any name, each once)
            params = template_jq_params(request.query_params.items())
            return await call(service.template_jq_input, name, subject, suffix[1], params, blocking=True)
        elif len(suffix) == 2 and suffix[0] == "template-jq" and method == "POST":
            body = await _body(request, required=False)
            if not isinstance(body, dict) or set(body) - {"input", "op_id"}:
                raise BadRequest('body must be {"input"?: <JSON>, "op_id"?: string}')
            applied = await run(
                service.template_jq_apply,
                name,
                subject,
                suffix[1],
                body.get("input"),
                op_id=body.get("op_id"),
                origin=origin,
                context=ctx,
                expect_revision=expect,
                blocking=True,
            )
            # the answer template_jq_update gives, with the record's ETag as …/deltas answers it
            tag = [_etag(applied.revision)] if applied.revision is not None else []
            return _Answer(encode_trusted({"data": {"name": suffix[1], **applied.to_json()}}), 200, tag)
        elif suffix == ["writes"] and method == "GET":
            return await call(
                service.writes,
                name,
                subject,
                limit=_query_int(request, "limit"),
                cursor=request.query_params.get("cursor"),
            )
        raise MethodNotAllowed(f"{method} is not allowed on {request.url.path}", allow)

    async def record_endpoint(request: Request) -> Response:
        params = request.path_params
        return await record(params["name"], params["rest"], request)

    # A plain route, not FastAPI's: its parameters are parsed above, so dependency solving
    # would be pure per-request cost (the API description is written by hand, in openapi.py).
    # Every method: the handler answers the ones a path does not take (405 naming those it
    # does, ``_allowed``), where the router's 405 would name the route's, POST on every path.
    record_route = Route("/api/states/{name}/records/{rest:path}", record_endpoint, name="record")
    record_route.methods = None  # (Starlette's default for a function: GET alone)
    # a key may hold a line break (%0A): ``.`` in the route's pattern must match it too
    record_route.path_regex = re.compile(record_route.path_regex.pattern, re.DOTALL)
    app.router.routes.append(record_route)

    async def record_direct(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        params = scope["path_params"]  # (what ``request.path_params`` answers, as the endpoint reads it)
        try:
            response = await record(params["name"], params["rest"], request)
        except StateflowError as exc:
            response = _error(exc)
        except ClientDisconnect:
            raise  # nobody to answer: BodyLimit drops the request quietly
        except Exception:
            # answered as FastAPI's server-error layer answers (the request may have come past
            # it, see ``_Api``; where it did not, that layer sees the answer started), then
            # raised for the server to log; nothing was sent: ``record`` only returns answers
            await _internal_error()(scope, receive, send)
            raise
        await response(scope, receive, send)

    def shortcut(scope: Scope) -> ASGIApp | None:
        """The record routes' requests — nearly all an agent's or service's traffic — go to
        the record endpoint straight from the token check: the router would try every other
        route first, and the exception middleware and route wrappers between add nothing the
        endpoint does not do itself (it answers a refusal as the handler would, and an
        unexpected error with the server-error layer's answer, raising it on for the server).
        Before FastAPI's stack the app asks it too (``_Api``). Anything else (the search route, a
        method the record routes do not take) goes the usual way."""
        path: str = scope["path"]
        if scope["method"] not in RECORD_METHODS or not path.startswith("/api/states/"):
            return None
        if scope.get("root_path"):  # (the route's own match strips it)
            match, child = record_route.matches(scope)
            if match != Match.FULL:
                return None
            params = child["path_params"]
        else:
            params = _record_params(path, scope)
            if params is None:
                return None
        # the search route's path is a record path whose rest is "search" (same name pattern)
        if params["rest"] == "search":
            return None
        scope["endpoint"], scope["path_params"] = record_endpoint, params
        return record_direct

    mount_studio(app, service, tokens)
    # without the ``mcp`` extra the API and the studio serve all the same; /mcp says what to install
    refusal = missing_for("mcp", MCP_OVER_HTTP, "stateflow.mcp.http")
    if refusal is not None:

        @app.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)
        async def _no_mcp() -> Response:
            return _json(501, {"error": refusal, "code": MissingExtra.code})

    else:
        from stateflow.mcp.http import mount as mount_mcp

        mount_mcp(
            app, service.store, tokens, states=service, loaded=loaded, max_body_bytes=http.max_body_bytes
        )

    @app.exception_handler(404)
    async def _not_found(request: Request, exc: Exception) -> Response:
        return _json(404, {"error": _no_route(request), "code": "not-found"})

    def allowed(scope: Scope) -> list[str]:
        """Every method of every route whose path matches the request's — the record routes
        aside, which name their own (``_allowed``). Starlette's 405 names the first such
        route's methods only, where a path's methods are spread over several routes."""
        methods: set[str] = set()
        for route in app.router.routes:
            if (
                isinstance(route, Route)
                and route is not record_route
                and route.methods
                and route.matches(scope)[0] != Match.NONE
            ):
                methods |= route.methods
        if "GET" in methods:
            methods.add("HEAD")  # (answered as the GET: see ``_Api``)
        return sorted(methods)

    @app.exception_handler(405)
    async def _not_allowed(request: Request, exc: Exception) -> Response:
        allow = allowed(request.scope) or _header_allow(exc)
        return _json(
            405,
            {"error": f"{request.method} is not allowed on {request.url.path}", "code": "method-not-allowed"},
            {"Allow": ", ".join(allow)} if allow else None,
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        return _internal_error()

    app.add_middleware(
        BodyLimit,
        max_body_bytes=http.max_body_bytes,
        timeout=http.body_timeout_seconds,
        jsonrpc_paths=(MCP_PATH,),  # (``/mcp/`` is served as /mcp before this: see ``_Api``)
    )
    if quick:  # (FastAPI's telemetry check understood: see ``_Api``)
        app.front = shortcut
        app.front_stack = BodyLimit(
            Authenticate(record_direct, tokens, admit), http.max_body_bytes, http.body_timeout_seconds
        )
        app.own_middleware = len(app.user_middleware)
    return app


def _no_route(request: Request) -> str:
    path: str = request.url.path
    if any(c in request.scope["path"] for c in "\t\n\r"):  # (which the URL's parse drops)
        path = request.scope["path"]
    said = f"{NO_ROUTE}{request.method} {path}"
    if path.endswith("/") and path != "/":
        said += f" (paths take no trailing slash: {path.rstrip('/')})"
    return said


def _header_allow(exc: Exception) -> list[str]:
    """The methods a 405 raised by Starlette names (a route outside the API's list: a mount's)."""
    allow = (getattr(exc, "headers", None) or {}).get("Allow")
    return [m.strip() for m in allow.split(",")] if allow else []


def _internal_error() -> Response:
    """The answer to an unexpected error (the server logs the error itself)."""
    return JSONResponse({"error": "internal error", "code": "internal"}, status_code=500)


HEAD_PATHS: Final = ("/api/", "/openapi.json", "/docs")
"""Where a HEAD is answered as the GET, without its body."""


def _bodiless(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": b""}
        await send(message)

    return sending


class _Api(FastAPI):
    """FastAPI, with a record route's request taken from the server straight to the body limit,
    the token check and the record handler (``front_stack``: instances of their own) where
    FastAPI's own layers — the server-error answer, telemetry, its body limit — would only hand
    it on: the app neither debug nor under a root path, without a body limit of FastAPI's or
    middleware beyond ours, no telemetry provider configured (asked on every request, as FastAPI
    asks), and not inside another FastAPI app's request. Those layers were ~7% of a record
    write's Python on the event loop's thread. The record handler answers an unexpected error
    with the server-error layer's own answer (``record_direct``); anything else, and every
    request while the stack is not built yet, goes the usual way."""

    front: Callable[[Scope], ASGIApp | None] | None = None
    """which requests take the front stack (the record routes' shortcut), once ``create_app``
    has understood FastAPI's telemetry check; None: none does"""
    front_stack: ASGIApp | None = None
    own_middleware = 0
    """``user_middleware``'s length when ``create_app`` returned: one added later turns the
    front off (it would not be on the front stack)"""
    _front_open = False

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        # (once, as Starlette builds the stack it keeps for the app's life)
        self._front_open = (
            self.front is not None
            and not self.debug
            and not self.root_path
            and getattr(self, "max_body_size", None) is None
            and len(self.user_middleware) == self.own_middleware
        )
        return stack

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == MCP_SLASHED:
            # MCP clients are often configured with ".../mcp/": served as /mcp from here on, so
            # the token, its read-only rule and the route see the one path (no redirect: see
            # ``redirect_slashes``)
            scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode()}
        if scope["type"] == "http" and scope["method"] == "HEAD" and scope["path"].startswith(HEAD_PATHS):
            # HEAD wherever GET is served (RFC 9110 §9.3.2): the GET's answer, headers and all
            # (a record's ETag), without its body. (Not /mcp: its GET is an endless event stream.)
            scope = {**scope, "method": "GET"}
            send = _bodiless(send)
        if (
            self._front_open
            and scope["type"] == "http"
            and "starlette.max_body_size" not in scope  # (a parent app's limit: FastAPI's layer)
            and "fastapi.telemetry" not in scope
            and not self._native_telemetry.enabled()
        ):
            assert self.front is not None and self.front_stack is not None
            if self.front(scope) is not None:
                scope["app"] = self  # (as Starlette sets it)
                await self.front_stack(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _record_params(path: str, scope: Scope) -> dict[str, Any] | None:
    """The record route's path parameters for ``path`` (``/api/states/`` and more), as its
    pattern ``^/api/states/(?P<name>[^/]+)/records/(?P<rest>.*)$`` (``re.DOTALL``) would match
    them, told by string methods rather than the route's regular expression, a cost on every
    request; None where it does not match."""
    name, _, after = path[12:].partition("/")
    if not name or not after.startswith("records/"):
        return None
    rest = after[8:]
    return {**scope.get("path_params", {}), "name": name, "rest": rest}


def _query_names(suffix: list[str], method: str) -> tuple[str, ...]:
    """The query parameters a record route takes."""
    if method != "GET":
        return ()
    if not suffix:
        return ("revision", "seq")
    if suffix == ["writes"]:
        return ("limit", "cursor")
    if suffix == ["diff"]:
        return ("from", "to")
    return ()


def _allowed(suffix: list[str]) -> list[str]:
    """The methods a record sub-route answers (for a 405's ``Allow``); empty for no route."""
    if not suffix:
        return ["DELETE", "GET", "HEAD", "PATCH", "PUT"]
    if suffix in (["deltas"], ["fold"], ["revert"]):
        return ["POST"]
    if suffix in (["writes"], ["diff"]):
        return ["GET", "HEAD"]
    if len(suffix) == 2 and suffix[0] == "template-jq":
        return ["GET", "HEAD", "POST"]
    return []


@functools.lru_cache(maxsize=1024)
def _api_context(principal: str) -> DoorContext:
    """The context of a request through the API: one per token principal (the model is frozen,
    so shared; validating it on every request was a measurable part of a write's cost)."""
    return DoorContext(door="api", actor=principal)


def _subject(parts: list[str]) -> StateSubject:
    tk, tn, kind, key = parts
    return subject_from(tk, tn, kind, key)
