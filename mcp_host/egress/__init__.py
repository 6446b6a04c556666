"""The host's egress proxy: how a sandboxed child reaches the hosts its manifest and the owner
name, and nothing else, and each child's caps through it (`egress_caps_for`).
One unix socket per child instance (`EgressGate`, opened by
`EgressProxy.open` with the plugin's `plugins.EgressPolicy` and `EgressCaps`) speaks HTTP
`CONNECT`, absolute-form HTTP and SOCKS5; the proxy resolves each name itself
(`HostsFileResolver`, then the system's), checks every address, and connects to a checked one.
Also where any of the host's outbound connections resolves names (`Resolver`).

Below: `plugins` (the policy), `observe` (the counters). Above: `sandbox` (binds the gate's
socket and the bridge), `children` (opens a gate per child start), the composition root.
"""

from .allowance import egress_caps_for, egress_limit_warnings
from .caps import EgressCaps
from .gate import EgressGate, GateStats, Refusal
from .proxy import EgressProxy
from .refusals import RefusalBook
from .resolver import HostsFileResolver, MemoryResolver, Resolver, SystemResolver

__all__ = [
    "EgressCaps",
    "EgressGate",
    "EgressProxy",
    "GateStats",
    "HostsFileResolver",
    "MemoryResolver",
    "Refusal",
    "RefusalBook",
    "Resolver",
    "SystemResolver",
    "egress_caps_for",
    "egress_limit_warnings",
]
