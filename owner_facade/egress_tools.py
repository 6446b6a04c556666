"""The egress slice of the owner tool table: the hosts a sandboxed plugin's children may reach
beyond its manifest's, added and removed by the owner (`plugin_egress_allow`,
`plugin_egress_remove`; `mcp-host plugin allow|disallow` call these on a running host).

Above: `tools` (the one table). Below: `mcp_host.store.EgressGrants` (the owner's entries, over
the database `services.PluginParts` holds), `mcp_host.owner` (which plugins take egress, and
the egress the answer shows), and the children to restart: each change stops the plugin's
running instances on this host, which start again with the new egress on their next call.
"""

from __future__ import annotations

from typing import Any

from mcp_host.errors import Unconfigured
from mcp_host.owner import egress_plugin
from mcp_host.plugins import Plugin
from mcp_host.store import EgressGrants, OwnerEgress

from .models import PluginEgressAllow, PluginEgressRemove
from .owner_tool import Answer, OwnerTool
from .services import OwnerServices, PluginParts

__all__ = ["EGRESS_TOOLS"]


def _parts(s: OwnerServices) -> PluginParts:
    if s.admin is None:
        raise Unconfigured("this host does not change plugins' egress from the owner door")
    return s.admin


def _changed(s: OwnerServices, parts: PluginParts, plugin: Plugin, owner: OwnerEgress) -> Answer:
    """Stop `plugin`'s running instances (they start again with the new egress); the answer."""
    pid = plugin.manifest.id
    running = parts.children.running_by_plugin().get(pid, 0)
    parts.children.stop_plugin(pid)
    egress = s.catalogue.egress(plugin, owner)
    return {
        "plugin_id": pid,
        "egress": egress.model_dump(mode="json") if egress is not None else None,
        "restarted": running,
    }


async def _allow(s: OwnerServices, owner_id: str, a: PluginEgressAllow) -> Answer:
    """Add `host` to the plugin's egress (with `private`, its host reachable at a private address)."""
    parts = _parts(s)
    plugin = egress_plugin(s.plugins, a.plugin_id)
    owner = await EgressGrants(parts.database).allow(plugin.manifest.id, a.host, private=a.private, by=owner_id)
    return _changed(s, parts, plugin, owner)


async def _remove(s: OwnerServices, owner_id: str, a: PluginEgressRemove) -> Answer:
    """Take `host` out of the owner's entries of the plugin (the manifest's stay)."""
    parts = _parts(s)
    plugin = egress_plugin(s.plugins, a.plugin_id)
    grants = EgressGrants(parts.database)
    removed = await grants.remove(plugin.manifest.id, a.host)
    answer: dict[str, Any] = dict(_changed(s, parts, plugin, await grants.entries(plugin.manifest.id)))
    return answer | {"removed": removed}


EGRESS_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "plugin_egress_allow",
        "Let a sandboxed plugin's processes connect to `host` (host, host:port, *.domain or *.domain:port) "
        "through the host's egress proxy, beside what its manifest names; `private: true` also lets them reach "
        "that host at a loopback or private address. Its running instances restart. Answers with the plugin's "
        "egress: the manifest's entries, the owner's, allow_net, the private hosts, and the destinations its "
        "processes were refused. A remote plugin is refused: the host reaches it at its allowed_hosts.",
        PluginEgressAllow,
        _allow,
    ),
    OwnerTool(
        "plugin_egress_remove",
        "Take `host` out of the entries the owner added to a plugin's egress (its manifest's stay). Its "
        "running instances restart. Answers with the plugin's egress after.",
        PluginEgressRemove,
        _remove,
    ),
]
