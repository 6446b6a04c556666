"""Grants: the short-lived tokens that authorise a child's host ops for one forwarded call.

Above: the doors (the visitor door mints one around each forwarded `tools/call` to a plugin
that named host ops) and the back-channel (which redeems the token every op carries). Below:
nothing (`secrets`, `hashlib`).

A grant is bound to the plugin it was minted for, the owner, the call's trusted scope (the
session, or owner context) and the tool called, with a budget of host-op calls. Only the
token's sha256 digest is kept. It is live from `issue` until the forwarded call returns or
times out (`with book.issue(...)` ends it on every exit path), so a token a child keeps is
worthless afterwards. Grants live in the memory of the replica that forwards the call: the
child that can present one is spoken to by this replica alone, and the grant dies with the
call, so nothing that must survive a replica is lost with it (docs/design.md "Data").

Every refusal is a `Denied` whose message is the reason, for the log; the back-channel tells
the child no more than `denied`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp_host.access import Session, Subject
from mcp_host.children import InFlight
from mcp_host.errors import Denied

__all__ = ["Grant", "GrantBook", "CallScope"]

_TOKEN_BYTES = 32
_MAX_TOKEN_CHARS = 128


@dataclass(frozen=True)
class CallScope:
    """Who a forwarded call is for, as the host knows it: a visitor session, or the owner."""

    owner_id: str
    session: Session | None = None

    @property
    def subject(self) -> Subject | None:
        return self.session.subject if self.session is not None else None

    @property
    def mode(self) -> str:
        return self.session.mode if self.session is not None else "owner"

    def wire(self) -> dict[str, Any]:
        """The trusted `mcp-host/session` value of the Plugin ABI."""
        session = self.session
        if session is None:
            return {
                "owner_id": self.owner_id,
                "session_id": None,
                "mode": "owner",
                "subject": None,
                "visitor": None,
                "role": None,
            }
        return {
            "owner_id": session.owner_id,
            "session_id": session.id,
            "mode": session.mode,
            "subject": session.subject.model_dump() if session.subject else None,
            "visitor": session.visitor.model_dump() if session.visitor else None,
            "role": session.role.id,
        }


@dataclass
class Grant:
    """What a live grant allows: ops of `plugin_id`, for `scope`, while budget lasts."""

    plugin_id: str
    scope: CallScope
    tool: str
    budget: int
    refusals: list[str] = field(default_factory=list)
    """Error codes of ops refused under this grant (the door reads `quota_exhausted`)."""
    call: InFlight | None = None
    """The forwarded call, and the client it came from (`inference.generate` asks it)."""


class GrantBook:
    """The live grants of this replica, by token digest."""

    def __init__(self, *, budget: int) -> None:
        self._budget = budget
        self._live: dict[bytes, Grant] = {}

    @contextmanager
    def issue(
        self, plugin_id: str, scope: CallScope, tool: str, call: InFlight | None = None
    ) -> Iterator[tuple[str, Grant]]:
        """Mint a grant for one forwarded call; it ends when the block exits, however it exits."""
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        digest = _digest(token)
        grant = Grant(plugin_id, scope, tool, self._budget, call=call)
        self._live[digest] = grant
        try:
            yield token, grant
        finally:
            del self._live[digest]

    def redeem(self, token: object, plugin_id: str) -> Grant:
        """Spend one op of the grant `token` for `plugin_id`'s op; the grant, if it may.

        Raises Denied (the reason is for the log only) when the token is missing or not one
        of ours, has ended, was minted for another plugin, or has no budget left.
        """
        if not isinstance(token, str) or not token:
            raise Denied("the op carried no grant")
        if len(token) > _MAX_TOKEN_CHARS:
            raise Denied("the op carried a grant that is not one of ours")
        grant = self._live.get(_digest(token))
        if grant is None:
            raise Denied("the grant is not live (never issued, or its call has ended)")
        if grant.plugin_id != plugin_id:
            raise Denied(f"the grant was minted for {grant.plugin_id}")
        if grant.budget <= 0:
            raise Denied(f"the grant's budget of host ops for {grant.tool} is spent")
        grant.budget -= 1
        return grant

    def live_count(self) -> int:
        return len(self._live)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
