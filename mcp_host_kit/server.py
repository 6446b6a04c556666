"""`PluginServer`: the SDK's `MCPServer`, answering argument mistakes in the host's vocabulary,
and serving an MCP App (the `io.modelcontextprotocol/ui` extension) from a file in two lines.

MCPServer turns arguments that miss a field or carry the wrong JSON type into an error result
with no code. A plugin under mcp-host answers `{code: "invalid_arguments", message}` instead,
naming the fields (never their values), like any other mistake of the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import ValidationError

from .errors import InvalidArguments, error_result

__all__ = ["APP_MIME_TYPE", "PluginServer"]

APP_MIME_TYPE = "text/html;profile=mcp-app"
"""The MIME type of an MCP App's HTML: what a client renders in a sandboxed frame."""
_CSP_KEYS = ("connectDomains", "resourceDomains", "frameDomains", "baseUriDomains")


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

    def app(
        self,
        uri: str,
        html: Path,
        *,
        name: str,
        csp: Mapping[str, Sequence[str]] | None = None,
        prefers_border: bool = True,
    ) -> dict[str, Any]:
        """Serve the file `html` as the MCP App `uri` (`ui://…`), and return the `_meta` a tool
        names it with: `@mcp.tool(meta=mcp.app(...))`.

        The resource is `APP_MIME_TYPE`; its contents carry `_meta.ui` with `csp` (each of
        connectDomains, resourceDomains, frameDomains, baseUriDomains; those not given are
        empty: by default the app reaches no network) and `prefersBorder`. The file is read at
        each `resources/read`, bytes as they are on disk (UTF-8); the host pins what it reads,
        so a changed file is a changed app the owner reviews again. Raises ValueError when `uri`
        is not `ui://` or FileNotFoundError when `html` is missing (at start, not at a read)."""
        if not uri.startswith("ui://"):
            raise ValueError(f"an app's URI starts with ui://, not {uri!r}")
        if not html.is_file():
            raise FileNotFoundError(f"no app file at {html}")
        declared = {key: list((csp or {}).get(key, ())) for key in _CSP_KEYS}
        meta = {"ui": {"csp": declared, "prefersBorder": prefers_border}}

        def read() -> str:
            return html.read_bytes().decode("utf-8")  # not read_text: no newline translation

        self.resource(uri, name=name, mime_type=APP_MIME_TYPE, meta=meta)(read)
        return {"ui": {"resourceUri": uri}}
