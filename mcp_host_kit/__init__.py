"""mcp_host_kit: what a plugin of mcp-host imports to reach the host.

    kit = Kit(__file__)                      # once, next to the MCPServer

    @mcp.tool()
    @tool_errors                             # a HostOpError becomes {code, message}, isError
    async def note_add(text: str, ctx: Context) -> dict[str, Any]:
        host = kit.host(ctx)                 # this call's grant and session
        return {"id": await host.store.insert("notes", {"text": text})}

A connector reads the owner's settings for its category with `kit.connection(ctx)`, and
reaches a server of a protocol other than HTTP with `open_tunnel(host, port, timeout=…)`
(through the host's egress proxy when the sandbox names one).

Under the host, ops travel over the back-channel socket named by `MCP_HOST_SOCKET`;
without it (`python server.py`, the MCP Inspector) they are emulated in memory from the
plugin's `manifest.yaml`. The kit depends on the MCP SDK alone (PyYAML only standalone) and
never on `mcp_host`. README.md next to this file is the plugin author's guide.
"""

from .connection import CONNECTION_KEY, ConnectionInfo
from .egress import open_tunnel
from .errors import (
    Denied,
    EgressRefused,
    HostOpError,
    InvalidArguments,
    QuotaExhausted,
    Unavailable,
    Unconfigured,
    error_result,
    tool_errors,
)
from .host import Config, ConfigValues, Host, Inference, Owner, Record, SearchHit, Store
from .kit import SOCKET_ENV, Kit
from .server import APP_MIME_TYPE, PluginServer
from .session import GRANT_KEY, SESSION_KEY, TEST_SESSION, SessionInfo, Subject, Visitor

__all__ = [
    "APP_MIME_TYPE",
    "CONNECTION_KEY",
    "GRANT_KEY",
    "SESSION_KEY",
    "SOCKET_ENV",
    "TEST_SESSION",
    "Config",
    "ConfigValues",
    "ConnectionInfo",
    "Denied",
    "EgressRefused",
    "Host",
    "HostOpError",
    "Inference",
    "InvalidArguments",
    "Kit",
    "Owner",
    "PluginServer",
    "QuotaExhausted",
    "Record",
    "SearchHit",
    "SessionInfo",
    "Store",
    "Subject",
    "Unavailable",
    "Unconfigured",
    "Visitor",
    "error_result",
    "open_tunnel",
    "tool_errors",
]
