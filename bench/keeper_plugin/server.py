"""The abuse suite's per-session child: `remember` a value, `recall` it, `slow` for a while."""

from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("bench-keeper", version="1", log_level="WARNING")
_kept: dict[str, Any] = {"value": None}


@mcp.tool()
async def remember(value: str) -> dict[str, Any]:
    """Keep `value` in this instance's memory."""
    _kept["value"] = value
    return {"kept": value}


@mcp.tool()
async def recall() -> dict[str, Any]:
    """What this instance was last told (null after a restart)."""
    return {"value": _kept["value"]}


@mcp.tool()
async def slow(seconds: float) -> dict[str, Any]:
    """Answer after `seconds`."""
    await anyio.sleep(min(seconds, 120.0))
    return {"slept": seconds}


if __name__ == "__main__":
    mcp.run()
