"""A test capability that needs a calendar: it reaches the owner's connector only through the
host op `connector.invoke`, and can show everything it was given in `_meta`."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_host_kit import Kit, tool_errors

mcp = MCPServer("scheduler", version="1", log_level="WARNING")
kit = Kit(__file__)


async def _calendar(ctx: Context, verb: str, args: dict[str, Any]) -> dict[str, Any]:
    return await kit.host(ctx).call("connector.invoke", {"category": "calendar", "verb": verb, "args": args})


@mcp.tool()
@tool_errors
async def slots_busy(start: str, end: str, ctx: Context) -> dict[str, Any]:
    """The owner's busy times between start and end (ISO 8601 with offset)."""
    return await _calendar(ctx, "freebusy", {"start": start, "end": end})


@mcp.tool()
@tool_errors
async def meeting_book(summary: str, start: str, end: str, ctx: Context) -> dict[str, Any]:
    """Put a meeting in the owner's calendar."""
    return await _calendar(ctx, "insert_event", {"summary": summary, "start": start, "end": end})


@mcp.tool()
@tool_errors
async def mail_send(ctx: Context) -> dict[str, Any]:
    """Try a category this capability does not require (the host must refuse)."""
    return await kit.host(ctx).call("connector.invoke", {"category": "mail", "verb": "send", "args": {}})


@mcp.tool()
def meta_seen(ctx: Context) -> dict[str, Any]:
    """Everything this call carried in `_meta`, as text."""
    return {"meta": json.dumps(ctx.request_context.meta or {}, default=str, sort_keys=True)}


if __name__ == "__main__":
    mcp.run()
