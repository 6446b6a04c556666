"""What a plugin's sandboxed children may reach, as the owner sees it: the manifest's egress
entries, the ones the owner added (`store.EgressGrants`), `allow_net`, the hosts also reachable
at a private address, and the destinations its children were refused.

Above: the catalogue (each entry's `egress`), the owner door's `plugin_egress_allow` /
`plugin_egress_remove` and `mcp-host plugin allow|disallow` (`egress_plugin`: which plugins
take owner egress). Below: `plugins` (the manifest), `store` (`OwnerEgress`). The refused
destinations are read through `RefusedDestinations`, which the composition root fills from the
egress proxy's record (`NoRefusals` otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import Plugin, declared_egress
from mcp_host.store import OwnerEgress

__all__ = ["NoRefusals", "PluginEgress", "RefusedDestination", "RefusedDestinations", "egress_of", "egress_plugin"]


class RefusedDestinations(Protocol):
    """The destinations a plugin's children were refused (the egress proxy's record)."""

    def of(self, plugin_id: str) -> Sequence[tuple[str, str]]:
        """`(destination "host:port", reason)` pairs, each destination once."""
        ...


class NoRefusals:
    """No record of refusals: every plugin shows none."""

    def of(self, plugin_id: str) -> Sequence[tuple[str, str]]:
        return ()


class RefusedDestination(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    destination: str
    reason: str


class PluginEgress(BaseModel):
    """Where a sandboxed plugin's children may connect through the host's egress proxy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    manifest: list[str]
    """`transport.sandbox.egress` as the manifest names it."""
    owner: list[str]
    """The entries the owner added (`plugin allow`, `plugin_egress_allow`), canonical."""
    allow_net: bool
    """Any public address at any port (`transport.sandbox.allow_net`)."""
    allow_private: list[str]
    """The hosts also reachable at a loopback or private address: the manifest's, then the owner's."""
    refused: list[RefusedDestination]
    """Destinations its children asked for and were refused, with why."""

    @property
    def offline(self) -> bool:
        return not (self.manifest or self.owner or self.allow_net)


def egress_of(plugin: Plugin, owner: OwnerEgress, refused: Sequence[tuple[str, str]] = ()) -> PluginEgress | None:
    """`plugin`'s egress with the owner's entries `owner`; None for a plugin that runs no
    sandboxed child (a remote one: its reach is `transport.allowed_hosts`)."""
    transport = plugin.manifest.transport
    if transport is None or transport.kind != "stdio":
        return None
    entries, private = declared_egress(transport)
    return PluginEgress(
        manifest=list(entries),
        owner=list(owner.entries),
        allow_net=transport.sandbox.allow_net,
        allow_private=list(dict.fromkeys([*private, *owner.private])),
        refused=[RefusedDestination(destination=d, reason=r) for d, r in refused],
    )


def egress_plugin(plugins: Iterable[Plugin], plugin_id: str) -> Plugin:
    """The loaded plugin `plugin_id` whose children take owner egress; `InvalidArguments` in one
    sentence for no such plugin or a remote one."""
    plugin = next((p for p in plugins if p.manifest.id == plugin_id), None)
    if plugin is None:
        raise InvalidArguments(f"plugin_id: no plugin named {plugin_id[:80]!r} is loaded")
    transport = plugin.manifest.transport
    if transport is not None and transport.kind == "http":
        raise InvalidArguments(
            f"plugin_id: {plugin_id} is a remote server; the host reaches it at transport.allowed_hosts, and it"
            " has no egress of its own"
        )
    if transport is None:
        raise InvalidArguments(f"plugin_id: {plugin_id} runs no process of its own; it has no egress")
    return plugin
