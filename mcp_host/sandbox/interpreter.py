"""The host's base Python interpreter as a sandbox binds it: its trees, its own site-packages
(hidden from a child) and its executable. `command: python` children run it (`runtimes`), and
so does the egress bridge of any child with egress (`egress_view`).

Above: `runtimes`, `egress_view`. Below: `sys`, `sysconfig`. Reads no file but the paths'
symlinks; starts nothing.
"""

from __future__ import annotations

import functools
import sys
import sysconfig
from pathlib import Path

__all__ = ["base_executable", "base_site_dirs", "base_trees", "hidden_in"]


@functools.cache
def base_trees() -> frozenset[Path]:
    """The base interpreter's trees: its prefix and the one its executable lives in."""
    return frozenset({Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent.parent})


@functools.cache
def base_executable() -> Path:
    """The base interpreter's executable, as found at its own path (inside a bound base tree,
    or under /usr): a virtualenv's python resolved through its symlink, else the base prefix's
    `bin/pythonX.Y` (a venv made with --copies)."""
    resolved = Path(sys.executable).resolve()
    if resolved.is_relative_to(Path(sys.base_prefix).resolve()) or sys.prefix == sys.base_prefix:
        return resolved
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return Path(sys.base_prefix).resolve() / "bin" / version


@functools.cache
def base_site_dirs() -> tuple[Path, ...]:
    """The base interpreter's own site-packages (another environment's packages: on this kind
    of host pip installs there)."""
    if sys.prefix == sys.base_prefix:
        return ()  # the host's site-packages are the SDK's: `python_view` keeps them
    scheme = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    dirs = {Path(sysconfig.get_path(name, vars=scheme)).resolve() for name in ("purelib", "platlib")}
    return tuple(sorted(path for path in dirs if path.is_dir()))


def hidden_in(trees: tuple[Path, ...]) -> tuple[str, ...]:
    """The base site-packages folders under one of `trees` (to cover with an empty tmpfs)."""
    return tuple(str(path) for path in base_site_dirs() if any(path.is_relative_to(tree) for tree in trees))
