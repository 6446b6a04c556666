"""Node grants as stored: what the owner lends to a node, and the budget each call spends.

Above: `policy.node_grants` (minting, the decision at call time). Below: asyncpg, the table
`mcp_host.node_grants` (migration 013).

Not `backchannel.grants` (the per-call token a plugin's host ops present): a node grant is the
owner's, long-lived, and names capabilities and a budget of calls. Only the token's sha256 is
kept. `spend` is one statement, `UPDATE … SET used = used + 1 WHERE used < calls … RETURNING`,
in a transaction of its own: two replicas spending the last call cannot both get it, and a
revoked or expired grant spends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .database import PgPool

__all__ = ["NodeGrantRow", "NodeGrantStore"]

_COLUMNS = "id, owner_id, capabilities, calls, used, expires_at, note, created_at, revoked_at"

_SPEND = """
UPDATE mcp_host.node_grants SET used = used + 1
WHERE id = $1 AND used < calls AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
RETURNING used
"""


@dataclass(frozen=True)
class NodeGrantRow:
    """A grant as stored, and as the owner and the rules see it (`policy.NodeGrant` is this
    type): never its token."""

    id: str
    owner_id: str
    capabilities: tuple[str, ...]
    calls: int
    used: int
    expires_at: datetime | None
    note: str
    created_at: datetime
    revoked_at: datetime | None

    def live(self, at: datetime | None = None) -> bool:
        now = at or datetime.now(UTC)
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def shown(self) -> dict[str, Any]:
        """The grant as the owner's `grants_list` shows it, with its status."""
        status = "revoked" if self.revoked_at is not None else "live" if self.live() else "expired"
        if status == "live" and self.used >= self.calls:
            status = "spent"
        return {
            "id": self.id,
            "capabilities": list(self.capabilities),
            "budget": {"calls": self.calls, "used": self.used, "remaining": max(0, self.calls - self.used)},
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "note": self.note,
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "status": status,
        }


def _row(record: Any) -> NodeGrantRow:
    return NodeGrantRow(
        id=record["id"],
        owner_id=record["owner_id"],
        capabilities=tuple(record["capabilities"]),
        calls=int(record["calls"]),
        used=int(record["used"]),
        expires_at=record["expires_at"],
        note=record["note"],
        created_at=record["created_at"],
        revoked_at=record["revoked_at"],
    )


class NodeGrantStore:
    """The node grants in Postgres."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def create(
        self,
        grant_id: str,
        owner_id: str,
        token_sha256: bytes,
        capabilities: list[str],
        calls: int,
        expires_at: datetime | None,
        note: str,
    ) -> NodeGrantRow:
        record = await self._pool.fetchrow(
            "INSERT INTO mcp_host.node_grants (id, owner_id, token_sha256, capabilities, calls, expires_at, note) "
            f"VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_COLUMNS}",
            grant_id,
            owner_id,
            token_sha256,
            capabilities,
            calls,
            expires_at,
            note,
        )
        return _row(record)

    async def of_owner(self, owner_id: str) -> list[NodeGrantRow]:
        """The owner's grants, newest first (at most 500)."""
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM mcp_host.node_grants WHERE owner_id = $1 ORDER BY created_at DESC LIMIT 500",
            owner_id,
        )
        return [_row(r) for r in rows]

    async def by_token(self, token_sha256: bytes) -> NodeGrantRow | None:
        record = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM mcp_host.node_grants WHERE token_sha256 = $1", token_sha256
        )
        return None if record is None else _row(record)

    async def revoke(self, owner_id: str, grant_id: str) -> NodeGrantRow | None:
        """Revoke the owner's grant `grant_id` (again: unchanged); None when there is none."""
        record = await self._pool.fetchrow(
            "UPDATE mcp_host.node_grants SET revoked_at = coalesce(revoked_at, now()) "
            f"WHERE owner_id = $1 AND id = $2 RETURNING {_COLUMNS}",
            owner_id,
            grant_id,
        )
        return None if record is None else _row(record)

    async def spend(self, grant_id: str) -> int | None:
        """Spend one call of the grant: the calls used now, or None (spent, revoked, expired)."""
        used = await self._pool.fetchval(_SPEND, grant_id)
        return None if used is None else int(used)
