"""What each runtime sees in its sandbox beyond /usr and its plugin folder: the trees bound for
the command a manifest names, so a Node child gets no Python and a Python child only the SDK.

Above: `launch`, which puts a `View` into the `SandboxSpec`. Below: the host's file system,
`sys` and `importlib.metadata` (which distributions the SDK needs). Nothing here starts a
process or opens a file descriptor.

- `command: python` (`python_view`) means the host's own interpreter with the MCP SDK and the
  plugin kit: the base interpreter's tree at its own path, its own site-packages hidden; the
  host's virtualenv rebuilt at `/opt/mcp-host/venv` from its `pyvenv.cfg`, its python and,
  in its site-packages, only the entries of the distributions `SDK_DISTRIBUTIONS` need
  (their requirements' closure), so host-only packages (asyncpg, psutil, pgserver, the
  host's own `mcp_host`) cannot be read (cryptography can: `mcp.server` imports it); the
  kit at `/opt/mcp-host/lib`. A host not in a virtualenv binds its interpreter's tree whole: its site-packages are the
  SDK's install, and cannot be told apart from the host's.
- Any other command (`command_view`: node, a plugin's own `venv/bin/python`, a binary) gets
  none of that; only when the program it runs lives outside /usr (a Node or a base Python
  under /opt or ~/.pyenv, reached through a symlink or found on the host's PATH) its install
  tree is bound read-only at its own path, and the host interpreter's site-packages in it
  hidden.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import logging
import re
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from .bwrap import BASE_ENV
from .interpreter import base_trees, hidden_in

__all__ = [
    "KIT_INSIDE",
    "SDK_DISTRIBUTIONS",
    "kit_dir",
    "VENV_INSIDE",
    "View",
    "command_view",
    "python_view",
    "sdk_entries",
]

logger = logging.getLogger(__name__)

KIT_INSIDE = "/opt/mcp-host/lib"
VENV_INSIDE = "/opt/mcp-host/venv"
_KIT_PACKAGE = "mcp_host_kit"
# What a `command: python` plugin may import besides the standard library: the SDK, what the
# kit imports (yaml), and what the builtin capabilities import (caldav: caldav; smtp:
# aiosmtplib). Each with its requirements' closure.
SDK_DISTRIBUTIONS = ("mcp", "pyyaml", "caldav", "aiosmtplib")
# Roots where a program is reached anyway (/usr is bound whole; /bin, /lib… link into it or
# are bound as the host has them).
_SEEN_ROOTS = (Path("/usr"), Path("/bin"), Path("/sbin"), Path("/lib"), Path("/lib64"))
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA_IN_MARKER = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


@dataclass(frozen=True)
class View:
    """What one runtime's sandbox gets: `command` (as run inside), `own_paths` (trees bound at
    their own paths), `binds_at` ((host path, path inside)), `hidden` (paths inside covered by
    an empty tmpfs) and `env` (variables it needs, PYTHONPATH for the kit)."""

    command: str
    own_paths: tuple[Path, ...] = ()
    binds_at: tuple[tuple[Path, str], ...] = ()
    hidden: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def python_view() -> View:
    """The view of `command: python`: the host's interpreter, the SDK's packages and the kit."""
    kit = kit_dir()
    kit_binds = ((kit, f"{KIT_INSIDE}/{_KIT_PACKAGE}"),) if kit is not None else ()
    kit_env = (("PYTHONPATH", KIT_INSIDE),) if kit is not None else ()
    base = base_trees()
    if sys.prefix == sys.base_prefix:
        return View(sys.executable, tuple(sorted(base)), kit_binds, (), kit_env)
    venv = Path(sys.prefix).resolve()
    try:
        python = Path(sys.executable).relative_to(sys.prefix)
    except ValueError:  # a python outside its venv's tree: the venv is bound whole, as found
        return View(sys.executable, tuple(sorted(base | {venv})), kit_binds, (), kit_env)
    # The venv is found from the path its python runs by (pyvenv.cfg one level up), and its
    # `home` names the base interpreter, bound at its own path; a bind of the python follows
    # its symlink to the base executable (a venv made with --copies: its own copy).
    site = _venv_site_packages(venv)
    site_inside = f"{VENV_INSIDE}/{site.relative_to(venv)}"
    binds = (
        (venv / "pyvenv.cfg", f"{VENV_INSIDE}/pyvenv.cfg"),
        (Path(sys.executable).resolve(), f"{VENV_INSIDE}/{python}"),
        *((site / name, f"{site_inside}/{name}") for name in sdk_entries(site)),
        *kit_binds,
    )
    own = tuple(sorted(base - {venv}))
    return View(f"{VENV_INSIDE}/{python}", own, binds, hidden_in(own), kit_env)


def command_view(command: str, plugin_dir: Path) -> View:
    """The view of any other command: nothing of the host's Python; the install tree of the
    program it runs when that lives outside /usr (and outside the plugin folder), where a
    bare name not on the sandbox's PATH is run by the path the host's PATH finds."""
    found = _program(command, plugin_dir)
    if found is None:
        return View(command)
    run_as, real = found
    tree = _install_tree(real)
    if tree is None or real.is_relative_to(plugin_dir.resolve()):
        return View(run_as)
    own = (tree,)
    return View(run_as, own, (), hidden_in(own))


def _program(command: str, plugin_dir: Path) -> tuple[str, Path] | None:
    """(the command as the sandbox runs it, the real file it runs), or None when it is not
    found on the host (the child then fails to start, saying so)."""
    if "/" in command:
        path = Path(command) if command.startswith("/") else plugin_dir / command
        return (command, path.resolve()) if path.exists() else None
    inside = shutil.which(command, path=BASE_ENV["PATH"])
    if inside is not None:
        return command, Path(inside).resolve()
    host = shutil.which(command)  # e.g. an nvm node: run by its path, its tree bound
    return (host, Path(host).resolve()) if host is not None and host.startswith("/") else None


def _install_tree(real: Path) -> Path | None:
    """The tree to bind for the program at `real`: none under /usr; its prefix (`bin/..`)
    when it is in a `bin` folder below the root's children; else its own folder."""
    if any(real.is_relative_to(root) for root in _SEEN_ROOTS):
        return None
    folder = real.parent
    if folder.name == "bin" and len(folder.parent.parts) >= 3:
        return folder.parent
    return folder if len(folder.parts) >= 3 else None


def _venv_site_packages(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


@functools.cache
def kit_dir() -> Path | None:
    """The plugin kit's package folder on the host, or None when it is not installed."""
    spec = importlib.util.find_spec(_KIT_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent


@functools.cache
def sdk_entries(site: Path) -> tuple[str, ...]:
    """The top-level entries of `site` (a site-packages folder) that the distributions of
    `SDK_DISTRIBUTIONS` and their requirements install: packages, modules, their .dist-info
    (`importlib.metadata` reads it) and .pth files; sorted.

    Requirements are followed with the extras they ask for (the SDK's `pyjwt[crypto]` brings
    cryptography, which `mcp.server` imports) and whatever their other markers say (a
    requirement for another platform is simply not installed). A distribution not installed
    is skipped.
    """
    entries: set[str] = set()
    for dist in _closure(SDK_DISTRIBUTIONS):
        for file in dist.files or ():
            top = file.parts[0] if file.parts else ""
            if top and top not in ("..", "__pycache__") and (site / top).exists():
                entries.add(top)
    return tuple(sorted(entries))


def _closure(names: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """The installed distributions `names` need: each, and what its requirements name, with
    the extras they ask for (`pyjwt[crypto]`: cryptography too)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()  # (distribution, extra or "") already followed
    todo: list[tuple[str, frozenset[str]]] = [(name, frozenset()) for name in names]
    while todo:
        name, extras = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        wanted = ({""} | extras) - {extra for dist, extra in done if dist == key}
        if not wanted:
            continue
        dist = found.get(key)
        if dist is None:
            try:
                dist = found[key] = importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                logger.debug("%s is not installed; python children do without it", name)
                continue
        done.update((key, extra) for extra in wanted)
        for requirement in dist.requires or ():
            spec, _, marker = requirement.partition(";")
            needs = set(_EXTRA_IN_MARKER.findall(marker)) or {""}  # "": the distribution itself
            if needs & wanted:
                match = _REQUIREMENT.match(spec)
                if match is not None:
                    asked = frozenset(x.strip() for x in (match.group(2) or "").split(",") if x.strip())
                    todo.append((match.group(1), asked))
    return list(found.values())
