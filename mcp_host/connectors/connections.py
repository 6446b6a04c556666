"""Connections: which connector an owner connected for each category, with its settings.

Above: the owner's administration (connect, disconnect, list), the connector gateway (which
needs a connection's settings to call its connector) and the requirement gate (which asks
which categories are connected). Below: asyncpg (`mcp_host.connections`), `secrets_box`
(secret settings are sealed with the host key) and `config` (setting values are checked with
the rules of declared config).

An owner connects at most one connector per category; connecting again replaces it. A
setting that is given must fit its declaration and an undeclared one is refused; whether the
ones left out matter is the connector's to say (its `connected` verb). Secret settings are stored
sealed and are never returned by a listing: the only code that opens them is
`settings_for`, whose caller hands them to the connector child alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mcp_host.errors import InvalidArguments, Unconfigured
from mcp_host.plugins import ConfigField, Plugin
from mcp_host.store import SealError, SecretBox, check_value

if TYPE_CHECKING:
    from mcp_host.store import PgPool

__all__ = ["Connection", "Connections", "check_settings"]

_MAX_CACHED_OWNERS = 10_000


@dataclass(frozen=True)
class Connection:
    """A connection as the owner may see it: secret values are only named, never shown."""

    category: str
    connector: str
    settings: dict[str, Any]
    secrets_set: tuple[str, ...]
    connected_at: datetime


def _bound_to(owner_id: str, category: str, connector_id: str) -> str:
    return f"{owner_id}\x1f{category}\x1f{connector_id}"


def check_settings(plugin: Plugin, values: Mapping[str, object]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(plain, secret) settings for `plugin`, checked against its declaration.

    Raises InvalidArguments naming every undeclared or ill-typed key.
    """
    declared = {s.key: s for s in plugin.manifest.settings or ()}
    problems = [f"{key}: not a setting of {plugin.manifest.id}" for key in sorted(set(values) - set(declared))]
    plain: dict[str, Any] = {}
    secret: dict[str, Any] = {}
    for key, setting in declared.items():
        if key not in values:
            continue
        field = ConfigField(key=key, type=setting.type)
        try:
            value = check_value(field, values[key])
        except InvalidArguments as exc:
            problems.append(exc.message)
            continue
        (secret if setting.secret else plain)[key] = value
    if problems:
        raise InvalidArguments("; ".join(problems))
    return plain, secret


class Connections:
    """The owners' connections in Postgres, with a short per-replica cache of categories."""

    def __init__(self, pool: PgPool, box: SecretBox, connectors: Mapping[str, Plugin], *, ttl_s: float) -> None:
        self._pool = pool
        self._box = box
        self._connectors = connectors
        self._ttl_s = ttl_s
        self._categories: dict[str, tuple[float, frozenset[str]]] = {}
        self.on_change: list[Callable[[str], None]] = []
        """Called with the owner id after a connect or disconnect (caches keyed on it drop it)."""

    async def connect(self, owner_id: str, connector_id: str, values: Mapping[str, object]) -> Connection:
        """Connect `connector_id` for its category, replacing the one connected before.

        Raises InvalidArguments for an unknown connector or settings that do not fit.
        """
        plugin = self._connectors.get(connector_id)
        if plugin is None or plugin.manifest.category is None:
            raise InvalidArguments(f"no connector named {connector_id[:80]!r} is installed")
        category = plugin.manifest.category
        plain, secret = check_settings(plugin, values)
        sealed = self._box.seal(secret, bound_to=_bound_to(owner_id, category, connector_id)) if secret else None
        row = await self._pool.fetchrow(
            "INSERT INTO mcp_host.connections (owner_id, category, connector_id, settings, secrets) "
            "VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (owner_id, category) DO UPDATE SET connector_id = EXCLUDED.connector_id, "
            "settings = EXCLUDED.settings, secrets = EXCLUDED.secrets, connected_at = now() "
            "RETURNING connected_at",
            owner_id,
            category,
            connector_id,
            plain,
            sealed,
        )
        assert row is not None
        self.forget(owner_id)
        return Connection(category, connector_id, plain, tuple(sorted(secret)), row["connected_at"])

    async def disconnect(self, owner_id: str, category: str) -> bool:
        """Remove the owner's connection for `category`; False if there was none."""
        status = await self._pool.execute(
            "DELETE FROM mcp_host.connections WHERE owner_id = $1 AND category = $2", owner_id, category
        )
        self.forget(owner_id)
        return bool(status.endswith(" 1"))

    async def list(self, owner_id: str) -> list[Connection]:
        rows = await self._pool.fetch(
            "SELECT category, connector_id, settings, secrets, connected_at FROM mcp_host.connections "
            "WHERE owner_id = $1 ORDER BY category",
            owner_id,
        )
        return [
            Connection(
                r["category"],
                r["connector_id"],
                dict(r["settings"]),
                self._secret_names(r["connector_id"]) if r["secrets"] else (),
                r["connected_at"],
            )
            for r in rows
        ]

    async def categories(self, owner_id: str) -> frozenset[str]:
        """The categories the owner has connected (cached for `ttl_s` on this replica)."""
        now = time.monotonic()
        cached = self._categories.get(owner_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        rows = await self._pool.fetch(
            "SELECT category, connector_id FROM mcp_host.connections WHERE owner_id = $1", owner_id
        )
        # A connection whose connector is no longer installed connects nothing.
        found = frozenset(r["category"] for r in rows if r["connector_id"] in self._connectors)
        if self._ttl_s > 0:
            if len(self._categories) >= _MAX_CACHED_OWNERS:
                self._categories.clear()
            self._categories[owner_id] = (now + self._ttl_s, found)
        return found

    def forget(self, owner_id: str) -> None:
        """Drop this replica's cached categories of `owner_id` (after a change)."""
        self._categories.pop(owner_id, None)
        for listener in self.on_change:
            listener(owner_id)

    async def settings_for(self, owner_id: str, category: str) -> tuple[Plugin, dict[str, Any]]:
        """The connector and its full settings (secrets opened) for the owner's `category`.

        Raises Unconfigured when nothing usable is connected for it.
        """
        row = await self._pool.fetchrow(
            "SELECT connector_id, settings, secrets FROM mcp_host.connections WHERE owner_id = $1 AND category = $2",
            owner_id,
            category,
        )
        plugin = self._connectors.get(row["connector_id"]) if row is not None else None
        if row is None or plugin is None:
            raise Unconfigured(f"no connector is connected for {category!r}")
        settings = dict(row["settings"])
        if row["secrets"]:
            try:
                settings.update(
                    self._box.open(row["secrets"], bound_to=_bound_to(owner_id, category, row["connector_id"]))
                )
            except SealError:
                raise Unconfigured(
                    f"the {category!r} connection must be made again (its secrets do not open)"
                ) from None
        return plugin, settings

    def _secret_names(self, connector_id: str) -> tuple[str, ...]:
        plugin = self._connectors.get(connector_id)
        return tuple(sorted(s.key for s in (plugin.manifest.settings or ()) if s.secret)) if plugin else ()
