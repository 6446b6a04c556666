"""An installer for tests (`mcp_host.plugins.Installer`, passed where the real one would be: to
`running_host`, `create_app` or `cli.main`): the real installer's work, offline, with npm given
a local tarball in place of a registry's.

`LocalPackages` installs the tiny-node test package (`packages.NPM_SOURCE`) at a version from
that version's npm-packed tarball (no version: 1.0.0) and a registry server.json's npm package
from the tarball of the version it pins; any other source, and a version it has no tarball of,
as the real installer does (offline: the registries refuse every connection).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from mcp_host.plugins import (
    Installed,
    NpmSource,
    PackageInstaller,
    RegistryEntrySource,
    install_npm,
    install_registry_entry,
    installed_source,
    parse_add_source,
    parse_source,
    stage_upgrade,
)
from tests.plugins.packages import NPM_SOURCE

__all__ = ["LocalPackages"]


@dataclass
class LocalPackages:
    """`tarballs`: tiny-node's npm-packed tarballs by version. `pause_s`: how long an install of
    tiny-node takes at least (long enough for the owner door to report progress)."""

    tarballs: dict[str, Path] = field(default_factory=dict)
    pause_s: float = 0.0

    def install(self, source: str, data_dir: Path, plugin_id: str | None) -> Installed:
        parsed = parse_add_source(source)
        if isinstance(parsed, NpmSource) and parsed.package == NPM_SOURCE.package:
            time.sleep(self.pause_s)
            spec = self.tarballs.get(parsed.version or "1.0.0")
            return install_npm(parsed, data_dir, plugin_id=plugin_id, spec=None if spec is None else str(spec))
        if isinstance(parsed, RegistryEntrySource):
            return install_registry_entry(parsed, data_dir, plugin_id=plugin_id, spec=self._pinned(parsed))
        return PackageInstaller().install(source, data_dir, plugin_id)

    def stage_upgrade(self, data_dir: Path, plugin_id: str, version: str | None, source: str | None) -> Installed:
        spec = str(self.tarballs[version]) if version in self.tarballs else None
        if spec is None and version is None:
            entry = parse_source(source) if source is not None else installed_source(data_dir, plugin_id)
            spec = self._pinned(entry) if isinstance(entry, RegistryEntrySource) and entry.path.is_file() else None
        return stage_upgrade(data_dir, plugin_id, version, source=source, spec=spec)

    def _pinned(self, entry: RegistryEntrySource) -> str | None:
        """The tarball of the version `entry`'s server.json pins (None: none here)."""
        pinned = self.tarballs.get(json.loads(entry.path.read_text())["packages"][0]["version"])
        return None if pinned is None else str(pinned)
