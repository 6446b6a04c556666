"""A test capability whose tool list changes: `shift` swaps `alpha` for `beta` (and back)."""

from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

state = {"shifted": False}
OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
    named = "beta" if state["shifted"] else "alpha"
    return types.ListToolsResult(
        tools=[
            types.Tool(name=named, description=f"the {named} tool", input_schema=OBJECT),
            types.Tool(name="shift", description="swap alpha and beta", input_schema=OBJECT),
        ]
    )


async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "shift":
        state["shifted"] = not state["shifted"]
        await ctx.session.send_tool_list_changed()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=params.name)], structured_content={"called": params.name}
    )


server = Server("test-shifty", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
