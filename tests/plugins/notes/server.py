"""A test capability built on the plugin kit: notes in the store, slots as claims, config,
the owner's timezone and the session as the plugin sees it.

Run it standalone with `python server.py` (stdio); under the host it is a sandboxed child.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_host_kit import Kit, tool_errors

mcp = MCPServer("notes", version="1", log_level="WARNING")
kit = Kit(__file__)

NOTES = "notes"
SLOTS = "slots"


@mcp.tool()
@tool_errors
async def note_add(text: str, ctx: Context) -> dict[str, Any]:
    """Keep a note; returns its id. The host stamps the subject into `subject_id`."""
    return {"id": await kit.host(ctx).store.insert(NOTES, {"text": text})}


@mcp.tool()
@tool_errors
async def note_list(ctx: Context) -> dict[str, Any]:
    """The notes, oldest first, at most the owner's `page_size`."""
    host = kit.host(ctx)
    page_size = (await host.config.get()).config.get("page_size")
    records = await host.store.query(NOTES, limit=page_size if isinstance(page_size, int) else None)
    return {"notes": [{**r.doc, "id": r.id, "created_at": r.created_at.isoformat()} for r in records]}


@mcp.tool()
@tool_errors
async def note_count(ctx: Context) -> dict[str, Any]:
    """How many notes there are."""
    return {"count": await kit.host(ctx).store.count(NOTES)}


@mcp.tool()
@tool_errors
async def note_update(id: str, text: str, ctx: Context) -> dict[str, Any]:
    """Change a note's text."""
    return {"updated": await kit.host(ctx).store.update(NOTES, id, {"text": text})}


@mcp.tool()
@tool_errors
async def note_delete(id: str, ctx: Context) -> dict[str, Any]:
    """Delete a note."""
    return {"deleted": await kit.host(ctx).store.delete(NOTES, id=id)}


@mcp.tool()
@tool_errors
async def slot_claim(key: str, ttl_s: int, ctx: Context) -> dict[str, Any]:
    """Hold a slot for `ttl_s` seconds."""
    return {"claimed": await kit.host(ctx).store.claim(SLOTS, key, ttl_s)}


@mcp.tool()
@tool_errors
async def slot_release(key: str, ctx: Context) -> dict[str, Any]:
    """Give a slot back."""
    return {"released": await kit.host(ctx).store.release(SLOTS, key)}


@mcp.tool()
@tool_errors
async def config_show(ctx: Context) -> dict[str, Any]:
    """This plugin's config values for this call, per scope."""
    return (await kit.host(ctx).config.get()).model_dump()


@mcp.tool()
@tool_errors
async def owner_timezone(ctx: Context) -> dict[str, Any]:
    """The owner's timezone."""
    return {"timezone": await kit.host(ctx).owner.meta("timezone")}


@mcp.tool()
@tool_errors
async def whoami(ctx: Context) -> dict[str, Any]:
    """The session this call is for, as the plugin sees it."""
    return kit.host(ctx).session.model_dump(mode="json")


if __name__ == "__main__":
    mcp.run()
