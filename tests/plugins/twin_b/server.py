"""A test capability whose `same_name` tool collides with its twin's."""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("test-twin-b", version="1", log_level="WARNING")


@mcp.tool()
def same_name() -> str:
    """Clashes with the twin."""
    return "b"


@mcp.tool()
def only_b() -> str:
    """Unique to twin b."""
    return "b"


if __name__ == "__main__":
    mcp.run()
