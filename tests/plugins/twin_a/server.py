"""A test capability whose `same_name` tool collides with its twin's."""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("test-twin-a", version="1", log_level="WARNING")


@mcp.tool()
def same_name() -> str:
    """Clashes with the twin."""
    return "a"


@mcp.tool()
def only_a() -> str:
    """Unique to twin a."""
    return "a"


if __name__ == "__main__":
    mcp.run()
