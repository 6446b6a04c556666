"""The owner's audit trail: one row per owner tool call — who, what, when, outcome.

Above: the owner door, which records every call it answers and reads the trail back for
`audit_list`. Below: asyncpg (table `mcp_host.audit`, migration 006).

What is stored of a call's arguments is a summary (`summarize`): values under keys that
look secret (`settings`, `code`, `key`, `token`, `password`, `secret` …, and whatever key
the caller names) are replaced by `REDACTED` before the row is written, long strings are
cut and deep or wide values are shortened. A secret never reaches the table, so the trail
can be shown to anyone who may see the owner's administration. Rows older than the audit
retention (`audit_retention_days`, a year) are deleted by `store.retention`'s sweep.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from mcp_host.store import PgPool

__all__ = ["MAX_LIST_LIMIT", "REDACTED", "AuditLog", "AuditRow", "summarize"]

REDACTED = "[redacted]"
MAX_LIST_LIMIT = 500
_SECRET_KEY = re.compile(r"secret|password|passwd|token|credential|settings|\bcode\b|\bkey\b|api_?key", re.I)
_MAX_STRING = 200
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_MAX_ITEMS = 50
_MAX_DEPTH = 4


class AuditRow(BaseModel):
    """One owner tool call as `audit_list` shows it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    tool: str
    arguments: dict[str, Any]
    outcome: str
    at: datetime


def _text(value: str, limit: int) -> str:
    """`value` cut to `limit`, storable as jsonb: NUL and lone surrogates become U+FFFD."""
    cut = value if len(value) <= limit else value[:limit] + "…"
    return cut if cut.isascii() and "\x00" not in cut else _UNSTORABLE.sub("\ufffd", cut)


def _summary(value: object, depth: int) -> object:
    if isinstance(value, str):
        return _text(value, _MAX_STRING)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # jsonb has no NaN or Infinity
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= _MAX_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        items = list(value.items())[:_MAX_ITEMS]
        return {_text(str(k), 64): REDACTED if _SECRET_KEY.search(str(k)) else _summary(v, depth + 1) for k, v in items}
    if isinstance(value, list | tuple):
        return [_summary(v, depth + 1) for v in value[:_MAX_ITEMS]]
    return f"<{type(value).__name__}>"


def summarize(arguments: Mapping[str, object] | None, secret: Collection[str] = ()) -> dict[str, Any]:
    """What the audit keeps of a call's `arguments`: values under secret-looking keys (and
    the top-level keys named in `secret`) replaced by `REDACTED`; the rest shortened."""
    out: dict[str, Any] = {}
    for key, value in list((arguments or {}).items())[:_MAX_ITEMS]:
        name = str(key)[:64]
        kept = REDACTED if name in secret or _SECRET_KEY.search(name) else _summary(value, 1)
        out[_text(name, 64)] = kept
    return out


class AuditLog:
    """The audit trail in Postgres."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def record(self, owner_id: str, tool: str, arguments: Mapping[str, Any], outcome: str) -> None:
        """Append one row; `arguments` must already be a summary (see `summarize`). The tool name is
        the caller's and stored as a summary too: any name is recorded, even one with a NUL."""
        await self._pool.execute(
            "INSERT INTO mcp_host.audit (owner_id, tool, arguments, outcome) VALUES ($1, $2, $3, $4)",
            owner_id,
            _text(tool[:64], 64),
            dict(arguments),
            _text(outcome[:64], 64),
        )

    async def list(self, owner_id: str, *, since: datetime | None = None, limit: int = 100) -> list[AuditRow]:
        """The owner's rows at or after `since`, newest first, at most `limit` (≤ 500)."""
        rows = await self._pool.fetch(
            "SELECT id, tool, arguments, outcome, at FROM mcp_host.audit "
            "WHERE owner_id = $1 AND ($2::timestamptz IS NULL OR at >= $2) ORDER BY at DESC, id DESC LIMIT $3",
            owner_id,
            since,
            max(1, min(limit, MAX_LIST_LIMIT)),
        )
        return [AuditRow.model_validate(dict(row)) for row in rows]
