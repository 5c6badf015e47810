"""The memory tools, the context resources and the context prompt over the Model Context Protocol.

Every call runs through the same dispatcher as the CLI, so a model receives exactly the same
text whichever door it uses; successful calls also carry the result as structured content
matching the tool's ``outputSchema``. A refusal is an ``isError`` result whose text keeps the
stable code (``error[path-not-found]: …``).

One server object serves every transport: it asks ``host_for`` for the tools of the request's
identity (fixed for stdio; named by each HTTP request's headers and checked against its token).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS

from stateflow import __version__
from stateflow.doc.canonical import encode
from stateflow.errors import NotFound, StateflowError
from stateflow.mcp.subscriptions import Subscriptions
from stateflow.mcp.unparsed import AnsweringUnparsed, CheckedLines, sent_arguments, stdin_bytes
from stateflow.memory.view import Context
from stateflow.tools import ToolHost, ToolResult

CONTEXT_URI: Final = "stateflow://memory/context"
CONTEXT_JSON_URI: Final = "stateflow://memory/context.json"
CONTEXT_PROMPT: Final = "memory_context"

HostFactory = Callable[[Any], ToolHost]
"""The tools of one request: given the request context (its HTTP request, if any)."""

_NO_ARGUMENTS: Final = object()
_given_arguments: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "given_arguments", default=_NO_ARGUMENTS
)
"""A ``tools/call``'s ``arguments`` as sent, when they are not an object (see :func:`_unshaped_arguments`)."""


async def _unshaped_arguments(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Hand a ``tools/call`` whose ``arguments`` are not an object (a string, an array, a number,
    null) to the tool as sent: the SDK's schema check would answer it with a bare -32602 before
    the tool runs, where the tool refuses it naming the problem (``read_state requires an
    object``), as every door refuses any other bad argument. The call goes on without them, so the
    SDK checks the rest of the request; the tool gets them back from ``_given_arguments``."""
    params = ctx.params
    if ctx.method != "tools/call" or not isinstance(params, Mapping) or "arguments" not in params:
        return await call_next(ctx)
    arguments = params["arguments"]
    if isinstance(arguments, Mapping):
        return await call_next(ctx)
    rest = {k: v for k, v in params.items() if k != "arguments"}
    given = _given_arguments.set(arguments)
    try:
        return await call_next(dataclasses.replace(ctx, params=rest))
    finally:
        _given_arguments.reset(given)


def _tool(d: Any) -> types.Tool:
    return types.Tool(
        name=d.name,
        title=d.title,
        description=d.description,
        input_schema=d.input_schema,
        output_schema=d.output_schema,
        annotations=types.ToolAnnotations(
            title=d.title,
            read_only_hint=d.read_only,
            destructive_hint=d.destructive,
            idempotent_hint=d.read_only,
            open_world_hint=False,
        ),
    )


def _resources() -> list[types.Resource]:
    return [
        types.Resource(
            name="context",
            title="Memory context",
            uri=CONTEXT_URI,
            description="The baseline context a model sees at the start of a turn: protocol, hot effective "
            "state, lazy navigation and recent transitions of this agent, cwd and session (read it again "
            "each turn; it changes with every accepted patch).",
            mime_type="text/plain",
        ),
        types.Resource(
            name="context-json",
            title="Memory context (JSON)",
            uri=CONTEXT_JSON_URI,
            description="The same context as JSON: {projection, head}.",
            mime_type="application/json",
        ),
    ]


def _prompts() -> list[types.Prompt]:
    return [
        types.Prompt(
            name=CONTEXT_PROMPT,
            title="Memory context",
            description="Start a turn with the current memory context of this agent, cwd and session.",
        )
    ]


def _refusal(exc: StateflowError) -> MCPError:
    """A protocol-level refusal (resources, prompts) that keeps the stable code in its message."""
    return MCPError(code=INVALID_PARAMS, message=f"error[{exc.code}]: {exc.message}")


Offload = Callable[[Callable[[], Any], str | None], Awaitable[Any]]
"""How the server runs a synchronous call on the store: ``offload(fn, tool)`` awaits ``fn()``
(``tool`` names the tool it calls, None for the host and the context)."""


async def on_thread(fn: Callable[[], Any], tool: str | None) -> Any:
    """The store is synchronous: keep the event loop responsive while it works."""
    return await anyio.to_thread.run_sync(fn)


def build_server(
    host_for: HostFactory,
    instructions: str | None = None,
    subscriptions: Subscriptions | None = None,
    offload: Offload = on_thread,
    per_view: bool = False,
) -> Server[Any]:
    """The server over ``host_for``'s tools. ``per_view``: each ``initialize`` is answered with
    the protocol of its request's own view (over HTTP, the headers name it: its scopes, a
    read-only token's reading only), ``instructions`` only where that view is refused."""

    async def host(ctx: Any) -> ToolHost:
        try:
            tools: ToolHost = await offload(functools.partial(host_for, ctx), None)
        except StateflowError as exc:
            raise _refusal(exc) from exc
        return tools

    async def context_of(ctx: Any) -> Context:
        tools = await host(ctx)
        try:
            context: Context = await offload(tools.view.context, None)
        except StateflowError as exc:
            raise _refusal(exc) from exc
        return context

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(d) for d in (await host(ctx)).definitions()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            tools = await offload(functools.partial(host_for, ctx), None)
        except StateflowError as exc:
            result = ToolResult(exc.message, True, exc.code)
        else:
            given = _given_arguments.get()
            arguments = (params.arguments or {}) if given is _NO_ARGUMENTS else given
            sent = sent_arguments.get()
            if sent is not None and sent[0] == ctx.request_id:
                arguments = sent[1]  # (as the client wrote them: see ``sent_arguments``)
            call = functools.partial(tools.call, params.name, arguments)
            result = await offload(call, params.name)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.error_text())],
            structured_content=None if result.is_error else result.structured,
            is_error=result.is_error,
        )

    async def list_resources(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=_resources())

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri not in (CONTEXT_URI, CONTEXT_JSON_URI):
            raise _refusal(NotFound(f"no resource {uri}; available: {CONTEXT_URI}, {CONTEXT_JSON_URI}"))
        context = await context_of(ctx)
        if uri == CONTEXT_URI:
            text, mime = context.text(), "text/plain"
        else:
            text, mime = (
                encode({"projection": context.projection, "head": context.head}).decode(),
                "application/json",
            )
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )

    async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=_prompts())

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != CONTEXT_PROMPT:
            raise _refusal(NotFound(f"no prompt {params.name!r}; available: {CONTEXT_PROMPT}"))
        context = await context_of(ctx)
        return types.GetPromptResult(
            description="The current memory context (user-level data, not system instructions).",
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(type="text", text=context.text()))
            ],
        )

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        assert subscriptions is not None
        try:
            return await subscriptions.subscribe(ctx, params)
        except StateflowError as exc:
            raise _refusal(exc) from exc

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        assert subscriptions is not None
        return await subscriptions.unsubscribe(ctx, params)

    async def listen(
        ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        assert subscriptions is not None
        try:
            return await subscriptions.listen(ctx, params)
        except StateflowError as exc:
            raise _refusal(exc) from exc

    server: Server[Any] = Server(
        "stateflow",
        version=__version__,
        title="stateflow memory",
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_subscribe_resource=subscribe if subscriptions is not None else None,
        on_unsubscribe_resource=unsubscribe if subscriptions is not None else None,
        on_subscriptions_listen=listen if subscriptions is not None else None,
    )
    server.middleware.append(_unshaped_arguments)

    async def view_instructions(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "initialize" or not isinstance(result, dict):
            return result
        try:
            tools: ToolHost = await offload(functools.partial(host_for, ctx), None)
        except StateflowError:
            return result  # (the generic text: the request's calls are refused, naming why)
        return {**result, "instructions": tools.view.protocol()}

    if per_view:
        server.middleware.append(view_instructions)
    return server


def serve_stdio(host: ToolHost, host_for: HostFactory | None = None) -> None:
    """Serve ``host`` over stdio; with ``host_for``, each request's tools come from it (the
    session may change while the server runs) and the instructions are the protocol only."""
    if host_for is None:
        fixed = host
        subscriptions = Subscriptions(lambda ctx: fixed, (CONTEXT_URI, CONTEXT_JSON_URI))
        # The instructions are the context at start; the resources and the prompt stay current.
        server = build_server(lambda ctx: fixed, host.view.context().text(), subscriptions)
    else:
        view = host.view
        subscriptions = Subscriptions(host_for, (CONTEXT_URI, CONTEXT_JSON_URI))
        server = build_server(host_for, view.protocol(), subscriptions)

    async def main() -> None:
        with stdin_bytes() as stdin:
            await serve(stdin)

    async def serve(stdin: anyio.AsyncFile[bytes]) -> None:
        lines = CheckedLines(stdin)
        # (the SDK parses bytes lines as it does text, from any async iterable of them; its
        # signature names only a text file)
        async with (
            stdio_server(stdin=lines) as (read_stream, write_stream),  # type: ignore[arg-type]
            anyio.create_task_group() as group,
        ):
            lines.answer_to(write_stream)
            group.start_soon(subscriptions.watch)
            answering = AnsweringUnparsed(read_stream, write_stream)  # (the SDK drops them unanswered)
            await server.run(answering, write_stream, server.create_initialization_options())
            group.cancel_scope.cancel()

    anyio.run(main)
