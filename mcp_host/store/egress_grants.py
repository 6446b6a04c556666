"""The egress the owner grants a plugin, as stored: entries of the same grammar as a manifest's
`transport.sandbox.egress` (`plugins.egress_rules`), each perhaps also reachable at a private
address (`private`: its host named in `allow_private`).

Above: the owner door's `plugin_egress_allow` / `plugin_egress_remove`, `mcp-host plugin
allow|disallow`, the catalogue (what a plugin may reach), and the composition root, which
merges `await grants.entries(plugin_id)` with the manifest's entries at each child start.
Below: `plugins.egress_rules` (the grammar), `plugins.addresses` (which hosts are cloud
metadata), asyncpg (table `mcp_host.plugin_egress`, migration 023).

An entry is stored in its canonical text (`str(parse_rule(text))`), so `API.Example.com:443`
and `api.example.com:443` are one row. `private` is refused on a wildcard (private reach is
named one host at a time) and on a metadata or link-local host named any way but its literal
address (`addresses.PrivateReach` reaches those only when the address itself is named).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import EgressRule, literal_address, metadata_host, parse_rule

from .database import PgPool

__all__ = ["MAX_OWNER_EGRESS", "EgressGrants", "OwnerEgress", "owner_rule"]

MAX_OWNER_EGRESS = 64
"""Entries the owner may add to one plugin (a manifest may name as many)."""

_ENTRY_SHOWN = 120  # characters of a refused entry said back


class OwnerEgress(BaseModel):
    """What the owner added to one plugin's egress: `entries` (canonical, sorted) and
    `private`, the hosts of the entries also reachable at a private address (what a child's
    `allow_private` gains)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    entries: tuple[str, ...] = ()
    private: tuple[str, ...] = ()


def owner_rule(text: str, *, private: bool) -> EgressRule:
    """The rule `text` names, checked for the owner's `allow`; `InvalidArguments` in one
    sentence for a bad entry or a `private` the rules never honour."""
    try:
        rule = parse_rule(text)
    except ValueError as exc:
        raise InvalidArguments(f"host: {exc}") from None
    if private and rule.wildcard:
        raise InvalidArguments(
            f"host: {rule} is a wildcard; private reach is named one host at a time (allow each host --private)"
        )
    if private and metadata_host(rule.host) and literal_address(rule.host) is None:
        raise InvalidArguments(
            f"host: {rule.host} is a link-local or cloud-metadata host; it is reached only when the address"
            " itself is named (allow that address --private)"
        )
    return rule


def _private_host(entry: str) -> str:
    """The host of canonical `entry` as `allow_private` names it (an IPv6 one in brackets)."""
    rule = parse_rule(entry)
    return f"[{rule.host}]" if ":" in rule.host else rule.host


def _owner_egress(rows: Sequence[tuple[str, bool]]) -> OwnerEgress:
    entries = tuple(sorted(entry for entry, _ in rows))
    private = tuple(sorted({_private_host(entry) for entry, private in rows if private}))
    return OwnerEgress(entries=entries, private=private)


class EgressGrants:
    """The owner's egress entries of every plugin in `mcp_host.plugin_egress`, shared by
    replicas (a change restarts nothing itself: the caller stops the plugin's children)."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def entries(self, plugin_id: str) -> OwnerEgress:
        """What the owner added to `plugin_id`'s egress (empty when nothing): what a child's
        start merges with its manifest's."""
        rows = await self._pool.fetch(
            "SELECT entry, private FROM mcp_host.plugin_egress WHERE plugin_id = $1", plugin_id
        )
        return _owner_egress([(row["entry"], row["private"]) for row in rows])

    async def all(self) -> dict[str, OwnerEgress]:
        """Every plugin's owner egress, by plugin id (plugins with none left out)."""
        rows = await self._pool.fetch("SELECT plugin_id, entry, private FROM mcp_host.plugin_egress")
        by_plugin: dict[str, list[tuple[str, bool]]] = {}
        for row in rows:
            by_plugin.setdefault(row["plugin_id"], []).append((row["entry"], row["private"]))
        return {plugin_id: _owner_egress(found) for plugin_id, found in sorted(by_plugin.items())}

    async def allow(self, plugin_id: str, entry: str, *, private: bool, by: str) -> OwnerEgress:
        """Add `entry` to `plugin_id`'s egress (again: its `private` replaced); the plugin's
        owner egress after. Raises `InvalidArguments` for a bad entry (`owner_rule`) or past
        `MAX_OWNER_EGRESS` entries."""
        canonical = str(owner_rule(entry, private=private))
        async with self._pool.acquire() as conn, conn.transaction():
            # One writer per plugin at a time, so the count below stays true.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('mcp_host.plugin_egress'), hashtext($1))", plugin_id
            )
            count = await conn.fetchval(
                "SELECT count(*) FROM mcp_host.plugin_egress WHERE plugin_id = $1 AND entry <> $2", plugin_id, canonical
            )
            if count >= MAX_OWNER_EGRESS:
                raise InvalidArguments(f"{plugin_id} has {MAX_OWNER_EGRESS} egress entries already; remove one first")
            await conn.execute(
                "INSERT INTO mcp_host.plugin_egress (plugin_id, entry, private, added_by) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (plugin_id, entry) DO UPDATE "
                "SET private = EXCLUDED.private, added_at = now(), added_by = EXCLUDED.added_by",
                plugin_id,
                canonical,
                private,
                by[:128] or "?",
            )
        return await self.entries(plugin_id)

    async def remove(self, plugin_id: str, entry: str) -> bool:
        """Take `entry` out of `plugin_id`'s owner egress; whether it was there. Raises
        `InvalidArguments` for an entry that is not one."""
        try:
            canonical = str(parse_rule(entry))
        except ValueError as exc:
            raise InvalidArguments(f"host: {exc}") from None
        status: str = await self._pool.execute(
            "DELETE FROM mcp_host.plugin_egress WHERE plugin_id = $1 AND entry = $2", plugin_id, canonical
        )
        return status.rsplit(" ", 1)[-1] != "0"

    async def forget_plugin(self, plugin_id: str) -> int:
        """Delete every entry of `plugin_id` (its uninstall); how many there were."""
        status: str = await self._pool.execute("DELETE FROM mcp_host.plugin_egress WHERE plugin_id = $1", plugin_id)
        return int(status.rsplit(" ", 1)[-1])
