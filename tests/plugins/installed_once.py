"""Plugins the real installer installs once per test run, copied into each test that only needs
one installed (to list, remove, check or call it), not to watch it install.

The installer's own tests (tests/plugins/test_install*.py, the owner door's `plugin_add`, the
command line's `plugin add`) still install every time: what they check is the install. The tests
here take `installed_once.copy_into(data_dir)` instead of a pip install of their own: a plugin
venv is seconds of CPU for pip, run at idle priority (`mcp_host.plugins.install`), so under the
suite's load one install held its xdist worker for 15-100 s.

The first test of the run that asks for a package (on any xdist worker: a lock file in the folder
the workers share) installs it into that folder; each asker gets a copy of the plugin's folder in
its own data directory, symlinks kept (a venv's python links to the base interpreter). The
installer builds a plugin in a staging folder and renames it into place, so a plugin folder
already works wherever it is moved (tests/plugins/test_install.py's visitor calls both copies
under a host): a copy is what any install leaves, made by this run's code. An install that fails
leaves no mark: the next asker installs again (and fails the same way, in its own test).

Above: the tests that list, remove, check or call an installed plugin. Below:
`mcp_host.plugins`' installers and `tests.plugins.packages` (the wheels, the tarball).
"""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from mcp_host.plugins import Installed, RegistryEntrySource, install_npm, install_pypi, install_registry_entry
from tests.plugins.packages import GREETER, NPM_SOURCE, PYPI_SOURCE, greeter_wheel, npm_tarball, wheel

__all__ = ["InstalledOnce", "run_folder"]


def run_folder(tmp_path_factory: pytest.TempPathFactory, config: pytest.Config) -> Path:
    """A folder every xdist worker of this run shares (the workers' temporary folders' parent),
    or this process's own without xdist; a new one for each run, never an older run's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


Package = Literal["pypi", "npm", "server.json"]

# How each package is installed: (a folder for the package file, the data dir) -> what the
# installer says it installed.
_INSTALLS: dict[Package, Callable[[Path, Path], Installed]] = {
    # whisper-server from the test wheel, with pip into its own venv: pypi.whisper_server
    "pypi": lambda packages, data: install_pypi(PYPI_SOURCE, data, spec=str(wheel(packages))),
    # tiny-node's shout server from its npm-packed tarball (npm needed): npm.tiny_test.shout_server
    "npm": lambda packages, data: install_npm(NPM_SOURCE, data, spec=str(npm_tarball(packages))),
    # the greeter's registry server.json, naming its wheel (installed with pip): pypi.greeter_server
    "server.json": lambda packages, data: install_registry_entry(
        RegistryEntrySource(GREETER / "server.json"), data, spec=str(greeter_wheel(packages))
    ),
}


class InstalledOnce:
    """The test packages installed once in `folder`, shared by the run; `copy_into` puts a copy
    of one's plugin folder in a data dir."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder / "installed-once"

    def copy_into(self, data_dir: Path, package: Package) -> Path:
        """The plugin folder of `package` in `data_dir`/plugins, named as its installer names it."""
        installed = self._installed(package)
        target = data_dir / "plugins" / installed.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(installed, target, symlinks=True)
        return target

    def _installed(self, package: Package) -> Path:
        """The installed plugin folder, installing it first if no test of the run has."""
        folder = self._folder / package
        folder.mkdir(parents=True, exist_ok=True)
        done = folder / "installed"  # the plugin folder's path, written once it is whole
        with (folder / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait for the one installing
            if not done.exists():
                packages = folder / "packages"
                packages.mkdir(exist_ok=True)
                done.write_text(str(_INSTALLS[package](packages, folder / "data").folder))
            return Path(done.read_text())
