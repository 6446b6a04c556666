"""The apps a plugin's tools name (MCP Apps), read from its child so the pins cover them.

Above: `bindings`, which asks for a vetted list's apps before the pins record it (the owner
reviews a tool with the app it names). Below: `children` (a `resources/read` of each `ui://`
URI, no session's `_meta`: the host reads, not a visitor).

An app is read again with each fresh list (a visitor's `tools/list`, the owner's fresh review)
and kept otherwise, while the child that served it has not restarted: a call routed from the
last lists costs no read. A plugin with no tool naming an app is never asked. An app that
cannot be read is None (logged): its tool's pin then names it unreadable, and no version of it
is served until the owner approves one that reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import mcp.types as types

from mcp_host.children import Child, ChildSource
from mcp_host.errors import is_connection_failure
from mcp_host.plugins import Plugin
from mcp_host.wire import AppVersion, app_uri

__all__ = ["AppReader"]

logger = logging.getLogger(__name__)


class AppReader:
    """Each plugin's apps as last read, with the start of the child that served them."""

    def __init__(self, children: ChildSource, *, read_timeout_s: float) -> None:
        self._children = children
        self._timeout_s = read_timeout_s
        # plugin id -> URI -> (the serving child's start count, the app as then read)
        self._read: dict[str, dict[str, tuple[int, AppVersion | None]]] = {}

    async def versions(
        self, plugin: Plugin, tools: Sequence[types.Tool], *, fresh: bool, session_id: str | None
    ) -> dict[str, AppVersion | None]:
        """The apps `tools` name, by URI: read now when `fresh` (or not read since the child
        last started), else as last read. Empty, with no read, when no tool names one."""
        uris = sorted({uri for tool in tools if (uri := app_uri(tool)) is not None})
        if not uris:
            return {}
        pid = plugin.manifest.id
        child = self._children.lister(plugin, session_id)
        starts = child.health().starts
        known = self._read.setdefault(pid, {})
        found: dict[str, AppVersion | None] = {}
        for uri in uris:
            last = known.get(uri)
            if fresh or last is None or last[0] != starts:
                last = known[uri] = (starts, await self._read_one(pid, child, uri))
            found[uri] = last[1]
        return found

    async def _read_one(self, pid: str, child: Child, uri: str) -> AppVersion | None:
        request = types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=uri))
        try:
            read = await child.forward(request, types.ReadResourceResult, timeout_s=self._timeout_s)
        except Exception as exc:  # fail closed: an unreadable app is served to no visitor
            trace = not is_connection_failure(exc)
            logger.warning("%s: app %r could not be read for the owner's review", pid, uri[:200], exc_info=trace)
            return None
        return AppVersion.of(uri, read)

    def forget(self, plugin_id: str) -> None:
        self._read.pop(plugin_id, None)
