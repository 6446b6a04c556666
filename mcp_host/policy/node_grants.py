"""Node grants: what the owner lends to a node (another host holding the token), and the
decision on each of the node's calls, made here at the parent when the call is made.

Above: the owner door (`grant_create`, `grants_list`, `grant_revoke`) and the node endpoint
(`visitor.node`). Below: `store.NodeGrantStore` (only the token's sha256 is kept; the budget is
spent by one conditional UPDATE), `rules` (the owner's rules see `session.kind == "node"` and
`grant`), `holds` (through the rules), `audit` (why a node's call was refused, with the node's
request id). Not `backchannel.grants`: those are per-call host-op tokens of a plugin.

`admit` decides, in order: the token is genuine (a known sha256), the grant live (not revoked,
not expired) and naming the capability; the owner's rules allow it (a hold waits for the
owner's approval, used once); then one call of the budget is spent, exactly across replicas. A
refused or held call spends nothing. Every refusal is `Denied("denied")` for the node, which
learns nothing more; the audit row (`node_call`) says why, with the grant, the capability, the
tool and the node's request id.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mcp_host.errors import Denied, Held, InvalidArguments
from mcp_host.store import NodeGrantRow

from .audit import summarize
from .rules import CallFacts

if TYPE_CHECKING:
    from mcp_host.store import NodeGrantStore

    from .audit import AuditLog
    from .rules import RuleGate

__all__ = ["TOKEN_PREFIX", "NodeGrant", "NodeGrants", "node_call"]

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "mcpn_"
_DENIED = "denied"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


NodeGrant = NodeGrantRow
"""A grant as the owner and the rules see it (never its token): the store's row, one type."""


def node_call(
    grant: NodeGrant, capability: str, tool: str, annotations: Mapping[str, Any], arguments: Mapping[str, Any] | None
) -> CallFacts:
    """A node's call as the owner's rules see it: `session.kind` "node", `grant` {id, note,
    capabilities}; held per grant; counted per grant. With no rule matching, a call to a tool
    annotated destructive is held, as a visitor's is."""
    return CallFacts(
        owner_id=grant.owner_id,
        kind="node",
        capability=capability,
        tool=tool,
        annotations=dict(annotations),
        arguments=dict(arguments or {}),
        session={
            "kind": "node",
            "id": f"node:{grant.id}",
            "mode": "node",
            "subject": grant.id,
            "subject_kind": "node_grant",
            "role": None,
            "visitor": {"name": None, "email": None},
        },
        hold_session=f"node:{grant.id}",
        subject=f"node_grant:{grant.id}",
        destructive=annotations.get("destructiveHint") is True,  # held by default, as a visitor's
        grant={"id": grant.id, "note": grant.note, "capabilities": list(grant.capabilities)},
    )


class NodeGrants:
    """Minting, listing and revoking node grants, and deciding each node call."""

    def __init__(self, store: NodeGrantStore, rules: RuleGate | None, audit: AuditLog | None) -> None:
        self._store = store
        self._rules = rules
        self._audit = audit

    async def create(
        self, owner_id: str, capabilities: list[str], calls: int, expires_at: datetime | None, note: str
    ) -> tuple[str, NodeGrant]:
        """A new grant and its token (shown once: only its sha256 is stored)."""
        if expires_at is not None and expires_at.tzinfo is None:
            raise InvalidArguments("expires_at needs a timezone (e.g. 2027-01-01T00:00:00Z)")
        if expires_at is not None and expires_at <= datetime.now(UTC):
            raise InvalidArguments("expires_at is in the past")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = await self._store.create(
            "ng_" + secrets.token_hex(8), owner_id, _digest(token), sorted(set(capabilities)), calls, expires_at, note
        )
        return token, row

    async def of_owner(self, owner_id: str) -> list[NodeGrant]:
        return await self._store.of_owner(owner_id)

    async def revoke(self, owner_id: str, grant_id: str) -> NodeGrant | None:
        return await self._store.revoke(owner_id, grant_id)

    async def genuine(self, token: str) -> NodeGrant | None:
        """The grant `token` is for (live or not); None for a token nobody minted."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return None
        return await self._store.by_token(_digest(token))

    async def live(self, token: str) -> NodeGrant | None:
        """The live grant `token` is for; None otherwise (the node's listing shows nothing)."""
        grant = await self.genuine(token)
        return grant if grant is not None and grant.live() else None

    async def admit(
        self,
        token: str,
        capability: str,
        tool: str,
        annotations: Mapping[str, Any],
        arguments: Mapping[str, Any] | None,
        request_id: str | None,
    ) -> NodeGrant:
        """Decide the node's call now; the grant it runs under. Raises `Denied("denied")` (the
        node learns nothing more; the audit says why) or `Held` (the owner decides; the node
        calls again once approved)."""
        grant = await self.genuine(token)
        if grant is None:
            raise Denied(_DENIED)  # no owner to audit for
        where = {"grant": grant.id, "capability": capability, "tool": tool, "request_id": request_id}
        if grant.revoked_at is not None:
            await self._refused(grant.owner_id, where, "the grant is revoked")
        if not grant.live():
            await self._refused(grant.owner_id, where, "the grant has expired")
        if capability not in grant.capabilities:
            await self._refused(grant.owner_id, where, "the grant does not name the capability")
        if self._rules is not None:
            try:
                await self._rules.admit(node_call(grant, capability, tool, annotations, arguments))
            except Held:
                await self._record(grant.owner_id, where, "held", "a rule holds the call for the owner")
                raise
            except Denied:
                await self._refused(grant.owner_id, where, "the owner's rules refuse the call")
        if await self._store.spend(grant.id) is None:
            await self._refused(grant.owner_id, where, "the budget is spent, or the grant ended meanwhile")
        await self._record(grant.owner_id, where, "ok", None)
        return grant

    async def _refused(self, owner_id: str, where: dict[str, Any], why: str) -> None:
        logger.info(
            "node call %s/%s under %s refused: %s", where["capability"], where["tool"][:80], where["grant"], why
        )
        await self._record(owner_id, where, "denied", why)
        raise Denied(_DENIED)

    async def _record(self, owner_id: str, where: dict[str, Any], outcome: str, why: str | None) -> None:
        if self._audit is None:
            return
        row = {**where, "why": why} if why else dict(where)
        try:
            await self._audit.record(owner_id, "node_call", summarize(row), outcome)
        except Exception:  # the decision stands whether or not the row is written
            logger.warning("the audit row of a node call could not be written", exc_info=True)
