"""`mcp-host check DIR…`: the manifest verdict on plugin folders and, when a host runs with the
data directory, what each plugin there still needs before a visitor can use it.

Above: `cli` (the parser). Below: `plugins` (`check_paths` and `load_plugins`, which decide by
the same rules), `sandbox` (a manifest's limits above this host's ceilings), `door_client` (the
running host's owner door: `capabilities_list` and, per capability, `capability_next_steps`,
whose steps the host decides as it decides the ones `plugin add` ends with) and `plugin_commands`
(each step's command, as `plugin add` prints it).

The verdict is the exit status: 1 when a manifest has an error, else 0; what a plugin still
needs is information: one line per plugin, each step indented below it with its command under
it. Without a host, the verdict alone (and, for a data directory named with `--data-dir`, one
line on stderr saying so).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from mcp_host.egress import egress_limit_warnings
from mcp_host.plugins import Plugin, check_paths, load_plugins, printable
from mcp_host.sandbox import limit_warnings
from mcp_host.settings import Settings

from .door_client import Door, DoorFailed, DoorRefused, NoDoor, call_door, find_door
from .plugin_commands import step_command

__all__ = ["Checked", "run_check"]

_SHOWN_MAX = 300  # characters of one value from the host printed to the terminal


@dataclass(frozen=True)
class Checked:
    """What `check` prints (`out` on stdout, `err` on stderr) and its exit status."""

    status: int
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)


def run_check(dirs: Sequence[str], settings: Settings, *, data_dir_named: bool) -> Checked:
    """The verdict on `dirs` and what each plugin still needs on the host running with
    `settings.data_dir`; the exit status is 1 when a manifest has an error."""
    paths = [Path(p) for p in dirs]
    report = check_paths(paths, builtin_root=settings.builtin_dir)
    checked = Checked(1 if report.errors else 0)
    checked.out.extend(f"error: {error.message}" for error in report.errors)
    checked.out.extend(f"warning: {warning.message}" for warning in report.warnings)
    plugins = load_plugins(None, paths).plugins
    for plugin in plugins:  # a manifest's limits above this host's ceilings
        over = (*limit_warnings(plugin, settings.sandbox), *egress_limit_warnings(plugin, settings.egress))
        checked.out.extend(f"warning: {message}" for message in over)
    if not report.errors:
        checked.out.append(f"ok: {', '.join(dirs)}")
    try:
        door = find_door(settings.data_dir)
        if door is not None:
            checked.out.extend(anyio.run(_lines, door, plugins, settings.data_dir))
        elif data_dir_named:
            checked.err.append(f"(manifests only: no host is running with data directory {settings.data_dir})")
    except (DoorFailed, DoorRefused) as exc:
        checked.err.append(f"mcp-host: what the plugins still need is not known: {exc.message}")
    except NoDoor:
        checked.err.append(f"(manifests only: the host of data directory {settings.data_dir} does not answer)")
    return checked


async def _lines(door: Door, plugins: Sequence[Plugin], data_dir: Path) -> list[str]:
    listed = await call_door(door, "capabilities_list", {})
    running = {str(c.get("id")): c for c in listed.get("capabilities") or [] if isinstance(c, dict)}
    lines: list[str] = []
    owner_tools = False
    for plugin in plugins:
        plugin_id = plugin.manifest.id
        entry = running.get(plugin_id)
        if entry is None:
            lines.append(f"{plugin_id}: the host at {door.url} does not run it; {_to_run(plugin, data_dir)}")
        elif plugin.manifest.kind == "connector":
            lines.append(f"{plugin_id}: a connector; capabilities reach it once you connect it (connectors_list)")
        else:
            answer = await call_door(door, "capability_next_steps", {"capability": plugin_id})
            said, owner = _steps(answer, door, data_dir)
            lines += said
            owner_tools = owner_tools or owner
    if owner_tools:
        lines.append(
            f"(owner tool: ask your agent connected to the owner door, or use the console at {door.url}/owner/)"
        )
    return lines


def _steps(answer: dict[str, Any], door: Door, data_dir: Path) -> tuple[list[str], bool]:
    """The capability's line and one indented line per step with its command; and whether a
    step is an owner tool."""
    plugin_id = _shown(answer.get("capability"))
    steps = [step for step in answer.get("next") or [] if isinstance(step, dict)]
    # A child that fails or waits for the owner (a remote server refusing its credentials):
    # said first, with where to read why — unless a required setting is unset, which is why
    # (no child starts without it).
    setting = any(step.get("tool") == "config_set" for step in steps)
    if answer.get("status") in ("failing", "unconfigured") and not setting:
        arguments = {"capability": answer.get("capability")}
        why = f"it does not start ({_shown(answer.get('cause'))})"
        steps.insert(0, {"step": why, "tool": "capability_logs", "arguments": arguments})
    if not steps:
        return [f"{plugin_id}: a visitor can use it now (a public session sees it)"], False
    lines = [f"{plugin_id}: {len(steps)} step{'s' if len(steps) > 1 else ''} before a visitor can use it"]
    if answer.get("note"):
        lines[0] += f" ({_shown(answer['note'])})"
    for step in steps:
        lines += [f"  {_shown(step.get('step'))}:", f"    {step_command(step, data_dir)}"]
    return lines, any(step.get("tool") != "tools_approve" for step in steps)


def _to_run(plugin: Plugin, data_dir: Path) -> str:
    installed = data_dir / "plugins"
    if plugin.folder.parent == installed.resolve():
        return "it loads what is in <data dir>/plugins when it starts: restart it"
    return f"serve it with --plugins {shlex.quote(str(plugin.folder))}"


def _shown(value: object) -> str:
    return printable(str(value), _SHOWN_MAX)
