"""Test plugin: `greet` for visitors; `purge` is an owner tool its manifest keeps from them."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("owned", version="1", log_level="WARNING")


@mcp.tool()
def greet() -> str:
    """Say hello."""
    return "hello"


@mcp.tool()
def purge(ctx: Context) -> dict[str, Any]:
    """What an owner-only tool sees of its caller."""
    scope = (ctx.request_context.meta or {}).get("mcp-host/session") or {}
    return {"purged": True, "mode": scope.get("mode")}


if __name__ == "__main__":
    mcp.run()
