"""``/mcp`` on ``stateflow serve``: the MCP door over streamable HTTP, behind the API's tokens.

Each HTTP request names whose memory it works on with headers (``X-Stateflow-Agent``,
``X-Stateflow-Cwd``, ``X-Stateflow-Session``, optionally ``X-Stateflow-Scopes``) and proves who
it is with the same bearer token as the REST API. A token limited to some agents (``@agent/a``)
reaches only their memory; a read-only token gets ``read_state`` and the context, never
``patch_state``, and instructions and a context that teach reading only; what it reads is not
what a writer's next receipt is relative to. ``X-Stateflow-States: a,b`` (or ``*``) adds the declared-state tools for those
states, as ``stateflow mcp --states`` does; a record of a target the token is not limited to is
refused, and agent memory stays read-only through them. The transport is stateless (every POST
stands alone), so identity and token are checked on every request, not once per connection.
The cwd header keys the cwd scope only: it is the client's directory, not one of this machine
(UTF-8, absolute, normalized as text and never looked up here), so artifact sources must lie in
the server's knowledge roots.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import anyio
from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from stateflow.config import DEFAULT_MAX_BODY_BYTES
from stateflow.doc.canonical import ascii_digits, encode
from stateflow.errors import Forbidden, InvalidInput, StateflowError
from stateflow.http.auth import TokenSet
from stateflow.http.headers import header_text
from stateflow.mcp.unparsed import error_message, read_message, sent_arguments
from stateflow.memory import Identity, MemoryConfig, MemoryView, parse_scopes, shown
from stateflow.memory.protocol import protocol_text
from stateflow.store import Store
from stateflow.tools import ToolHost

if TYPE_CHECKING:
    from stateflow.states import StatesService

PATH: Final = "/mcp"  # as stateflow.http.app.MCP_PATH
AGENT_HEADER: Final = "x-stateflow-agent"
CWD_HEADER: Final = "x-stateflow-cwd"
SESSION_HEADER: Final = "x-stateflow-session"
SCOPES_HEADER: Final = "x-stateflow-scopes"
STATES_HEADER: Final = "x-stateflow-states"


def state_names(request: Request) -> list[str] | None:
    """The declared states a request asks tools for: None (no state tools), [] (every state)."""
    raw = header(request, STATES_HEADER)
    names = [n.strip() for n in (raw or "").split(",") if n.strip()]
    if not names:
        return None
    return [] if names == ["*"] else names


def identity_of(request: Request) -> tuple[Identity, tuple[str, ...]]:
    """The agent, cwd and session a request names, and its wanted scopes.

    Without a cwd header there is no cwd scope (the server's own directory is nobody's project).
    """
    cwd = header(request, CWD_HEADER)
    if cwd is not None and not cwd.startswith("/"):
        raise InvalidInput(f"{CWD_HEADER} must be an absolute path")
    wanted = header(request, SCOPES_HEADER)
    # (an empty header is a list of no scopes, refused as `--scopes ""` is: not "all of them")
    scopes = (
        parse_scopes(wanted)
        if wanted is not None
        else (("global", "cwd", "session") if cwd else ("global", "session"))
    )
    if "cwd" in scopes and cwd is None:
        raise InvalidInput(f"the cwd scope needs the {CWD_HEADER} header")
    # the client's directory, on its machine: normalized as text, never looked up here
    agent, session = header(request, AGENT_HEADER), header(request, SESSION_HEADER)
    identity = Identity.claimed(agent, cwd or "/", session)
    return identity, scopes


def header(request: Request, name: str) -> str | None:
    """An ``X-Stateflow-*`` header's text, read as the REST API reads its own: a directory keys the
    same cwd scope over HTTP as over the CLI and stdio, and a refusal quotes the value as the client
    sent it."""
    value = request.headers.get(name)
    return None if value is None else header_text(name, value.encode("latin-1"))


def config_from_env(env: Mapping[str, str] | None = None) -> MemoryConfig:
    """``/mcp``'s memory settings: ``STATEFLOW_HOT_BUDGET`` and ``STATEFLOW_KNOWLEDGE_ROOTS`` as the
    CLI reads them, and the last-shown views kept in the runtime directory, so a receipt compares
    against what the model was shown whichever worker process (or local hook) showed it."""
    env = os.environ if env is None else env
    budget = env.get("STATEFLOW_HOT_BUDGET") or None
    if budget is not None and not ascii_digits(budget):
        raise InvalidInput(f"STATEFLOW_HOT_BUDGET must be a positive number of bytes, not {budget!r}")
    roots = [r for r in (env.get("STATEFLOW_KNOWLEDGE_ROOTS") or "").split(os.pathsep) if r]
    return MemoryConfig(
        knowledge_roots=tuple(os.path.realpath(os.path.expanduser(r)) for r in roots),
        hot_budget=None if budget is None else int(budget),
        runtime_dir=shown.default_dir(),
    )


def host_factory(
    store: Store, tokens: TokenSet, config: MemoryConfig, states: StatesService | None = None
) -> Callable[[Any], ToolHost]:
    # The cwd header is the client's claim about its own machine: it keys the cwd scope, but no
    # artifact source is looked for under it here (only in this machine's knowledge roots).
    config = replace(config, local_cwd=False)
    reader = replace(config, read_only=True)  # (taught reading only; shows no writer anything)

    def host_for(ctx: Any) -> ToolHost:
        request = ctx.request
        if not isinstance(request, Request):
            raise Forbidden("the MCP HTTP door needs an HTTP request")
        token = tokens.authenticate(request.headers.get("authorization"))
        identity, scopes = identity_of(request)
        if not token.allows_tenant(("agent", identity.agent)):
            raise Forbidden(f"this token may not use the memory of agent {identity.agent!r}")
        view = MemoryView(store, identity, scopes, reader if token.read_only else config)
        names = state_names(request)
        if names is None or states is None:
            return ToolHost(view, read_only=token.read_only)
        for name in names:
            states.get_declaration(name)  # an unknown state is refused by name
        return ToolHost(
            view, states, names or None, read_only=token.read_only, allows_target=token.allows_tenant
        )

    return host_for


BLOCKING_TOOLS: Final = frozenset(("state_template_jq",))
"""Tools that wait on the jq workers: they never run on the event loop."""


def offload_for(store: Store, config: MemoryConfig) -> Any:
    """How ``/mcp`` runs its calls on ``store``: on the event loop over an async PostgreSQL store
    (:func:`stateflow.aio.on_edge`), except a tool waiting on jq, and everything when knowledge
    roots are configured (a context may then hash their Markdown sources); else on a thread."""
    from stateflow.aio import on_edge, runs_on_loop
    from stateflow.mcp.server import Offload, on_thread

    if not runs_on_loop(store) or config.knowledge_roots:
        return on_thread

    async def offload(fn: Callable[[], Any], tool: str | None) -> Any:
        if tool in BLOCKING_TOOLS:
            return await on_thread(fn, tool)
        return await on_edge(store, fn)

    typed: Offload = offload
    return typed


def _managers(
    store: Store, tokens: TokenSet, config: MemoryConfig, states: StatesService | None, max_body_bytes: int
) -> dict[bool, Any]:
    """The MCP SDK's stateless session managers over our server, for write tokens (False) and
    read-only ones (True): each request's instructions are its view's protocol, and where its
    headers are refused a generic text, which for a reader teaches reading only (the SDK's
    import is the slow part). The SDK's own body limit (4 MiB unless told) is
    set to the server's, which ``BodyLimit`` enforces first, so ``/mcp`` takes what every other
    route takes and a larger body is refused in one shape."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from stateflow.mcp.server import build_server

    host_for = host_factory(store, tokens, config, states)
    offload = offload_for(store, config)
    return {
        read_only: StreamableHTTPSessionManager(
            # (each request's view is named by its headers)
            # (answered per request with its view's protocol; this generic one where refused)
            app=build_server(
                host_for, protocol_text("active", None, read_only), offload=offload, per_view=True
            ),
            stateless=True,
            json_response=True,
            max_request_body_size=max_body_bytes,
        )
        for read_only in (False, True)
    }


def mount(
    app: FastAPI,
    store: Store,
    tokens: TokenSet,
    config: MemoryConfig | None = None,
    states: StatesService | None = None,
    loaded: Callable[[], None] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> None:
    """Serve MCP at ``/mcp`` on ``app``; the API's middleware has already checked the token.

    The MCP SDK loads in the background once the server is up, so ``stateflow serve`` starts
    listening as fast as without it; an MCP request that arrives first waits for it.
    ``loaded`` is called once it has loaded (on the event loop). ``max_body_bytes``: the
    server's body limit (``BodyLimit``, in front of the route, answers a larger body).
    """
    memory_config = config or config_from_env()  # a bad setting stops the server here, at start
    running: dict[str, Any] = {}
    previous = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        ready, stop = anyio.Event(), anyio.Event()
        running["ready"] = ready

        async def serve_mcp() -> None:
            managers = await anyio.to_thread.run_sync(
                _managers, store, tokens, memory_config, states, max_body_bytes
            )
            async with managers[False].run(), managers[True].run():
                running["managers"] = managers
                ready.set()
                if loaded is not None:
                    loaded()
                await stop.wait()

        async with anyio.create_task_group() as group:
            group.start_soon(serve_mcp)
            async with previous(a) as state:
                yield state
            stop.set()

    app.router.lifespan_context = lifespan
    endpoint = _Endpoint(running, tokens)
    app.router.routes.append(Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))


class _Endpoint:
    """An ASGI app (not a request function) handing each request to the session manager for its
    token (the API's middleware has admitted it; the server checks it again per request)."""

    def __init__(self, running: dict[str, Any], tokens: TokenSet) -> None:
        self.running = running
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.running["ready"].wait()
        try:
            read_only = self.tokens.authenticate(Headers(scope=scope).get("authorization")).read_only
        except StateflowError:
            read_only = False  # refused by the server itself, as any request without a token
        if scope["method"] == "POST":
            # the body is read here, not by the SDK: it answers a client that goes away while
            # sending as its own failure (a 500 and a traceback), where raised, the request is
            # dropped with the one line any route's gets (``BodyLimit``)
            body = await Request(scope, receive).body()
            # a member named twice (the SDK's parser keeps the last value) and JSON that is not a
            # JSON-RPC message (the SDK answers its validator's raw report, without the id) are
            # refused as on stdio
            refused, sent = read_message(body)
            if refused is not None:
                await _refusal(*refused)(scope, receive, send)
                return
            if sent is not None:
                sent_arguments.set(sent)  # (this request's own task: no other request sees it)
            receive = _replaying(body, receive)
        await self.running["managers"][read_only].handle_request(scope, receive, send)


def _refusal(code: int, reason: str, rid: int | str | None) -> Response:
    """The answer to a refused body, as the SDK answers one it refuses (400, a JSON-RPC error),
    for the request's id where it can be told."""
    error = {"code": code, "message": error_message(code, reason)}
    return Response(encode({"jsonrpc": "2.0", "id": rid, "error": error}), 400, media_type="application/json")


def _replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the request's body, already read, handed over first."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()  # (the client's going away, once the answer is under way)
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
