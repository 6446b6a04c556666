"""The HTTP edge, in front of the MCP SDK: who is asking (the principal), the JSON-RPC edge, caps
on protocol sessions, Host and Origin rules, throttling wrong credentials, the uvicorn config,
the MCP servers' tracing, the host's Prometheus series, and the REST endpoints' error answers.
Below: `wire`. Above: the doors.
"""

from .host_origin import HostOriginGuard
from .http_server import server_config
from .jsonrpc import FastPath, RpcEdge, drain_limit, read_body
from .metrics import METRICS_CONTENT_TYPE, HostMetrics, Reading
from .principal import Asking, Principal, PrincipalKind
from .protocol_sessions import ProtocolSessionLimits, ProtocolSessions, SessionRecord, SessionRecords, record_key
from .rates import PrincipalPace, PrincipalRate
from .rest_errors import REST_ERRORS, MethodNotAllowed, TooFast, TooLarge, Unauthorized, rest_response
from .throttle import FailureThrottle, ThrottleLimits
from .tracing import untraced

__all__ = [
    "METRICS_CONTENT_TYPE",
    "REST_ERRORS",
    "Asking",
    "FailureThrottle",
    "FastPath",
    "HostMetrics",
    "HostOriginGuard",
    "MethodNotAllowed",
    "Principal",
    "PrincipalKind",
    "PrincipalPace",
    "PrincipalRate",
    "ProtocolSessionLimits",
    "ProtocolSessions",
    "Reading",
    "RpcEdge",
    "SessionRecord",
    "SessionRecords",
    "ThrottleLimits",
    "TooFast",
    "TooLarge",
    "Unauthorized",
    "drain_limit",
    "read_body",
    "record_key",
    "rest_response",
    "server_config",
    "untraced",
]
