"""`mcp-host plugin add|list|remove|upgrade`: plugins installed from npm, PyPI, an MCP Bundle or a
registry server.json into the data directory.

Above: `cli` (which adds these sub-commands to its parser). Below: `plugins` (the SOURCE
grammar, the installer, the manifest model). A failure is a `HostError` whose one sentence
`cli.main` prints. A running host picks an added or removed plugin up at its next start (hot
reload comes with a later part of issue 15).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import anyio

from mcp_host.children import ChildPool
from mcp_host.errors import HostError, InvalidArguments
from mcp_host.plugins import (
    BundleSource,
    NpmSource,
    Plugin,
    PypiSource,
    install_bundle,
    install_npm,
    install_pypi,
    install_registry_entry,
    installed,
    load_plugins,
    parse_source,
    plugins_dir,
    remove,
    stage_upgrade,
    switch_upgrade,
)
from mcp_host.sandbox import launch_for
from mcp_host.settings import Settings

_LIST_WAIT_S = 60.0

__all__ = ["add_plugin_commands"]


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(data_dir=args.data_dir) if args.data_dir is not None else Settings()


def _add(args: argparse.Namespace) -> int:
    settings = _settings(args)
    source = parse_source(args.source)
    if isinstance(source, NpmSource):
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
    folder = remove(_settings(args).data_dir, args.plugin_id)
    print(f"removed {args.plugin_id} ({folder}); a running host drops it at its next start")
    print(f"  its store and config stay: `mcp-host uninstall {args.plugin_id} --yes` deletes them")
    return 0


async def _listed(plugin: Plugin, settings: Settings) -> list[str]:
    """Start `plugin` once, sandboxed as the host would in owner context, and list its tools."""
    from .wiring import child_limits  # the composition root's limits; imported only here

    async with ChildPool(child_limits(settings), max_children=1) as pool:
        child = pool.child(
            plugin.manifest.id, lambda: launch_for(plugin, settings), per_session=plugin.manifest.per_session
        )
        try:
            tools = await child.list_tools(timeout_s=_LIST_WAIT_S)
        finally:
            pool.stop_plugin(plugin.manifest.id)
    return [t.name for t in tools]


def _upgrade(args: argparse.Namespace) -> int:
    """Install the new version beside the old one, start it and list its tools, and only then
    swap the folders; any failure deletes the new folder and leaves the old one as it was."""
    settings = _settings(args)
    staged = stage_upgrade(settings.data_dir, args.plugin_id, args.version)
    try:
        report = load_plugins(None, [staged.folder])
        if report.errors or len(report.plugins) != 1 or report.plugins[0].manifest.id != args.plugin_id:
            raise InvalidArguments(f"the new version of {args.plugin_id} does not load; the old one stays")
        try:
            tools = anyio.run(_listed, report.plugins[0], settings)
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


def add_plugin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser], data_dir_help: str) -> None:
    """Add `plugin add|list|remove` to the command line's sub-commands `sub`."""
    plugin = sub.add_parser("plugin", help="install MCP servers from npm or PyPI as plugins")
    commands = plugin.add_subparsers(dest="plugin_command", required=True)

    def command(name: str, help: str, run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help)
        parser.add_argument("--data-dir", dest="data_dir", type=Path, metavar="DIR", help=data_dir_help)
        parser.set_defaults(run=run)
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
    up = command(
        "upgrade", "install another version of an npm or PyPI plugin, switching once it lists its tools", _upgrade
    )
    up.add_argument("plugin_id", metavar="ID")
    up.add_argument("version", metavar="VERSION", nargs="?", help="the version to install (default: the newest)")
