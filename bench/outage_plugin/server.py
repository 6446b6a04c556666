"""The outage bench's plugin: `put` stores one record `{key}` and answers only once the host
has acknowledged the insert, so every answered `put` is a write the host promised to keep."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_host_kit import Kit, tool_errors

mcp = MCPServer("bench_outage", version="1", log_level="WARNING")
kit = Kit(__file__)


@mcp.tool()
@tool_errors
async def put(key: str, ctx: Context) -> dict[str, Any]:
    """Store `{key}` in the collection `puts`; returns the record's id."""
    return {"id": await kit.host(ctx).store.insert("puts", {"key": key})}


if __name__ == "__main__":
    mcp.run()
