"""`mcp-host plugin add|list|remove|upgrade`: plugins installed from npm, PyPI, an MCP Bundle, a
registry server.json or a remote server's https:// URL into the data directory; and `mcp-host
tools approve`: a capability's pending tools shown (each one's definition and sha256) and
approved on the running host, at exactly the hashes shown.

Above: `cli` (which adds these sub-commands to its parser, with the installer to use). Beside:
`egress_commands` (`plugin allow|disallow`, added to the same `plugin` command). Below:
`door_lines` and `door_client` (the running host's owner door), `plugins` (the SOURCE grammar,
the manifest model, and `PluginAdmin`, the plugin-admin service the owner door uses too: with no
host running, the install, load check, trial start, switch and rollback are its).

When a host runs with the data directory (its host file, `host_file.py`), each command is a call
to that host's owner door (`plugin_add`, `plugins_list`, `plugin_remove`, `plugin_upgrade`): the
host installs, loads or stops the plugin at once, no restart; npm's or pip's lines print on
stderr as they come. A path source goes to it as an absolute path (the host runs on this
machine). When no host runs there, or its host file is stale (nothing answers at its address),
the command works on the folder alone, says so in one line, and a host picks the change up at
its next start; `--role` and `tools approve` need the host (roles and approvals live in it).
`plugin add` and `tools approve` end with what is left before a visitor can call the capability,
each step with its exact command: this command line's where it has one, else the owner tool and
its arguments (`owner_facade.next_steps`), then how a visitor reaches it.

A failure is one sentence on stderr and a non-zero exit, never a traceback: a `HostError`
(printed by `cli.main`, exit 2), a door's refusal (exit 2), a host that fails mid-call (exit 1).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio

from mcp_host.children import ChildPool
from mcp_host.errors import HostError, InvalidArguments
from mcp_host.plugins import (
    ChildConfig,
    Installer,
    NpmSource,
    Plugin,
    PluginAdmin,
    PypiSource,
    RemoteSource,
    installed,
    installer_output,
    needs_config,
    parse_add_source,
    plugins_dir,
    reach,
    upgrade_argument,
)
from mcp_host.sandbox import launch_for
from mcp_host.settings import Settings
from mcp_host.store import ConfigUnset

from .door_client import Door, DoorFailed, NoDoor, call_door, find_door
from .door_lines import cli_command, cli_settings, one_line, progress_said, said, shown, through_host
from .egress_commands import add_egress_parsers

_LIST_WAIT_S = 60.0
_REACH_MAX = 1200  # of a line saying what a plugin reaches (it names its folder, maybe twice)

__all__ = ["add_plugin_commands", "step_command"]

T = TypeVar("T")


async def _lines_said(label: str, work: Callable[[], T]) -> T:
    """`work()` in a worker thread, each line its installers print said on stderr as it comes."""

    def run() -> T:
        with installer_output(said):
            return work()

    return await anyio.to_thread.run_sync(run)


def _admin(args: argparse.Namespace, settings: Settings) -> PluginAdmin:
    """The plugin-admin service on the data directory alone (no host runs there), with the
    installer `add_plugin_commands` was given."""
    installer: Installer = args.installer
    return PluginAdmin(settings.data_dir, installer, _lines_said)


def step_command(step: dict[str, Any], data_dir: Path) -> str:
    """A `next` step's exact command: `tools approve` on this command line, else the owner tool
    and its arguments (`mcp-host check` prints them too)."""
    given = step.get("arguments")
    arguments: dict[str, Any] = given if isinstance(given, dict) else {}
    if step.get("tool") == "tools_approve":
        capability = shlex.quote(str(arguments.get("capability")))
        return f"{cli_command()} tools approve {capability} --all --data-dir {shlex.quote(str(data_dir))}"
    return f"owner tool {shown(step.get('tool'))} {shown(json.dumps(arguments, ensure_ascii=False))}"


def _next_lines(answer: dict[str, Any], door: Door, data_dir: Path) -> list[str]:
    """The steps of a `plugin_add` or `tools_approve` answer (`next`, `visitors`), each with
    its exact command (`tools approve` here, else the owner tool and its arguments), then how a
    visitor reaches the capability."""
    cli, where = cli_command(), shlex.quote(str(data_dir))
    steps = [step for step in answer.get("next") or [] if isinstance(step, dict)]
    lines = ["next:"] if steps else []
    for n, step in enumerate(steps, 1):
        lines.append(f"  {n}. {shown(step.get('step'))}:")
        lines.append(f"       {step_command(step, data_dir)}")
    said = answer.get("visitors")
    visitors: dict[str, Any] = said if isinstance(said, dict) else {}
    session = f"{cli} session new --data-dir {where}"
    if visitors.get("code_role"):
        session += " --code CODE  (CODE: the text code_create showed)"
    if visitors.get("public") or visitors.get("code_role"):
        lines.append(("then a visitor: " if steps else "a visitor reaches it now: ") + session)
    if any(step.get("tool") != "tools_approve" for step in steps):
        lines.append(
            f"(owner tool: ask your agent connected to the owner door, or use the console at {door.url}/owner/)"
        )
    return lines


def _host_source(text: str) -> str:
    """`text` as the host takes it: a path (a bundle, a server.json) made absolute; the host
    runs on this machine but not in this directory."""
    source = parse_add_source(text)  # refuses a bad source here, before any host is asked
    if isinstance(source, NpmSource | PypiSource | RemoteSource):
        return text
    return os.path.abspath(text)


def _add(args: argparse.Namespace) -> int:
    settings = cli_settings(args)
    arguments = {"source": _host_source(args.source)} | ({"id": args.id} if args.id else {})
    arguments |= {"role": args.role} if args.role else {}
    through = through_host(settings, "plugin_add", arguments)
    if through is None:
        if args.role:
            raise InvalidArguments(
                f"--role needs the running host (roles live in its database); nothing was installed: start it"
                f" ({cli_command()} serve --data-dir {shlex.quote(str(settings.data_dir))}) or leave --role out"
            )
        return _add_offline(args, settings)
    door, answer = through
    print(f"installed {shown(answer.get('capability'))} {shown(answer.get('version') or '')}".rstrip())
    print(f"  folder:  {shown(answer.get('folder'))}")
    for line in answer.get("reaches") or []:
        print(f"  {shown(line, _REACH_MAX)}")
    print(f"  pending: {shown(', '.join(map(str, answer.get('pending_tools') or [])) or '(none)')}")
    for field in answer.get("config_to_set") or []:
        print(f"  config:  {shown(field.get('key'))} ({shown(field.get('type'))}) to set")
    if answer.get("role"):
        print(f"  role:    {shown(answer['role'])} grants it now (its sessions see its tools once you approve them)")
    print(f"the host at {door.url} serves it now")
    for line in _next_lines(answer, door, settings.data_dir):
        print(line)
    return 0


def _add_offline(args: argparse.Namespace, settings: Settings) -> int:
    added = anyio.run(_admin(args, settings).add, args.source, args.id)
    done, plugin = added.installed, added.plugin
    print(f"installed {done.id} {done.version}".rstrip())
    print(f"  folder:  {done.folder}")
    for line in reach(plugin.manifest, plugin.folder):
        print(f"  {line}")
    cli, where = cli_command(), shlex.quote(str(settings.data_dir))
    print("a host running with this data directory picks it up at its next start; then:")
    print(f"  1. start it, unless one runs: {cli} serve --data-dir {where}")
    print(f"  2. approve its tools: {cli} tools approve {done.id} --all --data-dir {where}")
    print("  3. grant it to a role and make an access code: owner tools role_put and code_create")
    print(f"     (next time: {cli} plugin add … --role ROLE with the host running grants it at once)")
    return 0


def _list(args: argparse.Namespace) -> int:
    settings = cli_settings(args)
    through = through_host(settings, "plugins_list", {})
    if through is not None:
        _, answer = through
        rows = answer.get("plugins") or []
        if not rows:
            print(f"no plugins installed in {plugins_dir(settings.data_dir)}")
        for row in rows:
            loaded = "loaded" if row.get("loaded") else "not loaded"
            version, source = row.get("version") or "-", row.get("source") or "-"
            print(f"{shown(row.get('id'))}  {shown(version)}  {loaded}  {shown(source)}")
        return 0
    found = installed(settings.data_dir)
    if not found:
        print(f"no plugins installed in {plugins_dir(settings.data_dir)}")
        return 0
    for name, folder, manifest in found:
        if manifest is None:
            print(f"{name}  (manifest does not load; `mcp-host check {shlex.quote(str(folder))}` says why)")
        else:
            print(f"{manifest.id}  {manifest.version or '-'}  {manifest.title or '-'}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    settings = cli_settings(args)
    through = through_host(settings, "plugin_remove", {"id": args.plugin_id, "purge": args.purge})
    if through is not None:
        door, answer = through
        print(f"removed {args.plugin_id} ({shown(answer.get('folder'))}); the host at {door.url} stopped it")
        purged = answer.get("purged")
        if isinstance(purged, dict):
            store = "dropped its store" if purged.get("store_dropped") else "it had no store"
            print(
                f"  purged: {store}; deleted {purged.get('config_rows_deleted', 0)} config row(s) and"
                f" {purged.get('tool_pins_deleted', 0)} tool approval(s)"
            )
        else:
            print(f"  its store and config stay: `mcp-host uninstall {args.plugin_id} --yes` deletes them")
        return 0
    if args.purge:
        raise InvalidArguments(
            f"--purge needs the running host; without one: `mcp-host plugin remove {args.plugin_id}`, then"
            f" `mcp-host uninstall {args.plugin_id} --yes`"
        )
    folder = anyio.run(_admin(args, settings).remove, args.plugin_id)
    print(f"removed {args.plugin_id} ({folder}); a running host drops it at its next start")
    print(f"  its store and config stay: `mcp-host uninstall {args.plugin_id} --yes` deletes them")
    return 0


async def _config_env(plugin: Plugin, settings: Settings) -> ChildConfig | None:
    """The variables and arguments the owner's config gives `plugin`'s children
    (`plugins.config_refs`), read as a host's start reads them (`OwnerEnv`, secrets opened with
    the host key); None, the database left closed, for a plugin that needs no config. Raises
    `ConfigUnset` naming a required setting the owner left unset."""
    if not needs_config(plugin.manifest):
        return None
    from mcp_host.access import OwnerStore
    from mcp_host.store import ConfigStore, OwnerEnv, SecretBox, load_host_key, open_database

    key = settings.connectors.secret_key
    box = SecretBox(load_host_key(settings.data_dir, key.get_secret_value() if key is not None else None))
    unset: ConfigUnset | None = None
    async with open_database(settings) as database:
        owner = await OwnerStore(database.pool).ensure_single_owner()
        try:
            env = await OwnerEnv(ConfigStore(database.pool, box=box), owner.id).child_config(plugin)
        except ConfigUnset as exc:  # raised below, outside the database's task group
            unset = exc
    if unset is not None:
        raise unset
    return env


async def _listed(plugin: Plugin, settings: Settings) -> list[str]:
    """Start `plugin` once, sandboxed as the host would in owner context (with the owner's
    config in its environment), and list its tools; a failure is one sentence."""
    pid = plugin.manifest.id
    try:
        return await _started_and_listed(plugin, settings)
    except ConfigUnset as exc:
        raise InvalidArguments(f"the new version of {pid} cannot start: {exc.message}; the old one stays") from None
    except InvalidArguments:
        raise
    except HostError as exc:
        why = f"the new version of {pid} did not list its tools ({exc.code}); the old one stays"
        raise InvalidArguments(why) from None


async def _started_and_listed(plugin: Plugin, settings: Settings) -> list[str]:
    from .limits import child_limits  # the composition root's limits; imported only here

    env = await _config_env(plugin, settings)
    async with ChildPool(child_limits(settings), max_children=1) as pool:
        child = pool.child(
            plugin.manifest.id,
            lambda: (
                launch_for(plugin, settings)
                if env is None
                else launch_for(plugin, settings, extra_env=env.env, args=env.args)
            ),
            per_session=plugin.manifest.per_session,
        )
        try:
            tools = await child.list_tools(timeout_s=_LIST_WAIT_S)
        finally:
            pool.stop_plugin(plugin.manifest.id)
    return [t.name for t in tools]


def _upgrade(args: argparse.Namespace) -> int:
    settings = cli_settings(args)
    version, source = upgrade_argument(args.version)  # a version, or a path / npm: / pypi: source
    arguments = {"id": args.plugin_id} | ({"version": version} if version else {})
    arguments |= {"source": _host_source(source)} if source else {}
    through = through_host(settings, "plugin_upgrade", arguments)
    if through is None:
        return _upgrade_offline(args, settings)
    door, answer = through
    old, new = answer.get("from_version") or "?", answer.get("version") or "?"
    print(f"upgraded {args.plugin_id} from {shown(old)} to {shown(new)}")
    print(f"  folder:  {shown(answer.get('folder'))}")
    print(f"  tools:   {shown(', '.join(map(str, answer.get('tools') or [])) or '(none)')}")
    print(f"  pending: {shown(', '.join(map(str, answer.get('pending_tools') or [])) or '(none)')}")
    print(f"  the host at {door.url} serves it now; changed tools wait in tools_pending for your approval")
    return 0


def _upgrade_offline(args: argparse.Namespace, settings: Settings) -> int:
    """Install the new version beside the old one, start it and list its tools, and only then
    swap the folders; any failure deletes the new folder and leaves the old one as it was."""
    version, source = upgrade_argument(args.version)

    async def trial(plugin: Plugin) -> list[str]:
        return await _listed(plugin, settings)

    upgrade = functools.partial(_admin(args, settings).upgrade, args.plugin_id, version, source, trial=trial)
    upgraded = anyio.run(upgrade)
    print(f"upgraded {args.plugin_id} to {upgraded.version or '?'}")
    print(f"  folder:  {upgraded.folder}")
    print(f"  tools:   {', '.join(upgraded.tools) or '(none)'}")
    print("  a running host serves it from its next start; changed tools wait in tools_pending for your approval")
    return 0


def _running_door(settings: Settings, command: str) -> Door:
    """The owner door of the host running with the data directory; `InvalidArguments` saying how
    to start one when none runs there."""
    door = find_door(settings.data_dir)
    if door is None:
        where = shlex.quote(str(settings.data_dir))
        raise InvalidArguments(
            f"{command} needs the running host; none runs with data directory {settings.data_dir}: start it with"
            f" {cli_command()} serve --data-dir {where}"
        )
    return door


def _ask(door: Door, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        return anyio.run(call_door, door, tool, arguments, progress_said)
    except NoDoor:
        raise DoorFailed(f"the host at {door.named} does not answer; is it starting or stopping?") from None


def _show_pending(entry: dict[str, Any]) -> None:
    """One pending tool as the owner reviews it: name, hash, its whole definition as JSON
    (every character outside printable ASCII escaped), and for a changed one the lines that
    changed since its approval."""
    changed = entry.get("approved") is not None
    print(f"{shown(entry.get('tool'))}  ({'changed' if changed else 'new'})  sha256 {shown(entry.get('live_sha256'))}")
    live = json.dumps(entry.get("live"), indent=2, sort_keys=True, ensure_ascii=True).splitlines()
    if changed:
        approved = json.dumps(entry.get("approved"), indent=2, sort_keys=True, ensure_ascii=True).splitlines()
        live = list(difflib.unified_diff(approved, live, "approved", "live", lineterm=""))
    for line in live:
        print(f"    {line}")
    if entry.get("warning"):
        print(f"  warning: {shown(entry['warning'])}")


def _approve(args: argparse.Namespace) -> int:
    """Show the capability's pending tools (or the named ones); with --all or names, approve
    exactly the definitions shown (their hashes go with the call: one changed since is refused,
    nothing approved)."""
    settings = cli_settings(args)
    door = _running_door(settings, "tools approve")
    capability = args.capability
    review = _ask(door, "tools_pending", {})
    pending = [e for e in review.get("pending") or [] if isinstance(e, dict) and e.get("capability") == capability]
    if args.tools:
        unknown = sorted(set(args.tools) - {str(e.get("tool")) for e in pending})
        if unknown:
            waiting = ", ".join(str(e.get("tool")) for e in pending) or "none"
            raise InvalidArguments(f"no tool {unknown[0]!r} of {capability} waits for approval (pending: {waiting})")
        pending = [e for e in pending if e.get("tool") in args.tools]
    if review.get("note"):  # the host is still listing its plugins' tools
        print(f"({shown(review['note'])})")
    for entry in pending:
        _show_pending(entry)
    for rejected in review.get("rejected") or []:
        if isinstance(rejected, dict) and rejected.get("capability") == capability:
            print(f"{shown(rejected.get('tool'))}  (rejected, never shown to visitors: {shown(rejected.get('cause'))})")
    if pending and not (args.all or args.tools):
        where = shlex.quote(str(settings.data_dir))
        line = f"{cli_command()} tools approve {shlex.quote(capability)} --all --data-dir {where}"
        print(f"approve these {len(pending)}: {line}")
        return 0
    arguments: dict[str, Any] = {"capability": capability, "tools": {e["tool"]: e["live_sha256"] for e in pending}}
    answer = _ask(door, "tools_approve", arguments | ({"hide_colliding": True} if args.hide_colliding else {}))
    if not pending:
        print(f"no tool of {capability} waits for your approval")
    for approved in answer.get("approved") or []:
        print(f"approved {shown(approved.get('tool'))}  sha256 {shown(approved.get('live_sha256'))}")
    for hidden in answer.get("hidden") or []:
        print(f"  hidden from sessions that see both: {shown(hidden.get('tool'))} of {shown(hidden.get('capability'))}")
    for line in _next_lines(answer, door, settings.data_dir):
        print(line)
    return 0


def add_plugin_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], data_dir_help: str, installer: Installer
) -> None:
    """Add `plugin add|list|remove|upgrade` and `tools approve` to the command line's
    sub-commands `sub`; with no host running, `installer` installs the plugins added or upgraded."""
    _add_plugin_parsers(sub, data_dir_help, installer)
    _add_tools_parsers(sub, data_dir_help)


def _add_plugin_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], data_dir_help: str, installer: Installer
) -> None:
    """`plugin add|list|remove|upgrade|allow|disallow`."""
    plugin = sub.add_parser(
        "plugin",
        help="install MCP servers from npm, PyPI, an .mcpb, a server.json or an https:// URL as plugins (on the"
        " running host, if any)",
    )
    commands = plugin.add_subparsers(dest="plugin_command", required=True)

    def command(name: str, help: str, run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        parser.add_argument("--data-dir", dest="data_dir", type=Path, metavar="DIR", help=data_dir_help)
        parser.set_defaults(run=one_line(run), installer=installer)
        return parser

    add = command(
        "add",
        "install a plugin into <data dir>/plugins, or add a remote MCP server by its https:// URL; through the"
        " running host if one runs there (its tools wait for your approval), and say what is left before a"
        " visitor can call it",
        _add,
    )
    add.add_argument(
        "source",
        metavar="SOURCE",
        help="npm:<package>[@<version>], pypi:<package>[==<version>], a path to an .mcpb or to a registry entry"
        " (server.json, x.server.json, any .json), or the https:// URL of a remote MCP server (streamable HTTP;"
        " http:// only to a loopback host)",
    )
    add.add_argument("--id", help="the plugin id (default: from the package name, e.g. npm.scope.name)")
    add.add_argument(
        "--role",
        metavar="ROLE",
        help="grant the new capability to this existing role now (needs the running host): its sessions see its"
        " tools once you approve them (`tools approve`)",
    )
    command("list", "list the plugins installed in <data dir>/plugins", _list)
    rm = command("remove", "delete an installed plugin's folder", _remove)
    rm.add_argument("plugin_id", metavar="ID")
    rm.add_argument("--purge", action="store_true", help="also delete its store, config and tool approvals")
    up = command(
        "upgrade", "install another version of a plugin beside it, switching once it lists its tools", _upgrade
    )
    up.add_argument("plugin_id", metavar="ID")
    up.add_argument(
        "version",
        metavar="VERSION",
        nargs="?",
        help="an npm/PyPI plugin's version (default: the newest); a bundle's new .mcpb; a server.json plugin's"
        " server.json (default: the one it was added from, read again)",
    )
    add_egress_parsers(command)


def _add_tools_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], data_dir_help: str) -> None:
    """`tools approve`."""
    tools = sub.add_parser("tools", help="tools waiting for your approval (on the running host)")
    tool_commands = tools.add_subparsers(dest="tools_command", required=True)
    approve = tool_commands.add_parser(
        "approve",
        help="show a capability's pending tools (definition and sha256) and approve them",
        description="Show each pending tool of CAPABILITY — its whole definition and its sha256 — and, with --all"
        " or TOOL names, approve exactly those definitions on the running host (a tool changed since is refused,"
        " nothing approved); then what is left before a visitor can call it.",
    )
    approve.add_argument("capability", metavar="CAPABILITY")
    approve.add_argument("tools", nargs="*", metavar="TOOL", help="approve only these (default with --all: every one)")
    approve.add_argument("--all", action="store_true", help="approve every pending tool of CAPABILITY shown")
    approve.add_argument(
        "--hide-colliding",
        action="store_true",
        help="approve tools whose names collide with tools visitors see (both are then hidden where both are seen)",
    )
    approve.add_argument("--data-dir", dest="data_dir", type=Path, metavar="DIR", help=data_dir_help)
    approve.set_defaults(run=one_line(_approve))
