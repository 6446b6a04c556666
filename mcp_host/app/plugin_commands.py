"""`mcp-host plugin add|list|remove|upgrade`: plugins installed from npm, PyPI, an MCP Bundle or a
registry server.json into the data directory.

Above: `cli` (which adds these sub-commands to its parser). Below: `door_client` (the running
host's owner door), `plugins` (the SOURCE grammar, the installer, the manifest model).

When a host runs with the data directory (its host file, `host_file.py`), each command is a call
to that host's owner door (`plugin_add`, `plugins_list`, `plugin_remove`, `plugin_upgrade`): the
host installs, loads or stops the plugin at once, no restart; its progress prints as lines on
stderr. A path source goes to it as an absolute path (the host runs on this machine). When no
host runs there, or its host file is stale (nothing answers at its address), the command works
on the folder alone, says so in one line, and a host picks the change up at its next start.

A failure is one sentence on stderr and a non-zero exit, never a traceback: a `HostError`
(printed by `cli.main`, exit 2), a door's refusal (exit 2), a host that fails mid-call (exit 1).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from mcp_host.children import ChildPool
from mcp_host.errors import HostError, InvalidArguments
from mcp_host.plugins import (
    BundleSource,
    ChildConfig,
    NpmSource,
    Plugin,
    PypiSource,
    RemoteSource,
    install_bundle,
    install_npm,
    install_pypi,
    install_registry_entry,
    install_remote,
    installed,
    load_plugins,
    needs_config,
    parse_add_source,
    plugins_dir,
    remove,
    stage_upgrade,
    switch_upgrade,
    upgrade_argument,
)
from mcp_host.sandbox import launch_for
from mcp_host.settings import Settings
from mcp_host.store import ConfigUnset

from .door_client import Door, DoorFailed, DoorRefused, NoDoor, call_door, find_door
from .host_file import HOST_FILE

_LIST_WAIT_S = 60.0
_SHOWN_MAX = 300  # characters of one value from the host printed to the terminal

__all__ = ["add_plugin_commands"]


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(data_dir=args.data_dir) if args.data_dir is not None else Settings()


def _shown(value: object) -> str:
    """`value` as one printable line (the host's answers name a plugin's own tools and texts)."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 1] + "…"


async def _progress(progress: float, total: float | None, message: str | None) -> None:
    done = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    print(f"  … {_shown(message) if message else done}", file=sys.stderr, flush=True)


def _through_host(settings: Settings, tool: str, arguments: dict[str, Any]) -> tuple[Door, dict[str, Any]] | None:
    """Call `tool` on the owner door of the host running with the data directory: that host
    and its answer; None, having said so in one line, when no host answers there."""
    data_dir = settings.data_dir
    door = find_door(data_dir)
    if door is None:
        _offline(f"no host runs with data directory {data_dir}")
        return None
    try:
        return door, anyio.run(call_door, door, tool, arguments, _progress)
    except NoDoor:
        _offline(f"the host in {data_dir / HOST_FILE} (pid {door.pid}) does not answer at {door.url}")
        return None


def _offline(why: str) -> None:
    print(f"(offline: {why}; working on the plugin folders alone)", file=sys.stderr)


def _host_source(text: str) -> str:
    """`text` as the host takes it: a path (a bundle, a server.json) made absolute; the host
    runs on this machine but not in this directory."""
    source = parse_add_source(text)  # refuses a bad source here, before any host is asked
    if isinstance(source, NpmSource | PypiSource | RemoteSource):
        return text
    return os.path.abspath(text)


def _add(args: argparse.Namespace) -> int:
    settings = _settings(args)
    arguments = {"source": _host_source(args.source)} | ({"id": args.id} if args.id else {})
    through = _through_host(settings, "plugin_add", arguments)
    if through is None:
        return _add_offline(args, settings)
    door, answer = through
    print(f"installed {_shown(answer.get('capability'))} {_shown(answer.get('version') or '')}".rstrip())
    print(f"  folder:  {_shown(answer.get('folder'))}")
    print(f"  pending: {_shown(', '.join(map(str, answer.get('pending_tools') or [])) or '(none)')}")
    for field in answer.get("config_to_set") or []:
        print(f"  config:  {_shown(field.get('key'))} ({_shown(field.get('type'))}) to set")
    print(f"  the host at {door.url} serves it now; its tools wait in tools_pending for your approval")
    return 0


def _add_offline(args: argparse.Namespace, settings: Settings) -> int:
    source = parse_add_source(args.source)
    if isinstance(source, RemoteSource):
        done = install_remote(source, settings.data_dir, plugin_id=args.id)
    elif isinstance(source, NpmSource):
        done = install_npm(source, settings.data_dir, plugin_id=args.id)
    elif isinstance(source, PypiSource):
        done = install_pypi(source, settings.data_dir, plugin_id=args.id)
    elif isinstance(source, BundleSource):
        done = install_bundle(source, settings.data_dir, plugin_id=args.id)
    else:
        done = install_registry_entry(source, settings.data_dir, plugin_id=args.id)
    print(f"installed {done.id} {done.version}".rstrip())
    print(f"  folder:  {done.folder}")
    print(f"  command: {shlex.join([done.command, *done.args])}")
    print(
        "  a host running with this data directory picks it up at its next start; its tools then wait in"
        " tools_pending for your approval"
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    through = _through_host(settings, "plugins_list", {})
    if through is not None:
        _, answer = through
        rows = answer.get("plugins") or []
        if not rows:
            print(f"no plugins installed in {plugins_dir(settings.data_dir)}")
        for row in rows:
            loaded = "loaded" if row.get("loaded") else "not loaded"
            version, source = row.get("version") or "-", row.get("source") or "-"
            print(f"{_shown(row.get('id'))}  {_shown(version)}  {loaded}  {_shown(source)}")
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
    settings = _settings(args)
    through = _through_host(settings, "plugin_remove", {"id": args.plugin_id, "purge": args.purge})
    if through is not None:
        door, answer = through
        print(f"removed {args.plugin_id} ({_shown(answer.get('folder'))}); the host at {door.url} stopped it")
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
    folder = remove(settings.data_dir, args.plugin_id)
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
    config in its environment), and list its tools."""
    from .wiring import child_limits  # the composition root's limits; imported only here

    try:
        env = await _config_env(plugin, settings)
    except ConfigUnset as exc:
        why = f"the new version of {plugin.manifest.id} cannot start: {exc.message}; the old one stays"
        raise InvalidArguments(why) from None
    async with ChildPool(child_limits(settings), max_children=1) as pool:
        child = pool.child(
            plugin.manifest.id,
            lambda: launch_for(plugin, settings)
            if env is None
            else launch_for(plugin, settings, extra_env=env.env, args=env.args),
            per_session=plugin.manifest.per_session,
        )
        try:
            tools = await child.list_tools(timeout_s=_LIST_WAIT_S)
        finally:
            pool.stop_plugin(plugin.manifest.id)
    return [t.name for t in tools]


def _upgrade(args: argparse.Namespace) -> int:
    settings = _settings(args)
    version, source = upgrade_argument(args.version)  # a version, or a path / npm: / pypi: source
    arguments = {"id": args.plugin_id} | ({"version": version} if version else {})
    arguments |= {"source": _host_source(source)} if source else {}
    through = _through_host(settings, "plugin_upgrade", arguments)
    if through is None:
        return _upgrade_offline(args, settings)
    door, answer = through
    old, new = answer.get("from_version") or "?", answer.get("version") or "?"
    print(f"upgraded {args.plugin_id} from {_shown(old)} to {_shown(new)}")
    print(f"  folder:  {_shown(answer.get('folder'))}")
    print(f"  tools:   {_shown(', '.join(map(str, answer.get('tools') or [])) or '(none)')}")
    print(f"  pending: {_shown(', '.join(map(str, answer.get('pending_tools') or [])) or '(none)')}")
    print(f"  the host at {door.url} serves it now; changed tools wait in tools_pending for your approval")
    return 0


def _upgrade_offline(args: argparse.Namespace, settings: Settings) -> int:
    """Install the new version beside the old one, start it and list its tools, and only then
    swap the folders; any failure deletes the new folder and leaves the old one as it was."""
    version, source = upgrade_argument(args.version)
    staged = stage_upgrade(settings.data_dir, args.plugin_id, version, source=source)
    try:
        report = load_plugins(None, [staged.folder])
        if report.errors or len(report.plugins) != 1 or report.plugins[0].manifest.id != args.plugin_id:
            raise InvalidArguments(f"the new version of {args.plugin_id} does not load; the old one stays")
        try:
            tools = anyio.run(_listed, report.plugins[0], settings)
        except InvalidArguments:  # a required setting the owner left unset, named
            raise
        except HostError as exc:
            raise InvalidArguments(
                f"the new version of {args.plugin_id} did not list its tools ({exc.code}); the old one stays"
            ) from None
    except BaseException:
        shutil.rmtree(staged.folder, ignore_errors=True)
        raise
    folder = switch_upgrade(settings.data_dir, args.plugin_id, staged.folder)
    print(f"upgraded {args.plugin_id} to {staged.version or '?'}")
    print(f"  folder:  {folder}")
    print(f"  tools:   {', '.join(tools) or '(none)'}")
    print("  a running host serves it from its next start; changed tools wait in tools_pending for your approval")
    return 0


def _one_line(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`run`, with the running host's refusal (exit 2) or failure (exit 1) as one line on stderr."""

    def guarded(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except DoorRefused as exc:
            print(f"mcp-host: {_shown(exc.refusal.message)}", file=sys.stderr)
            return 2
        except DoorFailed as exc:
            print(f"mcp-host: {exc.message}", file=sys.stderr)
            return 1

    return guarded


def add_plugin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser], data_dir_help: str) -> None:
    """Add `plugin add|list|remove|upgrade` to the command line's sub-commands `sub`."""
    plugin = sub.add_parser(
        "plugin",
        help="install MCP servers from npm, PyPI, an .mcpb or a server.json as plugins (on the running host, if any)",
    )
    commands = plugin.add_subparsers(dest="plugin_command", required=True)

    def command(name: str, help: str, run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help)
        parser.add_argument("--data-dir", dest="data_dir", type=Path, metavar="DIR", help=data_dir_help)
        parser.set_defaults(run=_one_line(run))
        return parser

    add = command("add", "install a plugin into <data dir>/plugins", _add)
    add.add_argument(
        "source",
        metavar="SOURCE",
        help="npm:<package>[@<version>], pypi:<package>[==<version>], a path to an .mcpb or to a server.json",
    )
    add.add_argument("--id", help="the plugin id (default: from the package name, e.g. npm.scope.name)")
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
