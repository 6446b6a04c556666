"""The composition root: the one place that wires database, plugins, children and doors.

Above: the CLI (`mcp-host serve`) and the tests, which run `create_app(settings)` under
uvicorn. Below: everything else. Nothing here decides policy; it only builds parts and hands
them to each other, in the order their lifetimes nest.
"""

from __future__ import annotations

import functools
import gc
import logging
import shlex
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from mcp_host.access import (
    OWNER_TOKEN_FILE,
    Access,
    CachedSessionStore,
    OwnerStore,
    PostgresSessionStore,
    SessionStore,
    ensure_owner_token,
)
from mcp_host.backchannel import BackChannel, BackChannelLimits, GrantBook, OpServices, named_ops
from mcp_host.children import Child, ChildLimits, ChildPool
from mcp_host.connectors import Connections, ConnectorGateway, RequirementGate
from mcp_host.edge import (
    FailureThrottle,
    HostOriginGuard,
    ProtocolSessionLimits,
    ProtocolSessions,
    RpcEdge,
    ThrottleLimits,
)
from mcp_host.owner import Catalogue, OwnerCalls
from mcp_host.plugins import LoadReport, Plugin, load_plugins
from mcp_host.policy import AuditLog, Holds, PinBook, Pins, PostgresTurns, QuotaGate, TurnStore
from mcp_host.sandbox import SandboxLedger, host_cgroups, launch_for, require_bwrap
from mcp_host.settings import Settings
from mcp_host.store import ConfigStore, Database, PluginStores, SecretBox, StoreLimits, load_host_key, open_database
from mcp_host.visitor import (
    Bindings,
    ChangeFeed,
    InputRounds,
    SessionsEndpoint,
    TurnsEndpoint,
    VisitorDoor,
    VisitorMCPEndpoint,
    build_visitor_server,
    security_settings,
)
from mcp_host.wire import MetaCaps
from owner_facade import OWNER_PATH, OwnerDoor, OwnerMCPEndpoint, OwnerServices, build_owner_server

from .health import OutageGuard, answer_outages, healthz, readyz
from .host_file import listen_url, remove_host_file, write_host_file

__all__ = ["Host", "HostApp", "child_limits", "create_app", "running_host"]

logger = logging.getLogger("mcp_host")


@dataclass
class Host:
    """The running host's parts, for the HTTP routes and for tests."""

    settings: Settings
    report: LoadReport
    pool: ChildPool
    catalogue: Catalogue
    owner_token_file: Path | None
    owners: OwnerStore
    sessions_endpoint: SessionsEndpoint
    visitor_endpoint: VisitorMCPEndpoint
    owner_endpoint: OwnerMCPEndpoint
    owner_id: str
    sessions: SessionStore
    config: ConfigStore
    stores: PluginStores
    grants: GrantBook
    channel: BackChannel
    access: Access
    connections: Connections
    connectors: ConnectorGateway
    audit: AuditLog
    turns: TurnStore
    turns_endpoint: TurnsEndpoint
    pins: PinBook | None = None
    database: Database | None = None
    owner_token_new: bool = False
    """The owner token was made by this start (so `serve` shows it once, on the terminal)."""
    spawned: list[int] = field(default_factory=list)


def child_limits(s: Settings) -> ChildLimits:
    """The limits every child of a host with settings `s` runs under (also the bench's)."""
    return ChildLimits(
        start_timeout_s=s.child_start_timeout_s,
        idle_timeout_s=s.child_idle_timeout_s,
        max_line_bytes=s.child_max_line_bytes,
        stderr_lines_per_s=s.child_stderr_lines_per_s,
        stderr_line_bytes=s.child_stderr_line_bytes,
        backoff_max_s=s.child_restart_backoff_max_s,
        crash_loop_threshold=s.child_crash_loop_threshold,
        timeouts_before_recycle=s.child_timeouts_before_recycle,
        input_timeout_s=s.input_timeout_s,
        input_budget=s.input_budget,
        backoff_base_s=s.child_restart_backoff_base_s,
        stable_after_s=s.child_stable_after_s,
        log_keep_lines=s.child_log_keep_lines,
        errors_logged_per_s=s.child_errors_logged_per_s,
        errors_logged_burst=s.child_errors_logged_burst,
    )


def _secret(settings: Settings) -> str | None:
    return settings.secret_key.get_secret_value() if settings.secret_key is not None else None


def _throttle_limits(s: Settings) -> ThrottleLimits:
    return ThrottleLimits(
        free_failures=s.access_failures_free,
        window_s=s.access_failure_window_s,
        base_delay_s=s.access_failure_delay_s,
        max_delay_s=s.access_failure_delay_max_s,
        max_clients=s.access_failure_clients_max,
    )


def _store_limits(s: Settings) -> StoreLimits:
    return StoreLimits(
        max_doc_bytes=s.store_max_doc_bytes,
        max_doc_depth=s.store_max_doc_depth,
        max_query_limit=s.store_max_query_limit,
    )


async def _ensure_stores(stores: PluginStores, plugins: tuple[Plugin, ...]) -> None:
    """Create the store of every plugin that uses one (named a store op, or counts a quota)."""
    for plugin in plugins:
        uses_store = any(op.startswith("store.") for op in named_ops(plugin))
        if uses_store or plugin.manifest.quota_gate() is not None:
            await stores.ensure(plugin.manifest.kind, plugin.manifest.id)


def _load(settings: Settings) -> LoadReport:
    report = load_plugins(settings.builtin_dir, settings.plugins)
    for error in report.errors:
        logger.error("plugin skipped: %s", error)
    for plugin in report.plugins:  # loaded, read fail-closed; `mcp-host check` calls these errors
        for mistake in plugin.mistakes:
            logger.warning("plugin %s: %s", plugin.manifest.id, mistake)
    if settings.sandbox == "on":
        require_bwrap()
    else:
        logger.warning("MCP_HOST_SANDBOX=off: children run UNSANDBOXED. For development only.")
    return report


def _protocol_session_limits(s: Settings) -> ProtocolSessionLimits:
    return ProtocolSessionLimits(
        per_principal=s.protocol_sessions_per_principal,
        per_client=s.protocol_sessions_per_client,
        idle_s=s.protocol_session_idle_s,
    )


def _allowed_hosts(settings: Settings) -> list[str]:
    """Extra Host values: the configured ones and the public URL's own."""
    hosts = list(settings.allowed_hosts)
    if settings.public_url:
        netloc = urlsplit(settings.public_url).netloc
        if netloc:
            hosts.append(netloc)
    return hosts


@asynccontextmanager
async def running_host(settings: Settings) -> AsyncIterator[Host]:
    """Start every part of the host; stop them all, children first, on exit."""
    report = _load(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ledger = SandboxLedger(settings.data_dir / "run" / "sandboxes")
    swept = ledger.sweep()
    if swept:
        logger.warning("killed %d sandbox(es) left over from a host that did not stop cleanly", len(swept))
    if settings.sandbox == "on":
        host_cgroups(settings.cgroup_root)  # detect now (and sweep dead hosts' groups), not at first use
    spawned: list[int] = []

    def on_spawn(pid: int, plugin_id: str) -> None:
        spawned.append(pid)
        ledger.record(pid, plugin_id)

    pool = ChildPool(
        child_limits(settings), max_children=settings.max_children, on_spawn=on_spawn, on_exit=ledger.forget
    )
    grants = GrantBook(budget=settings.grant_op_budget)
    channel = BackChannel(
        report.plugins,
        grants,
        BackChannelLimits(
            settings.host_op_max_message_bytes,
            settings.host_op_max_connections,
            denials_logged_per_s=settings.host_op_denials_logged_per_s,
            denials_logged_burst=settings.host_op_denials_logged_burst,
        ),
        runtime_dir=settings.runtime_dir,
    )

    def child_of(plugin: Plugin) -> Child:
        socket = channel.socket_for(plugin.manifest.id)
        return pool.child(plugin.manifest.id, lambda: launch_for(plugin, settings, host_socket=socket))

    bindings = Bindings(child_of, list_timeout_s=settings.list_timeout_s)
    async with channel, pool, anyio.create_task_group() as background:
        if settings.prestart_children:
            # Children boot while the database starts: both take about a second.
            always = [p for p in report.plugins if p.manifest.kind == "capability" and p.manifest.acl == "always"]
            background.start_soon(functools.partial(bindings.assemble, always, fresh=True))
        async with open_database(settings) as database:
            owners = OwnerStore(database.pool)
            owner = await owners.ensure_single_owner()
            # Tool pinning: a child's tool whose definition the owner has not approved stays
            # hidden. Attached now (the bindings exist before the database, for prestart).
            pins = Pins(database.pool) if settings.pin_tools else None
            if pins is not None:
                await pins.load()
            bindings.pins = pins
            first_token = not (settings.data_dir / OWNER_TOKEN_FILE).exists()
            token_file = await ensure_owner_token(owners, owner, settings.data_dir)
            sessions = CachedSessionStore(
                PostgresSessionStore(database.pool),
                ttl_s=settings.auth_cache_ttl_s,
                outage_grace_s=settings.auth_outage_grace_s,
            )
            stores = PluginStores(database.pool, _store_limits(settings))
            await _ensure_stores(stores, report.plugins)
            config = ConfigStore(database.pool)
            # Revoking a code or key here drops its sessions' cached authentications at once.
            access = Access(database.pool, config, report.plugins, sessions, on_revoked=sessions.forget_subject)
            await access.ensure_defaults(owner.id)
            quota = QuotaGate(stores, config, limit_ttl_s=settings.quota_limit_ttl_s)
            connections = Connections(
                database.pool,
                SecretBox(load_host_key(settings.data_dir, _secret(settings))),
                {p.manifest.id: p for p in report.plugins if p.manifest.kind == "connector"},
                ttl_s=settings.connections_ttl_s,
            )
            connectors = ConnectorGateway(
                connections,
                child_of,
                call_timeout_s=settings.call_timeout_s,
                can_perform_ttl_s=settings.can_perform_ttl_s,
            )
            connections.on_change.append(connectors.forget)
            turns = PostgresTurns(database.pool)
            channel.services = OpServices(
                stores=stores,
                config=config,
                owners=owners,
                quota=quota,
                connectors=connectors,
                turns=turns,
                input_timeout_s=settings.input_timeout_s,
                input_budget=settings.input_budget,
            )
            holds = Holds(database.pool, ttl_s=settings.hold_ttl_s)
            door = VisitorDoor(
                report.plugins,
                bindings,
                child_of,
                grants=grants,
                quota=quota,
                requirements=RequirementGate(connections, connectors),
                meta_caps=MetaCaps(settings.meta_max_keys, settings.meta_max_depth, settings.meta_max_bytes),
                call_timeout_s=settings.call_timeout_s,
                holds=holds if settings.hold_destructive_tools else None,
                turns=turns,
            )
            feed = ChangeFeed(door.sees, background)

            def list_changed(plugin_id: str, what: str) -> None:
                if what in ("prompts", "resources"):
                    door.listings.forget(plugin_id)
                feed.publish(plugin_id, what)

            pool.on_list_changed = list_changed
            meta_caps = MetaCaps(settings.meta_max_keys, settings.meta_max_depth, settings.meta_max_bytes)
            rounds = InputRounds(background, timeout_s=settings.input_timeout_s)
            manager = StreamableHTTPSessionManager(
                build_visitor_server(door, bindings.input_schema, rounds=rounds, feed=feed, meta_caps=meta_caps),
                security_settings=security_settings(settings.host, settings.port, _allowed_hosts(settings)),
                max_request_body_size=settings.max_body_bytes,
                max_sessions=settings.protocol_sessions_max,
                session_idle_timeout=settings.protocol_session_idle_s,  # the idle time ProtocolSessions counts on
            )
            audit = AuditLog(database.pool)
            catalogue = Catalogue(report, pool, bindings)
            owner_door = OwnerDoor(
                OwnerServices(
                    plugins=report.plugins,
                    catalogue=catalogue,
                    config=config,
                    access=access,
                    sessions=sessions,
                    connections=connections,
                    connectors=connectors,
                    calls=OwnerCalls(report.plugins, child_of, grants=grants, call_timeout_s=settings.call_timeout_s),
                    audit=audit,
                    holds=holds,
                    owners=owners,
                    pins=pins,
                )
            )
            owner_manager = StreamableHTTPSessionManager(
                build_owner_server(owner_door),
                security_settings=security_settings(settings.host, settings.port, _allowed_hosts(settings)),
                max_request_body_size=settings.max_body_bytes,
                max_sessions=settings.protocol_sessions_max,
                session_idle_timeout=settings.protocol_session_idle_s,  # the idle time ProtocolSessions counts on
            )
            async with manager.run(), owner_manager.run():
                try:
                    yield Host(
                        settings=settings,
                        report=report,
                        pool=pool,
                        catalogue=catalogue,
                        owner_token_file=token_file,
                        owners=owners,
                        sessions_endpoint=SessionsEndpoint(
                            access,
                            FailureThrottle(_throttle_limits(settings)),
                            owner.id,
                            settings.base_url,
                            settings.max_rest_body_bytes,
                        ),
                        visitor_endpoint=VisitorMCPEndpoint(
                            sessions,
                            ProtocolSessions(
                                RpcEdge(manager.handle_request, max_body_bytes=settings.max_body_bytes),
                                _protocol_session_limits(settings),
                            ),
                        ),
                        owner_endpoint=OwnerMCPEndpoint(
                            owners,
                            ProtocolSessions(
                                RpcEdge(owner_manager.handle_request, max_body_bytes=settings.max_body_bytes),
                                _protocol_session_limits(settings),
                            ),
                        ),
                        owner_id=owner.id,
                        sessions=sessions,
                        config=config,
                        stores=stores,
                        grants=grants,
                        channel=channel,
                        access=access,
                        connections=connections,
                        connectors=connectors,
                        audit=audit,
                        turns=turns,
                        turns_endpoint=TurnsEndpoint(sessions, turns, door, settings.max_rest_body_bytes),
                        pins=pins,
                        database=database,
                        owner_token_new=first_token and token_file is not None,
                        spawned=spawned,
                    )
                finally:
                    rounds.close()  # calls parked between input rounds end with the host
        background.cancel_scope.cancel()
        logger.info("stopping children")


class _Deferred:
    """An ASGI endpoint that forwards to a part of the running host (built in the lifespan)."""

    def __init__(self, app: Starlette, part: str) -> None:
        self._app = app
        self._part = part

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host: Host | None = getattr(self._app.state, "host", None)
        if host is None:
            await JSONResponse({"error": "starting"}, status_code=503)(scope, receive, send)
            return
        await getattr(host, self._part)(scope, receive, send)


class HostApp:
    """The outermost ASGI app.

    Visitor MCP requests — the hot path, one per MCP message — go straight to their
    endpoint; everything else goes through Starlette's router and middleware.
    """

    _PREFIX = "/v1/sessions/"
    _SUFFIX = "/mcp"

    def __init__(self, inner: Starlette, *, retry_after_s: int = 2) -> None:
        self.inner = inner
        self.state = inner.state
        self._retry_after_s = retry_after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            host: Host | None = self.state.host
            if host is not None and path.startswith(self._PREFIX) and path.endswith(self._SUFFIX):
                session_id = path[len(self._PREFIX) : -len(self._SUFFIX)]
                if session_id and "/" not in session_id:
                    scope["path_params"] = {"session_id": session_id}
                    # Outside Starlette's middleware: a database outage is answered 503 here.
                    await answer_outages(host.visitor_endpoint, scope, receive, send, self._retry_after_s)
                    return
        await self.inner(scope, receive, send)


def create_app(settings: Settings, *, on_fatal: Callable[[], None] | None = None) -> HostApp:
    """The host's ASGI app; its lifespan runs `running_host`.

    `on_fatal` is called when the running host ends by itself (a part of it failed): the
    server should then exit, non-zero, so that a supervisor restarts it, rather than keep a
    listening process that answers 503 to everything.
    """

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        started = False
        try:
            async with running_host(settings) as host:
                app.state.host = host
                started = True
                if settings.port:  # `mcp-host serve --port 0` binds first and passes the real port
                    # Where the command line finds this host (host_file.py); removed below.
                    write_host_file(settings.data_dir, listen_url(settings.host, settings.port))
                _announce(host)
                # Everything built so far lives as long as the host: keep the cyclic GC from
                # walking it on every collection (fewer, shorter pauses on the request path).
                gc.freeze()
                try:
                    yield
                finally:
                    app.state.host = None
                    remove_host_file(settings.data_dir)
                    gc.unfreeze()
        except BaseException:
            if started:
                logger.critical("the host stopped because a part of it failed", exc_info=True)
                if on_fatal is not None:
                    on_fatal()
            raise

    async def catalogue(request: Request) -> Response:
        host: Host | None = getattr(request.app.state, "host", None)
        if host is None:
            return JSONResponse({"error": "starting"}, status_code=503)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token or await host.owners.verify_token(token.strip()) is None:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        entries = [e.model_dump() for e in host.catalogue.entries()]
        return JSONResponse({"capabilities": entries}, headers={"Cache-Control": "no-store"})

    async def open_turn(request: Request) -> Response:
        host: Host | None = getattr(request.app.state, "host", None)
        if host is None:
            return JSONResponse({"error": "starting"}, status_code=503)
        return await host.turns_endpoint.open_turn(request)

    async def answer_turn(request: Request) -> Response:
        host: Host | None = getattr(request.app.state, "host", None)
        if host is None:
            return JSONResponse({"error": "starting"}, status_code=503)
        return await host.turns_endpoint.answer(request)

    # A database outage met by any route is answered 503 with Retry-After (health.py).
    outages = Middleware(OutageGuard, retry_after_s=settings.database_retry_after_s)
    app = Starlette(lifespan=lifespan, middleware=[outages])
    app.state.host = None
    # The MCP endpoints' Host and Origin rules (the SDK checks those) on the plain routes too.
    security = security_settings(settings.host, settings.port, _allowed_hosts(settings))
    same_site = [Middleware(HostOriginGuard, security=security)]
    app.router.routes.extend(
        [
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/v1/catalogue", catalogue, methods=["GET"], middleware=same_site),
            Route("/v1/sessions", _Deferred(app, "sessions_endpoint"), methods=["POST"], middleware=same_site),
            Route("/v1/sessions/{session_id}/turns", open_turn, methods=["POST"], middleware=same_site),
            Route("/v1/sessions/{session_id}/turns/{n}/answer", answer_turn, methods=["POST"], middleware=same_site),
            Route(OWNER_PATH, _Deferred(app, "owner_endpoint"), methods=["GET", "POST", "DELETE"]),
            Route(
                "/v1/sessions/{session_id}/mcp",
                _Deferred(app, "visitor_endpoint"),
                methods=["GET", "POST", "DELETE"],
            ),
        ]
    )
    return HostApp(app, retry_after_s=settings.database_retry_after_s)


def _announce(host: Host) -> None:
    """Say where the host listens and how to reach it: every line names the address listened on
    and the data directory in use, so it can be copied as printed."""
    s = host.settings
    url = listen_url(s.host, s.port)
    owner_url = f"{url}{OWNER_PATH}"
    beside = Path(sys.executable).parent / "mcp-host"  # the console script of this environment
    cli = shlex.quote(str(beside)) if beside.exists() else "mcp-host"
    data_dir = shlex.quote(str(s.data_dir.resolve()))
    plugins = ", ".join(p.manifest.id for p in host.report.plugins) or "none"
    logger.info("mcp-host ready on %s (plugins: %s); data in %s", url, plugins, data_dir)
    if s.public_url:
        logger.info("visitors are given URLs under %s (MCP_HOST_PUBLIC_URL)", s.base_url)
    if host.owner_token_file is not None:
        logger.info("owner endpoint: %s; print the owner token: %s owner token --data-dir %s", owner_url, cli, data_dir)
    else:
        logger.info(
            "owner endpoint: %s; no owner token file: %s owner token --rotate --data-dir %s makes one",
            owner_url,
            cli,
            data_dir,
        )
    if host.owner_token_new and host.owner_token_file is not None:
        # Once, on the terminal only (never into the log): the owner connects with it.
        token = host.owner_token_file.read_text().strip()
        again = f"{cli} owner token --data-dir {data_dir}"
        sys.stdout.write(f"\n  owner token (shown once; `{again}` prints it again): {token}\n\n")
        sys.stdout.flush()
    logger.info(
        "Claude Code over HTTP: claude mcp add --transport http mcp-host %s"
        ' --header "Authorization: Bearer $(%s owner token --data-dir %s)"',
        owner_url,
        cli,
        data_dir,
    )
    logger.info("Claude Code over stdio: claude mcp add mcp-host -- %s owner --data-dir %s", cli, data_dir)
    logger.info("the catalogue: %s caps list --data-dir %s", cli, data_dir)
    logger.info(
        "open a visitor session: %s session new --data-dir %s, or curl -s -X POST %s/v1/sessions"
        " -H 'content-type: application/json' -d '{}'",
        cli,
        data_dir,
        url,
    )
