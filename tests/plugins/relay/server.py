"""Test plugin for the host's pass-through: everything a child can send its caller mid-call.

`ask` names its call (the plugin kit's `elicit`), `ask_plain` does not (the SDK's own
`ctx.elicit`): the host must route both to the visitor whose call it is.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types as types
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from mcp_host_kit.visitor import elicit

mcp = MCPServer("relay", version="1", log_level="WARNING")
_cancelled: list[str] = []


class Reply(BaseModel):
    reply: str


@mcp.tool()
async def ask(question: str, ctx: Context) -> dict[str, Any]:
    """Ask the caller's visitor, naming this call."""
    answer = await elicit(ctx, question, Reply)
    if answer is None:
        return {"asked": False}
    return {"asked": True, "action": answer.action, "reply": answer.data.reply if answer.data else None}


_arrived: list[str] = []
_all_here = anyio.Event()


@mcp.tool()
async def ask_plain(question: str, ctx: Context, together: int = 1) -> dict[str, Any]:
    """Ask with the SDK's own elicitation (the call is not named); with `together`, first wait
    (up to 10 s) until that many of these calls are in progress."""
    _arrived.append(question)
    if len(_arrived) >= together:
        _all_here.set()
    with anyio.move_on_after(10):
        await _all_here.wait()
    answer = await ctx.elicit(question, Reply)
    return {"action": answer.action, "reply": getattr(getattr(answer, "data", None), "reply", None)}


@mcp.tool()
async def sample(prompt: str, ctx: Context) -> dict[str, Any]:
    """Have the caller's client write a text; what the child was told when it cannot."""
    try:
        result = await ctx.session.create_message(
            [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
            max_tokens=50,
            related_request_id=ctx.request_id,
        )
    except MCPError as exc:
        return {"refused": exc.error.message, "code": exc.error.code}
    text = result.content.text if isinstance(result.content, types.TextContent) else ""
    return {"text": text, "model": result.model}


@mcp.tool()
async def sample_many(times: int, ctx: Context) -> dict[str, Any]:
    """Ask the caller's client to write `times` texts; how many it wrote, and the refusal."""
    written, refusal = 0, None
    for _ in range(times):
        try:
            await ctx.session.create_message(
                [types.SamplingMessage(role="user", content=types.TextContent(type="text", text="more"))],
                max_tokens=5,
                related_request_id=ctx.request_id,
            )
            written += 1
        except MCPError as exc:
            refusal = exc.error.message
    return {"written": written, "refusal": refusal}


@mcp.tool()
async def roots(ctx: Context) -> dict[str, Any]:
    """The caller's roots."""
    listed = await ctx.session.list_roots()
    return {"roots": [str(r.uri) for r in listed.roots]}


@mcp.tool()
async def roots_meta(ctx: Context) -> dict[str, Any]:
    """The `_meta` keys of the caller's roots answer, as this child received it."""
    listed = await ctx.session.list_roots()
    return {"keys": sorted((listed.meta or {}).keys())}


@mcp.tool()
async def progress(steps: int, ctx: Context) -> str:
    """Report `steps` progress notices, then finish."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    return "done"


@mcp.tool()
async def shout(text: str, ctx: Context) -> str:
    """Log `text` at warning level and at debug level."""
    await ctx.warning(text)
    await ctx.debug(f"quiet {text}")
    return "logged"


@mcp.tool()
async def wait(tag: str) -> str:
    """Wait until cancelled; remembers `tag` when it is."""
    try:
        await anyio.sleep(60)
    except anyio.get_cancelled_exc_class():
        _cancelled.append(tag)
        raise
    return "finished"


@mcp.tool()
async def cancelled() -> list[str]:
    """The tags of the waits that were cancelled."""
    return list(_cancelled)


@mcp.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool named `name` and say the tool list changed."""
    mcp.add_tool(lambda: name, name=name, description="A grown tool.")
    await ctx.session.send_tool_list_changed()
    return "grown"


@mcp.tool()
async def touch(ctx: Context) -> str:
    """Say relay://note changed (to whoever subscribed)."""
    await ctx.session.send_resource_updated("relay://note")
    return "touched"


@mcp.tool()
async def rich() -> list[Any]:
    """Every kind of content."""
    return [
        types.TextContent(type="text", text="text"),
        types.ImageContent(type="image", data="aW1n", mime_type="image/png"),
        types.AudioContent(type="audio", data="YXVk", mime_type="audio/wav"),
        types.EmbeddedResource(
            type="resource",
            resource=types.TextResourceContents(uri="relay://note", mime_type="text/plain", text="note"),
        ),
        types.ResourceLink(type="resource_link", uri="relay://note", name="note"),
    ]


@mcp.prompt()
def relay_greeting(name: str) -> str:
    """A greeting."""
    return f"Hello, {name}!"


@mcp.resource("relay://note", mime_type="text/plain")
def note() -> str:
    """A note."""
    return "a note"


@mcp.resource("relay://items/{item}")
def item(item: str) -> str:
    """An item."""
    return f"item {item}"


if __name__ == "__main__":
    mcp.run()
