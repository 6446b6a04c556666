"""The apps' contents as the host read them (MCP Apps), by plugin and sha256: what the owner's
review diffs (the approved version against the live one) and previews.

Above: `visitor.app_reader` (keeps each app it reads and passes the checks, then prunes) and the
owner door (`tools_pending`'s `app_review.diff`, `app_contents` for the console's preview).
Below: asyncpg (table `mcp_host.app_contents`, migration 024; it reads `mcp_host.tool_pins`
to know which versions a pin names).

A version is kept while a tool pin names it (approved or last seen) or the plugin's child served
it at the last read (`prune`'s `live`); the others go when the plugin's apps are next read.
Each body is at most the host's app cap (`MCP_HOST_APP_MAX_BYTES`): the reader refuses larger.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from .database import PgPool

__all__ = ["AppContents", "StoredApp"]


@dataclass(frozen=True)
class StoredApp:
    """One version of an app: its URI and its contents' texts joined (what `sha256` hashes)."""

    plugin_id: str
    sha256: str
    uri: str
    body: str


# The versions a pin of the plugin names: its approved and its last seen definitions' apps.
_PINNED = (
    "SELECT d->'app'->>'sha256' FROM mcp_host.tool_pins p, "
    "LATERAL (VALUES (p.approved_definition), (p.seen_definition)) AS v(d) "
    "WHERE p.plugin_id = $1 AND d->'app'->>'sha256' IS NOT NULL"
)


class AppContents:
    """`mcp_host.app_contents`, shared by replicas."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def keep(self, plugin_id: str, sha256: str, uri: str, body: str) -> None:
        """Keep one version (again: its read time renewed)."""
        await self._pool.execute(
            "INSERT INTO mcp_host.app_contents (plugin_id, sha256, uri, body) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (plugin_id, sha256) DO UPDATE SET read_at = now()",
            plugin_id,
            sha256,
            uri[:2048],
            body,
        )

    async def prune(self, plugin_id: str, live: Collection[str]) -> int:
        """Delete `plugin_id`'s versions that no pin names and that are not in `live` (the
        sha256s its child serves now); how many went."""
        status: str = await self._pool.execute(
            f"DELETE FROM mcp_host.app_contents WHERE plugin_id = $1 AND NOT sha256 = ANY($2::text[]) "
            f"AND sha256 NOT IN ({_PINNED})",
            plugin_id,
            sorted(live),
        )
        return int(status.rsplit(" ", 1)[-1])

    async def get(self, plugin_id: str, sha256: str) -> StoredApp | None:
        """The version of `plugin_id`'s app whose contents hash to `sha256`, or None."""
        row = await self._pool.fetchrow(
            "SELECT uri, body FROM mcp_host.app_contents WHERE plugin_id = $1 AND sha256 = $2", plugin_id, sha256
        )
        return None if row is None else StoredApp(plugin_id, sha256, row["uri"], row["body"])
