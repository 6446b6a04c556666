"""`mcp-host plugin allow ID HOST [--private]` and `mcp-host plugin disallow ID HOST`: the hosts a
sandboxed plugin's children may reach through the host's egress proxy, beside its manifest's
`transport.sandbox.egress`.

Above: `plugin_commands` (which adds these to the `plugin` sub-commands). Below: `door_lines`
(the running host's owner door), `mcp_host.owner` (which plugins take egress, what the answer
shows), `mcp_host.store.EgressGrants` and `mcp_host.policy.AuditLog`.

With a host running with the data directory, each is a call to its owner door
(`plugin_egress_allow`, `plugin_egress_remove`): audited there, and the plugin's running
instances restart at once. With none, the command finds the plugin as a host's start would
(builtins, `MCP_HOST_PLUGINS`, `<data dir>/plugins`), writes the database itself and audits
the change under the same tool name; the next start's children get it.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from mcp_host.access import OwnerStore
from mcp_host.owner import egress_of, egress_plugin
from mcp_host.plugins import installed_root, load_plugins
from mcp_host.policy import AuditLog, summarize
from mcp_host.settings import Settings
from mcp_host.store import EgressGrants, OwnerEgress, open_database, owner_rule

from .door_lines import cli_settings, shown, through_host

__all__ = ["add_egress_parsers"]

Command = Callable[[str, str, Callable[[argparse.Namespace], int]], argparse.ArgumentParser]


def _lines(egress: Mapping[str, Any] | None) -> list[str]:
    """A plugin's egress (`PluginEgress` as JSON) as the lines the commands print."""
    if not egress:
        return []
    yours = [f"{shown(e)} (yours)" for e in egress.get("owner") or []]
    entries = [*map(shown, egress.get("manifest") or []), *yours]
    lines = ["  network: " + (", ".join(entries) if entries else "none")]
    if egress.get("allow_net"):
        lines.append("  also:    any public address, any port (transport.sandbox.allow_net)")
    if egress.get("allow_private"):
        lines.append("  private: " + ", ".join(map(shown, egress["allow_private"])) + " (also at a private address)")
    lines.extend(
        f"  refused: {shown(r.get('destination'))} ({shown(r.get('reason'))})" for r in egress.get("refused") or []
    )
    return lines


Change = Callable[[EgressGrants, str], Awaitable[bool]]
"""One change to the owner's egress of a plugin, by the owner with this id; whether the entry
was there to change."""


async def _offline_change(
    settings: Settings, tool: str, arguments: dict[str, Any], change: Change
) -> tuple[OwnerEgress, bool]:
    """`change` on the database alone, audited as the owner door's `tool`; the plugin's owner
    egress after, and whether the entry was there."""
    async with open_database(settings) as database:
        owner = await OwnerStore(database.pool).ensure_single_owner()
        grants = EgressGrants(database.pool)
        found = await change(grants, owner.id)
        after = await grants.entries(arguments["plugin_id"])
        await AuditLog(database.pool).record(owner.id, tool, summarize(arguments), "ok")
    return after, found


def _change(args: argparse.Namespace, tool: str, arguments: dict[str, Any], change: Change) -> int:
    settings = cli_settings(args)
    verb = "allowed" if tool == "plugin_egress_allow" else "disallowed"
    owner_rule(args.host, private=arguments.get("private", False))  # a bad entry: refused before any host
    through = through_host(settings, tool, arguments, alone="the database")
    if through is not None:
        door, answer = through
        if answer.get("removed") is False:
            print(f"{shown(args.host)} was not among the hosts you gave {args.plugin_id}")
        else:
            print(f"{verb} {shown(args.host)} for {args.plugin_id}")
        print(f"  the host at {door.url} restarted its {answer.get('restarted', 0)} running instance(s)")
        for line in _lines(answer.get("egress")):
            print(line)
        return 0
    report = load_plugins(settings.builtin_dir, [*settings.plugins, *filter(None, [installed_root(settings.data_dir)])])
    plugin = egress_plugin(report.plugins, args.plugin_id)
    after, found = anyio.run(_offline_change, settings, tool, arguments, change)
    print(f"{verb} {shown(args.host)} for {args.plugin_id}" if found else f"{shown(args.host)} was not there")
    print("  a host running with this data directory starts its children with it from its next start")
    egress = egress_of(plugin, after)
    for line in _lines(egress.model_dump(mode="json") if egress is not None else None):
        print(line)
    return 0


def _allow(args: argparse.Namespace) -> int:
    arguments = {"plugin_id": args.plugin_id, "host": args.host, "private": args.private}

    async def allow(grants: EgressGrants, by: str) -> bool:
        await grants.allow(args.plugin_id, args.host, private=args.private, by=by)
        return True

    return _change(args, "plugin_egress_allow", arguments, allow)


def _disallow(args: argparse.Namespace) -> int:
    async def remove(grants: EgressGrants, by: str) -> bool:
        return await grants.remove(args.plugin_id, args.host)

    return _change(args, "plugin_egress_remove", {"plugin_id": args.plugin_id, "host": args.host}, remove)


_HOST_HELP = (
    "host (ports 80 and 443), host:port, *.domain (every name under it, not the domain itself) or *.domain:port;"
    " an IPv6 address in [brackets]"
)


def add_egress_parsers(command: Command) -> None:
    """`plugin allow|disallow`, added with `command` (name, help, run → its parser)."""
    allow = command(
        "allow",
        "let a sandboxed plugin's processes connect to HOST through the host's egress proxy (on the running host,"
        " its instances restart)",
        _allow,
    )
    allow.add_argument("plugin_id", metavar="ID")
    allow.add_argument("host", metavar="HOST", help=_HOST_HELP)
    allow.add_argument(
        "--private",
        action="store_true",
        help="also reach HOST at a loopback or private address (never with *.domain; a link-local or metadata"
        " address only when HOST is that address)",
    )
    disallow = command("disallow", "take HOST out of the hosts you let a plugin reach (its manifest's stay)", _disallow)
    disallow.add_argument("plugin_id", metavar="ID")
    disallow.add_argument("host", metavar="HOST", help=_HOST_HELP)
