"""The doors and what stands in front of them: the visitor, owner and node doors, the MCP
session managers that run their servers, the caps on their protocol sessions, the endpoints
the HTTP routes hand requests to (`Doors`), and the OAuth routes and front desk that let any
MCP client in at the one visitor URL and the owner door.

Above: `wiring` (which builds them in order) and `asgi` (which routes to `Doors`). Below:
`early`, `shared`, `limits`, the parts, and the owner's facade and console (with `wiring`,
the only modules that import them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Router
from starlette.types import ASGIApp

from mcp_host.children import RemoteSignIns
from mcp_host.connectors import RequirementGate
from mcp_host.desk import FrontDeskEndpoint
from mcp_host.edge import FailureThrottle, FastPath, ProtocolSessions, RpcEdge, client_address
from mcp_host.oauth import DoorTokenVerifier, oauth_routes, resource_metadata_url
from mcp_host.owner import Catalogue, OwnerCalls
from mcp_host.plugins import Installer
from mcp_host.principal import Asking
from mcp_host.settings import Settings
from mcp_host.store import AppContents, Database, ProtocolSessionRecords
from mcp_host.visitor import (
    ONE_URL_PATH,
    ChangeFeed,
    Fleet,
    NodeDoor,
    NodeMCPEndpoint,
    OneURLEndpoint,
    SessionOpener,
    SessionsEndpoint,
    ToolSearch,
    TurnsEndpoint,
    VisitorDoor,
    VisitorMCPEndpoint,
)
from mcp_host.wire import MetaCaps
from owner_console import ConsoleSessions, OwnerConsole, cookie_owner
from owner_facade import OWNER_PATH, OwnerDoor, OwnerMCPEndpoint, OwnerServices, PluginParts

from .early import Early
from .limits import protocol_session_limits, public_sessions_rate, throttle_limits, turns_rate, visitor_pace
from .shared import Shared

__all__ = [
    "Doors",
    "doors",
    "front_desk",
    "node_door",
    "owner_door",
    "protocol_sessions",
    "session_manager",
    "session_opener",
    "visitor_door",
]


@dataclass(frozen=True)
class Doors:
    """What the HTTP routes hand requests to."""

    sessions: SessionsEndpoint
    visitor: VisitorMCPEndpoint
    owner: OwnerMCPEndpoint
    turns: TurnsEndpoint
    one_url: OneURLEndpoint
    """`/mcp`: the one visitor URL any MCP client adds (`visitor.one_url`)."""
    desk: FrontDeskEndpoint
    """`/oauth/desk`: where a person lets an OAuth client in (`desk`)."""
    oauth: ASGIApp
    """The authorization server's routes: metadata, `/authorize`, `/token`, `/register`, `/revoke`."""
    node: NodeMCPEndpoint | None = None
    """`/v1/node/mcp`: what the owner lends to nodes (`visitor.node`)."""
    console: OwnerConsole | None = None
    """`/owner/`: the owner's web console, a browser's client of the owner door (`owner_console`)."""


def session_manager(
    server: Server[Any], settings: Settings, rules: TransportSecuritySettings
) -> StreamableHTTPSessionManager:
    return StreamableHTTPSessionManager(
        server,
        security_settings=rules,
        max_request_body_size=settings.http.max_body_bytes,
        max_sessions=settings.principals.max_protocol_sessions,
        session_idle_timeout=settings.protocol_sessions.idle_s,  # the idle time ProtocolSessions counts on
    )


def visitor_door(
    settings: Settings, early: Early, shared: Shared, meta_caps: MetaCaps, search: ToolSearch
) -> VisitorDoor:
    return VisitorDoor(
        early.plugins,
        shared.bindings,
        early.children,
        grants=early.grants,
        quota=shared.quota,
        requirements=RequirementGate(shared.connections, shared.connectors),
        meta_caps=meta_caps,
        call_timeout_s=settings.children.call_timeout_s,
        holds=shared.holds if settings.policy.hold_destructive_tools else None,
        turns=shared.turns,
        metrics=early.metrics,
        rules=shared.rules,
        search=search,
    )


def owner_door(
    settings: Settings,
    early: Early,
    shared: Shared,
    catalogue: Catalogue,
    database: Database,
    feed: ChangeFeed,
    installer: Installer,
    sign_ins: RemoteSignIns | None = None,
) -> OwnerDoor:
    calls = OwnerCalls(
        early.plugins,
        early.children,
        grants=early.grants,
        call_timeout_s=settings.children.call_timeout_s,
        rules=shared.rules,
    )
    return OwnerDoor(
        OwnerServices(
            plugins=early.plugins,
            catalogue=catalogue,
            config=shared.config,
            access=shared.access,
            sessions=shared.sessions,
            connections=shared.connections,
            connectors=shared.connectors,
            calls=calls,
            audit=shared.audit,
            holds=shared.holds,
            owners=shared.owners,
            pins=shared.pins,
            review=shared.review,
            apps=AppContents(database.pool),
            # plugin_add / plugin_remove / plugin_upgrade while the host runs (into <data dir>/plugins)
            admin=PluginParts(installer, settings.data_dir, early.pool, database.pool, feed.announce, settings),
            rules=shared.rules,
            node_grants=shared.node_grants,
            oauth=shared.oauth.grants,
            sign_ins=sign_ins,
        )
    )


def node_door(settings: Settings, early: Early, shared: Shared) -> NodeDoor:
    return NodeDoor(
        early.plugins,
        shared.bindings,
        early.children,
        grants=early.grants,
        node_grants=shared.node_grants,
        call_timeout_s=settings.children.call_timeout_s,
    )


def protocol_sessions(
    settings: Settings,
    manager: StreamableHTTPSessionManager,
    records: ProtocolSessionRecords,
    fleet: Fleet | None = None,
    fast: FastPath | None = None,
    asking: Asking | None = None,
    on_ended: Callable[[str, bytes], None] | None = None,
) -> ProtocolSessions:
    """The caps on a door's protocol sessions, in front of its JSON-RPC edge and SDK manager
    (for the visitor door, with the forward of retries parked on other replicas between, and
    each session's principal from `asking`); a session born on another replica is adopted
    through `records`, and one idle a while rests (`on_ended`: told as each ends in the SDK)."""
    cap = settings.http.max_body_bytes
    app = manager.handle_request if fleet is None else fleet.forward(manager.handle_request, max_body_bytes=cap)
    edge = RpcEdge(app, max_body_bytes=cap, fast=fast)
    return ProtocolSessions(edge, protocol_session_limits(settings), records, asking, on_ended)


def session_opener(settings: Settings, shared: Shared) -> SessionOpener:
    """How visitor sessions open, one for `POST /v1/sessions` and the front desk: one throttle
    of wrong codes and keys, one pace of public sessions."""
    throttle = FailureThrottle(throttle_limits(settings))
    return SessionOpener(shared.access, throttle, shared.owner_id, public_sessions_rate(settings))


def front_desk(
    settings: Settings,
    early: Early,
    shared: Shared,
    opener: SessionOpener,
    rules: TransportSecuritySettings,
    console: ConsoleSessions,
    sign_ins: FailureThrottle,
) -> FrontDeskEndpoint:
    """The front desk; `console`: the console's sessions (a signed-in owner needs no token
    there); `sign_ins`: the console's throttle of wrong owner tokens, shared."""

    async def console_owner(request: Request) -> str | None:
        return await cookie_owner(console, request)

    return FrontDeskEndpoint(
        shared.oauth,
        opener,
        shared.access,
        shared.owners,
        early.plugins,
        rules,
        base_url=settings.base_url,
        owner_door=f"{settings.base_url}{OWNER_PATH}",
        sign_ins=sign_ins,
        console_owner=console_owner,
    )


def doors(
    settings: Settings,
    shared: Shared,
    door: VisitorDoor,
    protocol: Mapping[str, ProtocolSessions],
    asking: Asking,
    console: OwnerConsole,
    opener: SessionOpener,
    desk: FrontDeskEndpoint,
) -> Doors:
    """The endpoints in front of the doors: `protocol` holds each door's protocol sessions
    (`visitor`, `owner`, `node`)."""
    visitor = VisitorMCPEndpoint(shared.sessions, protocol["visitor"], asking, visitor_pace(settings))
    one_url, owner_url = f"{settings.base_url}{ONE_URL_PATH}", f"{settings.base_url}{OWNER_PATH}"
    routes = oauth_routes(shared.oauth, names={one_url: "Visitors", owner_url: "The owner"}, address_of=client_address)
    one_url_endpoint = OneURLEndpoint(
        visitor,
        shared.sessions,
        shared.access,
        shared.owner_id,
        DoorTokenVerifier(shared.oauth, one_url),
        resource_metadata_url(one_url),
        session_gone=shared.oauth.revoke_subject,
    )
    return Doors(
        sessions=SessionsEndpoint(opener, settings.base_url, settings.http.max_rest_body_bytes),
        visitor=visitor,
        owner=OwnerMCPEndpoint(
            shared.owners,
            protocol["owner"],
            DoorTokenVerifier(shared.oauth, owner_url),
            resource_metadata_url(owner_url),
        ),
        turns=TurnsEndpoint(
            shared.sessions,
            shared.turns,
            door,
            settings.http.max_rest_body_bytes,
            turns_rate(settings),
            by_credential=one_url_endpoint.session_of,  # `/mcp/turns`: the credential names the session
        ),
        node=NodeMCPEndpoint(shared.node_grants, protocol["node"]),
        console=console,
        one_url=one_url_endpoint,
        desk=desk,
        oauth=Router(routes=list(routes)),
    )
