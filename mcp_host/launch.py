"""What starts a plugin's process: the argv, working directory and environment.

Above: `children` (which spawns what this returns). Below: `sandbox` (the bubblewrap argv).
`command: python` in a manifest means the host's own interpreter, so the MCP SDK (and later
the plugin kit) are importable inside the sandbox: its prefix and base prefix are bound
read-only, nothing else of the host's tree.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from .plugins import Plugin
from .sandbox import Limits, SandboxSpec, build_command
from .settings import Settings

__all__ = ["Launch", "launch_for"]

logger = logging.getLogger(__name__)

_INSIDE_PLUGIN_DIR = "/plugin"


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    cwd: Path | None
    env: dict[str, str]


def _interpreter_dirs() -> tuple[Path, ...]:
    dirs = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    # A venv's python is a symlink into the base interpreter's bin; both trees are needed.
    dirs.add(Path(sys.executable).resolve().parent.parent)
    return tuple(sorted(dirs))


def launch_for(plugin: Plugin, settings: Settings) -> Launch:
    """The launch of `plugin`'s stdio child under the host's sandbox settings."""
    transport = plugin.manifest.transport
    if transport is None or transport.command is None:
        raise ValueError(f"{plugin.manifest.id} has no stdio command")
    command = sys.executable if transport.command == "python" else transport.command
    sandboxed = settings.sandbox == "on"
    env = dict(transport.env or {})
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    spec = SandboxSpec(
        plugin_dir=plugin.folder,
        command=command,
        args=tuple(transport.args or ()),
        env=env,
        allow_net=bool(transport.sandbox and transport.sandbox.allow_net),
        limits=Limits(
            memory_bytes=settings.child_memory_bytes,
            max_processes=settings.child_max_processes,
            max_open_files=settings.child_max_open_files,
            cpu_seconds=settings.child_cpu_seconds,
            max_file_bytes=settings.child_max_file_bytes,
        ),
        extra_ro_binds=_interpreter_dirs(),
    )
    argv = build_command(spec, sandbox=sandboxed)
    if sandboxed:
        return Launch(argv=argv, cwd=None, env={})
    logger.warning("%s: starting UNSANDBOXED (MCP_HOST_SANDBOX=off; development only)", plugin.manifest.id)
    return Launch(argv=argv, cwd=plugin.folder, env=env)
