"""The composition root: builds the host's parts and hands them to each other.

Above: `lifespan` (which opens the parts' lifetimes in order and calls these builders between
them) and `asgi` (which routes requests to the doors built here). Below: everything else.
Nothing here decides policy. Every part gets what it needs through its constructor, and each
value is built once. Two edges run the other way, from a part made early to one made later,
and neither is an assignment: a child's "list changed" goes through a stream that `wired`
relays to the visitor door once it exists, and the connector gateway registers itself with the
connections it reads. The back-channel comes in two parts for the same reason: its sockets
(`OpSockets`) are made early, as a sandbox binds its plugin's socket when the child starts;
the part that serves ops (`BackChannel`) is built later with the sockets and the op services.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from mcp_host.access import (
    OWNER_TOKEN_FILE,
    Access,
    CachedSessionStore,
    OwnerStore,
    PostgresSessionStore,
    SessionStore,
    ensure_owner_token,
)
from mcp_host.backchannel import BackChannel, BackChannelLimits, GrantBook, OpServices, OpSockets, named_ops
from mcp_host.children import (
    ChildFactory,
    ChildLimits,
    ChildPool,
    InstanceShares,
    ListChange,
    ParentLink,
    PromptsChanged,
    ResourcesChanged,
    ToolsChanged,
    granted_by_parent,
    parent_plugins,
)
from mcp_host.connectors import Connections, ConnectorGateway, RequirementGate
from mcp_host.edge import (
    FailureThrottle,
    FastPath,
    PrincipalPace,
    PrincipalRate,
    ProtocolSessionLimits,
    ProtocolSessions,
    RpcEdge,
    ThrottleLimits,
)
from mcp_host.observe import HostMetrics
from mcp_host.owner import Catalogue, OwnerCalls
from mcp_host.plugins import Installer, LoadReport, Plugin, Registry, installed_root, load_plugins
from mcp_host.policy import (
    AuditLog,
    HoldCaps,
    Holds,
    NodeGrants,
    PinBook,
    Pins,
    PostgresTurns,
    QuotaGate,
    RuleGate,
    TurnCaps,
)
from mcp_host.principal import Asking
from mcp_host.sandbox import SandboxLedger, require_bwrap
from mcp_host.settings import Settings
from mcp_host.store import (
    ConfigStore,
    Database,
    NodeGrantStore,
    OwnerEnv,
    PluginStores,
    ProtocolSessionRecords,
    RuleStore,
    SecretBox,
    StoreLimits,
    load_host_key,
)
from mcp_host.visitor import (
    NODE_PATH,
    Bindings,
    ChangeFeed,
    Fleet,
    InputRounds,
    ModernExchange,
    NodeDoor,
    NodeMCPEndpoint,
    OwnerReview,
    SessionsEndpoint,
    TaskBook,
    ToolSearch,
    TurnsEndpoint,
    VisitorDoor,
    VisitorMCPEndpoint,
    build_node_server,
    build_visitor_server,
    security_settings,
)
from mcp_host.wire import MetaCaps
from owner_console import SESSION_TTL, OwnerConsole, PostgresConsoleSessions
from owner_facade import OWNER_PATH, OwnerDoor, OwnerMCPEndpoint, OwnerServices, PluginParts, build_owner_server

from .host_file import listen_url
from .host_metrics import watch

__all__ = [
    "NODE_PATH",
    "OWNER_PATH",
    "Doors",
    "Early",
    "Host",
    "child_limits",
    "early_parts",
    "load",
    "security",
    "wired",
]

logger = logging.getLogger("mcp_host")


@dataclass(frozen=True)
class Doors:
    """What the HTTP routes hand requests to."""

    sessions: SessionsEndpoint
    visitor: VisitorMCPEndpoint
    owner: OwnerMCPEndpoint
    turns: TurnsEndpoint
    node: NodeMCPEndpoint | None = None
    """`/v1/node/mcp`: what the owner lends to nodes (`visitor.node`)."""
    console: OwnerConsole | None = None
    """`/owner/`: the owner's web console, a browser's client of the owner door (`owner_console`)."""


@dataclass(frozen=True)
class Host:
    """The running host: its doors, and the parts the health checks, the banner and tests read."""

    settings: Settings
    report: LoadReport
    doors: Doors
    database: Database
    pool: ChildPool
    spawned: Sequence[int]
    """The pids of every child process started, in order (tests count and kill them)."""
    catalogue: Catalogue
    owners: OwnerStore
    owner_id: str
    owner_token_file: Path | None
    owner_token_new: bool
    """The owner token was made by this start (so `serve` shows it once, on the terminal)."""
    sessions: SessionStore
    access: Access
    config: ConfigStore
    stores: PluginStores
    grants: GrantBook
    sockets: OpSockets
    connections: Connections
    audit: AuditLog
    pins: PinBook | None
    metrics: HostMetrics
    """This host's Prometheus series (`GET /metrics`, `host_metrics`)."""
    rounds: InputRounds
    """The 2026-07-28 calls parked between input rounds (a drain waits for them)."""


@dataclass(frozen=True)
class Early:
    """The parts that live before the database opens (so children can boot while it starts)."""

    plugins: Registry
    prestart: Sequence[Plugin]
    """The capabilities whose children start with the host (`_prestarted`)."""
    pool: ChildPool
    sockets: OpSockets
    children: ChildFactory
    grants: GrantBook
    spawned: Sequence[int]
    list_changes_sent: MemoryObjectSendStream[ListChange]
    list_changes: MemoryObjectReceiveStream[ListChange]
    """Each "list changed" (or resource updated) a child sent; `wired` relays them. The
    lifespan closes both ends."""
    metrics: HostMetrics
    """This host's series, in its own registry (tests run several hosts in one process)."""


def child_limits(s: Settings) -> ChildLimits:
    """The limits every child of a host with settings `s` runs under (also the bench's)."""
    return ChildLimits(
        start_timeout_s=s.children.start_timeout_s,
        idle_timeout_s=s.children.idle_timeout_s,
        max_line_bytes=s.children.max_line_bytes,
        stderr_lines_per_s=s.child_logs.stderr_lines_per_s,
        stderr_line_bytes=s.child_logs.stderr_line_bytes,
        backoff_max_s=s.children.restart_backoff_max_s,
        crash_loop_threshold=s.children.crash_loop_threshold,
        timeouts_before_recycle=s.children.timeouts_before_recycle,
        input_timeout_s=s.children.input_timeout_s,
        input_budget=s.children.input_budget,
        backoff_base_s=s.children.restart_backoff_base_s,
        stable_after_s=s.children.stable_after_s,
        log_keep_lines=s.child_logs.keep_lines,
        errors_logged_per_s=s.child_logs.errors_logged_per_s,
        errors_logged_burst=s.child_logs.errors_logged_burst,
    )


def security(settings: Settings) -> TransportSecuritySettings:
    """The Host and Origin rules of every door: the host's own names, the configured ones and
    the public URL's."""
    hosts = list(settings.allowed_hosts)
    for url in (settings.public_url, settings.replica_url):  # other replicas' forwards use the latter
        netloc = urlsplit(url).netloc if url else ""
        if netloc:
            hosts.append(netloc)
    return security_settings(settings.host, settings.port, hosts)


def load(settings: Settings) -> LoadReport:
    """The plugins; raises SandboxUnavailable when the sandbox is on and bubblewrap missing."""
    installed = installed_root(settings.data_dir)  # `mcp-host plugin add` puts plugins there
    report = load_plugins(settings.builtin_dir, [*settings.plugins, *([installed] if installed else [])])
    for error in report.errors:
        logger.error("plugin skipped: %s", error)
    for plugin in report.plugins:  # loaded, read fail-closed; `mcp-host check` calls these errors
        for mistake in plugin.mistakes:
            logger.warning("plugin %s: %s", plugin.manifest.id, mistake)
    if settings.sandbox.mode == "on":
        require_bwrap()
    else:
        logger.warning("MCP_HOST_SANDBOX=off: children run UNSANDBOXED. For development only.")
    return report


def _prestarted(settings: Settings, plugins: Registry) -> list[Plugin]:
    """The capabilities whose children start with the host: those every session sees."""
    if not settings.children.prestart:
        return []
    return [p for p in plugins.capabilities if p.manifest.acl == "always"]


# A child that sends more "list changed" notifications than this before the door relays them
# loses the surplus (each only says "ask again"; the next one it sends is delivered).
_LIST_CHANGES_BUFFERED = 1024


def early_parts(settings: Settings, report: LoadReport, ledger: SandboxLedger) -> Early:
    """The child pool, the back-channel's sockets and the child factory (not yet entered)."""
    spawned: list[int] = []

    def on_spawn(pid: int, plugin_id: str) -> None:
        spawned.append(pid)
        ledger.record(pid, plugin_id)

    changes_in, changes_out = anyio.create_memory_object_stream[ListChange](_LIST_CHANGES_BUFFERED)
    metrics = HostMetrics()

    def list_changed(change: ListChange) -> None:
        try:
            changes_in.send_nowait(change)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            logger.debug("%s: a list change (%s) was not relayed", change.plugin_id, change.what)

    pool = ChildPool(
        child_limits(settings),
        max_children=settings.children.max_running,
        session_instances=InstanceShares(
            host=settings.principals.max_session_instances,
            per_principal=settings.principals.session_instances,
            starts_per_minute=settings.principals.instance_starts_per_minute,
        ),
        session_idle_timeout_s=settings.children.session_idle_timeout_s,
        on_spawn=on_spawn,
        on_exit=ledger.forget,
        on_list_changed=list_changed,
        metrics=metrics,
    )
    grants = GrantBook(budget=settings.backchannel.grant_op_budget)
    sockets = OpSockets(report.plugins, runtime_dir=settings.backchannel.runtime_dir)
    plugins = Registry(report.plugins)
    return Early(
        plugins,
        _prestarted(settings, plugins),
        pool,
        sockets,
        ChildFactory(pool, settings, sockets),
        grants,
        spawned,
        changes_in,
        changes_out,
        metrics,
    )


def _throttle_limits(s: Settings) -> ThrottleLimits:
    return ThrottleLimits(
        free_failures=s.access.failures_free,
        window_s=s.access.failure_window_s,
        base_delay_s=s.access.failure_delay_s,
        max_delay_s=s.access.failure_delay_max_s,
        max_clients=s.access.failure_clients_max,
    )


def _channel_limits(s: Settings) -> BackChannelLimits:
    return BackChannelLimits(
        s.backchannel.max_message_bytes,
        s.backchannel.max_connections,
        denials_logged_per_s=s.backchannel.denials_logged_per_s,
        denials_logged_burst=s.backchannel.denials_logged_burst,
    )


def _store_limits(s: Settings) -> StoreLimits:
    return StoreLimits(
        max_doc_bytes=s.store.max_doc_bytes,
        max_doc_depth=s.store.max_doc_depth,
        max_query_limit=s.store.max_query_limit,
    )


async def _ensure_stores(stores: PluginStores, plugins: Registry) -> None:
    """Create the store of every plugin that uses one (named a store op, or counts a quota)."""
    for plugin in plugins:
        uses_store = any(op.startswith("store.") for op in named_ops(plugin))
        if uses_store or plugin.manifest.quota_gate() is not None:
            await stores.ensure(plugin.manifest.kind, plugin.manifest.id)


def _secret(settings: Settings) -> str | None:
    return settings.connectors.secret_key.get_secret_value() if settings.connectors.secret_key is not None else None


def _session_manager(
    server: Server[Any], settings: Settings, rules: TransportSecuritySettings
) -> StreamableHTTPSessionManager:
    return StreamableHTTPSessionManager(
        server,
        security_settings=rules,
        max_request_body_size=settings.http.max_body_bytes,
        max_sessions=settings.principals.max_protocol_sessions,
        session_idle_timeout=settings.protocol_sessions.idle_s,  # the idle time ProtocolSessions counts on
    )


async def _relay_list_changes(
    changes: MemoryObjectReceiveStream[ListChange],
    door: VisitorDoor,
    feed: ChangeFeed,
    review: OwnerReview | None,
) -> None:
    """Each child's "list changed", to the visitor door's caches and to the listening sessions;
    a changed tool list is also listed again for the owner's review (pinning on). A session's
    own instance's change touches neither: its lists are not kept, and the owner reviews the
    owner-context instance's list (the session's next list vets its own)."""
    async for change in changes:
        if change.session_id is None and isinstance(change.what, (PromptsChanged, ResourcesChanged)):
            door.listings.forget(change.plugin_id)
        elif change.session_id is None and isinstance(change.what, ToolsChanged) and review is not None:
            review.changed(change.plugin_id)
        feed.publish(change)


async def _first_lists(
    bindings: Bindings, review: OwnerReview | None, capabilities: Sequence[Plugin], prestart: Sequence[Plugin]
) -> None:
    """Once the pins are loaded: every capability's tools listed for the owner's review (so
    `tools_pending` shows them before any visitor lists them, whatever their `acl`), then the
    prestarted children's lists vetted as the toolset every session sees."""
    if review is not None:
        await review.all(capabilities)
    if prestart:
        await bindings.assemble(prestart, fresh=False)


@dataclass(frozen=True)
class _Shared:
    """The parts both doors share, built once the database is open."""

    owners: OwnerStore
    owner_id: str
    owner_token_file: Path | None
    owner_token_new: bool
    pins: Pins | None
    bindings: Bindings
    review: OwnerReview | None
    sessions: CachedSessionStore
    stores: PluginStores
    config: ConfigStore
    access: Access
    quota: QuotaGate
    connections: Connections
    connectors: ConnectorGateway
    turns: PostgresTurns
    holds: Holds
    audit: AuditLog
    rules: RuleGate
    node_grants: NodeGrants


async def _shared(
    settings: Settings,
    report: LoadReport,
    early: Early,
    database: Database,
    background: TaskGroup,
    lent: Sequence[str] = (),
) -> _Shared:
    """The owner, pins, sessions, stores, config, access, quota, connectors and the rest, each
    built once; once the pins are loaded, every capability's tools are listed for the owner's
    review (pinning on) and the prestarted children's lists vetted, in the background. `lent`:
    the parent's capabilities (`_lent_by_parent`), linked to the parent before any is listed."""
    rule_store = RuleStore(database.pool)
    owners = OwnerStore(database.pool, on_profile_set=rule_store.forget)  # the rules' timezone
    owner = await owners.ensure_single_owner()
    audit = AuditLog(database.pool)
    # Before the review below lists any child: a child is made once, and one of a lent
    # capability made without its link to the parent would pass the parent's bare refusal to
    # visitors (defect 8) and leave no `parent_call` rows.
    _audit_parent_calls(early.children, audit, owner.id, lent)
    # Tool pinning: a child's tool whose definition the owner has not approved stays hidden.
    pins = Pins(database.pool) if settings.policy.pin_tools else None
    if pins is not None:
        await pins.load()
    bindings = Bindings(early.children, list_timeout_s=settings.children.list_timeout_s, pins=pins)
    review = OwnerReview(bindings, early.plugins, background) if pins is not None else None
    if review is not None or early.prestart:  # prestarted children booted while the database started
        background.start_soon(_first_lists, bindings, review, early.plugins.capabilities, early.prestart)
    first_token = not (settings.data_dir / OWNER_TOKEN_FILE).exists()
    token_file = await ensure_owner_token(owners, owner, settings.data_dir)
    sessions = CachedSessionStore(
        # An ended session's per-session child instances stop at once (on this replica).
        PostgresSessionStore(
            database.pool, on_ended=early.pool.end_session, public_idle_s=settings.retention.public_session_idle_s
        ),
        ttl_s=settings.access.auth_cache_ttl_s,
        outage_grace_s=settings.access.auth_outage_grace_s,
    )
    background.start_soon(sessions.expire)  # an abandoned session's entry goes once its grace is over
    stores = PluginStores(database.pool, _store_limits(settings))
    await _ensure_stores(stores, early.plugins)
    box = SecretBox(load_host_key(settings.data_dir, _secret(settings)))
    # A write to a setting a child's environment is made from restarts the plugin's children.
    config = ConfigStore(database.pool, box=box, on_env_changed=early.pool.stop_plugin)
    early.children.use_env(OwnerEnv(config, owner.id))
    # Revoking a code or key here drops its sessions' cached authentications at once.
    access = Access(database.pool, config, early.plugins, sessions, on_revoked=sessions.forget_subject)
    await access.ensure_defaults(owner.id)
    connections = Connections(
        database.pool,
        box,
        {p.manifest.id: p for p in early.plugins.connectors},
        ttl_s=settings.connectors.connections_ttl_s,
    )
    holds = Holds(
        database.pool,
        ttl_s=settings.policy.hold_ttl_s,
        caps=HoldCaps(per_session=settings.principals.session_holds, per_principal=settings.principals.principal_holds),
        principal_of=lambda session_id: str(early.pool.asking.of(session_id)),  # who asks for it now
    )
    rules = RuleGate(rule_store, holds, audit, hold_destructive=settings.policy.hold_destructive_tools)
    return _Shared(
        owners=owners,
        owner_id=owner.id,
        owner_token_file=token_file,
        owner_token_new=first_token and token_file is not None,
        pins=pins,
        bindings=bindings,
        review=review,
        sessions=sessions,
        stores=stores,
        config=config,
        access=access,
        quota=QuotaGate(stores, config, limit_ttl_s=settings.policy.quota_limit_ttl_s),
        connections=connections,
        connectors=ConnectorGateway(
            connections,
            early.children,
            call_timeout_s=settings.children.call_timeout_s,
            can_perform_ttl_s=settings.connectors.can_perform_ttl_s,
        ),
        turns=PostgresTurns(database.pool, caps=_turn_caps(settings)),
        holds=holds,
        audit=audit,
        # The owner's rules: every visitor, owner-context and node call, before its child.
        rules=rules,
        node_grants=NodeGrants(NodeGrantStore(database.pool), rules, audit),
    )


def _turn_caps(settings: Settings) -> TurnCaps:
    p = settings.principals
    return TurnCaps(
        turn_bytes=p.turn_max_bytes, turns=p.session_turns, session_bytes=p.session_turn_bytes, receipts=p.turn_receipts
    )


async def _lent_by_parent(settings: Settings, plugins: Registry) -> list[str]:
    """A node (`serve --parent URL`): the parent's granted capabilities join this host's as
    remote capabilities, pending this owner's review like any plugin. A parent that cannot be
    reached leaves none (logged); a capability id taken here is skipped."""
    if settings.parent_url is None or settings.parent_token is None:
        return []
    token = settings.parent_token.get_secret_value()
    try:
        with anyio.fail_after(settings.children.start_timeout_s):
            granted = await granted_by_parent(settings.parent_url, token, timeout_s=settings.children.call_timeout_s)
    except Exception:
        logger.warning(
            "the parent host at %s could not be reached; none of its capabilities are here", settings.parent_url
        )
        return []
    added = []
    for plugin in parent_plugins(settings.parent_url, token, granted, settings.data_dir / "parent"):
        try:
            plugins.add(plugin)
            added.append(plugin.manifest.id)
        except ValueError:
            logger.warning("the parent's capability %s has an id taken here; skipped", plugin.manifest.id)
    logger.info("parent %s lends %d capabilities", settings.parent_url, len(granted))
    return added


def _audit_parent_calls(children: ChildFactory, audit: AuditLog, owner_id: str, lent: Sequence[str]) -> None:
    """Each call to the parent's capabilities leaves a row here (`parent_call`) with the request
    id the parent's audit names it by."""
    for capability in lent:

        async def told(tool: str, request_id: str, capability: str = capability) -> None:
            row = {"capability": capability, "tool": tool, "request_id": request_id}
            try:
                await audit.record(owner_id, "parent_call", row, "sent")
            except Exception:  # the call goes on; the parent decides and audits it either way
                logger.warning("the audit row of a call to the parent could not be written", exc_info=True)

        children.tell_calls(capability, told)


def _back_channel(settings: Settings, early: Early, shared: _Shared, lent: Sequence[str] = ()) -> BackChannel:
    # The sockets were made before the database (a sandbox binds its socket when it starts);
    # a connection made since waits in the backlog until the channel runs.
    services = OpServices(
        stores=shared.stores,
        config=shared.config,
        owners=shared.owners,
        quota=shared.quota,
        connectors=shared.connectors,
        turns=shared.turns,
        input_timeout_s=settings.children.input_timeout_s,
        input_budget=settings.children.input_budget,
        # A node's plugins reach its parent's lent capabilities (`parent.invoke`).
        parent=ParentLink(early.plugins, early.children, lent, timeout_s=settings.children.call_timeout_s)
        if lent
        else None,
    )
    return BackChannel(early.sockets, early.grants, services, _channel_limits(settings), early.metrics)


def _visitor_door(
    settings: Settings, early: Early, shared: _Shared, meta_caps: MetaCaps, search: ToolSearch
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


def _owner_door(
    settings: Settings,
    early: Early,
    shared: _Shared,
    catalogue: Catalogue,
    database: Database,
    feed: ChangeFeed,
    installer: Installer,
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
            # plugin_add / plugin_remove / plugin_upgrade while the host runs (into <data dir>/plugins)
            admin=PluginParts(installer, settings.data_dir, early.pool, database.pool, feed.announce, settings),
            rules=shared.rules,
            node_grants=shared.node_grants,
        )
    )


def _protocol_sessions(
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
    limits = ProtocolSessionLimits(
        per_session=settings.principals.session_protocol_sessions,
        per_principal=settings.principals.protocol_sessions,
        host=settings.principals.max_protocol_sessions,
        idle_s=settings.protocol_sessions.idle_s,
        rest_s=settings.protocol_sessions.rest_s,
    )
    cap = settings.http.max_body_bytes
    app = manager.handle_request if fleet is None else fleet.forward(manager.handle_request, max_body_bytes=cap)
    return ProtocolSessions(RpcEdge(app, max_body_bytes=cap, fast=fast), limits, records, asking, on_ended)


def _doors(
    settings: Settings,
    shared: _Shared,
    door: VisitorDoor,
    visitor_protocol: ProtocolSessions,
    owner_protocol: ProtocolSessions,
    node_protocol: ProtocolSessions,
    asking: Asking,
) -> Doors:
    return Doors(
        sessions=SessionsEndpoint(
            shared.access,
            FailureThrottle(_throttle_limits(settings)),
            shared.owner_id,
            settings.base_url,
            settings.http.max_rest_body_bytes,
            PrincipalRate(settings.principals.public_sessions_per_minute),
        ),
        visitor=VisitorMCPEndpoint(
            shared.sessions,
            visitor_protocol,
            asking,
            PrincipalPace(
                settings.principals.requests_per_s,
                settings.principals.requests_burst,
                settings.principals.request_wait_s,
            ),
        ),
        owner=OwnerMCPEndpoint(shared.owners, owner_protocol),
        turns=TurnsEndpoint(
            shared.sessions,
            shared.turns,
            door,
            settings.http.max_rest_body_bytes,
            PrincipalRate(settings.principals.turns_per_minute),
        ),
        node=NodeMCPEndpoint(shared.node_grants, node_protocol),
    )


@asynccontextmanager
async def wired(
    settings: Settings,
    report: LoadReport,
    early: Early,
    database: Database,
    background: TaskGroup,
    rules: TransportSecuritySettings,
    installer: Installer,
) -> AsyncIterator[Host]:
    """Build every part that needs the database, run the back-channel and the two MCP session
    managers, and yield the host; calls parked between input rounds end when it exits.
    `installer` installs the plugins the owner door adds (`PackageInstaller`, or a test's)."""
    lent = await _lent_by_parent(settings, early.plugins)
    shared = await _shared(settings, report, early, database, background, lent)
    channel = _back_channel(settings, early, shared, lent)
    meta_caps = MetaCaps(settings.wire.meta_max_keys, settings.wire.meta_max_depth, settings.wire.meta_max_bytes)
    search = ToolSearch(shared.access.tool_search_threshold)  # sessions that see many tools
    door = _visitor_door(settings, early, shared, meta_caps, search)
    # This replica's row, forwards and change notices (the other replicas on this database).
    fleet = Fleet(
        database.pool,
        url=settings.replica_url or listen_url(settings.host, settings.port),
        host_key=load_host_key(settings.data_dir, _secret(settings)),
        task_group=background,
    )
    feed = ChangeFeed(door.sees, background, early.pool.runs_own, relay=fleet.relay)
    search.tell_with(feed.tell_session)  # a session's working set grew: its list changed
    background.start_soon(_relay_list_changes, early.list_changes, door, feed, shared.review)
    rounds = InputRounds(background, timeout_s=settings.children.input_timeout_s, replica_id=fleet.id)
    tasks = TaskBook(
        per_session=settings.principals.session_tasks,
        per_principal=settings.principals.tasks,
        in_all=settings.principals.max_tasks,
        asking=early.pool.asking,
    )
    background.start_soon(tasks.keep)  # each task forgotten at its ttl's end is cancelled in its child
    server = build_visitor_server(
        door, shared.bindings.input_schema, rounds=rounds, feed=feed, meta_caps=meta_caps, tasks=tasks
    )
    visitor_manager = _session_manager(server, settings, rules)
    catalogue = Catalogue(report, early.pool, shared.bindings, early.plugins, lent=lent)
    owner_door = _owner_door(settings, early, shared, catalogue, database, feed, installer)
    owner_manager = _session_manager(build_owner_server(owner_door), settings, rules)
    node_door = NodeDoor(
        early.plugins,
        shared.bindings,
        early.children,
        grants=early.grants,
        node_grants=shared.node_grants,
        call_timeout_s=settings.children.call_timeout_s,
    )
    node_manager = _session_manager(build_node_server(node_door), settings, rules)
    records = ProtocolSessionRecords(database.pool, idle_s=settings.protocol_sessions.idle_s)
    protocol = {
        # 2026-07-28 requests that end in one JSON answer skip the SDK transport (visitor/exchange.py).
        "visitor": _protocol_sessions(
            settings,
            visitor_manager,
            records,
            fleet,
            ModernExchange(server, rules),
            early.pool.asking,
            on_ended=feed.forget_connection,  # a connection's change notices go with its SDK session
        ),
        "owner": _protocol_sessions(settings, owner_manager, records),
        "node": _protocol_sessions(settings, node_manager, records),
    }
    doors = _doors(settings, shared, door, protocol["visitor"], protocol["owner"], protocol["node"], early.pool.asking)
    # The web console: the same owner door (handlers, audit), its sessions in the database.
    console = OwnerConsole(owner_door, shared.owners, PostgresConsoleSessions(database.pool, SESSION_TTL), rules)
    doors = dataclasses.replace(doors, console=console)
    watch(
        early.metrics,
        pool=early.pool,
        database=database,
        holds=shared.holds,
        pins=shared.pins,
        owner_id=shared.owner_id,
        rounds=rounds,
        protocol_sessions=protocol,
    )
    # The back-channel serves before the doors that mint grants open, and stops after them.
    async with channel, visitor_manager.run(), owner_manager.run(), node_manager.run():
        try:
            # The loops on the database start last, in the `try` that stops them: a start that
            # fails leaves none running into the pool's close (`open_database` closes it next).
            await fleet.register()
            await background.start(fleet.run, feed.publish_remote)
            await background.start(shared.rules.listen)  # rule states cached while their notices are heard
            await background.start(shared.turns.run)  # receipts written in batches, off the call's path
            for protocol_sessions in protocol.values():
                background.start_soon(protocol_sessions.keep_records)  # records of open sessions stay alive
                background.start_soon(protocol_sessions.rest_idle)  # idle ones rest (end in the SDK)
            yield Host(
                settings=settings,
                report=report,
                doors=doors,
                database=database,
                pool=early.pool,
                spawned=early.spawned,
                catalogue=catalogue,
                owners=shared.owners,
                owner_id=shared.owner_id,
                owner_token_file=shared.owner_token_file,
                owner_token_new=shared.owner_token_new,
                sessions=shared.sessions,
                access=shared.access,
                config=shared.config,
                stores=shared.stores,
                grants=early.grants,
                sockets=early.sockets,
                connections=shared.connections,
                audit=shared.audit,
                pins=shared.pins,
                rounds=rounds,
                metrics=early.metrics,
            )
        finally:
            rounds.close()  # calls parked between input rounds end with the host
            for protocol_sessions in protocol.values():
                protocol_sessions.stop_keeping()  # before the database closes, not after
            shared.rules.stop_listening()
            await shared.turns.stop()  # the receipts still queued are written before the pool closes
            await fleet.stop()
