"""What an installed plugin can reach, in sentences, as `plugin add` tells the owner (`reach`):
its command, the files its sandbox shows it, its network (`network_line`: its egress entries
through the host's proxy, or none with the command that gives it a host), and how to give it
more files; `declared_egress`, a stdio manifest's egress and private hosts.

Above: `admin` and the `plugin add` answers (the owner door's `plugin_add`, the command line),
`mcp_host.owner` (the catalogue's egress). Below: `manifest`.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from .manifest import MANIFEST_NAME, Manifest, Transport

__all__ = ["declared_egress", "network_line", "reach"]


def declared_egress(transport: Transport) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A stdio transport's `sandbox.egress` and `sandbox.allow_private`."""
    return transport.sandbox.egress, transport.sandbox.allow_private


def network_line(manifest: Manifest) -> str:
    """What a sandboxed plugin's manifest lets it reach on the network, in one sentence: its
    egress entries through the host's proxy, or none, with how the owner gives it a host."""
    transport = manifest.transport
    entries = declared_egress(transport)[0] if transport is not None else ()
    public = transport is not None and transport.sandbox.allow_net
    if not entries and not public:
        return (
            f"network: none — give it a host with `mcp-host plugin allow {manifest.id} HOST` (or the owner tool"
            f' plugin_egress_allow {{"plugin_id": "{manifest.id}", "host": "HOST"}}); HOST: host, host:port or'
            " *.domain"
        )
    said = [*entries, *(["any public address (transport.sandbox.allow_net)"] if public else [])]
    return (
        "network: "
        + ", ".join(said)
        + f" through the host's egress proxy (more: mcp-host plugin allow {manifest.id} HOST)"
    )


def reach(manifest: Manifest, folder: Path) -> list[str]:
    """What the plugin `manifest` (installed in `folder`) can reach, one sentence each, as
    `plugin add` tells the owner: its command, the files it sees in its sandbox (`sandbox.bwrap`),
    its network (`network_line`), and how to give it more files."""
    transport = manifest.transport
    if transport is None or transport.kind == "http":
        hosts = ", ".join(transport.reachable_hosts()) if transport is not None else ""
        url = transport.url if transport is not None else ""
        return [f"runs elsewhere: the host calls {url} and may reach {hosts or 'no host'} only"]
    command = shlex.join([transport.command or "", *transport.args])
    return [
        f"runs {command} in its sandbox, in /plugin",
        f"files: its folder {folder} as /plugin, read-only (what it writes there is its own and gone when it"
        " stops), and a /tmp of its own, empty at each start; nothing else of this machine",
        network_line(manifest),
        f"more files: copy them into {folder} and name them as /plugin/… in transport.args of"
        f" {folder / MANIFEST_NAME}; the host reads it at its next start (there is no /workspace yet:"
        " transport.sandbox.workspace binds nothing)",
    ]
