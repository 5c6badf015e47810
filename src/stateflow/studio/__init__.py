"""The studio: server-rendered pages under ``/studio`` for people who look at (and fix) what
agents remember and services wrote. Sign-in is by API token; pages call the same services as
the HTTP API; every asset ships in the package (htmx and the studio's own small script)."""

from __future__ import annotations

import hmac
import re
import secrets
from typing import Final

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.types import Scope

from stateflow.errors import NotFound, StateflowError
from stateflow.http.auth import TokenSet
from stateflow.states import StatesService
from stateflow.studio import memory_pages, states_pages
from stateflow.studio.session import COOKIE, LOGIN_COOKIE, Session
from stateflow.studio.web import PREFIX, STATIC, SignInNeeded, Studio, page, read_form, safe_next, url

__all__ = ["mount_studio"]

_NONCE: Final = re.compile(r"[A-Za-z0-9_-]{32}")
"""A sign-in nonce as ``_login_page`` makes them (``secrets.token_urlsafe(24)``)."""


def _cookie(response: Response, request: Request, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _unknown(studio: Studio, request: Request, session: Session) -> Response:
    raise NotFound(f"the studio has no page {request.url.path}")


class _Static(StaticFiles):
    """The studio's files; an address under them that names none is answered like any other
    address the studio does not have (a studio page), not with the API's JSON 404."""

    def __init__(self, studio: Studio) -> None:
        super().__init__(directory=STATIC)
        self._missing = page(studio, _unknown)

    async def get_response(self, path: str, scope: Scope) -> Response:
        try:
            return await super().get_response(path, scope)
        except HTTPException as exc:
            if exc.status_code != 404:
                raise
            return await self._missing(Request(scope))


def mount_studio(app: FastAPI, service: StatesService, tokens: TokenSet) -> Studio:
    studio = Studio(service, tokens)
    app.mount(PREFIX + "/static", _Static(studio), name="studio-static")

    @app.get(PREFIX, include_in_schema=False)
    @app.get(PREFIX + "/", include_in_schema=False)
    async def home(request: Request) -> Response:
        try:
            studio.session_of(request)
        except SignInNeeded:
            return RedirectResponse(url("/login"), status_code=303)
        return RedirectResponse(url("/states"), status_code=303)

    @app.get(PREFIX + "/login", include_in_schema=False)
    async def login_form(request: Request) -> Response:
        if studio.sessions.get(request.cookies.get(COOKIE)) is not None:
            return RedirectResponse(safe_next(request.query_params.get("next")), status_code=303)
        return _login_page(request, None, 200)

    def _login_page(request: Request, error: str | None, status: int) -> Response:
        # One nonce a browser, kept until the browser ends: a new one on every showing of the
        # form made each sign-in tab (and each failed attempt) expire the forms of the others.
        # The form and the cookie carry it (double submit); another site can read neither.
        nonce = request.cookies.get(LOGIN_COOKIE) or ""
        fresh = not _NONCE.fullmatch(nonce)
        if fresh:
            nonce = secrets.token_urlsafe(24)
        response = studio.html(
            "login.html",
            session=None,
            status=status,
            error=error,
            login_csrf=nonce,
            next=safe_next(request.query_params.get("next")),
        )
        if fresh:
            _cookie(response, request, LOGIN_COOKIE, nonce)
        return response

    @app.post(PREFIX + "/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        try:
            form = await read_form(request)
        except StateflowError as exc:
            return _login_page(request, exc.message, 400)
        expected = request.cookies.get(LOGIN_COOKIE) or ""
        given = form.get("login_csrf") or ""
        if not expected or not hmac.compare_digest(expected.encode(), given.encode()):
            return _login_page(request, "The sign-in form expired; please try again.", 403)
        try:
            token = tokens.authenticate("Bearer " + form.get("token", "").strip())
        except StateflowError:
            # 403, not 401: the credentials were given (in the form) and refused (RFC 9110
            # §15.5.4); a 401 must challenge with a scheme this URL accepts, and it takes none
            return _login_page(request, "That token is not one this server accepts.", 403)
        response = RedirectResponse(safe_next(form.get("next")), status_code=303)
        _cookie(response, request, COOKIE, studio.sessions.open(token))
        return response

    @app.post(PREFIX + "/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        sid = request.cookies.get(COOKIE)
        session = studio.sessions.get(sid)
        if session is not None:
            try:
                form = await read_form(request)
                session.check_csrf(form.get("csrf"))
            except StateflowError as exc:
                return studio.error(exc, session, False)
            studio.sessions.close(session)
        response = RedirectResponse(url("/login"), status_code=303)
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    states_pages.register(app, studio)
    memory_pages.register(app, studio)

    # last: any other /studio/... URL (a mistyped link, a GET of a form's action) is answered
    # with a studio page that links back, not the API's JSON 404 or 405
    app.add_api_route(
        PREFIX + "/{rest:path}", page(studio, _unknown), methods=["GET"], include_in_schema=False
    )
    return studio
