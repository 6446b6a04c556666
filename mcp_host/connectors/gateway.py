"""The connector gateway: calling an owner's connected connector, for a capability or the owner.

Above: the host op `connector.invoke` (a capability's call), the requirement gate (which
asks `can_perform`), later the owner door's `connector_invoke`. Below: `connections` (which
connector, with which settings) and `children` (the connector's sandboxed child).

A verb is a tool of the connector's MCP server. The forwarded call carries the owner's
settings — secrets opened — in `_meta["mcp-host/connection"]` and nothing of the session
that caused it: settings go to the connector child and nowhere else. The connector's result
comes back as it gave it (its own `{code, message}` refusals included).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import mcp.types as types

from mcp_host.children import Child
from mcp_host.errors import HostError, UnknownTool
from mcp_host.plugins import Plugin
from mcp_host_kit.contract import CONNECTION_KEY, SERVER_INFO_KEY

from .connections import Connections

__all__ = ["CONNECTION_KEY", "ConnectorGateway"]

logger = logging.getLogger(__name__)

_MAX_CACHED_ANSWERS = 10_000


class ConnectorGateway:
    def __init__(
        self,
        connections: Connections,
        child_of: Callable[[Plugin], Child],
        *,
        call_timeout_s: float,
        can_perform_ttl_s: float,
    ) -> None:
        self._connections = connections
        self._child_of = child_of
        self._call_timeout_s = call_timeout_s
        self._ttl_s = can_perform_ttl_s
        self._answers: dict[tuple[str, str, str], tuple[float, bool]] = {}
        connections.on_change.append(self.forget)  # an owner's change drops their cached answers

    async def invoke(
        self, owner_id: str, category: str, verb: str, args: Mapping[str, Any] | None
    ) -> types.CallToolResult:
        """Call `verb` of the owner's `category` connector with `args`.

        Raises Unconfigured (nothing connected), UnknownTool (the connector has no such verb),
        and the forwarding errors of `Child.call_tool`.
        """
        plugin, settings = await self._connections.settings_for(owner_id, category)
        if verb not in (plugin.manifest.verbs or ()):
            raise UnknownTool(f"the {category!r} connector has no verb {verb[:64]!r}")
        meta = {CONNECTION_KEY: {"owner_id": owner_id, "category": category, "settings": settings}}
        result = await self._child_of(plugin).call_tool(verb, dict(args or {}), meta, timeout_s=self._call_timeout_s)
        if result.meta:
            result.meta.pop(SERVER_INFO_KEY, None)
        return result

    async def can_perform(self, owner_id: str, category: str, action: str) -> bool:
        """Whether the owner's connection can perform `action` (cached); False when unsure."""
        key = (owner_id, category, action)
        now = time.monotonic()
        cached = self._answers.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            result = await self.invoke(owner_id, category, "can_perform", {"action": action})
            answer = not result.is_error and (result.structured_content or {}).get("can") is True
        except HostError as exc:
            logger.warning("%s: can_perform %r for owner %s failed: %s", category, action, owner_id, exc.message)
            return False  # not cached: the next list asks again
        if not answer:
            logger.info(
                "%s: owner %s's connection cannot %s; tools that need it are hidden", category, owner_id, action
            )
        if self._ttl_s > 0:
            if len(self._answers) >= _MAX_CACHED_ANSWERS:
                self._answers.clear()
            self._answers[key] = (now + self._ttl_s, answer)
        return answer

    def forget(self, owner_id: str) -> None:
        """Drop cached answers for `owner_id` (after connecting or disconnecting)."""
        for key in [k for k in self._answers if k[0] == owner_id]:
            del self._answers[key]
