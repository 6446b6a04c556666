"""mcp-host: a sandboxing, per-session MCP proxy host. See README.md beside this file."""

__all__: list[str] = []
