"""A node's view of its parent: the capabilities the parent's owner granted to this host's node
grant token (`MCP_HOST_PARENT_TOKEN`), each as a remote capability of this host.

Above: the composition root (at start, when `parent_url` is set). Below: the MCP SDK's
streamable HTTP client (one listing of `/v1/node/mcp` to learn what is granted) and
`plugins.Manifest` (each granted capability becomes a manifest with `transport.kind: http` to
`/v1/node/mcp/{capability}` with the token as bearer, run by `RemoteChild` like any remote
plugin: pinned on this host, its tools pending until this host's owner approves them,
`acl: role_granted` so this host's own roles decide which visitors see it).

The token is never written anywhere: the manifests live in memory only, and the parent hands
the node nothing but tool definitions and results. Every call is decided at the parent.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_host.errors import Denied, UnknownTool
from mcp_host.plugins import Manifest, Plugin, Registry
from mcp_host.wire import ERROR_KEY, without_host_keys
from mcp_host_kit.contract import CAPABILITY_KEY

from .mcp_session import Child

__all__ = ["PARENT_KIND", "PARENT_REFUSED", "ParentLink", "granted_by_parent", "parent_answer", "parent_plugins"]

logger = logging.getLogger(__name__)

NODE_PATH = "/v1/node/mcp"  # the parent's node endpoint (`visitor.node`)
PARENT_KIND = "remote"
"""The kind the catalogue shows for a capability lent by the parent (its manifest's kind stays
`capability`: it is looked up, granted and called as one)."""

PARENT_REFUSED = "the parent host refused this call"
"""All a node's caller learns of a refusal at the parent (its audit says why)."""


def parent_answer(result: types.CallToolResult) -> types.CallToolResult:
    """The parent's answer to a node's call, as this host's: the parent host's own `denied` (no
    grant, a spent budget, a rule; `_meta["mcp-host/error"]`, which a remote's result otherwise
    loses on its way to a visitor) raises this host's `Denied`, so the node's caller gets the
    host's machine-readable refusal. Anything else is the parent's result."""
    error = (result.meta or {}).get(ERROR_KEY)
    if result.is_error and isinstance(error, dict) and error.get("code") == Denied.code:
        raise Denied(PARENT_REFUSED)
    return result


async def granted_by_parent(url: str, token: str, *, timeout_s: float) -> dict[str, list[types.Tool]]:
    """The parent's granted capabilities and their tools, as the parent lists them now."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout_s), trust_env=False) as http:
        transport = streamable_http_client(url.rstrip("/") + NODE_PATH, http_client=http)
        async with Client(transport, cache=None) as client:
            tools = (await client.list_tools()).tools
    by_capability: dict[str, list[types.Tool]] = defaultdict(list)
    for tool in tools:
        capability = (tool.meta or {}).get(CAPABILITY_KEY)
        if isinstance(capability, str):
            by_capability[capability].append(tool)
    return dict(by_capability)


def parent_plugins(url: str, token: str, granted: dict[str, list[types.Tool]], folder: Path) -> list[Plugin]:
    """One remote capability per granted capability (a manifest that does not validate is
    skipped, logged)."""
    base = url.rstrip("/")
    host = urlsplit(base).hostname or ""
    plugins = []
    for capability, tools in sorted(granted.items()):
        manifest: dict[str, Any] = {
            "id": capability,
            "kind": "capability",
            "description": f"A {PARENT_KIND} capability lent by the parent host {host}; every call is decided there.",
            "acl": "role_granted",
            "instances": "shared",
            "visitor_tools": sorted(t.name for t in tools),
            "transport": {
                "kind": "http",
                "url": f"{base}{NODE_PATH}/{capability}",
                "headers": {"Authorization": f"Bearer {token}"},
                "allowed_hosts": [host],
                "allow_private": [host],  # the operator named the parent (--parent): a private one too
            },
        }
        try:
            plugins.append(Plugin(Manifest.model_validate(manifest), folder, builtin=False))
        except ValueError:
            logger.warning("the parent's capability %r cannot be a capability here; skipped", capability[:80])
    return plugins


class ParentLink:
    """`parent.invoke`: a node's plugin calling a capability the parent lent this node, through
    that capability's child (owner context here; the parent decides and audits the call)."""

    def __init__(
        self, plugins: Registry, children: Callable[[Plugin], Child], lent: Sequence[str], *, timeout_s: float
    ) -> None:
        self._plugins = plugins
        self._children = children
        self._lent = frozenset(lent)
        self._timeout_s = timeout_s

    async def invoke(self, capability: str, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        plugin = self._plugins.get(capability, "capability") if capability in self._lent else None
        if plugin is None:
            raise UnknownTool(f"the parent lends no capability named {capability[:80]!r}")
        result = await self._children(plugin).call_tool(tool, arguments, {}, timeout_s=self._timeout_s)
        return without_host_keys(result)  # the parent's words, not this host's
