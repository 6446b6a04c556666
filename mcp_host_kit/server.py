"""`PluginServer`: the SDK's `MCPServer`, answering argument mistakes in the host's vocabulary.

MCPServer turns arguments that miss a field or carry the wrong JSON type into an error result
with no code. A plugin under mcp-host answers `{code: "invalid_arguments", message}` instead,
naming the fields (never their values), like any other mistake of the caller's.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import ValidationError

from .errors import InvalidArguments, error_result

__all__ = ["PluginServer"]


class PluginServer(MCPServer):
    """An `MCPServer` whose argument-validation failures answer `invalid_arguments`."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            fields = sorted({".".join(str(p) for p in e["loc"]) or "(arguments)" for e in exc.__cause__.errors()})
            return error_result(InvalidArguments(f"missing or mistyped: {', '.join(fields)}"))
