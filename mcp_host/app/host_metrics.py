"""`GET /metrics`: the scrape-time gauges a running host registers, and the operator's route.

Above: `asgi` (which mounts the route) and `wiring` (which calls `watch` once the parts exist).
Below: `observe.HostMetrics` (the series and the text format), the parts read when scraped: the
child pool, the database pool, holds, pins, input rounds and the protocol sessions' caps.

The route is an operator endpoint, never open to visitors: it needs `Authorization: Bearer`
with `MCP_HOST_METRICS_TOKEN` (when set; compared in constant time) or the owner token;
anything else is answered 401. Like `/readyz` it takes no Host check (a Prometheus scrapes a
replica by its address, behind the load balancer's name).

Figures read from the database (`mcp_host_visitor_sessions_open`, `mcp_host_holds_pending`,
`mcp_host_tools_pending`) are the cluster's, the same on every replica; the others are this
replica's own.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from mcp_host.children import ChildPool
from mcp_host.edge import ProtocolSessions, Unauthorized
from mcp_host.observe import METRICS_CONTENT_TYPE, HostMetrics, Reading
from mcp_host.policy import HoldBook, PinBook
from mcp_host.store import Database
from mcp_host.visitor import InputRounds

if TYPE_CHECKING:
    from .wiring import Host

__all__ = ["metrics", "watch"]

# Live visitor sessions (not ended), on every replica: `access.sessions` keeps them.
_LIVE_SESSIONS = "SELECT count(*) FROM mcp_host.sessions WHERE ended_at IS NULL"


def watch(
    metrics: HostMetrics,
    *,
    pool: ChildPool,
    database: Database,
    holds: HoldBook,
    pins: PinBook | None,
    owner_id: str,
    rounds: InputRounds,
    protocol_sessions: Mapping[str, ProtocolSessions],
) -> None:
    """Register the gauges read when scraped (README.md, "Metrics", names them)."""

    async def children() -> Reading:
        return {(plugin,): float(n) for plugin, n in pool.running_by_plugin().items()}

    async def visitor_sessions() -> Reading:
        return float(await database.pool.fetchval(_LIVE_SESSIONS))

    async def holds_pending() -> Reading:
        return float(len(await holds.of_owner(owner_id)))

    async def parked() -> Reading:
        return float(rounds.parked_count())

    metrics.gauge("mcp_host_children_running", "Children with a live process, by plugin.", children, ["plugin"])
    metrics.gauge("mcp_host_visitor_sessions_open", "Visitor sessions not ended (all replicas).", visitor_sessions)
    metrics.gauge(
        "mcp_host_holds_pending", "Held calls waiting for the owner (all replicas; at most 500).", holds_pending
    )
    if pins is not None:
        book = pins

        async def tools_pending() -> Reading:
            return float(len(await book.pending()))

        metrics.gauge(
            "mcp_host_tools_pending", "Tools hidden until the owner approves them (all replicas).", tools_pending
        )
    metrics.gauge("mcp_host_input_rounds_parked", "2026-07-28 calls parked between input rounds.", parked)
    _watch_protocol_sessions(metrics, protocol_sessions)
    _watch_pool(metrics, database)


def _watch_protocol_sessions(metrics: HostMetrics, protocol_sessions: Mapping[str, ProtocolSessions]) -> None:
    async def protocol() -> Reading:
        return {(door,): float(s.count()) for door, s in protocol_sessions.items()}

    async def resting() -> Reading:
        return {(door,): float(s.resting()) for door, s in protocol_sessions.items()}

    metrics.gauge(
        "mcp_host_protocol_sessions_open",
        "2025-11-25 protocol sessions (Mcp-Session-Id) open on this replica, by door.",
        protocol,
        ["door"],
    )
    metrics.gauge(
        "mcp_host_protocol_sessions_resting",
        "Of those, the ones resting (idle: ended in the SDK, opened again by their next request), by door.",
        resting,
        ["door"],
    )


def _watch_pool(metrics: HostMetrics, database: Database) -> None:
    async def db_pool() -> Reading:
        size, idle = database.pool.get_size(), database.pool.get_idle_size()
        return {("in_use",): float(size - idle), ("idle",): float(idle)}

    async def db_pool_max() -> Reading:
        return float(database.pool.get_max_size())

    metrics.gauge("mcp_host_db_pool_connections", "Database pool connections, by state.", db_pool, ["state"])
    metrics.gauge("mcp_host_db_pool_max", "The database pool's maximum size.", db_pool_max)


async def metrics(host: Host, request: Request) -> Response:
    """`GET /metrics`: every series in the Prometheus text format, for the operator."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or not await _operator(host, token):
        raise Unauthorized("metrics need the metrics token or the owner token")
    body = await host.metrics.exposition()
    return Response(body, media_type=METRICS_CONTENT_TYPE, headers={"Cache-Control": "no-store"})


async def _operator(host: Host, token: str) -> bool:
    expected = host.settings.metrics_token
    if expected is not None and hmac.compare_digest(token.encode(), expected.get_secret_value().encode()):
        return True
    return await host.owners.verify_token(token) is not None
