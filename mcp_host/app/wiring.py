"""The composition root: builds the host's parts and hands them to each other, in the order
`wired` names: a node's lent capabilities (`parent`), the shared parts (`shared`), the
back-channel, the visitor side, the owner and node doors (`doors`), their protocol sessions,
then the loops that run while the host does.

Above: `lifespan` (which opens the parts' lifetimes in order and calls these builders between
them) and `asgi` (which routes requests to the doors built here). Below: `early` (the parts made
before the database), `shared`, `doors`, `parent`, `limits` (settings into limits), and the parts.
Nothing here decides policy. Every part gets what it needs through its constructor, and each
value is built once. Three edges run the other way, from a part made early to one made later,
and none is a setter on a built part: a child's "list changed" goes through a stream that
`wired` relays to the visitor door once it exists; the child factory reads the owner's config
and a node's parent-call audit through a seam it is given at construction (`OnceOpen`), which
`shared` opens once they exist; and the connector gateway registers itself with the
connections it reads. The back-channel comes in two parts for the same reason: its sockets
(`OpSockets`) are made early, as a sandbox binds its plugin's socket when the child starts;
the part that serves ops (`BackChannel`) is built later with the sockets and the op services.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from mcp_host.access import Access, OwnerStore, SessionStore
from mcp_host.backchannel import BackChannel, GrantBook, OpServices, OpSockets, ServesOps
from mcp_host.children import (
    ChildPool,
    ListChange,
    ParentLink,
    PromptsChanged,
    RemoteSignIns,
    ResourcesChanged,
    ToolsChanged,
)
from mcp_host.connectors import Connections
from mcp_host.edge import FailureThrottle, ProtocolSessions
from mcp_host.egress import EgressProxy
from mcp_host.oauth import AuthorizationServer
from mcp_host.observe import HostMetrics
from mcp_host.owner import Catalogue
from mcp_host.plugins import Installer, LoadReport
from mcp_host.policy import AuditLog, PinBook
from mcp_host.settings import Settings
from mcp_host.store import ConfigStore, Database, PluginStores, ProtocolSessionRecords, SecretBox, SignInStore
from mcp_host.visitor import (
    NODE_PATH,
    ChangeFeed,
    DirectAnswer,
    Fleet,
    InputRounds,
    ModernExchange,
    OwnerReview,
    TaskBook,
    ToolSearch,
    VisitorDoor,
    build_node_server,
    build_visitor_server,
    direct_answers,
    sees,
)
from owner_console import SESSION_TTL, SIGN_IN_THROTTLE, OwnerConsole, PostgresConsoleSessions
from owner_facade import OWNER_PATH, OwnerDoor, build_owner_server

from .doors import (
    Doors,
    doors,
    front_desk,
    node_door,
    owner_door,
    protocol_sessions,
    session_manager,
    session_opener,
    visitor_door,
)
from .early import Early
from .host_file import listen_url
from .host_metrics import watch
from .limits import channel_limits, meta_caps
from .parent import lent_by_parent
from .shared import Shared, shared_parts

__all__ = ["NODE_PATH", "OWNER_PATH", "Host", "wired"]


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
    oauth: AuthorizationServer
    """The authorization server of the doors (its grants: what the retention sweep ends and deletes)."""
    sign_ins: RemoteSignIns
    """The host's OAuth sign-ins to remote plugins' servers (`/oauth/callback` finishes them)."""
    egress: EgressProxy
    """The proxy every sandboxed child's network goes through (its open gates, by plugin)."""
    listed: anyio.Event
    """Set once the first tool lists at start are done (or their wait is over): `/readyz` waits."""


def _back_channel(
    settings: Settings, early: Early, shared: Shared, lent: Sequence[str], serves_ops: ServesOps
) -> AbstractAsyncContextManager[object]:
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
    return serves_ops(early.sockets, early.grants, services, channel_limits(settings), early.metrics)


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


@dataclass(frozen=True)
class _VisitorSide:
    """The visitor door and what runs beside it: this replica among the others, the change
    notices, the calls parked between input rounds, and the MCP server and its session manager."""

    door: VisitorDoor
    fleet: Fleet
    feed: ChangeFeed
    rounds: InputRounds
    server: Server[Any]
    manager: StreamableHTTPSessionManager
    direct: Mapping[str, DirectAnswer]
    """The methods the 2026-07-28 hot path answers without `server` (`visitor.direct`)."""


def _visitor_side(
    settings: Settings,
    early: Early,
    shared: Shared,
    database: Database,
    background: TaskGroup,
    rules: TransportSecuritySettings,
) -> _VisitorSide:
    caps = meta_caps(settings)
    # This replica's row, forwards and change notices (the other replicas on this database).
    fleet = Fleet(
        database.pool,
        url=settings.replica_url or listen_url(settings.host, settings.port),
        host_key=shared.host_key,
        task_group=background,
    )
    feed = ChangeFeed(functools.partial(sees, early.plugins), background, early.pool.runs_own, relay=fleet.relay)
    # Sessions that see many tools list through search; one whose working set grew is told its list changed.
    search = ToolSearch(shared.access.tool_search_threshold, feed.tell_session)
    door = visitor_door(settings, early, shared, caps, search)
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
        door, shared.bindings.input_schema, rounds=rounds, feed=feed, meta_caps=caps, tasks=tasks
    )
    manager = session_manager(server, settings, rules)
    return _VisitorSide(door, fleet, feed, rounds, server, manager, direct_answers(door, rounds=rounds, server=server))


def _all_protocol_sessions(
    settings: Settings,
    early: Early,
    database: Database,
    visitor: _VisitorSide,
    owner_manager: StreamableHTTPSessionManager,
    node_manager: StreamableHTTPSessionManager,
    rules: TransportSecuritySettings,
) -> dict[str, ProtocolSessions]:
    """Each door's protocol sessions, their records in the database (another replica adopts them)."""
    records = ProtocolSessionRecords(database.pool, idle_s=settings.protocol_sessions.idle_s)
    return {
        # 2026-07-28 requests that end in one JSON answer skip the SDK transport (visitor/exchange.py).
        "visitor": protocol_sessions(
            settings,
            visitor.manager,
            records,
            visitor.fleet,
            ModernExchange(visitor.server, rules, direct=visitor.direct),
            early.pool.asking,
            on_ended=visitor.feed.forget_connection,  # a connection's change notices go with its SDK session
        ),
        "owner": protocol_sessions(settings, owner_manager, records),
        "node": protocol_sessions(settings, node_manager, records),
    }


@asynccontextmanager
async def wired(
    settings: Settings,
    report: LoadReport,
    early: Early,
    database: Database,
    background: TaskGroup,
    rules: TransportSecuritySettings,
    installer: Installer,
    serves_ops: ServesOps = BackChannel,
) -> AsyncIterator[Host]:
    """Build every part that needs the database, run the back-channel and the MCP session
    managers, and yield the host; calls parked between input rounds end when it exits.
    `installer` installs the plugins the owner door adds (`PackageInstaller`, or a test's);
    `serves_ops` serves the back-channel (`BackChannel`, or a test's)."""
    lent = await lent_by_parent(settings, early.plugins)
    shared = await shared_parts(settings, early, database, background, lent, owner_path=OWNER_PATH)
    channel = _back_channel(settings, early, shared, lent, serves_ops)
    visitor = _visitor_side(settings, early, shared, database, background, rules)
    sign_ins = await _sign_ins(settings, early, shared, database, visitor.feed, background)
    catalogue = Catalogue(
        report, early.pool, shared.bindings, early.plugins, lent=lent, sign_ins=sign_ins, refused=early.refused
    )
    owner = owner_door(settings, early, shared, catalogue, database, visitor.feed, installer, sign_ins)
    owner_manager = session_manager(build_owner_server(owner), settings, rules)
    node_manager = session_manager(build_node_server(node_door(settings, early, shared)), settings, rules)
    protocol = _all_protocol_sessions(settings, early, database, visitor, owner_manager, node_manager, rules)
    built = _doors(settings, early, shared, database, visitor.door, protocol, owner, rules)
    watch(
        early.metrics,
        pool=early.pool,
        database=database,
        holds=shared.holds,
        pins=shared.pins,
        owner_id=shared.owner_id,
        rounds=visitor.rounds,
        protocol_sessions=protocol,
    )
    # The back-channel serves before the doors that mint grants open, and stops after them.
    async with (
        channel,
        visitor.manager.run(),
        owner_manager.run(),
        node_manager.run(),
        _running(shared, visitor, protocol, background),
    ):
        yield _host(settings, report, early, database, shared, catalogue, built, visitor.rounds, sign_ins)


async def _sign_ins(
    settings: Settings, early: Early, shared: Shared, database: Database, feed: ChangeFeed, background: TaskGroup
) -> RemoteSignIns:
    """The host's sign-ins to remote plugins' servers, their tokens sealed under the host key;
    a completed sign-in restarts the plugin's children and tells its visitors its lists changed."""
    bindings = shared.bindings

    def connected(plugin_id: str) -> None:
        early.pool.stop_plugin(plugin_id)
        bindings.forget(plugin_id)
        feed.announce(plugin_id)

    store = SignInStore(database.pool, SecretBox(shared.host_key))
    sign_ins = RemoteSignIns(store, settings.base_url, background, on_connected=connected)
    await sign_ins.refresh()
    early.once_open.open_sign_ins(sign_ins)

    def session_ended(session_id: str) -> None:
        background.start_soon(sign_ins.forget_session, session_id)

    early.pool.on_session_end(session_ended)
    return sign_ins


def _doors(
    settings: Settings,
    early: Early,
    shared: Shared,
    database: Database,
    door: VisitorDoor,
    protocol: Mapping[str, ProtocolSessions],
    owner: OwnerDoor,
    rules: TransportSecuritySettings,
) -> Doors:
    """The endpoints, with the web console (the same owner door: handlers, audit; its sessions
    in the database) and the front desk, which share the console's throttle of wrong owner
    tokens, and the sessions endpoint and the desk one `SessionOpener`."""
    sessions = PostgresConsoleSessions(database.pool, SESSION_TTL)
    sign_ins = FailureThrottle(SIGN_IN_THROTTLE)
    console = OwnerConsole(owner, shared.owners, sessions, rules, throttle=sign_ins)
    opener = session_opener(settings, shared)
    desk = front_desk(settings, early, shared, opener, rules, sessions, sign_ins)
    return doors(settings, shared, door, protocol, early.pool.asking, console, opener, desk)


def _host(
    settings: Settings,
    report: LoadReport,
    early: Early,
    database: Database,
    shared: Shared,
    catalogue: Catalogue,
    built: Doors,
    rounds: InputRounds,
    sign_ins: RemoteSignIns,
) -> Host:
    return Host(
        settings=settings,
        report=report,
        doors=built,
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
        oauth=shared.oauth,
        sign_ins=sign_ins,
        egress=early.egress,
        listed=shared.listed,
    )


@asynccontextmanager
async def _running(
    shared: Shared, visitor: _VisitorSide, protocol: Mapping[str, ProtocolSessions], background: TaskGroup
) -> AsyncIterator[None]:
    """The loops on the database, started last, in the `try` that stops them: a start that
    fails leaves none running into the pool's close (`open_database` closes it next)."""
    try:
        await visitor.fleet.register()
        await background.start(visitor.fleet.run, visitor.feed.publish_remote)
        await background.start(shared.rules.listen)  # rule states cached while their notices are heard
        await background.start(shared.turns.run)  # receipts written in batches, off the call's path
        for sessions in protocol.values():
            background.start_soon(sessions.keep_records)  # records of open sessions stay alive
            background.start_soon(sessions.rest_idle)  # idle ones rest (end in the SDK)
        yield
    finally:
        visitor.rounds.close()  # calls parked between input rounds end with the host
        for sessions in protocol.values():
            sessions.stop_keeping()  # before the database closes, not after
        shared.rules.stop_listening()
        await shared.turns.stop()  # the receipts still queued are written before the pool closes
        await visitor.fleet.stop()
