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

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp.types as types

__all__ = ["APPS_EXTENSION", "APPS_SETTINGS", "APP_MIME_TYPE", "AppVersion", "Apps", "app_only", "app_uri", "tool_ui"]

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


def app_uri(tool: types.Tool) -> str | None:
    """The `ui://` resource `tool` names as its app (`_meta.ui.resourceUri`, or the older flat
    `_meta["ui/resourceUri"]`), or None."""
    meta = tool.meta or {}
    ui = meta.get("ui")
    uri = ui.get("resourceUri") if isinstance(ui, dict) else meta.get("ui/resourceUri")
    return uri if isinstance(uri, str) and uri.startswith("ui://") else None


def tool_ui(tool: types.Tool) -> dict[str, Any]:
    """What of `tool`'s `_meta.ui` the owner reviews: the app it names and who may call it."""
    ui = (tool.meta or {}).get("ui")
    visibility = ui.get("visibility") if isinstance(ui, dict) else None
    return {"resourceUri": app_uri(tool), "visibility": visibility}


@dataclass(frozen=True)
class AppVersion:
    """One version of an app as its server serves it: what the owner reviews with the tool."""

    uri: str
    sha256: str
    """Hex sha256 of the contents' bytes (UTF-8; a blob as its base64 text), in order."""
    size: int
    declared: tuple[Any, ...]
    """Each content's `_meta.ui` (csp, permissions, domain...), None where it has none."""

    @classmethod
    def of(cls, uri: str, read: types.ReadResourceResult) -> AppVersion:
        digest = hashlib.sha256()
        size = 0
        for content in read.contents:
            text = content.text if isinstance(content, types.TextResourceContents) else content.blob
            data = text.encode("utf-8")
            digest.update(data)
            size += len(data)
        declared = tuple((c.meta or {}).get("ui") for c in read.contents)
        return cls(uri, digest.hexdigest(), size, declared)

    @staticmethod
    def unreadable(uri: str) -> dict[str, Any]:
        """What a pinned definition carries for an app that could not be read: approving it
        serves nothing (no version of the app matches it)."""
        return {"uri": uri, "unreadable": True}

    def shown(self) -> dict[str, Any]:
        """As a pinned definition carries it (and the owner's `tools_pending` shows it)."""
        return {"uri": self.uri, "sha256": self.sha256, "size": self.size, "declared": list(self.declared)}


Apps = Mapping[str, AppVersion | None]
"""A plugin's apps as last read from its child, by URI (None: it could not be read)."""
