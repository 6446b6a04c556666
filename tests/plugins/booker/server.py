"""A test capability with a claim gate (`book_it`, "i've booked"), built on the plugin kit.

Run it standalone with `python server.py` (stdio); under the host it is a sandboxed child.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_host_kit import Kit, tool_errors

mcp = MCPServer("booker", version="1", log_level="WARNING")
kit = Kit(__file__)


@mcp.tool()
def book_it(fail: bool = False) -> dict[str, Any]:
    """Book it; `fail` answers `{"ok": false}` as a booking that did not go through."""
    return {"ok": not fail}


@mcp.tool()
def whatever() -> dict[str, Any]:
    """Something that is not a booking."""
    return {"done": "whatever"}


@mcp.tool()
@tool_errors
async def transcript(ctx: Context) -> dict[str, Any]:
    """This session's turns and their receipts, as the host keeps them."""
    return await kit.host(ctx).call("conversation.read", {})


if __name__ == "__main__":
    mcp.run()
