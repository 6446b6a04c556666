"""The owner tools: one handler per tool, registered in one table (`TOOLS`).

Above: `door` (dispatch, error boundary, audit). Below: `services` (the host's parts) and
`models` (each tool's arguments). A handler returns a dict, answered as structured content,
or — for the tools that run a plugin's own tool — that tool's result as it came back.
Handlers raise `mcp_host`'s `HostError`s; the door turns them into `{code, message}`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread
import mcp.types as types
from pydantic import BaseModel

from mcp_host.access import is_code_id, is_key_id
from mcp_host.backchannel import named_ops
from mcp_host.connectors import Connection
from mcp_host.errors import HostError, InvalidArguments, Unconfigured, UnknownTool
from mcp_host.plugins import (
    Installed,
    Plugin,
    installed,
    load_plugins,
    plugins_dir,
    printable,
    reach,
    remove,
    switch_upgrade,
)
from mcp_host.policy import (
    REDACTED,
    NodeGrants,
    RuleGate,
    summarize,
)
from mcp_host.sandbox import Launch, launch_for
from mcp_host.store import SCOPES, ConfigScope, ConfigUnset, OwnerEnv, declared, uninstall

from . import services as _services
from .approvals import tool_approve, tools_approve, tools_pending
from .models import (
    ApiKeyCreate,
    ApiKeyRevoke,
    AuditList,
    CapabilityInvoke,
    CapabilityLogs,
    CapabilityNextSteps,
    CodeCreate,
    CodeRevoke,
    ConfigGet,
    ConfigSet,
    ConnectorConnect,
    ConnectorDisconnect,
    ConnectorInvoke,
    GrantCreate,
    GrantRevoke,
    HoldDecide,
    HoldsList,
    HostSettingsSet,
    NoArguments,
    OwnerProfileSet,
    PluginAdd,
    PluginRemove,
    PluginUpgrade,
    RolePut,
    RulesSet,
    SessionEnd,
    ToolApprove,
    ToolsApprove,
)
from .next_steps import next_steps
from .progress import with_progress
from .services import OwnerServices, PluginAdmin

__all__ = ["TOOLS", "Answer", "OwnerTool"]

A = TypeVar("A", bound=BaseModel)
Answer = dict[str, Any] | types.CallToolResult
# How long `plugin_add` waits for the new plugin's first tool list (its child starting).
_FIRST_LIST_WAIT_S = 60.0
logger = logging.getLogger("owner_facade")
Summary = Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class OwnerTool(Generic[A]):
    """A row of the table: the tool as listed, its argument model, its handler, its audit summary."""

    name: str
    description: str
    model: type[A]
    handler: Callable[[OwnerServices, str, A], Awaitable[Answer]]
    summary: Summary = summarize

    def listed(self) -> types.Tool:
        return types.Tool(name=self.name, description=self.description, input_schema=self.input_schema())

    def input_schema(self) -> dict[str, Any]:
        return self.model.model_json_schema()


# -- capabilities -----------------------------------------------------------------------------


async def _capabilities_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    status = {entry.id: entry for entry in s.catalogue.entries()}
    connected = await s.connections.categories(owner_id)
    listed = []
    for plugin in s.plugins:
        m = plugin.manifest
        entry = status.get(m.id)
        owner_values = await s.config.for_plugin(m.id, m).get(owner_id, "owner")
        config: dict[str, list[dict[str, Any]]] = {}
        for scope in SCOPES:
            fields = [f.model_dump(mode="json") for f in declared(m, scope)]
            if scope == "owner":
                fields = [{**f, "value": owner_values.get(f["key"])} for f in fields]
            config[scope] = fields
        listed.append(
            {
                "id": m.id,
                "kind": entry.kind if entry is not None else m.kind,  # a lent capability: remote
                "title": m.title,
                "description": m.description,
                "acl": m.acl,
                "requires": [{"category": c, "connected": c in connected} for c in m.requires],
                "visitor_tools": list(m.visitor_tools),
                "owner_tools": [
                    {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                    for t in m.owner_tools
                ],
                "config": config,
                "quota": m.quota.model_dump(mode="json") if m.quota is not None else None,
                "claim_gate": m.claim_gate.model_dump(mode="json") if m.claim_gate is not None else None,
                "status": entry.status if entry is not None else "not_started",
                "cause": entry.cause if entry is not None else None,
                # A per-session plugin: how many visitor sessions' instances run now (None: shared).
                "instances": entry.instances if entry is not None else None,
            }
        )
    return {"capabilities": listed}


async def _capability_invoke(s: OwnerServices, owner_id: str, a: CapabilityInvoke) -> Answer:
    return await s.calls.invoke(owner_id, a.capability, a.tool, a.arguments)


async def _capability_logs(s: OwnerServices, owner_id: str, a: CapabilityLogs) -> Answer:
    """A plugin's latest stderr lines, exceptions and error results (escaped), and why its last
    process ended: for the owner's agent to debug a plugin. Never starts it."""
    logs = s.catalogue.logs(a.capability, a.lines)
    if logs is None:
        raise InvalidArguments(f"capability: no plugin named {a.capability[:80]!r} is loaded")
    return logs.model_dump(mode="json")


async def _capability_next_steps(s: OwnerServices, owner_id: str, a: CapabilityNextSteps) -> Answer:
    """What is left before a visitor can call the capability (`next_steps`, its pending tools once
    the host has listed them, as `tools_pending` waits for), with its status and why it does not
    start. Changes nothing and starts nothing: `mcp-host check` asks it of a running host."""
    plugin = _capability(s, a.capability)
    review = await tools_pending(s, owner_id, NoArguments())
    pending = [entry["tool"] for entry in review["pending"] if entry["capability"] == plugin.manifest.id]
    entry = next((e for e in s.catalogue.entries() if e.id == plugin.manifest.id), None)
    answer: dict[str, Any] = {
        "capability": plugin.manifest.id,
        "status": entry.status if entry is not None else "not_started",
        "cause": entry.cause if entry is not None else None,
    }
    if "note" in review:
        answer["note"] = review["note"]
    return answer | await next_steps(s, owner_id, plugin, pending)


# -- connectors -------------------------------------------------------------------------------


def _connection(c: Connection) -> dict[str, Any]:
    return {
        "category": c.category,
        "connector": c.connector,
        "settings": c.settings,
        "secrets_set": list(c.secrets_set),
        "connected_at": c.connected_at.isoformat(),
    }


async def _connectors_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    connections = {c.category: c for c in await s.connections.list(owner_id)}
    listed = []
    for plugin in s.plugins.connectors:
        m = plugin.manifest
        connection = connections.get(m.category or "")
        listed.append(
            {
                "id": m.id,
                "title": m.title,
                "description": m.description,
                "category": m.category,
                "verbs": list(m.verbs or ()),
                "settings": [st.model_dump(mode="json") for st in m.settings or ()],
                "connection": _connection(connection) if connection and connection.connector == m.id else None,
            }
        )
    return {"connectors": listed}


async def _connector_invoke(s: OwnerServices, owner_id: str, a: ConnectorInvoke) -> Answer:
    return await s.connectors.invoke(owner_id, a.category, a.verb, a.args)


async def _connector_connect(s: OwnerServices, owner_id: str, a: ConnectorConnect) -> Answer:
    connection = await s.connections.connect(owner_id, a.connector, a.settings)
    answer: dict[str, Any] = {"connection": _connection(connection)}
    plugin = s.plugin(a.connector, "connector")
    if plugin is not None and "connected" in (plugin.manifest.verbs or ()):
        # The connector's own word on whether the settings work (one call to its child).
        try:
            checked = await s.connectors.invoke(owner_id, connection.category, "connected", {})
            answer["connected"] = checked.structured_content
        except HostError as exc:
            answer["connected"] = {"code": exc.code, "message": exc.message}
    return answer


async def _connector_disconnect(s: OwnerServices, owner_id: str, a: ConnectorDisconnect) -> Answer:
    return {"disconnected": await s.connections.disconnect(owner_id, a.category)}


# -- config -----------------------------------------------------------------------------------


async def _scope_id(s: OwnerServices, owner_id: str, scope: ConfigScope, given: str | None) -> str:
    """The stored scope id for `given`: "" for the owner, a code's id for its text or id."""
    if scope == "owner":
        if given:
            raise InvalidArguments("scope_id: the owner scope takes no scope_id")
        return ""
    if not given:
        raise InvalidArguments(f"scope_id: the {scope} scope needs one")
    if scope == "code":
        code_id = await s.access.credentials.code_id(owner_id, given)
        if code_id is None:
            raise InvalidArguments("scope_id: no access code of this owner is that code or id")
        return code_id
    if scope == "role":
        if not await s.access.roles.exists(owner_id, given):
            raise InvalidArguments(f"scope_id: no role {given[:64]!r}")
        return given
    if not is_key_id(given) or given not in {k.id for k in await s.access.list_api_keys(owner_id)}:
        raise InvalidArguments(f"scope_id: no API key with id {given[:64]!r}")
    return given


def _capability(s: OwnerServices, capability: str) -> Plugin:
    plugin = s.plugin(capability, "capability")
    if plugin is None:
        raise InvalidArguments(f"capability: no capability named {capability[:80]!r} is loaded")
    return plugin


async def _config_get(s: OwnerServices, owner_id: str, a: ConfigGet) -> Answer:
    plugin = _capability(s, a.capability)
    scope_id = await _scope_id(s, owner_id, a.scope, a.scope_id)
    values = await s.config.for_plugin(plugin.manifest.id, plugin.manifest).get(owner_id, a.scope, scope_id)
    return {"capability": plugin.manifest.id, "scope": a.scope, "scope_id": scope_id or None, "values": values}


async def _config_set(s: OwnerServices, owner_id: str, a: ConfigSet) -> Answer:
    plugin = _capability(s, a.capability)
    scope_id = await _scope_id(s, owner_id, a.scope, a.scope_id)
    handle = s.config.for_plugin(plugin.manifest.id, plugin.manifest)
    values = await handle.set(owner_id, a.scope, scope_id, a.values)
    return {"capability": plugin.manifest.id, "scope": a.scope, "scope_id": scope_id or None, "values": values}


def _config_summary(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A code scope's `scope_id` may be the code's text: keep it only when it is an id. A
    string value may be a secret setting (the summary cannot tell): its text is not kept."""
    scope_id = arguments.get("scope_id")
    text = arguments.get("scope") == "code" and scope_id is not None and not is_code_id(scope_id)
    summary = summarize(arguments, secret={"scope_id"} if text else ())
    values = arguments.get("values")
    if isinstance(values, Mapping) and isinstance(summary.get("values"), dict):
        summary["values"] = {
            key: REDACTED if isinstance(values.get(key), str) else kept for key, kept in summary["values"].items()
        }
    return summary


# -- roles, codes, keys -----------------------------------------------------------------------


async def _role_put(s: OwnerServices, owner_id: str, a: RolePut) -> Answer:
    role = await s.access.put_role(owner_id, a.id, a.capabilities, a.config)
    return role.model_dump(mode="json")


async def _roles_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return {"roles": [r.model_dump(mode="json") for r in await s.access.list_roles(owner_id)]}


async def _code_create(s: OwnerServices, owner_id: str, a: CodeCreate) -> Answer:
    text, code = await s.access.create_code(owner_id, a.role, a.config, expires_at=a.expires_at, max_uses=a.max_uses)
    return {"code": text, **code.model_dump(mode="json")}


async def _codes_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return {"codes": [c.model_dump(mode="json") for c in await s.access.list_codes(owner_id)]}


async def _code_revoke(s: OwnerServices, owner_id: str, a: CodeRevoke) -> Answer:
    """`revoked: false` for a code already revoked; `unknown` for no code of this owner."""
    if await s.access.revoke_code(owner_id, a.code):
        return {"revoked": True}
    if await s.access.credentials.code_id(owner_id, a.code) is None:
        raise UnknownTool("no access code of yours is that code or id")
    return {"revoked": False}


def _code_summary(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Keep a code's id (it names the code), never its text."""
    code = arguments.get("code")
    return {**summarize(arguments), "code": code} if is_code_id(code) else summarize(arguments)


async def _api_key_create(s: OwnerServices, owner_id: str, a: ApiKeyCreate) -> Answer:
    text, key = await s.access.create_api_key(owner_id, a.role, a.config)
    return {"key": text, **key.model_dump(mode="json")}


async def _api_keys_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return {"api_keys": [k.model_dump(mode="json") for k in await s.access.list_api_keys(owner_id)]}


async def _api_key_revoke(s: OwnerServices, owner_id: str, a: ApiKeyRevoke) -> Answer:
    """`revoked: false` for a key already revoked; `unknown` for no key of this owner."""
    if await s.access.revoke_api_key(owner_id, a.id):
        return {"revoked": True}
    if a.id not in {key.id for key in await s.access.list_api_keys(owner_id)}:
        raise UnknownTool(f"no API key of yours has the id {a.id[:64]!r}")
    return {"revoked": False}


# -- sessions, audit, host settings -----------------------------------------------------------


async def _sessions_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    listed = [
        {
            "session_id": session.id,
            "mode": session.mode,
            "subject": session.subject.model_dump(mode="json") if session.subject else None,
            "visitor": session.visitor.model_dump(mode="json") if session.visitor else None,
            "role": session.role.id,
            "created_at": session.created_at.isoformat(),
            "credential_revoked": session.credential_revoked,
        }
        for session in await s.sessions.list_live(owner_id)
    ]
    return {"sessions": listed}


async def _session_end(s: OwnerServices, owner_id: str, a: SessionEnd) -> Answer:
    session = await s.sessions.get(a.session_id)
    if session is None or session.owner_id != owner_id:
        raise UnknownTool(f"no session {a.session_id[:64]!r}")
    return {"ended": await s.sessions.end(session.id)}


# -- holds ------------------------------------------------------------------------------------


async def _holds_list(s: OwnerServices, owner_id: str, a: HoldsList) -> Answer:
    """Visitor calls waiting for the owner (or every hold); `arguments` are the visitor's own words."""
    holds = await s.holds.of_owner(owner_id, everything=a.status == "all")
    return {"holds": [hold.shown() for hold in holds]}


async def _hold_decide(s: OwnerServices, owner_id: str, a: HoldDecide) -> Answer:
    return {"hold": (await s.holds.decide(owner_id, a.id, a.approve)).shown()}


# -- the owner's rules ------------------------------------------------------------------------


def _rules(s: OwnerServices) -> RuleGate:
    if s.rules is None:
        raise Unconfigured("this host has no rules")
    return s.rules


async def _rules_get(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    version, rules = await _rules(s).get(owner_id)
    return {"version": version, "rules": [r.model_dump(exclude_none=True) for r in rules]}


async def _rules_set(s: OwnerServices, owner_id: str, a: RulesSet) -> Answer:
    """Checked before anything changes: an invalid rule is refused naming its position (1-based)."""
    gate = _rules(s)
    version = await gate.set(owner_id, [r.model_dump() for r in a.rules])
    _, rules = await gate.get(owner_id)
    return {"version": version, "rules": [r.model_dump(exclude_none=True) for r in rules]}


# -- node grants ------------------------------------------------------------------------------


def _node_grants(s: OwnerServices) -> NodeGrants:
    if s.node_grants is None:
        raise Unconfigured("this host lends nothing to nodes")
    return s.node_grants


async def _grant_create(s: OwnerServices, owner_id: str, a: GrantCreate) -> Answer:
    """The token is in this answer only: the host keeps its sha256."""
    missing = [c for c in a.capabilities if s.plugin(c, "capability") is None]
    if missing:
        raise InvalidArguments(f"no capability named {missing[0][:64]!r} is loaded")
    token, grant = await _node_grants(s).create(owner_id, a.capabilities, a.budget.calls, a.expires_at, a.note)
    return {"grant": grant.shown(), "token": token}


async def _grants_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return {"grants": [g.shown() for g in await _node_grants(s).of_owner(owner_id)]}


async def _grant_revoke(s: OwnerServices, owner_id: str, a: GrantRevoke) -> Answer:
    grant = await _node_grants(s).revoke(owner_id, a.id)
    if grant is None:
        raise UnknownTool(f"no grant of yours has the id {a.id[:64]!r}")
    return {"grant": grant.shown()}


async def _audit_list(s: OwnerServices, owner_id: str, a: AuditList) -> Answer:
    rows = await s.audit.list(owner_id, since=a.since, limit=a.limit)
    return {"entries": [row.model_dump(mode="json") for row in rows]}


async def _host_settings_get(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return (await s.access.host_settings(owner_id)).model_dump(mode="json")


async def _host_settings_set(s: OwnerServices, owner_id: str, a: HostSettingsSet) -> Answer:
    changed = await s.access.set_host_settings(
        owner_id,
        public_sessions=a.public_sessions,
        public_role=a.public_role,
        tool_search_threshold=a.tool_search_threshold,
    )
    return changed.model_dump(mode="json")


# -- the owner's profile ----------------------------------------------------------------------


async def _owner_profile_get(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    owner = await s.owners.get(owner_id)
    if owner is None:  # the endpoint verified this owner's token a moment ago
        raise UnknownTool(f"no owner {owner_id[:64]!r}")
    return owner.profile()


async def _owner_profile_set(s: OwnerServices, owner_id: str, a: OwnerProfileSet) -> Answer:
    """Only the fields the call names change (`owners.check_profile` refuses a bad value)."""
    return (await s.owners.set_profile(owner_id, a.model_dump(include=a.model_fields_set))).profile()


# -- plugins installed while the host runs ---------------------------------------------------


def _admin(s: OwnerServices) -> PluginAdmin:
    if s.admin is None:
        raise Unconfigured("this host does not install plugins from the owner door")
    return s.admin


def _loaded(s: OwnerServices, done: Installed, *, replacing: str | None = None) -> Plugin:
    """The installed folder loaded as a plugin the running host can take: a capability with a
    new id (or the id `replacing`, an upgrade's) that names no host op (a plugin added now never
    gets a back-channel)."""
    report = load_plugins(None, [done.folder])
    if report.errors or len(report.plugins) != 1:
        raise InvalidArguments(f"the installed plugin {done.id} does not load; `mcp-host check` says why")
    plugin = report.plugins[0]
    pid = plugin.manifest.id
    if replacing is not None and pid != replacing:
        raise InvalidArguments(f"the new version of {replacing} names itself {pid}")
    if replacing is None and s.plugins.get(pid) is not None:
        raise InvalidArguments(f"a plugin {pid} is loaded already; choose another id")
    if plugin.manifest.kind != "capability":
        raise InvalidArguments(f"{pid} is a connector; a running host adds capabilities only (restart it)")
    if named_ops(plugin) or plugin.manifest.quota_gate() is not None:
        raise InvalidArguments(f"{pid} names host ops or a quota, which a plugin added while the host runs cannot use")
    return plugin


def _discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


async def _grant(s: OwnerServices, owner_id: str, role_id: str, pid: str) -> None:
    """Add `pid` to the capabilities of role `role_id`, its config kept (`plugin_add`'s `role`).
    A read, then a write: an owner's `role_put` of that role at the same moment may be lost."""
    role = await s.access.roles.get(owner_id, role_id)
    if role is None:
        raise InvalidArguments(f"role: no role {role_id[:64]!r}; nothing was installed")
    if pid in role.capabilities:
        return
    try:
        await s.access.put_role(owner_id, role_id, [*role.capabilities, pid])
    except InvalidArguments as exc:
        raise InvalidArguments(f"role: {role_id} cannot grant {pid} ({exc.message}); nothing was installed") from None


async def _plugin_add(s: OwnerServices, owner_id: str, a: PluginAdd) -> Answer:
    """Install, load and add a plugin; grant it to `role` (one that exists: checked before
    anything is installed); list its tools for the owner's review at once. A failure after the
    install removes the folder again: nothing is left behind. Answers with what it can reach and
    what is left before a visitor can call it (`next_steps`)."""
    admin = _admin(s)
    if a.id is not None and s.plugins.get(a.id) is not None:
        raise InvalidArguments(f"a plugin {a.id[:64]} is loaded already; choose another id")
    if a.role is not None and not await s.access.roles.exists(owner_id, a.role):
        raise InvalidArguments(f"role: no role {a.role[:64]!r} (roles_list shows yours; role_put makes one)")
    label = f"installing {printable(a.source, 80)}"
    done = await with_progress(label, lambda: _services.install(a.source, admin.data_dir, a.id))
    try:
        plugin = _loaded(s, done)
    except BaseException:
        await anyio.to_thread.run_sync(_discard, done.folder)
        raise
    s.plugins.add(plugin)
    pid = plugin.manifest.id
    if a.role is not None:
        try:
            await _grant(s, owner_id, a.role, pid)
        except BaseException:
            s.plugins.remove(pid)
            await anyio.to_thread.run_sync(_discard, done.folder)
            raise
    if s.review is not None:
        with anyio.move_on_after(_FIRST_LIST_WAIT_S):
            await s.review.all([plugin])  # lists it in owner context: its tools are pending now
    admin.announce(pid)  # the sessions that see it relist (its tools show once approved)
    pending = [t.tool for t in await s.pins.pending() if t.plugin_id == pid] if s.pins is not None else []
    fields = declared(plugin.manifest, "owner")
    return {
        "capability": pid,
        "version": done.version,
        "folder": str(done.folder),
        "role": a.role,
        "pending_tools": pending,
        "config_to_set": [
            {"key": f.key, "type": f.type, "default": f.default, "description": f.description}
            | {"required": f.required, "secret": f.secret}
            for f in fields
        ],
        "reaches": reach(plugin.manifest, plugin.folder),
        **await next_steps(s, owner_id, plugin, pending),
    }


_MANIFEST = "manifest.yaml"  # an installed plugin's, whose first line names its source
_SOURCE_RE = re.compile(r"\A# Installed by `mcp-host plugin add (.{1,300})` on ")


def _source_of(folder: Path) -> str | None:
    try:
        with (folder / _MANIFEST).open(encoding="utf-8") as file:
            first = file.readline(512)
    except OSError:
        return None
    found = _SOURCE_RE.match(first)
    return found.group(1) if found else None


async def _plugins_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    """The plugins installed in the data directory: id, source, version, folder, and loaded."""
    admin = _admin(s)
    out = []
    for name, folder, manifest in await anyio.to_thread.run_sync(installed, admin.data_dir):
        pid = manifest.id if manifest is not None else name
        out.append(
            {
                "id": pid,
                "source": _source_of(folder),
                "version": manifest.version if manifest is not None else None,
                "folder": str(folder),
                "loaded": s.plugins.get(pid) is not None,
            }
        )
    return {"plugins": out}


async def _plugin_remove(s: OwnerServices, owner_id: str, a: PluginRemove) -> Answer:
    """Stop an installed plugin's children, drop it from the registry and delete its folder;
    with `purge` also its store and config."""
    admin = _admin(s)
    if not (plugins_dir(admin.data_dir) / a.id).is_dir():
        raise InvalidArguments(f"no plugin {a.id[:64]} is installed in {plugins_dir(admin.data_dir)}")
    admin.announce(a.id)  # first: the sessions that see it now (they relist once it is gone)
    plugin = s.plugins.remove(a.id)
    admin.children.stop_plugin(a.id)
    s.catalogue.forget(a.id)  # a re-install is vetted and recorded with the pins afresh
    folder = await anyio.to_thread.run_sync(remove, admin.data_dir, a.id)
    answer: dict[str, Any] = {"removed": a.id, "folder": str(folder), "was_loaded": plugin is not None}
    if a.purge:
        gone = await uninstall(admin.database, plugin.manifest.kind if plugin else "capability", a.id)
        pins = await s.pins.forget(a.id) if s.pins is not None else 0
        answer["purged"] = {
            "store_dropped": gone.schema_dropped,
            "config_rows_deleted": gone.config_rows_deleted,
            "tool_pins_deleted": pins,
        }
    return answer


async def _tried(s: OwnerServices, owner_id: str, admin: PluginAdmin, plugin: Plugin) -> list[str]:
    """Start the staged new version in owner context beside the old one (its own pool key, no
    host socket) and list its tools; stopped again either way. It starts with the variables the
    owner's config gives the plugin (`OwnerEnv`, the env source real starts read), so a version
    that needs a setting the owner has set starts as it will once switched in. A failure raises
    one sentence; a required setting left unset names it."""
    assert admin.settings is not None
    settings, key = admin.settings, f"{plugin.manifest.id}#upgrade"
    env = OwnerEnv(s.config, owner_id)

    async def launch() -> Launch:
        given = await env.child_config(plugin)  # ${config.KEY} in its arguments resolved too
        return launch_for(plugin, settings, extra_env=given.env, args=given.args)

    try:
        await env.env_for(plugin)  # a required setting left unset: said, before anything spawns
    except ConfigUnset as exc:
        raise InvalidArguments(f"the new version cannot start: {exc.message}; the old one keeps running") from None
    try:
        child = admin.children.child(key, launch, per_session=plugin.manifest.per_session)
        tools = await child.list_tools(timeout_s=_FIRST_LIST_WAIT_S)
    except HostError as exc:
        why = f"the new version did not list its tools ({exc.code}); the old one keeps running"
        raise InvalidArguments(why) from None
    finally:
        admin.children.stop_plugin(key)
    return [t.name for t in tools]


async def _plugin_upgrade(s: OwnerServices, owner_id: str, a: PluginUpgrade) -> Answer:
    """Install the new version beside the old one, list its tools, and only then switch: stop the
    old children, swap the folders, replace it in the registry and list it for the owner's
    review (changed definitions are pending again). Any failure before the switch deletes the
    new folder; the old version keeps running untouched."""
    admin = _admin(s)
    if admin.settings is None:
        raise Unconfigured("this host does not upgrade plugins from the owner door")
    old = s.plugins.get(a.id)
    label = f"upgrading {a.id}"
    staged = await with_progress(label, lambda: _services.upgrade(a.id, a.version, a.source, admin.data_dir))
    try:
        plugin = _loaded(s, staged, replacing=a.id)
        tools = await _tried(s, owner_id, admin, plugin)
    except BaseException:
        await anyio.to_thread.run_sync(_discard, staged.folder)
        raise
    s.plugins.remove(a.id)
    admin.children.stop_plugin(a.id)
    folder = await anyio.to_thread.run_sync(switch_upgrade, admin.data_dir, a.id, staged.folder)
    new = _loaded(s, dataclasses.replace(staged, folder=folder), replacing=a.id)
    s.plugins.add(new)
    if s.review is not None:
        with anyio.move_on_after(_FIRST_LIST_WAIT_S):
            await s.review.all([new])  # the pins see the new definitions: changed ones are pending
    admin.announce(a.id)
    pending = [t.tool for t in await s.pins.pending() if t.plugin_id == a.id] if s.pins is not None else []
    return {
        "capability": a.id,
        "from_version": old.manifest.version if old is not None else None,
        "version": staged.version,
        "folder": str(folder),
        "tools": tools,
        "pending_tools": pending,
    }


_TABLE: list[OwnerTool[Any]] = [
    OwnerTool(
        "capabilities_list",
        "Every plugin with what its manifest declares: tools, config (with the owner's values), "
        "requirements and whether they are connected, quota, claim gate, status, and for a plugin "
        "with one instance per visitor session how many run now (instances). Starts no plugin.",
        NoArguments,
        _capabilities_list,
    ),
    OwnerTool(
        "capability_invoke",
        "Run a capability's declared owner tool (`tool` as listed in its owner_tools) for the owner.",
        CapabilityInvoke,
        _capability_invoke,
    ),
    OwnerTool(
        "capability_next_steps",
        "What is left before a visitor can call a capability: next (each step an owner tool with its "
        "arguments: approve its pending tools, a required setting, a connector, a role, an access code), "
        "visitors (the roles that grant it, whether public sessions get it, whose code opens a session that "
        "does), and its status. Changes nothing.",
        CapabilityNextSteps,
        _capability_next_steps,
    ),
    OwnerTool(
        "capability_logs",
        "A plugin's latest log lines — what its process wrote to stderr, each exception it raised (type, "
        "message, last frames) and each error result of its tools — escaped, oldest first, with its status "
        "and why its last process ended. For debugging a plugin; starts none.",
        CapabilityLogs,
        _capability_logs,
    ),
    OwnerTool(
        "connectors_list",
        "Every connector, its verbs and settings, and the owner's connection.",
        NoArguments,
        _connectors_list,
    ),
    OwnerTool(
        "connector_invoke", "Call a verb of the connector connected for `category`.", ConnectorInvoke, _connector_invoke
    ),
    OwnerTool(
        "connector_connect",
        "Connect a connector for its category (replacing the one before). Secret settings are write-only.",
        ConnectorConnect,
        _connector_connect,
    ),
    OwnerTool(
        "connector_disconnect",
        "Remove the owner's connection for `category`.",
        ConnectorDisconnect,
        _connector_disconnect,
    ),
    OwnerTool(
        "config_get",
        "A capability's config values at a scope (owner | code | role | key); scope_id: the code as issued "
        "or its id, the role id, or the API key's id.",
        ConfigGet,
        _config_get,
        _config_summary,
    ),
    OwnerTool(
        "config_set",
        "Set config values at a scope (null resets a key to its default).",
        ConfigSet,
        _config_set,
        _config_summary,
    ),
    OwnerTool(
        "role_put", "Create or replace a role: the capabilities it grants and their role config.", RolePut, _role_put
    ),
    OwnerTool("roles_list", "The owner's roles.", NoArguments, _roles_list),
    OwnerTool("code_create", "A new access code for a role; its text is shown once.", CodeCreate, _code_create),
    OwnerTool("codes_list", "The owner's access codes (never their text).", NoArguments, _codes_list),
    OwnerTool(
        "code_revoke", "Revoke an access code, given as issued or by its id.", CodeRevoke, _code_revoke, _code_summary
    ),
    OwnerTool("api_key_create", "A new API key for a role; its text is shown once.", ApiKeyCreate, _api_key_create),
    OwnerTool("api_keys_list", "The owner's API keys (never their text).", NoArguments, _api_keys_list),
    OwnerTool("api_key_revoke", "Revoke an API key by its id.", ApiKeyRevoke, _api_key_revoke),
    OwnerTool("sessions_list", "The live visitor sessions: mode, subject, role.", NoArguments, _sessions_list),
    OwnerTool("session_end", "End a visitor session.", SessionEnd, _session_end),
    OwnerTool(
        "tools_pending",
        "Tools hidden from visitors until you approve them (new, or changed since approval), "
        "with the approved and the live definition side by side, and the tools visitors see now "
        "that approving one would hide (collides_with: a name that differs only in case, '-' or '_'); "
        "and, under rejected, the tools no visitor is shown whatever you approve (unsafe name, text or "
        "schema), each with its cause.",
        NoArguments,
        tools_pending,
    ),
    OwnerTool(
        "tool_approve",
        "Approve a tool's live definition, so visitors can see and call it. A tool that collides "
        "with one visitors see needs hide_colliding: true, and then hides both (listed in `hidden`).",
        ToolApprove,
        tool_approve,
    ),
    OwnerTool(
        "tools_approve",
        "Approve every pending tool of a capability at once (or the ones `tools` names, each with the "
        "live_sha256 you reviewed), all or none; answers each approved tool with its definition and "
        "live_sha256, the rejected ones it left out, and what is left before a visitor can call the "
        "capability (next: each an owner tool with its arguments).",
        ToolsApprove,
        tools_approve,
    ),
    OwnerTool(
        "holds_list",
        "Visitor calls to destructive tools waiting for your approval (status: pending, the default, "
        "or all), with the visitor's arguments.",
        HoldsList,
        _holds_list,
    ),
    OwnerTool(
        "hold_decide",
        "Approve or deny a pending hold; an approved call runs once, when the visitor repeats it unchanged.",
        HoldDecide,
        _hold_decide,
    ),
    OwnerTool(
        "plugin_add",
        "Install an MCP server as a plugin and add it to the running host: npm:<package>[@<version>], "
        "pypi:<package>[==<version>], a path to an .mcpb bundle or a registry entry (server.json, any .json), "
        "or the https:// URL of a remote MCP server (nothing runs here; the host calls it). Reports npm's or "
        "pip's lines as progress; answers with the new capability, its tools pending your approval, the config "
        "it declares, what it can reach (its own folder read-only, a private /tmp, no network) and the next "
        "steps before a visitor can call it, each an owner tool with its arguments. `role` grants it to that "
        "role now (its tools show once approved); without it no role grants it.",
        PluginAdd,
        _plugin_add,
    ),
    OwnerTool("plugins_list", "The plugins installed in the data directory.", NoArguments, _plugins_list),
    OwnerTool(
        "plugin_remove",
        "Remove an installed plugin: stop its processes, drop its tools, delete its folder; purge: true "
        "also deletes its store and config values.",
        PluginRemove,
        _plugin_remove,
    ),
    OwnerTool(
        "plugin_upgrade",
        "Upgrade an installed plugin: one from npm or PyPI to `version` (default: the newest); one from an "
        ".mcpb bundle from `source`, the new bundle's path; one from a server.json from `source` (default: the "
        "same file, read again). A source of another kind is refused. Installs the new version beside the "
        "old one (reporting npm's or pip's lines as progress), lists its tools, and switches only when that "
        "succeeds; changed tools wait for your approval again. On any failure the old version keeps running and "
        "nothing is left behind.",
        PluginUpgrade,
        _plugin_upgrade,
    ),
    OwnerTool(
        "rules_get",
        "Your rules, in order, and their version: CEL conditions that allow, refuse or hold each call.",
        NoArguments,
        _rules_get,
    ),
    OwnerTool(
        "rules_set",
        "Replace your rules: an ordered list of {name?, when (CEL), effect: allow|refuse|hold, reason?}, "
        "checked for every visitor call and owner-context call before it reaches a plugin. Each condition is "
        "checked now; an invalid one is refused naming its position and why, and nothing changes.",
        RulesSet,
        _rules_set,
    ),
    OwnerTool(
        "grant_create",
        "Lend capabilities to a node (another mcp-host started with --parent and this token): "
        "{capabilities, budget: {calls}, expires_at?, note}. Every node call is decided here when it is made "
        "(live grant, your rules, one call of the budget). The token is shown once.",
        GrantCreate,
        _grant_create,
    ),
    OwnerTool("grants_list", "Your node grants (never their tokens), with budget used.", NoArguments, _grants_list),
    OwnerTool("grant_revoke", "Revoke a node grant: the node's next call is refused.", GrantRevoke, _grant_revoke),
    OwnerTool("audit_list", "The owner tool calls made so far, newest first.", AuditList, _audit_list),
    OwnerTool(
        "host_settings_get",
        "Whether public sessions are on, and their role; the tool search threshold.",
        NoArguments,
        _host_settings_get,
    ),
    OwnerTool(
        "host_settings_set",
        "Turn public sessions on or off; choose their role; set the tool search threshold.",
        HostSettingsSet,
        _host_settings_set,
    ),
    OwnerTool(
        "owner_profile_get",
        "Your profile: name, email address and IANA timezone (null where unset). Plugins read it.",
        NoArguments,
        _owner_profile_get,
    ),
    OwnerTool(
        "owner_profile_set",
        "Set your name, email address or IANA timezone; fields you omit are kept, null unsets one. "
        "Plugins use them (a timezone for working hours, an address to send to). Returns the profile.",
        OwnerProfileSet,
        _owner_profile_set,
    ),
]

TOOLS: dict[str, OwnerTool[Any]] = {tool.name: tool for tool in _TABLE}
