"""``StatesClient``: the declared-states HTTP API as Python calls (it satisfies
:class:`stateflow.states.api.StatesAPI`, like the local service).

    from stateflow.client import StatesClient

    states = StatesClient("http://127.0.0.1:8765", token="…", consumer="billing-job")
    record = states.read("tickets", {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "t-1"})
    states.merge("tickets", record["subject"], {"status": "closed"}, expect_revision=record["revision"])

A refusal raises :class:`ClientError` with the server's ``code``, ``message`` and HTTP ``status``;
an unreachable server raises ``StoreUnavailable``. Arguments a query string would turn into text
(revisions, limits, cursors) and op batches are checked here first, by the service's own checks,
so a bad one is refused as the local service refuses it (``InvalidInput`` …), nothing sent.
Standard library only (``urllib``).
"""

from __future__ import annotations

import http.client
import threading
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from stateflow.doc.canonical import decode, encode
from stateflow.doc.ops import parse_ops
from stateflow.errors import NO_ROUTE, InvalidInput, StateflowError, StoreUnavailable
from stateflow.states.listing import check_cursor, page_limit
from stateflow.states.pipeline import ANY_REVISION
from stateflow.states.results import (
    ApplyResult,
    Attached,
    AttachmentUpdated,
    Consumer,
    DeclarationView,
    Deleted,
    Detached,
    Diff,
    Erased,
    FoldReport,
    JqInput,
    JqUpdate,
    PruneReport,
    Record,
    SearchPage,
    StateAttachment,
    Stats,
    SubjectsPage,
    Template,
    TemplateRow,
    WritesPage,
)
from stateflow.states.search import split_filters
from stateflow.states.service import (
    Expect,
    check_as_of,
    check_revision,
    check_span,
    origin_of,
    subject_of,
)

Json = dict[str, Any]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The API never redirects: a redirect means the URL is another page (the studio sends its
    sign-in page), answered as such rather than followed."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class ClientError(StateflowError):
    """A refusal answered by the server: ``code`` and ``http_status`` are the server's."""

    def __init__(self, message: str, code: str, status: int) -> None:
        super().__init__(message)
        self.code = code
        self.http_status = status


NO_BODY: Any = object()
"""A request without a body (a body of None is sent as JSON ``null``)."""


def _q(text: str) -> str:
    return quote(text, safe="")


def _header_text(field: str, value: str) -> bytes:
    """``consumer`` / ``run_id`` as its header's value, the text's UTF-8 bytes. A header cannot
    carry a control character (tab aside) or keep space at either end (the server strips it):
    such an origin is refused here, before anything is sent, not changed on the way."""
    if value != value.strip(" \t") or any(c < " " and c != "\t" for c in value):
        raise InvalidInput(
            f"{field}: {value!r} cannot be sent in an HTTP header (a control character, or "
            "space at either end)"
        )
    return value.encode()


def _base_url(url: str) -> str:
    """``url`` as the server's base, refused (``invalid-input``) unless it is ``http(s)://host``
    with an optional port and path: urllib would take another scheme where it leads (``file://``
    reads the local disk, ``ftp://`` waits out the timeout) and crash on a URL it cannot split."""
    base = url.rstrip("/")
    example = "the server's base URL, e.g. http://127.0.0.1:8765"
    try:
        parts = urlsplit(base)
        parts.port  # noqa: B018 (read for its check: a port that is no number, or out of range)
    except ValueError as exc:
        raise InvalidInput(f"server URL {url!r} is not a valid URL ({exc}); give {example}") from None
    if "://" not in url:
        raise InvalidInput(f"server URL {url!r} has no scheme; give {example} (add http://)")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(
            f"server URL {url!r} is not an http:// or https:// URL with a host; give {example}"
        )
    return base


class StatesClient:
    """Calls a running ``stateflow serve``. ``consumer``/``run_id``/``meta`` (optional) are
    sent with every write as the consumer half of its origin unless a call passes ``origin``."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        consumer: str | None = None,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.url = _base_url(url)
        self.prefixed = bool(urlsplit(self.url).path)
        """the base URL has a path (a proxy's prefix, or by mistake one of the server's own addresses)"""
        self.token = token
        self.timeout = timeout
        self.default_origin = {
            k: v for k, v in {"consumer": consumer, "run_id": run_id, "meta": meta}.items() if v is not None
        }
        self._answers = threading.local()

    @property
    def last_etag(self) -> str | None:
        """The ``ETag`` of the last answer this thread received through the client (per thread:
        a client is shared across threads as the local service is)."""
        etag: str | None = getattr(self._answers, "etag", None)
        return etag

    # ------------------------------------------------------------------ transport

    def _call(
        self,
        method: str,
        path: str,
        body: Any = NO_BODY,
        query: dict[str, Any] | None = None,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> Any:
        return self._exchange(method, path, body, query, origin=origin, expect_revision=expect_revision)[0]

    def _exchange(
        self,
        method: str,
        path: str,
        body: Any = NO_BODY,
        query: dict[str, Any] | None = None,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> tuple[Any, str | None]:
        """The answer's ``data`` and its ``ETag`` (returned, not left on the client for the
        caller to read back: another thread's call may have replaced it by then)."""
        url = self.url + path
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urlencode(params)
        # (a method's None is sent as null, which the server refuses as the service refuses it)
        data = None if body is NO_BODY else encode(body)
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        if method != "GET":
            # each as its UTF-8 bytes, which the server reads (http.client would encode a str
            # as Latin-1, and fail on any other character)
            for key, value in self._origin(origin).items():
                header = {"consumer": "X-Stateflow-Consumer", "run_id": "X-Stateflow-Run-Id"}.get(key)
                if header is not None:
                    request.add_header(header, _header_text(key, str(value)))  # type: ignore[arg-type]
                elif key == "meta":
                    request.add_header("X-Stateflow-Meta", encode(value))  # type: ignore[arg-type]
        expect = check_revision(expect_revision)
        if expect is not None:  # "*": the record exists, at any revision
            request.add_header("If-Match", "*" if expect == ANY_REVISION else f'"{expect}"')
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                etag = self._answers.etag = response.headers.get("ETag")
                payload = self._payload(url, response.status, response.headers, response.read())
                if "data" not in payload:
                    raise self._not_api(url, response.status, "JSON without the API's data member")
                return payload["data"], etag
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            if exc.code >= 400 and exc.code != 404:  # (a proxy's own refusal may be a page, too)
                try:
                    payload = self._payload(url, exc.code, exc.headers, raw)
                except ClientError:
                    payload = {"error": f"{url} answered {exc.code} {exc.reason}"}
                if self.prefixed and payload.get("code") == "method-not-allowed":
                    # this client sends only the methods the API's routes take: a path under
                    # the base URL's (the banner's /studio address) that refuses one is another
                    # app of the server, not an API refusing the write
                    raise self._not_api(url, exc.code, f"{payload.get('error')!r}") from exc
            else:  # a redirect, or a page that is not there: this is not the API
                payload = self._payload(url, exc.code, exc.headers, raw)
                if self.prefixed and str(payload.get("error", "")).startswith(NO_ROUTE):
                    # the server, reached through a base URL with a path (the banner's
                    # /api/states address): a doubled path, not a route this client lacks
                    raise self._not_api(url, exc.code, f"{payload['error']!r}") from exc
            raise ClientError(
                str(payload.get("error", exc.reason)), str(payload.get("code", "http-error")), exc.code
            ) from exc
        except urllib.error.URLError as exc:
            raise StoreUnavailable(f"cannot reach {self.url}: {exc.reason}") from exc
        except (http.client.HTTPException, OSError) as exc:
            # reached, then no whole answer: the server (or a proxy) closed the connection — it
            # died, or was stopped — or it did not answer in time. A write sent may have landed.
            if isinstance(exc, TimeoutError):
                what = f"did not answer within {self.timeout:g} s"
            else:
                what = f"closed the connection without a whole answer ({exc or type(exc).__name__})"
            unknown = (
                ""
                if method == "GET"
                else "; the write may or may not have been applied: read it back before sending it again"
            )
            raise StoreUnavailable(f"{self.url} {what}{unknown}") from exc

    def _payload(self, url: str, status: int, headers: Any, raw: bytes) -> dict[str, Any]:
        """The API's JSON object; anything else (a redirect, an HTML page, another JSON service)
        means the base URL is not a stateflow API, which is said as such instead of as the JSON
        parse error of a page nobody asked for."""
        kind = (headers.get("Content-Type") or "").split(";")[0].strip()
        if kind != "application/json":
            where = headers.get("Location")
            got = f"a redirect to {where}" if where else kind or "no content type"
            raise self._not_api(url, status, got)
        try:
            payload = decode(raw)
        except StateflowError:
            payload = None
        if not isinstance(payload, dict):
            raise self._not_api(url, status, "JSON that is not an object")
        return payload

    def _not_api(self, url: str, status: int, got: str) -> ClientError:
        return ClientError(
            f"{self.url} is not a stateflow API ({url} answered {status} with {got}); give the "
            "server's base URL, e.g. http://127.0.0.1:8765",
            "http-error",
            status,
        )

    def _origin(self, origin: Any) -> dict[str, Any]:
        if origin is None:
            return self.default_origin
        checked = origin_of(origin)  # refuse a malformed origin before sending it
        if checked.op_id is not None:  # (refused, not dropped: the trail would lack it)
            raise InvalidInput(
                "origin.op_id cannot be sent over HTTP (no header carries it); an apply or "
                "template_jq_update takes op_id as its own argument, recorded in the origin too"
            )
        return {k: v for k, v in checked.model_dump().items() if v is not None}

    @staticmethod
    def _state(name: str) -> str:
        return f"/api/states/{_q(name)}"

    def _record(self, name: str, subject: Any) -> str:
        s = subject_of(subject)
        parts = [s.target_kind, s.target_name, s.kind, s.key]
        return f"{self._state(name)}/records/" + "/".join(_q(p) for p in parts)

    # ------------------------------------------------------------------ catalog

    def list_declarations(self) -> list[DeclarationView]:
        result: list[DeclarationView] = self._call("GET", "/api/states")
        return result

    def get_declaration(self, name: str, /) -> DeclarationView:
        result: DeclarationView = self._call("GET", self._state(name))
        return result

    def declare(self, name: str, raw: Any, /, *, replace: bool = True) -> DeclarationView:
        query = None if replace else {"replace": "false"}
        result: DeclarationView = self._call("PUT", self._state(name), raw, query=query)
        return result

    def delete_declaration(self, name: str, /) -> Deleted:
        result: Deleted = self._call("DELETE", self._state(name))
        return result

    def stats(self, name: str, /) -> Stats:
        result: Stats = self._call("GET", self._state(name) + "/stats")
        return result

    def consumers(self, name: str, /) -> list[Consumer]:
        result: list[Consumer] = self._call("GET", self._state(name) + "/consumers")
        return result

    # ------------------------------------------------------------------ listings

    def subjects(
        self, name: str, /, *, kind: str | None = None, limit: Any = None, cursor: str | None = None
    ) -> SubjectsPage:
        page_limit(limit)
        query = {"kind": kind, "limit": limit, "cursor": check_cursor(cursor)}
        result: SubjectsPage = self._call("GET", self._state(name) + "/subjects", query=query)
        return result

    def search(
        self,
        name: str,
        filters: Any,
        /,
        *,
        limit: Any = None,
        cursor: str | None = None,
        sort: Any = None,
        include_data: bool = False,
    ) -> SearchPage:
        # the service's check of the filters, so a bad one is refused as locally (a value JSON
        # cannot hold named from ``filters``, not from the request body's root)
        split_filters(filters)
        body: Json = {"filters": filters}
        for key, value in (("limit", limit), ("cursor", cursor), ("sort", sort)):
            if value is not None:
                body[key] = value
        if include_data is not False:  # (anything else the service's check refuses)
            body["include_data"] = include_data
        result: SearchPage = self._call("POST", self._state(name) + "/records/search", body)
        return result

    # ------------------------------------------------------------------ records

    def read(
        self, name: str, subject: Any, /, *, revision: int | None = None, seq: int | None = None
    ) -> Record | None:
        path = self._record(name, subject)
        revision, seq = check_as_of(revision, seq)
        result: Record | None = self._call("GET", path, query={"revision": revision, "seq": seq})
        return result

    def replace(
        self,
        name: str,
        subject: Any,
        document: Any,
        /,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> Record:
        result: Record = self._call(
            "PUT", self._record(name, subject), document, origin=origin, expect_revision=expect_revision
        )
        return result

    def merge(
        self,
        name: str,
        subject: Any,
        patch: Any,
        /,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> Record:
        result: Record = self._call(
            "PATCH", self._record(name, subject), patch, origin=origin, expect_revision=expect_revision
        )
        return result

    def apply(
        self,
        name: str,
        subject: Any,
        ops: Any,
        /,
        *,
        op_id: str | None = None,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> ApplyResult:
        # the service's check of the batch, so a bad one is refused as locally (over HTTP alone,
        # an `ops` that is not a list keeps its published 400)
        parse_ops(ops)
        body: Json = {"ops": ops, **({"op_id": op_id} if op_id is not None else {})}
        data, etag = self._exchange(
            "POST",
            self._record(name, subject) + "/deltas",
            body,
            origin=origin,
            expect_revision=expect_revision,
        )
        return ApplyResult(
            data["applied"],
            data["data"],
            data["seq"],
            data["skipped"],
            replayed=bool(data.get("replayed")),
            replayed_seq=data.get("replayed_seq"),
            written=data.get("written", True),
            revision=None if etag is None else int(etag.strip('"')),
        )

    def erase(
        self, name: str, subject: Any, /, *, origin: Any = None, expect_revision: Expect = None
    ) -> Erased:
        result: Erased = self._call(
            "DELETE", self._record(name, subject), origin=origin, expect_revision=expect_revision
        )
        return result

    def fold(
        self,
        name: str,
        subject: Any,
        into: Any,
        mode: Any,
        /,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> FoldReport:
        body = {"into": into, "mode": mode}
        result: FoldReport = self._call(
            "POST",
            self._record(name, subject) + "/fold",
            body,
            origin=origin,
            expect_revision=expect_revision,
        )
        return result

    def writes(
        self, name: str, subject: Any, /, *, limit: Any = None, cursor: str | None = None
    ) -> WritesPage:
        page_limit(limit)
        query = {"limit": limit, "cursor": check_cursor(cursor)}
        result: WritesPage = self._call("GET", self._record(name, subject) + "/writes", query=query)
        return result

    def diff(self, name: str, subject: Any, from_revision: Any, to_revision: Any = None, /) -> Diff:
        path = self._record(name, subject) + "/diff"
        low, high = check_span(from_revision, to_revision)
        result: Diff = self._call("GET", path, query={"from": low, "to": high})
        return result

    def revert(
        self,
        name: str,
        subject: Any,
        revision: Any,
        /,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> Record | None:
        result: Record | None = self._call(
            "POST",
            self._record(name, subject) + "/revert",
            {"revision": revision},
            origin=origin,
            expect_revision=expect_revision,
        )
        return result

    # ------------------------------------------------------------------ retention

    def prune(self) -> PruneReport:
        result: PruneReport = self._call("POST", "/api/state-retention/prune")
        return result

    # ------------------------------------------------------------------ templates and attachments

    def list_templates(self) -> list[TemplateRow]:
        result: list[TemplateRow] = self._call("GET", "/api/state-templates")
        return result

    def get_template(self, name: str, /) -> Template:
        result: Template = self._call("GET", f"/api/state-templates/{_q(name)}")
        return result

    def put_template(self, name: str, raw: Any, /, *, replace: bool = False) -> Template:
        query = {"replace": "true"} if replace else None
        result: Template = self._call("PUT", f"/api/state-templates/{_q(name)}", raw, query=query)
        return result

    def delete_template(self, name: str, /) -> Deleted:
        result: Deleted = self._call("DELETE", f"/api/state-templates/{_q(name)}")
        return result

    def attachments(self, name: str, /) -> list[StateAttachment]:
        result: list[StateAttachment] = self._call("GET", self._state(name) + "/attachments")
        return result

    def _attachment(self, name: str, template: str) -> str:
        return f"{self._state(name)}/attachments/{_q(template)}"

    def get_attachment(self, name: str, template: str, /) -> StateAttachment:
        result: StateAttachment = self._call("GET", self._attachment(name, template))
        return result

    def attach(self, name: str, template: str, body: Any, /) -> Attached:
        result: Attached = self._call("PUT", self._attachment(name, template), {} if body is None else body)
        return result

    def update_attachment(self, name: str, template: str, body: Any, /) -> AttachmentUpdated:
        result: AttachmentUpdated = self._call("PATCH", self._attachment(name, template), body)
        return result

    def detach(self, name: str, template: str, /) -> Detached:
        result: Detached = self._call("DELETE", self._attachment(name, template))
        return result

    def template_jq_input(
        self, name: str, subject: Any, reference: str, params: dict[str, Any], /
    ) -> JqInput:
        query = {k: encode(v).decode() for k, v in params.items()}
        path = self._record(name, subject) + f"/template-jq/{_q(reference)}"
        result: JqInput = self._call("GET", path, query=query)
        return result

    def template_jq_update(
        self,
        name: str,
        subject: Any,
        reference: str,
        input_value: Any = None,
        /,
        *,
        op_id: str | None = None,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> JqUpdate:
        body: Json = {"input": input_value, **({"op_id": op_id} if op_id is not None else {})}
        path = self._record(name, subject) + f"/template-jq/{_q(reference)}"
        result: JqUpdate = self._call("POST", path, body, origin=origin, expect_revision=expect_revision)
        return result


if TYPE_CHECKING:  # mypy keeps both sides of the one API in step
    from stateflow.states.api import StatesAPI
    from stateflow.states.service import StatesService

    def _conforms(local: StatesService, remote: StatesClient) -> tuple[StatesAPI, StatesAPI]:
        return local, remote
