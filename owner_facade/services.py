"""What the owner door works with: the host's parts, handed over by the composition root.

Above: `door`, and the tool table's slices (`*_tools`, `approvals`). Below: `mcp_host`'s public surface only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mcp_host.access import Access, OwnerStore, SessionStore
from mcp_host.children import ChildPool, RemoteSignIns
from mcp_host.connectors import Connections, ConnectorGateway
from mcp_host.oauth import OAuthGrants
from mcp_host.owner import Catalogue, OwnerCalls
from mcp_host.plugins import Installer, Plugin, PluginKind, Registry
from mcp_host.policy import AuditLog, HoldBook, NodeGrants, PinBook, RuleGate
from mcp_host.settings import Settings
from mcp_host.store import AppContents, ConfigBackend, PgPool

__all__ = ["PROGRESS", "OwnerServices", "PluginParts", "Progress", "ReviewProgress"]

Progress = Callable[[float, float | None, str | None], Awaitable[None]]
PROGRESS: ContextVar[Progress | None] = ContextVar("owner_facade_progress", default=None)
"""The current owner call's progress reporter (set by the endpoint; a no-op unless the caller
sent a progressToken): how a long tool such as `plugin_add` tells the owner it still runs."""


class ReviewProgress(Protocol):
    """The review at start that lists every capability's tools for the owner
    (`mcp_host.visitor.OwnerReview`); `all` lists some now (a plugin installed while the host runs)."""

    async def settled(self, *, within_s: float) -> bool: ...

    async def all(self, capabilities: Sequence[Plugin]) -> None: ...


@dataclass(frozen=True)
class PluginParts:
    """What installing and removing plugins while the host runs needs (`plugin_tools`): the
    installer (`mcp_host.plugins.Installer`: the real one, or a test's), where plugins go, the
    children to stop, the database (to drop a purged plugin's store and config), and who tells
    the visitor sessions that see a plugin that it came or goes (`ChangeFeed.announce`)."""

    installer: Installer
    data_dir: Path
    children: ChildPool
    database: PgPool
    announce: Callable[[str], None] = lambda plugin_id: None
    settings: Settings | None = None
    """How children start (`plugin_upgrade` tries the new version first); None: no upgrades."""


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
    apps: AppContents | None = None
    """The apps' contents as read (`app_review.diff`, `app_contents`); None: none are kept."""
    admin: PluginParts | None = None
    """None: this host does not install or remove plugins from the owner door."""
    rules: RuleGate | None = None
    """The owner's rules (`rules_get`, `rules_set`); None: this host has none."""
    node_grants: NodeGrants | None = None
    """What the owner lends to nodes (`grant_create`, `grants_list`, `grant_revoke`); None: nothing."""
    oauth: OAuthGrants | None = None
    """The clients let in by OAuth (`oauth_grants_list`, `oauth_grant_revoke`; `session_end` ends a
    session's grants); None: this host lets none in."""
    sign_ins: RemoteSignIns | None = None
    """The host's sign-ins to remote plugins' servers (`remote_connect`, `remote_status`,
    `remote_disconnect`); None: this host signs in to none."""

    def plugin(self, plugin_id: str, kind: PluginKind) -> Plugin | None:
        return self.plugins.get(plugin_id, kind)
