"""Sandboxing a child: the bubblewrap argv, the seccomp filter, pids and memory cgroups, and the
launch (argv, env, cwd) of one plugin. Below: `plugins`. Above: `children`.
"""

from .bwrap import SandboxLedger, SandboxUnavailable, require_bwrap
from .launch import Launch, host_cgroups, launch_for
from .procs import proc_stat, started_at

__all__ = [
    "Launch",
    "SandboxLedger",
    "SandboxUnavailable",
    "host_cgroups",
    "launch_for",
    "proc_stat",
    "require_bwrap",
    "started_at",
]
