"""The apps a plugin's tools name (MCP Apps), read from its child so the pins cover them.

Above: `bindings`, which asks for a vetted list's apps before the pins record it (the owner
reviews a tool with the app it names). Below: `children` (a `resources/read` of each `ui://`
URI, no session's `_meta`: the host reads, not a visitor).

An app is read again with each fresh list (a visitor's `tools/list`, the owner's fresh review)
and kept otherwise, while the child that served it has not restarted: a call routed from the
last lists costs no read. A plugin with no tool naming an app is never asked. An app that
cannot be read for a passing reason (a timeout, a crash) is None (logged): its tool's pin then
names it unreadable, and no version of it is served until the owner approves one that reads.
An app the checks refuse (`app_checks`: a csp open to any origin, past the size cap, not served
by the plugin itself) is `AppRefused`: `bindings` rejects its tool. One whose answer ended the
child (past its message limit) is not read again while the plugin stays installed (each read
would stop the child again). Each version read and not refused is kept in `AppContents` (the
owner's diff and preview), and the versions no pin names nor the child serves are pruned.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import mcp.types as types

from mcp_host.children import Child, ChildSource
from mcp_host.errors import AnswerTooLarge, TransportFailure, is_connection_failure, log_unless_outage
from mcp_host.plugins import Plugin
from mcp_host.store import AppContents
from mcp_host.wire import AppVersion, app_uri

from .app_checks import AppRefused, csp_problem, too_large

__all__ = ["AppRead", "AppReader"]

logger = logging.getLogger(__name__)

AppRead = AppVersion | AppRefused | None
"""One app as read: its version, why it is refused, or None (it could not be read now)."""


class AppReader:
    """Each plugin's apps as last read, with the start of the child that served them."""

    def __init__(
        self,
        children: ChildSource,
        *,
        read_timeout_s: float,
        max_bytes: int = 4 * 1024 * 1024,
        contents: AppContents | None = None,
    ) -> None:
        """`max_bytes`: the largest app accepted; `contents`: where the versions read are kept
        (None: nowhere)."""
        self._children = children
        self._timeout_s = read_timeout_s
        self._max_bytes = max_bytes
        self._contents = contents
        # plugin id -> URI -> (the serving child's start count, the app as then read)
        self._read: dict[str, dict[str, tuple[int, AppRead]]] = {}

    async def versions(
        self, plugin: Plugin, tools: Sequence[types.Tool], *, fresh: bool, session_id: str | None
    ) -> dict[str, AppRead]:
        """The apps `tools` name, by URI: read now when `fresh` (or not read since the child
        last started), else as last read. Empty, with no read, when no tool names one."""
        uris = sorted({uri for tool in tools if (uri := app_uri(tool)) is not None})
        if not uris:
            return {}
        pid = plugin.manifest.id
        child = self._children.lister(plugin, session_id)
        starts = child.health().starts
        known = self._read.setdefault(pid, {})
        found: dict[str, AppRead] = {}
        new: list[AppVersion] = []
        for uri in uris:
            last = known.get(uri)
            sticky = last is not None and isinstance(last[1], AppRefused) and last[1].sticky
            if last is None or (not sticky and (fresh or last[0] != starts)):
                read, body = await self._read_one(pid, child, uri)
                if isinstance(read, AppVersion) and (last is None or last[1] != read):
                    new.append(read)
                    await self._keep(pid, read, body)
                last = known[uri] = (starts, read)
            found[uri] = last[1]
        if new:  # a version changed: the ones neither pinned nor served now go
            await self._prune(pid, {v.sha256 for v in found.values() if isinstance(v, AppVersion)})
        return found

    async def _read_one(self, pid: str, child: Child, uri: str) -> tuple[AppRead, str]:
        """The app as read, and its body (empty unless it is a version)."""
        request = types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=uri))
        try:
            read = await child.forward(request, types.ReadResourceResult, timeout_s=self._timeout_s)
        except AnswerTooLarge:
            return too_large(uri, None, self._max_bytes), ""  # `bindings` logs the tool's rejection
        except TransportFailure:  # the child answered, with an error: it does not serve this app
            refused = AppRefused(
                f"its app {uri[:200]!r} is not served by {pid}, the plugin of the tool naming it "
                "(an app is read only from that plugin, never from another)"
            )
            return refused, ""
        except Exception as exc:  # fail closed: an unreadable app is served to no visitor
            trace = not is_connection_failure(exc)
            logger.warning("%s: app %r could not be read for the owner's review", pid, uri[:200], exc_info=trace)
            return None, ""
        return self._checked(uri, read), _body(read)

    def _checked(self, uri: str, read: types.ReadResourceResult) -> AppRead:
        """The version `read` is, or why it is refused."""
        version = AppVersion.of(uri, read)
        problem = too_large(uri, version.size, self._max_bytes) if version.size > self._max_bytes else None
        cause = csp_problem(version)
        if problem is None and cause is not None:
            problem = AppRefused(cause)
        return version if problem is None else problem

    async def _keep(self, pid: str, version: AppVersion, body: str) -> None:
        if self._contents is None:
            return
        try:
            await self._contents.keep(pid, version.sha256, version.uri, body)
        except Exception as exc:  # the review shows no diff of it; the pins still cover it
            uri = version.uri[:200]
            log_unless_outage(exc, logger, "%s: app %r could not be kept for the owner's review", pid, uri)

    async def _prune(self, pid: str, live: set[str]) -> None:
        if self._contents is None:
            return
        try:
            await self._contents.prune(pid, live)
        except Exception as exc:  # old versions stay until the next read
            log_unless_outage(exc, logger, "%s: old app versions could not be pruned", pid)

    def forget(self, plugin_id: str) -> None:
        self._read.pop(plugin_id, None)


def _body(read: types.ReadResourceResult) -> str:
    """The contents' texts joined (a blob as its base64 text): UTF-8, what `AppVersion.sha256` hashes."""
    return "".join(c.text if isinstance(c, types.TextResourceContents) else c.blob for c in read.contents)
