"""The capabilities slice of the owner tool table: every plugin as its manifest declares it,
running a capability's owner tool, what is left before a visitor can call one, its logs.

Above: `tools` (the one table). Below: `services`, `approvals` (`tools_pending`), `next_steps`.
"""

from __future__ import annotations

from typing import Any

from mcp_host.errors import InvalidArguments
from mcp_host.store import SCOPES, EgressGrants, declared

from .approvals import tools_pending
from .models import CapabilityInvoke, CapabilityLogs, CapabilityNextSteps, NoArguments
from .next_steps import next_steps
from .owner_tool import Answer, OwnerTool, loaded_capability
from .services import OwnerServices

__all__ = ["CAPABILITY_TOOLS"]


async def _capabilities_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    if s.sign_ins is not None:
        await s.sign_ins.refresh()  # another replica may have signed one in or out
    owner_egress = await EgressGrants(s.admin.database).all() if s.admin is not None else {}
    status = {entry.id: entry for entry in s.catalogue.entries(owner_egress)}
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
                # A remote plugin whose server asked for a sign-in: connected, expired, needs_sign_in.
                "sign_in": entry.sign_in if entry is not None else None,
                # A sandboxed plugin: the hosts it may reach (manifest, owner), what it was refused.
                "egress": entry.egress.model_dump(mode="json") if entry is not None and entry.egress else None,
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
    plugin = loaded_capability(s, a.capability)
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


CAPABILITY_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "capabilities_list",
        "Every plugin with what its manifest declares: tools, config (with the owner's values), "
        "requirements and whether they are connected, quota, claim gate, status, for a plugin "
        "with one instance per visitor session how many run now (instances), and for a sandboxed one its "
        "egress (the hosts it may reach, from its manifest and from you, and those it was refused). Starts no "
        "plugin.",
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
]
