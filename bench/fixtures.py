"""What the bench prepares before it starts anything: plugin folders and the peers' venvs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "FASTMCP_SPEC",
    "MCP_PROXY_SPEC",
    "PluginDirs",
    "ensure_fastmcp_venv",
    "ensure_mcp_proxy",
    "make_plugins",
]

BENCH = Path(__file__).resolve().parent
ECHO_PLUGIN = BENCH / "echo_plugin"
# Pinned so that runs compare; bump deliberately (the venv is rebuilt when this changes).
FASTMCP_SPEC = "fastmcp==4.2.3"
# The bare pass-through peer (issue 31): no sandbox, no gates; pinned likewise.
MCP_PROXY_SPEC = "mcp-proxy==0.13.0"


@dataclass(frozen=True)
class PluginDirs:
    one: Path
    """A plugins root with one echo capability (`bench.echo`, tool `echo`): legs a, b, c, f."""
    five: Path
    """A plugins root with five (`bench.echo_1` … `bench.echo_5`, tools `echo_1` …): legs d, e."""
    echo_server: Path
    """The echo child's `server.py` inside `one` (what legs a, b and f run directly)."""


def _copy_echo(dest: Path, plugin_id: str, tool: str) -> None:
    shutil.copytree(ECHO_PLUGIN, dest, ignore=shutil.ignore_patterns("__pycache__"))
    manifest: dict[str, Any] = yaml.safe_load((ECHO_PLUGIN / "manifest.yaml").read_text())
    manifest["id"] = plugin_id
    manifest["visitor_tools"] = [tool]
    manifest["transport"]["env"] = {"ECHO_TOOL_NAME": tool}
    (dest / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))


def make_plugins(workdir: Path, count: int = 5) -> PluginDirs:
    """Copy the bench echo plugin into `workdir`: one root with one copy, one with `count`."""
    one = workdir / "plugins-one"
    _copy_echo(one / "echo", "bench.echo", "echo")
    five = workdir / "plugins-five"
    for i in range(1, count + 1):
        _copy_echo(five / f"echo_{i}", f"bench.echo_{i}", f"echo_{i}")
    return PluginDirs(one=one, five=five, echo_server=one / "echo" / "server.py")


def ensure_fastmcp_venv(venv: Path) -> tuple[Path | None, str]:
    """The FastMCP venv's python (created and installed on first use), or None and why not."""
    return _ensure_venv(venv, FASTMCP_SPEC, "python")


def ensure_mcp_proxy(venv: Path) -> tuple[Path | None, str]:
    """The `mcp-proxy` command of its own venv (created and installed on first use), or None
    and why not (the registry unreachable, say)."""
    return _ensure_venv(venv, MCP_PROXY_SPEC, "mcp-proxy")


def _ensure_venv(venv: Path, spec: str, command: str) -> tuple[Path | None, str]:
    """`venv/bin/command` once `spec` is installed into `venv` (created, or rebuilt when the
    pin changed), or None and why not."""
    python, wanted = venv / "bin" / "python", venv / "bin" / command
    stamp = venv / f".installed-{spec}"
    if stamp.exists() and wanted.exists():
        return wanted, f"{spec} in {venv}"
    print(f"[bench] installing {spec} into {venv} (once)")
    if venv.exists():
        shutil.rmtree(venv)
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [
        [base, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", spec],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            return None, f"`{' '.join(step[-3:])}` failed ({done.returncode}): {tail}"
    stamp.touch()
    return wanted, f"{spec} in {venv} (just installed)"


def package_version(python: Path, package: str) -> str | None:
    """`package`'s version as `python` sees it (None if it is not installed)."""
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None
