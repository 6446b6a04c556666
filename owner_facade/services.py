"""What the owner door works with: the host's parts, handed over by the composition root.

Above: `tools` and `door`. Below: `mcp_host`'s public surface only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mcp_host.access import Access, OwnerStore, SessionStore
from mcp_host.connectors import Connections, ConnectorGateway
from mcp_host.owner import Catalogue, OwnerCalls
from mcp_host.plugins import Plugin, PluginKind, Registry
from mcp_host.policy import AuditLog, HoldBook, PinBook
from mcp_host.store import ConfigBackend

__all__ = ["OwnerServices", "ReviewProgress"]


class ReviewProgress(Protocol):
    """The review at start that lists every capability's tools for the owner
    (`mcp_host.visitor.OwnerReview`)."""

    async def settled(self, *, within_s: float) -> bool: ...


@dataclass(frozen=True)
class OwnerServices:
    plugins: Registry
    catalogue: Catalogue
    config: ConfigBackend
    access: Access
    sessions: SessionStore
    connections: Connections
    connectors: ConnectorGateway
    calls: OwnerCalls
    audit: AuditLog
    holds: HoldBook
    owners: OwnerStore
    pins: PinBook | None = None
    """None when tool pinning is off (`MCP_HOST_PIN_TOOLS=false`)."""
    review: ReviewProgress | None = None
    """The review at start (None with pinning off): `tools_pending` waits for it, bounded."""

    def plugin(self, plugin_id: str, kind: PluginKind) -> Plugin | None:
        return self.plugins.get(plugin_id, kind)
