"""What the owner still has to do before a visitor can call a capability: the `next` steps that
`plugin_add` and `tools_approve` answer with, each an owner tool and its exact arguments, and
who can reach the capability once they are done.

Above: `plugin_tools`, `approvals`. Below: `services` (roles, host settings, config,
connections) and `mcp_host`'s public surface.

The steps, in the order a visitor needs them: approve the pending tools; set each required
owner setting still unset; connect each required connector category not connected; grant it
to a role when no role grants it (a role named `guests`: made with it alone, or given it beside
what it grants); and, unless public sessions get it, an access code for a role that grants it.
A value only the owner knows (a setting, a connector's settings) is written `…`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp_host.plugins import Plugin
from mcp_host.store import declared

from .services import OwnerServices

__all__ = ["SUGGESTED_ROLE", "next_steps"]

SUGGESTED_ROLE = "guests"
"""The role the grant step names when no role grants the capability yet."""
_THE_OWNERS = "…"  # a value only the owner can give, in a step's arguments


def _step(step: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"step": step, "tool": tool, "arguments": arguments}


async def _setup_steps(s: OwnerServices, owner_id: str, plugin: Plugin) -> list[dict[str, Any]]:
    """Set each required owner setting still unset; connect each required category."""
    m = plugin.manifest
    steps = []
    values = await s.config.for_plugin(m.id, m).get(owner_id, "owner")
    for field in declared(m, "owner"):
        if field.required and values.get(field.key) in (None, {"set": False}):
            arguments = {"capability": m.id, "scope": "owner", "values": {field.key: _THE_OWNERS}}
            steps.append(_step(f"set its required setting {field.key}", "config_set", arguments))
    connected = await s.connections.categories(owner_id)
    for category in m.requires:
        if category in connected:
            continue
        offered = [c.manifest for c in s.plugins.connectors if c.manifest.category == category]
        connector = offered[0].id if offered else _THE_OWNERS
        settings = {st.key: _THE_OWNERS for st in (offered[0].settings or ())} if offered else {}
        arguments = {"connector": connector, "settings": settings}
        steps.append(_step(f"connect a connector of category {category}", "connector_connect", arguments))
    return steps


async def next_steps(s: OwnerServices, owner_id: str, plugin: Plugin, pending: Sequence[str]) -> dict[str, Any]:
    """`{"next": [{step, tool, arguments}, …], "visitors": {roles, public, code_role}}` for
    `plugin`, whose tools `pending` still wait for approval. `visitors.roles`: the roles that
    grant it; `public`: whether a public session gets it; `code_role`: the role whose access
    code opens a session that gets it (None when public sessions do)."""
    m = plugin.manifest
    steps = []
    if pending:
        steps.append(_step(f"approve its pending tools ({', '.join(pending)})", "tools_approve", {"capability": m.id}))
    steps += await _setup_steps(s, owner_id, plugin)
    granting = [role.id for role in await s.access.list_roles(owner_id) if m.id in role.capabilities]
    settings = await s.access.host_settings(owner_id)
    everyone = m.acl == "always"
    public = settings.public_sessions and (everyone or settings.public_role in granting)
    code_role: str | None = None
    if public:
        pass
    elif everyone:
        code_role = settings.public_role  # every session sees it: a code of any role opens one
    elif granting:
        code_role = next((r for r in granting if r != settings.public_role), granting[0])
    elif m.id in s.access.grantable():
        suggested = await s.access.roles.get(owner_id, SUGGESTED_ROLE)
        granted = sorted({*(suggested.capabilities if suggested is not None else ()), m.id})
        arguments = {"id": SUGGESTED_ROLE, "capabilities": granted}
        steps.append(_step(f"grant it to a role (here {SUGGESTED_ROLE}, or any of roles_list)", "role_put", arguments))
        code_role = SUGGESTED_ROLE
    if code_role is not None:
        step = f"make an access code of role {code_role} for a visitor (its text is shown once)"
        steps.append(_step(step, "code_create", {"role": code_role}))
    return {"next": steps, "visitors": {"roles": granting, "public": public, "code_role": code_role}}
