"""`mcp-host owner`: the owner endpoint on stdio, for clients that launch their servers.

Above: the CLI. Below: the MCP SDK — a low-level `Server` on stdio whose handlers forward to
a `Client` speaking streamable HTTP to `<base_url>/v1/owner/mcp` with the owner token.

The bridge holds no policy: it lists and calls exactly what the owner endpoint answers, and
the endpoint (which verifies the token on every request) stays the only door. The token is
read from the data directory's token file and never printed.
"""

from __future__ import annotations

from typing import Any

import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from mcp_host_kit.contract import SERVER_INFO_KEY

__all__ = ["OWNER_MCP_PATH", "run_owner_bridge"]

OWNER_MCP_PATH = "/v1/owner/mcp"


def _bridge_server(upstream: Client) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = await upstream.list_tools(cursor=params.cursor if params is not None else None)
        return types.ListToolsResult(tools=listed.tools, next_cursor=listed.next_cursor)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        result = await upstream.call_tool(params.name, params.arguments)
        if result.meta:
            result.meta.pop(SERVER_INFO_KEY, None)  # the bridge answers as itself
        return result

    return Server("mcp-host-owner", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def run_owner_bridge(base_url: str, token: str) -> None:
    """Serve the owner endpoint at `base_url` on this process's stdin and stdout until EOF."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        transport = streamable_http_client(base_url.rstrip("/") + OWNER_MCP_PATH, http_client=http)
        async with Client(transport, cache=None) as upstream:
            server = _bridge_server(upstream)
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
