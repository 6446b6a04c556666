"""MCP Apps (the `io.modelcontextprotocol/ui` extension) as the host passes them through.

Above: `children.mcp_session` (tells a child the host carries apps), `visitor.server` (tells a
visitor) and `visitor.tool_search` (never offers an app's own tools to the model). Below: nothing.

An app is a `ui://` resource (`text/html;profile=mcp-app`) that a tool names in its
`_meta.ui.resourceUri` (older servers: the flat `_meta["ui/resourceUri"]`); the client renders
it and the app calls its server's tools through the client, by the names the server gave them.
The host renames nothing of that: tool names, resource URIs, `_meta.ui` on tools and on the
resource's contents (csp, permissions, domain, prefersBorder) and results naming `ui://` pass
as the child sent them (mcp_host/README.md, "Apps pass through unchanged").
"""

from __future__ import annotations

from typing import Any

import mcp.types as types

__all__ = ["APPS_EXTENSION", "APP_MIME_TYPE", "APPS_SETTINGS", "app_only"]

APPS_EXTENSION = "io.modelcontextprotocol/ui"
APP_MIME_TYPE = "text/html;profile=mcp-app"
APPS_SETTINGS: dict[str, dict[str, Any]] = {APPS_EXTENSION: {"mimeTypes": [APP_MIME_TYPE]}}
"""The extension's entry under `capabilities.extensions`, both ways: the host carries apps."""


def app_only(tool: types.Tool) -> bool:
    """Whether `tool` is for its app alone: its `_meta.ui.visibility` is a list without
    `"model"` (absent, the default is both). Such a tool is called by the app through the
    client and is never offered to the model."""
    ui = (tool.meta or {}).get("ui")
    visibility = ui.get("visibility") if isinstance(ui, dict) else None
    return isinstance(visibility, list) and "model" not in visibility
