"""Uninstalling a plugin: the one owner action that destroys a plugin's data.

Above: the CLI (`mcp-host uninstall ID`; later the owner door). Below: `plugin_store` (whose
`PluginStores.drop` is the only code that drops a schema) and `config`.

It drops the plugin's store schema (every owner's records and claims) and deletes its stored
config values. The plugin's folder is the owner's to remove; a plugin still installed gets an
empty store again at the next host start.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_host.plugins import PluginKind

from .config import ConfigStore
from .database import PgPool
from .egress_grants import EgressGrants
from .plugin_store import PluginStores

__all__ = ["Uninstalled", "uninstall"]


@dataclass(frozen=True)
class Uninstalled:
    schema_dropped: bool
    config_rows_deleted: int
    egress_entries_deleted: int = 0


async def uninstall(pool: PgPool, kind: PluginKind, plugin_id: str) -> Uninstalled:
    """Drop `plugin_id`'s store and config (the owner's egress entries too). Raises ValueError
    for an id that is not a plugin id."""
    dropped = await PluginStores(pool).drop(kind, plugin_id)
    deleted = await ConfigStore(pool).forget_plugin(plugin_id)
    return Uninstalled(dropped, deleted, await EgressGrants(pool).forget_plugin(plugin_id))
