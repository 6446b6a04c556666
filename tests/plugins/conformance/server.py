"""A test capability implementing the MCP conformance suite's server-side test surface.

Run by the host as a sandboxed stdio child (`python server.py`), or on its own as a
streamable-HTTP server on loopback (`python server.py --http PORT`, endpoint `/mcp`) for
the direct baseline the suite is compared against (`tests/conformance/`). Tools live in
`tools.py`, resources, prompts and completions in `content.py`.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import anyio
import mcp.types as types
from content import (
    complete,
    get_prompt,
    list_prompts,
    list_resources,
    list_templates,
    read_resource,
    subscribe,
    unsubscribe,
)
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning
from tools import TOOLS

# Logging and sampling are deprecated at 2026-07-28; the suite speaks 2025-11-25, where they are live.
warnings.simplefilter("ignore", MCPDeprecationWarning)

Context = ServerRequestContext[Any, Any]


async def list_tools(ctx: Context, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[entry.tool for entry in TOOLS.values()])


async def call_tool(ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
    entry = TOOLS.get(params.name)
    if entry is None:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
    return await entry.handler(ctx, dict(params.arguments or {}))


async def set_logging_level(ctx: Context, params: types.SetLevelRequestParams) -> types.EmptyResult:
    return types.EmptyResult()


def build_server() -> Server[Any]:
    return Server(
        "conformance-test-plugin",
        version="1",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
        on_set_logging_level=set_logging_level,
    )


async def serve_stdio() -> None:
    server = build_server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_http(port: int) -> None:
    import uvicorn
    from event_store import MemoryEventStore

    app = build_server().streamable_http_app(
        streamable_http_path="/mcp", event_store=MemoryEventStore(), retry_interval=100, host="127.0.0.1"
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    args = parser.parse_args()
    if args.http is None:
        anyio.run(serve_stdio)
    else:
        serve_http(args.http)


if __name__ == "__main__":
    main()
