"""The policy slice of the owner tool table: the owner's rules, the grants that lend capabilities
to nodes, and the audit of owner tool calls.

Above: `tools` (the one table). Below: `services` (`RuleGate`, `NodeGrants`, `AuditLog`).
"""

from __future__ import annotations

from typing import Any

from mcp_host.errors import InvalidArguments, Unconfigured, UnknownTool
from mcp_host.policy import NodeGrants, RuleGate

from .models import AuditList, GrantCreate, GrantRevoke, NoArguments, RulesSet
from .owner_tool import Answer, OwnerTool
from .services import OwnerServices

__all__ = ["POLICY_TOOLS"]


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


POLICY_TOOLS: list[OwnerTool[Any]] = [
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
]
