"""The plugin-admin service: one lifecycle for adding, upgrading and removing the plugins installed
in `<data dir>/plugins`, for the owner door (`plugin_add`, `plugin_upgrade`, `plugin_remove`,
`plugins_list` while the host runs) and the command line with no host running (`mcp-host plugin
add|upgrade|remove|list`) alike.

Above: `owner_facade`'s plugin tools and `app.plugin_commands`. They pass in what lies above this
layer: how a staged version is tried (`Trial`: its children), what the running host refuses to
take (`Check`), and what it does to the old version before its folder moves (`switching`).
Below: `install`, `install_bundle` and `upgrade` (the folders; npm and pip) and `loading`.

The installer is a seam: `Installer` is what the service calls, `PackageInstaller` the real one
(npm, pip, an MCP Bundle, a registry server.json, a remote server's URL); tests pass a small one
that installs from local tarballs. It is blocking, so the service runs it through `Blocking`: in a
worker thread, its npm or pip lines going to the caller (the owner door's MCP progress, the
command line's stderr). Every failure after the files are written deletes them again: an add or
an upgrade that fails leaves `<data dir>/plugins` as it was.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import anyio
import anyio.to_thread

from mcp_host.errors import InvalidArguments

from .install import (
    Installed,
    check_id,
    install_npm,
    install_pypi,
    install_remote,
    installed,
    plugins_dir,
    recorded_source,
    remove,
)
from .install_bundle import install_bundle, install_registry_entry
from .loading import Plugin, load_plugins
from .manifest import Manifest
from .sources import BundleSource, NpmSource, PypiSource, RemoteSource, parse_add_source
from .text_safety import printable
from .upgrade import stage_upgrade, switch_upgrade

__all__ = [
    "Accept",
    "Added",
    "Blocking",
    "Check",
    "InstalledPlugin",
    "Installer",
    "PackageInstaller",
    "PluginAdmin",
    "Trial",
    "Upgraded",
    "in_a_thread",
]

T = TypeVar("T")


class Installer(Protocol):
    """Puts a plugin's files into `<data dir>/plugins`. Blocking (npm or pip may run): the
    service calls it in a worker thread. Raises one sentence (`HostError`), leaving nothing."""

    def install(self, source: str, data_dir: Path, plugin_id: str | None) -> Installed:
        """Install `source` (a source text: `sources.parse_add_source`) as a new plugin folder."""
        ...

    def stage_upgrade(self, data_dir: Path, plugin_id: str, version: str | None, source: str | None) -> Installed:
        """Installed `plugin_id`'s new version, in a hidden folder beside it (`upgrade.stage_upgrade`)."""
        ...


class PackageInstaller:
    """The real installer: npm, PyPI, an MCP Bundle, a registry server.json or the https:// URL
    of a remote MCP server (a manifest only: nothing runs here)."""

    def install(self, source: str, data_dir: Path, plugin_id: str | None) -> Installed:
        parsed = parse_add_source(source)
        if isinstance(parsed, RemoteSource):
            return install_remote(parsed, data_dir, plugin_id=plugin_id)
        if isinstance(parsed, NpmSource):
            return install_npm(parsed, data_dir, plugin_id=plugin_id)
        if isinstance(parsed, PypiSource):
            return install_pypi(parsed, data_dir, plugin_id=plugin_id)
        if isinstance(parsed, BundleSource):
            return install_bundle(parsed, data_dir, plugin_id=plugin_id)
        return install_registry_entry(parsed, data_dir, plugin_id=plugin_id)

    def stage_upgrade(self, data_dir: Path, plugin_id: str, version: str | None, source: str | None) -> Installed:
        return stage_upgrade(data_dir, plugin_id, version, source=source)


class Blocking(Protocol):
    """How the installer's blocking `work` runs off the event loop, `label` saying what it does,
    while its caller hears npm's or pip's lines as they come (`install.installer_output`)."""

    async def __call__(self, label: str, work: Callable[[], T]) -> T: ...


async def in_a_thread(label: str, work: Callable[[], T]) -> T:
    """`work()` in a worker thread; its installers' lines are dropped."""
    return await anyio.to_thread.run_sync(work)


Check = Callable[[Plugin], None]
"""Raises `InvalidArguments` for a loaded plugin its caller cannot take (a running host takes a
capability only, and no host ops)."""
Accept = Callable[[Plugin], Awaitable[None]]
"""Takes a newly added plugin (a running host: into its registry, granted to a role); what it
raises undoes the add."""
Trial = Callable[[Plugin], Awaitable[list[str]]]
"""Starts a staged new version once, lists its tools' names and stops it; raises one sentence."""


def _any_plugin(plugin: Plugin) -> None:
    """The `Check` and `Accept` with no host running: every plugin that loads is taken."""


async def _take_any(plugin: Plugin) -> None:
    _any_plugin(plugin)


def _no_host(plugin_id: str) -> None:
    """`switching` and `stopping` with no host running: nothing runs the plugin."""


@dataclass(frozen=True)
class Added:
    """A new plugin: loaded, and as the installer made it (`installed.folder`, `installed.version`)."""

    plugin: Plugin
    installed: Installed


@dataclass(frozen=True)
class Upgraded:
    """A switched-in new version: loaded from the plugin's `folder`, with the tools its trial listed."""

    plugin: Plugin
    version: str
    folder: Path
    tools: list[str]


@dataclass(frozen=True)
class InstalledPlugin:
    """A folder in `<data dir>/plugins`: its id (the folder's name when its manifest does not
    load), the source `plugin add` recorded in its header, its manifest (None: does not load)."""

    id: str
    folder: Path
    source: str | None
    manifest: Manifest | None


def _discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


class PluginAdmin:
    """Adds, upgrades, lists and removes the plugins in `<data dir>/plugins` with `installer`,
    its blocking work run by `run`."""

    def __init__(self, data_dir: Path, installer: Installer, run: Blocking = in_a_thread) -> None:
        self.data_dir = data_dir
        self.installer = installer
        self._run = run

    async def add(self, source: str, plugin_id: str | None = None, *, accept: Accept = _take_any) -> Added:
        """Install `source` (as `plugin_id`, else the id its source gives), load it and let
        `accept` take it; on any failure after the install the folder is deleted again."""
        done = await self._run(
            f"installing {printable(source, 80)}", lambda: self.installer.install(source, self.data_dir, plugin_id)
        )
        try:
            plugin = _loaded(done, _any_plugin)
            await accept(plugin)
        except BaseException:
            await anyio.to_thread.run_sync(_discard, done.folder)
            raise
        return Added(plugin, done)

    async def upgrade(
        self,
        plugin_id: str,
        version: str | None,
        source: str | None,
        *,
        trial: Trial,
        check: Check = _any_plugin,
        switching: Callable[[str], None] = _no_host,
    ) -> Upgraded:
        """Install `plugin_id`'s new version beside it (`version`, or from `source`), load it,
        `check` it and `trial` it (list its tools), and only then switch: `switching(plugin_id)`
        (a running host stops the old version), the folders swapped. Any failure before the
        switch deletes the new folder; the old one stays as it was."""
        staged = await self._run(
            f"upgrading {plugin_id}",
            lambda: self.installer.stage_upgrade(self.data_dir, plugin_id, version, source),
        )
        try:
            tools = await trial(_loaded(staged, check, replacing=plugin_id))
        except BaseException:
            await anyio.to_thread.run_sync(_discard, staged.folder)
            raise
        switching(plugin_id)
        folder = await anyio.to_thread.run_sync(switch_upgrade, self.data_dir, plugin_id, staged.folder)
        new = _loaded(dataclasses.replace(staged, folder=folder), check, replacing=plugin_id)
        return Upgraded(new, staged.version, folder, tools)

    async def remove(self, plugin_id: str, *, stopping: Callable[[str], None] = _no_host) -> Path:
        """Delete installed `plugin_id`'s folder, once `stopping(plugin_id)` (a running host
        drops it) has run; returns the folder. Its store and config stay."""
        check_id(plugin_id)
        folder = plugins_dir(self.data_dir) / plugin_id
        if not await anyio.to_thread.run_sync(folder.is_dir):
            raise InvalidArguments(f"no plugin {plugin_id} is installed in {plugins_dir(self.data_dir)}")
        stopping(plugin_id)
        return await anyio.to_thread.run_sync(remove, self.data_dir, plugin_id)

    async def listed(self) -> list[InstalledPlugin]:
        """Every plugin folder in `<data dir>/plugins`, sorted by folder name."""
        return await anyio.to_thread.run_sync(self._listed)

    def _listed(self) -> list[InstalledPlugin]:
        return [
            InstalledPlugin(manifest.id if manifest is not None else name, folder, recorded_source(folder), manifest)
            for name, folder, manifest in installed(self.data_dir)
        ]


def _loaded(done: Installed, check: Check, *, replacing: str | None = None) -> Plugin:
    """The folder `done` loaded as one plugin (with the id `replacing`, an upgrade's), `check`ed."""
    report = load_plugins(None, [done.folder])
    if report.errors or len(report.plugins) != 1:
        raise InvalidArguments(f"the installed plugin {done.id} does not load; `mcp-host check` says why")
    plugin = report.plugins[0]
    if replacing is not None and plugin.manifest.id != replacing:
        raise InvalidArguments(f"the new version of {replacing} names itself {plugin.manifest.id}")
    check(plugin)
    return plugin
