"""A test capability: `wipe` is annotated destructive (its calls wait for the owner), `peek`
is not, and `calls` tells how often each tool really ran in this process."""

from collections import Counter
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("test-vault", version="1", log_level="WARNING")
ran: Counter[str] = Counter()


@mcp.tool(annotations=ToolAnnotations(destructive_hint=True))
def wipe(target: str) -> dict[str, Any]:
    """Wipe `target` (pretend)."""
    ran["wipe"] += 1
    return {"wiped": target}


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek(target: str) -> dict[str, Any]:
    """Look at `target`."""
    ran["peek"] += 1
    return {"peeked": target}


@mcp.tool()
def calls() -> dict[str, Any]:
    """How many times each tool ran."""
    return {"wipe": ran["wipe"], "peek": ran["peek"]}


if __name__ == "__main__":
    mcp.run()
