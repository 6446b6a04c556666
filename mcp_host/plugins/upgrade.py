"""Upgrading an installed plugin: the new version is installed beside the old one, and switched
in only once the caller has loaded it and listed its tools.

Above: `admin` (the plugin-admin service of `mcp-host plugin upgrade ID [VERSION|SOURCE]` and
the owner door's `plugin_upgrade {id, version?, source?}`), which loads and tries the staged
folder, then `switch_upgrade`s or deletes it.
Below: `install` (the staging folder, npm and pip, the manifest header that records the
source) and `install_bundle` (bundles and registry entries).

A plugin upgrades from a source of the kind its manifest's header records, never another:
- npm or PyPI: the same package at `version` (None: the newest), or a source text naming it
  (`npm:<package>@<version>`);
- an MCP Bundle: a new `.mcpb` (`source`, required);
- a registry entry: a `server.json` (`source`; None: the recorded path read again), whose
  pinned package version may have changed.
`version` names a package version only and `source` a source only, so neither is ever guessed.
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from mcp_host.errors import InvalidArguments, Unavailable

from .install import Installed, Staging, check_id, npm_into, plugins_dir, pypi_into, recorded_source
from .install_bundle import install_bundle, install_registry_entry
from .sources import BundleSource, NpmSource, PypiSource, RegistryEntrySource, Source, names_a_file, parse_source
from .text_safety import printable

__all__ = ["installed_source", "stage_upgrade", "switch_upgrade", "upgrade_argument"]

_KIND = {
    NpmSource: "npm",
    PypiSource: "PyPI",
    BundleSource: "an MCP Bundle (.mcpb)",
    RegistryEntrySource: "an MCP registry server.json",
}


def installed_source(data_dir: Path, plugin_id: str) -> Source | None:
    """The source installed `plugin_id` was added from, as its manifest's header records it
    (None: a folder `plugin add` did not make, or a header that no longer parses)."""
    check_id(plugin_id)
    folder = plugins_dir(data_dir) / plugin_id
    if not folder.is_dir() or folder.is_symlink():
        raise InvalidArguments(f"no plugin {plugin_id} is installed in {plugins_dir(data_dir)}")
    recorded = recorded_source(folder)
    if recorded is None:
        return None
    try:
        return parse_source(recorded)
    except InvalidArguments:
        return None


def upgrade_argument(word: str | None) -> tuple[str | None, str | None]:
    """The command line's one optional word as `(version, source)`: a source when it names one
    (`npm:…`, `pypi:…`, a path ending `.mcpb` or `.json`: `sources.names_a_file`), else a version."""
    if word is None:
        return None, None
    if word.startswith(("npm:", "pypi:")) or names_a_file(word):
        return None, word
    return word, None


def stage_upgrade(
    data_dir: Path,
    plugin_id: str,
    version: str | None = None,
    *,
    source: str | None = None,
    spec: str | None = None,
) -> Installed:
    """Install `plugin_id`'s new version into a hidden folder beside the installed one
    (`Installed.folder`); the installed one is untouched. `version`: an npm or PyPI version
    (None: the newest); `source`: a source text of the installed kind (a new `.mcpb`, a
    `server.json`). The caller loads and lists it, then `switch_upgrade`s or deletes it. `spec`
    replaces what npm or pip is given (a local tarball or wheel, for tests offline)."""
    old = installed_source(data_dir, plugin_id)
    if old is None:
        raise InvalidArguments(f"{plugin_id} was not installed by `mcp-host plugin add`; it cannot be upgraded")
    if version is not None and source is not None:
        raise InvalidArguments("give a version or a source to upgrade from, not both")
    new = _new_source(plugin_id, old, version, None if source is None else parse_source(source))
    if isinstance(new, BundleSource):
        return install_bundle(new, data_dir, plugin_id=plugin_id, replacing=True)
    if isinstance(new, RegistryEntrySource):
        return install_registry_entry(new, data_dir, plugin_id=plugin_id, spec=spec, replacing=True)
    with Staging(data_dir, plugin_id, replacing=True) as staging:
        if isinstance(new, NpmSource):
            got = npm_into(staging.path, new, spec)
            return staging.finish(new, f"{new.package} {got.version} from npm (an upgrade)", got)
        got = pypi_into(staging.path, new, spec)
        return staging.finish(new, f"{new.package} {got.version} from PyPI (an upgrade)", got)


def _new_source(plugin_id: str, old: Source, version: str | None, given: Source | None) -> Source:
    """What to install: of the installed source's kind, else refused in one sentence."""
    if given is not None and type(given) is not type(old):
        raise InvalidArguments(
            f"{plugin_id} was installed from {_KIND[type(old)]}, so it upgrades only from {_KIND[type(old)]} too,"
            f" not from {_KIND[type(given)]}"
        )
    if isinstance(old, NpmSource | PypiSource):
        if isinstance(given, NpmSource | PypiSource):
            if given.package != old.package:
                raise InvalidArguments(
                    f"{plugin_id} is {printable(old.package, 80)}; add {printable(given.package, 80)} under another id"
                )
            return given
        return type(old)(old.package, version)
    if version is not None:
        path = ".mcpb" if isinstance(old, BundleSource) else "server.json"
        raise InvalidArguments(f"{plugin_id} was installed from {_KIND[type(old)]}; give the new {path} as the source")
    if given is not None:
        return given
    if isinstance(old, BundleSource):
        raise InvalidArguments(f"{plugin_id} was installed from an MCP Bundle; give the new .mcpb as the source")
    if not old.path.is_file():
        raise InvalidArguments(
            f"the server.json {plugin_id} was installed from is gone ({printable(str(old.path), 80)}); give its path"
        )
    return old


def switch_upgrade(data_dir: Path, plugin_id: str, staged: Path) -> Path:
    """Put the folder `stage_upgrade` made in place of installed `plugin_id`'s; the old one is
    deleted. Returns the plugin's folder. On failure the old folder stays in place."""
    folder = plugins_dir(data_dir) / plugin_id
    old = folder.with_name(f".staging-old-{secrets.token_hex(6)}")
    try:
        folder.rename(old)
    except OSError:
        raise Unavailable(f"the installed {plugin_id} could not be moved aside") from None
    try:
        staged.rename(folder)
    except OSError:
        old.rename(folder)
        raise Unavailable(f"the new version of {plugin_id} could not be moved into place") from None
    shutil.rmtree(old, ignore_errors=True)
    return folder
