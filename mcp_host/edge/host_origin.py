"""The MCP endpoints' Host and Origin rules, for the host's plain HTTP routes.

Above: the composition root (`app.asgi.create_app`) puts `HostOriginGuard` in front of
`POST /v1/sessions`, `GET /v1/catalogue` and the turns routes. Below: the route's endpoint.

The MCP endpoints get DNS-rebinding protection from the SDK (`TransportSecuritySettings`, built
by `visitor.http.security_settings`). The routes beside them had none, so a page on any site
could make a visitor's browser post a form that opens a public session (docs/security.md E6). The
same settings and the SDK's own check decide here: a Host that is not one of the host's names
is answered 421, a browser Origin that is not the host's own 403, both `denied` in the REST
endpoints' words (`rest_errors`). `GET /healthz` stays open:
probes call it by whatever address reaches the host.
"""

from __future__ import annotations

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_host.errors import Denied

from .rest_errors import Misdirected, rest_response

__all__ = ["HostOriginGuard"]

_REFUSALS = {
    421: Misdirected("this Host is not one of this host's names"),
    403: Denied("requests from this Origin are not accepted"),
}


class HostOriginGuard:
    """ASGI wrapper: refuse a request whose Host or Origin the MCP endpoints would refuse."""

    def __init__(self, app: ASGIApp, security: TransportSecuritySettings) -> None:
        self.app = app
        self._check = TransportSecurityMiddleware(security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = await self._check.validate_request(Request(scope), is_post=False)
            if refusal is not None:
                refused = _REFUSALS.get(refusal.status_code, Denied("request refused"))
                await rest_response(refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)
