"""A test capability only a role can grant: says hello, and shows the session scope it was called with."""

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("test-guarded", version="1", log_level="WARNING")


@mcp.tool()
def guarded_hello(name: str) -> dict[str, Any]:
    """Greet `name`."""
    return {"hello": name}


@mcp.tool()
def guarded_scope(ctx: Context) -> dict[str, Any]:
    """Return the session scope the host sent with this call."""
    return {"scope": (ctx.request_context.meta or {}).get("mcp-host/session")}


if __name__ == "__main__":
    mcp.run()
