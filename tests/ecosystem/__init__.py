"""The proof of issue 14: the ecosystem's own MCP servers (the reference servers from npm and
mcp-server-time from PyPI, installed by scripts/install-ecosystem) behind a real host with
default settings, reached through the Python SDK, the TypeScript SDK client and the MCP
Inspector CLI."""
