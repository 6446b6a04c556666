"""The SDK's tracing middleware leaves a server when nothing records spans; the rest stays."""

from __future__ import annotations

from typing import Any

from mcp.server import Server

from mcp_host.observe import tracing_configured, untraced


def test_the_sdks_tracing_middleware_is_taken_off_and_nothing_else() -> None:
    server: Server[Any] = Server("t")
    assert [type(m).__name__ for m in server.middleware] == ["OpenTelemetryMiddleware"]  # the SDK's default
    other = object()
    server.middleware.append(other)  # type: ignore[arg-type]
    assert not tracing_configured()
    assert untraced(server) is server
    assert server.middleware == [other]


def test_always_takes_it_off_whatever_is_configured() -> None:
    server: Server[Any] = Server("t")
    untraced(server, always=True)
    assert server.middleware == []
