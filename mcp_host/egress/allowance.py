"""One plugin's egress caps: its manifest's `limits.egress_connections` and
`limits.egress_mb_per_minute` under the host's `EgressSettings`, which are both the default and
the ceiling of each (as `sandbox.budget` does for the sandbox's own limits).

Above: whatever opens a child's gate on the proxy (`EgressProxy.open(..., caps)`), which logs
the warnings. Below: the settings and the manifest model. Pure: no file, no socket.
"""

from __future__ import annotations

from mcp_host.plugins import Plugin
from mcp_host.settings import EgressSettings

from .caps import EgressCaps

__all__ = ["egress_caps_for", "egress_limit_warnings"]

_MiB = 1024 * 1024


def egress_caps_for(plugin: Plugin, egress: EgressSettings) -> EgressCaps:
    """The caps `plugin`'s children get through the proxy: each manifest value, at most the host's."""
    asked = plugin.manifest.limits
    connections = egress.connections
    mb_per_minute = egress.mb_per_minute
    if asked is not None and asked.egress_connections is not None:
        connections = min(asked.egress_connections, connections)
    if asked is not None and asked.egress_mb_per_minute is not None:
        mb_per_minute = min(asked.egress_mb_per_minute, mb_per_minute)
    return EgressCaps(connections=connections, bytes_per_minute=mb_per_minute * _MiB, idle_s=egress.idle_s)


def egress_limit_warnings(plugin: Plugin, egress: EgressSettings) -> tuple[str, ...]:
    """One line per egress limit of the manifest above the host's ceiling, saying what it gets."""
    asked = plugin.manifest.limits
    if asked is None:
        return ()
    return asked.above(
        plugin.manifest.id,
        (
            ("egress_connections", egress.connections, "MCP_HOST_EGRESS_CONNECTIONS"),
            ("egress_mb_per_minute", egress.mb_per_minute, "MCP_HOST_EGRESS_MB_PER_MINUTE"),
        ),
    )
