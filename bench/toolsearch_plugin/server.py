"""The tool search bench's child: lists the tools of `catalogue.json` beside it and answers a
call of any of them with `{"tool": name, "arguments": ...}`."""

import json
from pathlib import Path
from typing import Any

import mcp.types as types
from mcp.server import Server, ServerRequestContext

CATALOGUE = [
    types.Tool.model_validate({k: v for k, v in t.items() if k != "source"})
    for t in json.loads((Path(__file__).parent / "catalogue.json").read_text())["tools"]
]


async def list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=CATALOGUE)


async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    answer = {"tool": params.name, "arguments": params.arguments or {}}
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(answer))])


server: Server[Any] = Server("bench-catalogue", version="1", on_list_tools=list_tools, on_call_tool=call_tool)

if __name__ == "__main__":
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
