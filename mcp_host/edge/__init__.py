"""The HTTP edge, in front of the MCP SDK: the JSON-RPC edge, caps on protocol sessions, Host and
Origin rules, throttling wrong credentials and rating principals, the uvicorn config, and the REST
endpoints' error answers. Below: the core (`policy` and under; `store` holds the protocol
session records). Above: the doors (`backchannel` needs none of it).
"""

from .credential import authenticated, credential_of
from .host_origin import HostOriginGuard
from .http_server import server_config
from .jsonrpc import FastPath, RpcEdge, drain_limit, read_body
from .protocol_sessions import ProtocolSessionLimits, ProtocolSessions, SessionRecords
from .rates import PrincipalPace, PrincipalRate
from .rest_errors import REST_ERRORS, MethodNotAllowed, TooFast, TooLarge, Unauthorized, rest_response
from .throttle import FailureThrottle, ThrottleLimits, client_address

__all__ = [
    "REST_ERRORS",
    "FailureThrottle",
    "FastPath",
    "HostOriginGuard",
    "MethodNotAllowed",
    "PrincipalPace",
    "PrincipalRate",
    "ProtocolSessionLimits",
    "ProtocolSessions",
    "RpcEdge",
    "SessionRecords",
    "ThrottleLimits",
    "TooFast",
    "TooLarge",
    "Unauthorized",
    "authenticated",
    "client_address",
    "credential_of",
    "drain_limit",
    "read_body",
    "rest_response",
    "server_config",
]
