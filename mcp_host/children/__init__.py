"""A child's life (start, reuse, idle stop, restart with backoff, failing), its stderr, and which
call a child's server-to-client request belongs to. Below: `sandbox`. Above: access and the doors.
"""

from .call_routing import InFlight
from .lifecycle import Child, ChildLimits, ChildPool, ChildState
from .stderr import LogKind

__all__ = ["Child", "ChildLimits", "ChildPool", "ChildState", "InFlight", "LogKind"]
