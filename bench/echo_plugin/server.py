"""The bench's echo child: one trivial tool, named by `ECHO_TOOL_NAME` (default `echo`).

`python server.py` serves it over stdio (as a host plugin, or leg a); `python server.py --http
PORT` serves the same server over streamable HTTP under uvicorn on 127.0.0.1 (leg b).
"""

import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("bench-echo", version="1", log_level="WARNING")


async def echo(text: str) -> dict[str, Any]:
    """Return the text."""
    return {"text": text}


mcp.add_tool(echo, name=os.environ.get("ECHO_TOOL_NAME", "echo"))


def main(argv: list[str]) -> None:
    if len(argv) == 2 and argv[0] == "--http":
        import uvicorn

        uvicorn.run(mcp.streamable_http_app(), host="127.0.0.1", port=int(argv[1]), log_level="warning")
    else:
        mcp.run()


if __name__ == "__main__":
    main(sys.argv[1:])
