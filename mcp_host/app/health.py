"""Liveness (`GET /healthz`), readiness (`GET /readyz`), and HTTP's answer to a database outage.

Above: `asgi` (which mounts the two routes, puts `OutageGuard` in front of Starlette's
routes and uses `answer_outages` on the visitor MCP fast path). Below: the
running host's `Database` (`answers`: a bounded `SELECT 1`), `sandbox.require_bwrap`, and
`errors.as_unavailable`, which says what counts as the database being away.

- `/healthz` is liveness: 200 `{"ok": true}` while the host runs, also during a database
  outage it is recovering from (restarting the process would not help; if the embedded server
  cannot be restarted, the host stops by itself). 503 while it starts or stops.
- `/readyz` is readiness: 200 only when the database answers `SELECT 1` within
  `readiness_timeout_s`, children can start (the sandbox is there; none is started), and the
  first tool lists at start are done (`lists`: every capability listed for the owner's review,
  the prestarted children vetted — at most `ready_lists_wait_s`), so the first visitor a load
  balancer sends finds warm children; else 503 naming the failed checks:
  `{"ready": false, "failed": ["lists"], "checks": {…, "lists": "starting"}}`.
  From SIGTERM on (`drain.py`) it answers 503 `{"drain": "draining"}` at once, asking nothing.
- A request whose handler meets a database outage before its response started is answered
  503 `{"error": "unavailable", "message": …}` with `Retry-After`, never a 500 with a traceback
  (the database watch logs the outage once). Other exceptions pass through unchanged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_host.errors import as_unavailable
from mcp_host.sandbox import SandboxUnavailable, require_bwrap

if TYPE_CHECKING:
    from .wiring import Host

__all__ = ["OutageGuard", "answer_outages", "healthz", "readyz"]

logger = logging.getLogger(__name__)


def _host(request: Request) -> Host | None:
    return getattr(request.app.state, "host", None)


async def healthz(request: Request) -> Response:
    """Liveness: the host's lifespan is running."""
    alive = _host(request) is not None
    return JSONResponse({"ok": alive}, status_code=200 if alive else 503, headers={"Cache-Control": "no-store"})


async def readyz(request: Request) -> Response:
    """Readiness: the database answers and children can start, and the host is not draining."""
    host = _host(request)
    drain = getattr(request.app.state, "drain", None)
    if drain is not None and drain.draining:  # the load balancer takes this replica out first
        checks = {"drain": "draining"}
    elif host is None:
        checks = {"host": "starting or stopping"}
    else:
        checks = {
            "database": await _database_check(host),
            "children": _children_check(host),
            "lists": "ok" if host.listed.is_set() else "starting",
        }
    failed = [name for name, outcome in checks.items() if outcome != "ok"]
    return JSONResponse(
        {"ready": not failed, "failed": failed, "checks": checks},
        status_code=503 if failed else 200,
        headers={"Cache-Control": "no-store"},
    )


async def _database_check(host: Host) -> str:
    if await host.database.answers(host.settings.database.readiness_timeout_s):
        return "ok"
    return "unavailable"


def _children_check(host: Host) -> str:
    if host.settings.sandbox.mode == "off":
        return "ok"
    try:
        require_bwrap()
    except SandboxUnavailable:
        return "sandbox unavailable"
    return "ok"


async def answer_outages(app: ASGIApp, scope: Scope, receive: Receive, send: Send, retry_after_s: int) -> None:
    """Run `app`; a database outage it meets before responding is answered 503 (see above)."""
    started = False

    async def tracking_send(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    try:
        await app(scope, receive, tracking_send)
    except Exception as exc:
        outage = as_unavailable(exc)
        if outage is None or started:
            raise
        logger.debug("%s %s answered 503: the database is unavailable", scope.get("method"), scope.get("path"))
        body = {"error": "unavailable", "message": outage.message}
        await JSONResponse(body, status_code=503, headers={"Retry-After": str(retry_after_s)})(scope, receive, send)


class OutageGuard:
    """ASGI middleware: `answer_outages` around every HTTP request of the wrapped app."""

    def __init__(self, app: ASGIApp, *, retry_after_s: int) -> None:
        self._app = app
        self._retry_after_s = retry_after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        await answer_outages(self._app, scope, receive, send, self._retry_after_s)
