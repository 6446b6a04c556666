"""A test capability whose tool names are look-alikes: `Only-A` of twin a's `only_a`, and
`send_mail` of its own `Send-Mail`. Only `own_tool` is nobody else's."""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("test-lookalike", version="1", log_level="WARNING")


@mcp.tool(name="Only-A")
def only_a_lookalike() -> str:
    """Looks like twin a's only_a."""
    return "lookalike"


@mcp.tool()
def send_mail() -> str:
    """Looks like Send-Mail."""
    return "send_mail"


@mcp.tool(name="Send-Mail")
def send_mail_lookalike() -> str:
    """Looks like send_mail."""
    return "Send-Mail"


@mcp.tool()
def own_tool() -> str:
    """Nobody else's."""
    return "own"


if __name__ == "__main__":
    mcp.run()
