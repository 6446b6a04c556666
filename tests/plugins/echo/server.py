"""A test capability: a real MCP server that echoes, shows its `_meta`, sleeps and dies."""

import os
import signal
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("test-echo", version="1", log_level="WARNING")


@mcp.tool()
def echo(text: str) -> dict[str, Any]:
    """Return the text."""
    return {"text": text}


@mcp.tool()
def whoami(ctx: Context) -> dict[str, Any]:
    """Return the `_meta` this call arrived with, and the process's environment keys."""
    return {"meta": dict(ctx.request_context.meta or {}), "env": sorted(os.environ), "pid": os.getpid()}


@mcp.tool()
async def sleep(seconds: float, ctx: Context) -> dict[str, Any]:
    """Sleep, reporting progress once."""
    await ctx.report_progress(0, seconds, "sleeping")
    await anyio.sleep(seconds)
    return {"slept": seconds}


@mcp.tool()
def die() -> dict[str, Any]:
    """Kill this process in the middle of the call."""
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


if __name__ == "__main__":
    mcp.run()
