"""One plugin's resource limits: its manifest's `limits` under the host's sandbox settings,
which are both the default and the ceiling of each.

Above: `launch`, which puts the `Budget` into the `SandboxSpec` (rlimits, tmpfs sizes) and the
sandbox's memory cgroup, and logs its warnings; `mcp-host check` shows them. Below: the
settings and the manifest model. Pure: no file, no process.

A manifest asking for less memory than the host's `child_memory_bytes` gets tmpfs caps
scaled down in the host's proportion (the defaults' 64 + 16 of 1024 MiB: 8 + 2 of a 128 MiB
plugin), so they stay inside its budget as the host's stay inside the host's.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_host.plugins import Plugin
from mcp_host.settings import SandboxSettings

from .bwrap import Limits

__all__ = ["Budget", "budget_for", "limit_warnings"]

_MiB = 1024 * 1024


@dataclass(frozen=True)
class Budget:
    """The limits of one plugin's sandbox: `limits` (rlimits and tmpfs sizes; its
    `memory_bytes` is the budget) and `cgroup_memory_bytes`, the cap of its memory cgroup
    where the host has one; `warnings` say which manifest value was lowered to the ceiling."""

    limits: Limits
    cgroup_memory_bytes: int
    warnings: tuple[str, ...] = ()


def budget_for(plugin: Plugin, sandbox: SandboxSettings) -> Budget:
    """The limits `plugin`'s children run under: each manifest value, at most the host's."""
    asked = plugin.manifest.limits
    warnings = limit_warnings(plugin, sandbox)
    memory = sandbox.memory_bytes
    host_cgroup = sandbox.memory_cgroup_bytes or sandbox.memory_bytes
    cgroup = host_cgroup
    tmp, shm = sandbox.tmp_bytes, sandbox.shm_bytes
    if asked is not None and asked.memory_mb is not None:
        memory = min(asked.memory_mb * _MiB, sandbox.memory_bytes)
        cgroup = min(memory, host_cgroup)
        tmp = max(_MiB, sandbox.tmp_bytes * memory // sandbox.memory_bytes)
        shm = max(_MiB, sandbox.shm_bytes * memory // sandbox.memory_bytes)

    def capped(key: str, ceiling: int) -> int:
        value: int | None = None if asked is None else getattr(asked, key)
        return ceiling if value is None else min(value, ceiling)

    limits = Limits(
        memory_bytes=memory,
        max_processes=capped("processes", sandbox.max_processes),
        max_open_files=capped("open_files", sandbox.max_open_files),
        cpu_seconds=capped("cpu_seconds", sandbox.cpu_seconds),
        max_file_bytes=sandbox.max_file_bytes,
        tmp_bytes=tmp,
        shm_bytes=shm,
    )
    return Budget(limits, cgroup, warnings)


def limit_warnings(plugin: Plugin, sandbox: SandboxSettings) -> tuple[str, ...]:
    """One line per manifest limit above the host's ceiling, saying what the plugin gets."""
    asked = plugin.manifest.limits
    if asked is None:
        return ()
    return asked.above(
        plugin.manifest.id,
        (
            ("memory_mb", sandbox.memory_bytes // _MiB, "MCP_HOST_CHILD_MEMORY_BYTES"),
            ("cpu_seconds", sandbox.cpu_seconds, "MCP_HOST_CHILD_CPU_SECONDS"),
            ("processes", sandbox.max_processes, "MCP_HOST_CHILD_MAX_PROCESSES"),
            ("open_files", sandbox.max_open_files, "MCP_HOST_CHILD_MAX_OPEN_FILES"),
        ),
    )
