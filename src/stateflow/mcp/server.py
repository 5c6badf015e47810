"""``stateflow mcp``: the LLM tools over the Model Context Protocol (stdio).

Every call runs through the same dispatcher as the CLI, so a model receives exactly the same
text whichever edge it uses. ``read_state`` is annotated read-only; ``patch_state`` destructive.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from stateflow import __version__
from stateflow.tools import ToolHost


def build_server(host: ToolHost) -> Server[Any]:
    definitions = host.definitions()
    tools = [
        types.Tool(
            name=d.name,
            description=d.description,
            input_schema=d.input_schema,
            annotations=types.ToolAnnotations(
                read_only_hint=d.read_only,
                destructive_hint=d.destructive,
                idempotent_hint=d.read_only,
                open_world_hint=False,
            ),
        )
        for d in definitions
    ]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        # The store is synchronous; keep the event loop responsive while it works.
        result = await anyio.to_thread.run_sync(host.call, params.name, params.arguments or {})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.error_text())], is_error=result.is_error
        )

    return Server(
        "stateflow",
        version=__version__,
        instructions=host.view.context().text(),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def serve_stdio(host: ToolHost) -> None:
    server = build_server(host)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
