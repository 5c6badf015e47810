"""What every studio page shares: the signed-in session, rendering, forms, errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import orjson
from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from stateflow import __version__
from stateflow.doc.canonical import JSON, ascii_digits, decode
from stateflow.errors import InvalidInput, InvalidJSON, StateflowError
from stateflow.http.auth import Forbidden, Token, TokenSet
from stateflow.states import DoorContext, StatesService
from stateflow.states.models import StateSubject
from stateflow.states.service import subject_of
from stateflow.studio.session import COOKIE, Session, Sessions
from stateflow.studio.tree import lazy_node, origin_fields, path_text, scalar, tree, visible

PREFIX: Final = "/studio"
TEMPLATES: Final = Path(__file__).with_name("templates")
STATIC: Final = Path(__file__).with_name("static")
MAX_FORM_BYTES: Final = 8 * 1024 * 1024
SQL_INT_MAX: Final = 2**63 - 1


class SignInNeeded(Exception):
    pass


def url(where: str, /, **params: Any) -> str:
    """A studio URL: ``where`` under the studio prefix, with the non-empty ``params``. Every
    studio link is built here, and names chosen by writers (a record's subject, an agent) go
    in ``params``, percent-encoded: a path segment could not carry a '/' in a name."""
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return PREFIX + quote(where, safe="/") + ("?" + query if query else "")


BACK_MAX_CHARS: Final = 4000
"""The longest ``back`` a link carries (its oldest cursors dropped past it): a request line must
stay under the server's limit (h11's 16 KiB) beside the filter, the sort and the cursor."""


@dataclass(frozen=True)
class Pages:
    """Where a paged list's Previous and Next links lead. Keyset cursors only go forward, so
    the links carry the cursors of the pages before this one (``back``: a JSON array, oldest
    first, ``null`` for the first page): Previous takes the last of them, Next adds this page's.
    Past :data:`BACK_MAX_CHARS` the oldest are dropped, and the page whose way back was dropped
    offers only the first page."""

    previous: dict[str, str | None] | None
    """the Previous link's ``cursor`` and ``back`` (None: no page known before this one)"""
    next_back: str | None
    """the Next link's ``back``"""

    @classmethod
    def at(cls, cursor: str | None, back: str | None) -> Pages:
        stack: list[str | None] = []
        if back:
            try:
                given = decode(back)
            except InvalidInput:
                given = None  # (an edited address: no way back but the first page)
            if isinstance(given, list) and all(c is None or isinstance(c, str) for c in given):
                stack = given
        previous = None
        if cursor and stack:
            previous = {"cursor": stack[-1], "back": _stacked(stack[:-1])}
        if not cursor:
            stack = []
        ahead = [*stack, cursor or None]
        while len(_stacked(ahead) or "") > BACK_MAX_CHARS and len(ahead) > 1:
            ahead.pop(0)
        return cls(previous, _stacked(ahead))


def _stacked(cursors: list[str | None]) -> str | None:
    return orjson.dumps(cursors).decode() if cursors else None


def subject_params(subject: Any) -> dict[str, str]:
    s = subject if isinstance(subject, dict) else subject.model_dump()
    return {"tk": s["target_kind"], "tn": s["target_name"], "kind": s["kind"], "key": s["key"]}


def subject_from(params: Any) -> StateSubject:
    try:
        raw = {
            "target_kind": params["tk"],
            "target_name": params["tn"],
            "kind": params["kind"],
            "key": params["key"],
        }
    except KeyError as exc:
        raise InvalidInput("a record is named by tk, tn, kind and key") from exc
    return subject_of(raw)


def json_field(raw: str | None, what: str) -> JSON:
    """``raw`` parsed as JSON, or a refusal that names the field once (the parser's own
    message already starts with "invalid JSON")."""
    try:
        return decode(raw or "")
    except InvalidJSON as exc:
        detail = exc.message.removeprefix("invalid JSON: ")
        raise InvalidInput(f"{what} is not valid JSON: {detail}") from exc


def int_param(params: Any, name: str) -> int | None:
    """An integer parameter of a studio page or form. Every one is a revision, an offset, a
    position or a sequence number, never below 0: a negative one is refused here (it would be
    counted from the wrong end, or name a revision nobody asked for)."""
    raw = params.get(name)
    if raw in (None, ""):
        return None
    # ASCII digits only, as the API reads them: int() would also take "+1", " 1", "1_0" and
    # other scripts' digits (and refuse thousands of digits with a ValueError of its own)
    if not ascii_digits(raw) or len(raw) > 19 or int(raw) > SQL_INT_MAX:
        raise InvalidInput(f"{name} must be a non-negative integer (ASCII digits 0-9, below 2**63)")
    return int(raw)


def single_valued(items: Iterable[tuple[str, str]]) -> None:
    """Refuse a parameter given twice: a page reads one value of each, and taking the last (or
    the first) would show a page other than the one the address seems to ask for."""
    seen: set[str] = set()
    for name, _ in items:
        if name in seen:
            raise InvalidInput(f"the parameter {name!r} is given more than once: give it once")
        seen.add(name)


class Studio:
    def __init__(self, service: StatesService, tokens: TokenSet) -> None:
        self.service = service
        self.store = service.store
        self.tokens = tokens
        self.sessions = Sessions(tokens)
        self.env = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
            auto_reload=False,  # packaged templates: no stat per render
        )
        self.env.globals.update(
            url=url,
            tree=tree,
            scalar=scalar,
            lazy_node=lazy_node,
            path_text=path_text,
            origin_fields=origin_fields,
            subject_params=subject_params,
            version=__version__,
        )
        self.env.filters["visible"] = visible

    def run(self, fn: Callable[..., Response], *args: Any) -> Response:
        return fn(*args)

    # ------------------------------------------------------------------ sessions

    def session_of(self, request: Request) -> Session:
        session = self.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            raise SignInNeeded
        return session

    def context(self, session: Session) -> DoorContext:
        """Studio writes enter through their own door, by the signed-in token (the audit trail
        tells an edit made by a person in the studio from a program's API call)."""
        return DoorContext(door="studio", actor=session.token.principal)

    @staticmethod
    def check_tenant(token: Token, subject: StateSubject) -> None:
        if not token.allows_tenant(subject.tenant):
            raise Forbidden(f"this token may not use target {subject.target_kind}/{subject.target_name}")

    @staticmethod
    def check_writer(token: Token) -> None:
        if token.read_only:
            raise Forbidden("this token is read-only")

    # ------------------------------------------------------------------ rendering

    def html(
        self, template: str, *, session: Session | None, status: int = 200, **values: Any
    ) -> HTMLResponse:
        token = session.token if session else None
        page = self.env.get_template(template).render(
            session=session,
            can_write=token is not None and not token.read_only,
            limited=token is not None and token.targets is not None,
            csrf=session.csrf if session else "",
            **values,
        )
        return HTMLResponse(page, status_code=status, headers=NO_STORE)

    def error(
        self, exc: StateflowError, session: Session | None, fragment: bool, address: str | None = None
    ) -> HTMLResponse:
        """The error as a page (``address``: see ``base.html``) or, for htmx, a fragment."""
        template = "_error.html" if fragment else "error.html"
        return self.html(
            template,
            session=session,
            status=exc.http_status,
            error=exc.message,
            code=exc.code,
            address=address,
        )


NO_STORE: Final = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    # only this server's own script and styles: an injected tag could run nothing
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
}

Page = Callable[[Studio, Request, Session], Response]
FormPage = Callable[[Studio, Request, Session, dict[str, str]], Response]
FormHome = Callable[[Request, dict[str, str]], str]
"""The studio page a form is on, from the form posted (where to come back after signing in)."""


def page(studio: Studio, fn: Page) -> Callable[[Request], Awaitable[Response]]:
    """A GET page: signed in, run off the event loop, errors rendered as a page (or fragment)."""

    async def handler(request: Request) -> Response:
        fragment = request.headers.get("hx-request") == "true"
        try:
            session = studio.session_of(request)
        except SignInNeeded:
            here = request.url.path + ("?" + request.url.query if request.url.query else "")
            return _to_login(request, fragment, None if fragment else here)
        try:
            single_valued(request.query_params.multi_items())
            return await run_in_threadpool(studio.run, fn, studio, request, session)
        except StateflowError as exc:
            return studio.error(exc, session, fragment)

    # not functools.wraps: FastAPI would read the wrapped function's parameters as query fields
    handler.__name__ = fn.__name__
    return handler


def form_page(studio: Studio, fn: FormPage, home: FormHome) -> Callable[[Request], Awaitable[Response]]:
    """A POST: signed in, the form's CSRF secret checked before anything runs."""

    async def handler(request: Request) -> Response:
        fragment = request.headers.get("hx-request") == "true"
        try:
            session = studio.session_of(request)
        except SignInNeeded:
            back = None
            if not fragment:
                try:
                    back = home(request, await read_form(request))
                except (StateflowError, KeyError):
                    back = None  # a form that names no page: the catalog after signing in
            return _to_login(request, fragment, back)
        form: dict[str, str] | None = None
        try:
            form = await read_form(request)
            session.check_csrf(form.get("csrf") or request.headers.get("x-csrf-token"))
            return await run_in_threadpool(studio.run, fn, studio, request, session, form)
        except StateflowError as exc:
            return studio.error(exc, session, fragment, None if fragment else _address(home, request, form))

    # not functools.wraps: FastAPI would read the wrapped function's parameters as query fields
    handler.__name__ = fn.__name__
    return handler


def _address(home: FormHome, request: Request, form: dict[str, str] | None) -> str | None:
    """The page a form's refusal stands for: the page the form is on, when it names one."""
    try:
        return None if form is None else home(request, form)
    except (StateflowError, KeyError):
        return None


async def read_form(request: Request) -> dict[str, str]:
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        raise InvalidInput("studio forms are sent as application/x-www-form-urlencoded")
    raw = await request.body()
    if len(raw) > MAX_FORM_BYTES:
        raise InvalidInput("the form is too large")
    fields = parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
    single_valued(fields)
    return dict(fields)


def safe_next(raw: str | None) -> str:
    """Only a studio page of this server: never an open redirect, and never a path a browser
    resolves out of the studio — a '.' or '..' segment (also percent-encoded, or split by an
    encoded '/') or a control character (which browsers drop) is refused, not normalised."""
    if raw and raw.startswith(PREFIX + "/") and not raw.startswith("//") and "\\" not in raw:
        segments = unquote(urlsplit(raw).path).split("/")
        if not any(s in (".", "..") for s in segments) and raw.isprintable() and " " not in raw:
            return raw
    return url("/states")


def _to_login(request: Request, fragment: bool, back: str | None) -> Response:
    """Sign in, then back to a page — never to a fragment or a POST-only URL, which would show
    a bare piece of HTML or a 405. ``back`` is the page asked for (a GET) or the page a form is
    on; an htmx request comes back to the page it was sent from (``HX-Current-URL``)."""
    if fragment:
        current = urlsplit(request.headers.get("hx-current-url") or "")
        ours = current.netloc == request.headers.get("host")
        back = current.path + ("?" + current.query if current.query else "") if ours else None
    target = url("/login", next=safe_next(back))
    if fragment:  # htmx follows HX-Redirect with a full page load
        return Response(status_code=200, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)
