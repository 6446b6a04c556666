"""Tracing of the host's MCP servers: the SDK's OpenTelemetry middleware only where it records.

Above: the MCP servers of the doors (visitor endpoint, owner endpoint, back-channel sockets).
Below: the SDK's `Server` and OpenTelemetry's tracer provider.

The SDK's low-level `Server` wraps every message in an OpenTelemetry span, even when nothing
records it: about 5% of the host's CPU per call. `untraced` takes that middleware off a server
when no tracer provider is configured (or always, for a server whose messages are not worth a
span). The middleware's class lives in a private module of the SDK, so it is known here by its
name; `tests/observe/test_tracing.py` fails if the SDK renames it.

The provider is set (or not) by `app.telemetry` from the `OTEL_*` variables before any server
is built. When it is, the middleware's span per message is the host's span for a visitor's
call and for each host op a child runs (its parent taken from the `traceparent` in `_meta`).
"""

from __future__ import annotations

from typing import Any

from mcp.server import Server
from opentelemetry import trace

__all__ = ["tracing_configured", "untraced"]

_SDK_TRACING = "OpenTelemetryMiddleware"


def tracing_configured() -> bool:
    """Whether a tracer provider has been set up (OpenTelemetry's default is a proxy)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def untraced(server: Server[Any], *, always: bool = False) -> Server[Any]:
    """`server` without the SDK's tracing middleware unless tracing is configured (`always`:
    whatever is configured); its other middleware stays. Returns `server`."""
    if always or not tracing_configured():
        server.middleware = [m for m in server.middleware if type(m).__name__ != _SDK_TRACING]
    return server
