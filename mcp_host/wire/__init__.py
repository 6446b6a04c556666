"""What travels: the `_meta` of a forwarded call, the results the host writes itself, checks on JSON a
plugin sends, newline-delimited JSON-RPC framing, the visitor's client as a call sees it,
rate-limited logging of what arrives, and what MCP Apps need of the host. Below: `errors`,
`settings`. Above: everything else.
"""

from .apps import (
    APP_MIME_TYPE,
    APPS_EXTENSION,
    APPS_SETTINGS,
    Apps,
    AppVersion,
    app_only,
    app_uri,
    tool_ui,
)
from .framing import UNREADABLE_ANSWER, Intercept, LineWriter, framed_transport
from .json_guard import check_json_object, json_contains
from .log_limit import LimitedLog, TokenBucket
from .meta import GRANT_KEY, MetaCaps, forwarded_meta, speaks_for_host, visitor_meta, without_host_keys
from .tool_results import (
    ERROR_KEY,
    Refusal,
    error_result,
    error_text,
    is_error,
    plain_tool_result,
    refusal_of,
    structured_result,
)
from .visitor_client import (
    ClientLacks,
    InputRequest,
    InputResponse,
    LogSink,
    PushClient,
    VisitorClient,
    lacking,
    log_sink,
)

__all__ = [
    "APPS_EXTENSION",
    "APPS_SETTINGS",
    "APP_MIME_TYPE",
    "ClientLacks",
    "ERROR_KEY",
    "GRANT_KEY",
    "Intercept",
    "LineWriter",
    "InputRequest",
    "InputResponse",
    "LimitedLog",
    "LogSink",
    "MetaCaps",
    "PushClient",
    "Refusal",
    "TokenBucket",
    "UNREADABLE_ANSWER",
    "VisitorClient",
    "AppVersion",
    "Apps",
    "app_only",
    "app_uri",
    "tool_ui",
    "check_json_object",
    "error_result",
    "error_text",
    "is_error",
    "forwarded_meta",
    "framed_transport",
    "json_contains",
    "lacking",
    "log_sink",
    "plain_tool_result",
    "refusal_of",
    "speaks_for_host",
    "structured_result",
    "visitor_meta",
    "without_host_keys",
]
