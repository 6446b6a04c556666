"""A plugin's egress caps: the manifest's limits under the host's settings, with a warning when over."""

from __future__ import annotations

from pathlib import Path

from mcp_host.egress import EgressCaps, egress_caps_for, egress_limit_warnings
from mcp_host.plugins import Manifest, Plugin
from mcp_host.settings import EgressSettings, Settings

_MiB = 1024 * 1024
HOST = EgressSettings(connections=16, mb_per_minute=100, idle_s=30.0)


def plugin_with(tmp_path: Path, limits: dict[str, int] | None) -> Plugin:
    manifest = Manifest.model_validate({"id": "demo.net", "transport": {"command": "node"}, "limits": limits})
    return Plugin(manifest, tmp_path, builtin=False)


def test_without_limits_a_plugin_gets_the_hosts_settings(tmp_path: Path) -> None:
    plugin = plugin_with(tmp_path, None)

    assert egress_caps_for(plugin, HOST) == EgressCaps(connections=16, bytes_per_minute=100 * _MiB, idle_s=30.0)
    assert egress_limit_warnings(plugin, HOST) == ()


def test_a_manifest_below_the_ceiling_gets_what_it_asks(tmp_path: Path) -> None:
    plugin = plugin_with(tmp_path, {"egress_connections": 4, "egress_mb_per_minute": 10})

    assert egress_caps_for(plugin, HOST) == EgressCaps(connections=4, bytes_per_minute=10 * _MiB, idle_s=30.0)
    assert egress_limit_warnings(plugin, HOST) == ()


def test_a_manifest_above_the_ceiling_gets_the_ceiling_and_a_warning(tmp_path: Path) -> None:
    plugin = plugin_with(tmp_path, {"egress_connections": 64, "egress_mb_per_minute": 1000})

    assert egress_caps_for(plugin, HOST) == EgressCaps(connections=16, bytes_per_minute=100 * _MiB, idle_s=30.0)
    assert egress_limit_warnings(plugin, HOST) == (
        "demo.net: limits.egress_connections 64 is above the host's ceiling (MCP_HOST_EGRESS_CONNECTIONS); it gets 16",
        "demo.net: limits.egress_mb_per_minute 1000 is above the host's ceiling (MCP_HOST_EGRESS_MB_PER_MINUTE);"
        " it gets 100",
    )


def test_the_settings_read_their_flat_variables() -> None:
    settings = Settings(egress_connections=3, egress_mb_per_minute=7, egress_idle_s=1.5, egress_hosts_file="/h")
    assert settings.egress == EgressSettings(connections=3, mb_per_minute=7, idle_s=1.5, hosts_file=Path("/h"))
    assert Settings().egress == EgressSettings(connections=32, mb_per_minute=600, idle_s=300.0, hosts_file=None)
