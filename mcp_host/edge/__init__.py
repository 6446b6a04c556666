"""The HTTP edge, in front of the MCP SDK: the JSON-RPC edge, caps on protocol sessions, Host and
Origin rules, throttling wrong credentials, and the uvicorn config. Below: `wire`. Above: the doors.
"""

from .host_origin import HostOriginGuard
from .http_server import server_config
from .jsonrpc import RpcEdge, drain_limit, read_body
from .protocol_sessions import ProtocolSessionLimits, ProtocolSessions
from .throttle import FailureThrottle, ThrottleLimits

__all__ = [
    "FailureThrottle",
    "HostOriginGuard",
    "ProtocolSessionLimits",
    "ProtocolSessions",
    "RpcEdge",
    "ThrottleLimits",
    "drain_limit",
    "read_body",
    "server_config",
]
