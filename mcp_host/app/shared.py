"""The parts both doors share, each built once the database is open (`Shared`): the owner,
the tool listings and their review, the sessions, the plugin stores, the config and the host
key that seals it, access, connectors, turns, holds, the audit log, the owner's rules and the
OAuth authorization server of the doors.

Above: `wiring` (which builds the doors on these). Below: `limits`, `parent` (a node's lent
capabilities, linked to the audit before any child is made) and the parts. The child factory,
made before the database, reads the owner's config and that audit through `Early.once_open`,
opened here first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from mcp_host.access import (
    OWNER_TOKEN_FILE,
    Access,
    CachedSessionStore,
    OwnerStore,
    PostgresSessionStore,
    ensure_owner_token,
)
from mcp_host.backchannel import named_ops
from mcp_host.connectors import Connections, ConnectorGateway
from mcp_host.desk import DeskAddress
from mcp_host.oauth import AuthorizationServer, end_owner_grants
from mcp_host.plugins import Plugin, Registry
from mcp_host.policy import AuditLog, Holds, NodeGrants, Pins, PostgresTurns, QuotaGate, RuleGate
from mcp_host.settings import Settings
from mcp_host.store import (
    AppContents,
    ConfigStore,
    Database,
    EgressGrants,
    NodeGrantStore,
    OwnerEnv,
    PgPool,
    PluginStores,
    RuleStore,
    SecretBox,
    load_host_key,
)
from mcp_host.visitor import ONE_URL_PATH, AppReader, Bindings, OwnerReview

from .early import Early
from .limits import hold_caps, store_limits, turn_caps
from .parent import audit_parent_calls

__all__ = ["Shared", "owner_store", "shared_parts"]


def owner_store(pool: PgPool, on_profile_set: Callable[[str], None] | None = None) -> OwnerStore:
    """The owners, as every command and the host build them: rotating the owner token ends
    the owner door's OAuth grants in the rotation's transaction (`oauth.end_owner_grants`)."""
    return OwnerStore(pool, on_profile_set=on_profile_set, on_token_rotated=end_owner_grants)


logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shared:
    """The parts both doors share, built once the database is open."""

    owners: OwnerStore
    owner_id: str
    owner_token_file: Path | None
    owner_token_new: bool
    pins: Pins | None
    bindings: Bindings
    review: OwnerReview | None
    listed: anyio.Event
    """Set once the first lists at start are done, or `ready_lists_wait_s` has passed."""
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
    host_key: bytes
    """Loaded once: it seals the config and the connections, and keys the replicas' forwards."""
    oauth: AuthorizationServer
    """The OAuth authorization server of the visitor door `/mcp` and the owner door."""


async def shared_parts(
    settings: Settings,
    early: Early,
    database: Database,
    background: TaskGroup,
    lent: Sequence[str] = (),
    *,
    owner_path: str,
) -> Shared:
    """The owner, pins, sessions, stores, config, access, quota, connectors and the rest, each
    built once; once the pins are loaded, every capability's tools are listed for the owner's
    review (pinning on) and the prestarted children's lists vetted, in the background. `lent`:
    the parent's capabilities (`parent.lent_by_parent`), linked to the parent before any is listed.
    `owner_path`: the owner door's path (an OAuth resource, as `/mcp` is)."""
    rule_store = RuleStore(database.pool)
    owners = owner_store(database.pool, on_profile_set=rule_store.forget)  # the rules' timezone
    owner = await owners.ensure_single_owner()
    audit = AuditLog(database.pool)
    host_key, box, config = _sealed_config(settings, early, database)
    # Before the review below lists any child (a child is made once: one of a lent capability made
    # before would pass the parent's bare refusal to visitors, defect 8, and leave no audit row).
    egress = EgressGrants(database.pool)
    early.once_open.open(OwnerEnv(config, owner.id), audit_parent_calls(audit, owner.id, lent), egress)
    for plugin_id in await egress.all():  # a child started while the database did lacks the owner's egress
        early.pool.stop_plugin(plugin_id)
    pins, bindings, review, listed = await _listings(settings, early, database, background)
    first_token = not (settings.data_dir / OWNER_TOKEN_FILE).exists()
    token_file = await ensure_owner_token(owners, owner, settings.data_dir)
    sessions = _session_store(settings, early, database, background)
    stores = PluginStores(database.pool, store_limits(settings))
    await _ensure_stores(stores, early.plugins)
    access, connections = await _access(settings, early, database, owner.id, sessions, config, box)
    holds, rules = _holds_and_rules(settings, early, database, rule_store, audit)
    return Shared(
        owners=owners,
        owner_id=owner.id,
        owner_token_file=token_file,
        owner_token_new=first_token and token_file is not None,
        pins=pins,
        bindings=bindings,
        review=review,
        listed=listed,
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
        turns=PostgresTurns(database.pool, caps=turn_caps(settings)),
        holds=holds,
        audit=audit,
        rules=rules,
        node_grants=NodeGrants(NodeGrantStore(database.pool), rules, audit),
        host_key=host_key,
        oauth=_authorization_server(settings, database, host_key, owner_path),
    )


def _holds_and_rules(
    settings: Settings, early: Early, database: Database, rule_store: RuleStore, audit: AuditLog
) -> tuple[Holds, RuleGate]:
    """The holds, and the owner's rules: every visitor, owner-context and node call, before its child."""
    holds = Holds(
        database.pool,
        ttl_s=settings.policy.hold_ttl_s,
        caps=hold_caps(settings),
        principal_of=lambda session_id: str(early.pool.asking.of(session_id)),  # who asks for it now
    )
    return holds, RuleGate(rule_store, holds, audit, hold_destructive=settings.policy.hold_destructive_tools)


def _authorization_server(
    settings: Settings, database: Database, host_key: bytes, owner_path: str
) -> AuthorizationServer:
    """The host's OAuth authorization server, its issuer the host's public URL, for the one
    visitor URL and the owner door; a client's browser is sent to the front desk (`desk`)."""
    base = settings.base_url
    return AuthorizationServer(
        database.pool,
        SecretBox(host_key),  # a client's secret sealed with the host key, as the config is
        issuer=base,
        resources=[f"{base}{ONE_URL_PATH}", f"{base}{owner_path}"],
        desk=DeskAddress(base, f"{base}{owner_path}"),
        client_documents=settings.oauth.client_documents,
        # A client that names no door gets the visitor's, never the owner's (least privilege).
        default_resource=f"{base}{ONE_URL_PATH}",
    )


async def _listings(
    settings: Settings, early: Early, database: Database, background: TaskGroup
) -> tuple[Pins | None, Bindings, OwnerReview | None, anyio.Event]:
    """Tool pinning (a child's tool whose definition the owner has not approved stays hidden),
    the listings over it, and the owner's review of them (pinning on); the first lists start
    in the background, and the event is set when they are done (or the wait for them is over)."""
    pins = Pins(database.pool) if settings.policy.pin_tools else None
    if pins is not None:
        await pins.load()
    timeout_s = settings.children.list_timeout_s
    max_bytes, contents = settings.policy.app_max_bytes, AppContents(database.pool)
    apps = AppReader(early.children, read_timeout_s=timeout_s, max_bytes=max_bytes, contents=contents)
    bindings = Bindings(early.children, list_timeout_s=timeout_s, pins=pins, apps=apps)
    review = OwnerReview(bindings, early.plugins, background) if pins is not None else None
    listed = anyio.Event()
    if review is not None or early.prestart:  # prestarted children booted while the database started
        background.start_soon(_first_lists, bindings, review, early.plugins.capabilities, early.prestart, listed)
        background.start_soon(_ready_anyway, listed, settings.children.ready_lists_wait_s)
    else:
        listed.set()
    return pins, bindings, review, listed


async def _first_lists(
    bindings: Bindings,
    review: OwnerReview | None,
    capabilities: Sequence[Plugin],
    prestart: Sequence[Plugin],
    listed: anyio.Event,
) -> None:
    """Once the pins are loaded: every capability's tools listed for the owner's review (so
    `tools_pending` shows them before any visitor lists them, whatever their `acl`), then the
    prestarted children's lists vetted as the toolset every session sees."""
    try:
        if review is not None:
            await review.all(capabilities)
        if prestart:
            await bindings.assemble(prestart, fresh=False)
    finally:
        listed.set()


async def _ready_anyway(listed: anyio.Event, wait_s: float) -> None:
    """Readiness waits for the first lists at most `wait_s`: a child slow to start delays the
    first visitor's list of it, not the whole host."""
    with anyio.move_on_after(wait_s):
        await listed.wait()
    if not listed.is_set():
        logger.warning("the first tool lists took over %.1f s; the host says it is ready without them", wait_s)
        listed.set()


def _session_store(settings: Settings, early: Early, database: Database, background: TaskGroup) -> CachedSessionStore:
    """The visitor sessions in the database, their authentications cached (and kept through a
    short outage); an abandoned session's entry goes, in the background, once its grace is over."""
    sessions = CachedSessionStore(
        # An ended session's per-session child instances stop at once (on this replica).
        PostgresSessionStore(
            database.pool, on_ended=early.pool.end_session, public_idle_s=settings.retention.public_session_idle_s
        ),
        ttl_s=settings.access.auth_cache_ttl_s,
        outage_grace_s=settings.access.auth_outage_grace_s,
    )
    background.start_soon(sessions.expire)
    return sessions


async def _ensure_stores(stores: PluginStores, plugins: Registry) -> None:
    """Create the store of every plugin that uses one (named a store op, or counts a quota)."""
    for plugin in plugins:
        uses_store = any(op.startswith("store.") for op in named_ops(plugin))
        if uses_store or plugin.manifest.quota_gate() is not None:
            await stores.ensure(plugin.manifest.kind, plugin.manifest.id)


def _sealed_config(settings: Settings, early: Early, database: Database) -> tuple[bytes, SecretBox, ConfigStore]:
    """The host key (loaded once), the box that seals with it, and the owner's config sealed in
    that box; a write to a setting a child's environment is made from restarts its children."""
    host_key = load_host_key(settings.data_dir, _secret(settings))
    box = SecretBox(host_key)
    return host_key, box, ConfigStore(database.pool, box=box, on_env_changed=early.pool.stop_plugin)


def _secret(settings: Settings) -> str | None:
    return settings.connectors.secret_key.get_secret_value() if settings.connectors.secret_key is not None else None


async def _access(
    settings: Settings,
    early: Early,
    database: Database,
    owner_id: str,
    sessions: CachedSessionStore,
    config: ConfigStore,
    box: SecretBox,
) -> tuple[Access, Connections]:
    """Access over the owner's config, its default roles ensured; the owner's connections,
    sealed under the host key as the config is."""
    # Revoking a code or key here drops its sessions' cached authentications at once.
    access = Access(database.pool, config, early.plugins, sessions, on_revoked=sessions.forget_subject)
    await access.ensure_defaults(owner_id)
    connections = Connections(
        database.pool,
        box,
        {p.manifest.id: p for p in early.plugins.connectors},
        ttl_s=settings.connectors.connections_ttl_s,
    )
    return access, connections
