"""A plugin the real installer installs once per test run, copied into each test that only needs
it installed (to list, remove or check it), not to watch it install.

The installer's own tests (tests/plugins/test_install*.py, the owner door's `plugin_add`, the
command line's `plugin add`) still install every time: what they check is the install. The tests
here take `installed_once.copy_into(data_dir)` instead of a pip install of their own: a plugin
venv is seconds of CPU for pip, run at idle priority (`mcp_host.plugins.install`), so under the
suite's load one install held its xdist worker for 15-100 s.

The first test of the run that asks (on any xdist worker: a lock file in the folder the workers
share) installs into that folder; each asker gets a copy of the plugin's folder in its own data
directory, symlinks kept (a venv's python links to the base interpreter). The installer makes a
venv in a staging folder and renames it into place, so a plugin folder already works wherever it
is moved: a copy is what any install leaves, made by this run's code. An install that fails
leaves no mark: the next asker installs again (and fails the same way, in its own test).

Above: the tests in tests/app that list, remove and check an installed plugin. Below:
`mcp_host.plugins.install_pypi` and `tests.plugins.packages` (the wheel).
"""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

import pytest

from mcp_host.plugins import install_pypi
from tests.plugins.packages import PYPI_SOURCE, wheel

__all__ = ["InstalledOnce", "run_folder"]


def run_folder(tmp_path_factory: pytest.TempPathFactory, config: pytest.Config) -> Path:
    """A folder every xdist worker of this run shares (the workers' temporary folders' parent),
    or this process's own without xdist; a new one for each run, never an older run's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


class InstalledOnce:
    """whisper-server (`packages.PYPI_SOURCE`, from the test wheel) installed with pip once in
    `folder`, shared by the run; `copy_into` puts a copy of its plugin folder in a data dir."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder / "installed-once-pypi"

    def copy_into(self, data_dir: Path) -> Path:
        """The plugin folder in `data_dir`/plugins, as `install_pypi` names it (`pypi.whisper_server`)."""
        installed = self._installed()
        target = data_dir / "plugins" / installed.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(installed, target, symlinks=True)
        return target

    def _installed(self) -> Path:
        """The installed plugin folder, installing it first if no test of the run has."""
        self._folder.mkdir(exist_ok=True)
        done = self._folder / "installed"  # the plugin folder's path, written once it is whole
        with (self._folder / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait for the one installing
            if not done.exists():
                packages = self._folder / "packages"
                packages.mkdir(exist_ok=True)
                made = install_pypi(PYPI_SOURCE, self._folder / "data", spec=str(wheel(packages))).folder
                done.write_text(str(made))
            return Path(done.read_text())
