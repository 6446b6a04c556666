"""Sandboxing a child: the bubblewrap argv, the seccomp filter, pids and memory cgroups, the
plugin's limits under the host's, what each runtime sees, and the launch (argv, env, cwd) of
one plugin. Below: `plugins`. Above: `children`.
"""

from .budget import limit_warnings
from .bwrap import SandboxLedger, SandboxUnavailable, require_bwrap
from .launch import Launch, host_cgroups, launch_for, says_out_of_memory
from .overlay import available as plugin_layer_available
from .procs import proc_stat, started_at

__all__ = [
    "Launch",
    "SandboxLedger",
    "SandboxUnavailable",
    "host_cgroups",
    "launch_for",
    "limit_warnings",
    "plugin_layer_available",
    "proc_stat",
    "require_bwrap",
    "says_out_of_memory",
    "started_at",
]
