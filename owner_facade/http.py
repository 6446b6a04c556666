"""The owner's MCP endpoint over HTTP: `/v1/owner/mcp`, with the owner token as bearer, or an
OAuth access token bound to this door whose grant the owner made at the front desk (subject
`owner:<owner id>`; a token for the visitor door is refused here).

Above: the composition root (`mcp_host.app.wiring`), which builds the server and routes the path
here. Below: `door` (the tools) and `mcp_host.access.owners` (whose token this is).

The token is verified on every request before the SDK sees it; a missing or wrong token, or
a visitor session's token, gets 401. The owner is put in the ASGI scope, where the server's
handlers find it. One low-level MCP `Server` behind a `StreamableHTTPSessionManager` serves
both protocol eras, with the same DNS-rebinding protection as the visitor endpoint (Host and
Origin checked: docs/security.md E6); a 2025-11-25 `Mcp-Session-Id` is bound to the owner.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.provider import TokenVerifier
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_host.access import Owner, OwnerStore
from mcp_host.edge import Unauthorized, authenticated, rest_response
from mcp_host.observe import untraced
from mcp_host.visitor import bearer_token

from .door import OwnerDoor
from .services import PROGRESS

__all__ = ["OWNER_PATH", "OwnerMCPEndpoint", "build_owner_server"]

OWNER_PATH = "/v1/owner/mcp"
SCOPE_KEY = "mcp_host.owner"
SERVER_NAME = "mcp-host-owner"
SERVER_VERSION = "0.1.0"


def _owner_of(ctx: ServerRequestContext[Any, Any]) -> Owner:
    request = ctx.request
    owner = request.scope.get(SCOPE_KEY) if request is not None else None
    if not isinstance(owner, Owner):  # the endpoint always sets it; fail closed if not
        raise PermissionError("request reached the owner server without an owner")
    return owner


def build_owner_server(door: OwnerDoor) -> Server[Any]:
    """The MCP server behind `/v1/owner/mcp`."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        _owner_of(ctx)
        return types.ListToolsResult(tools=door.list_tools())

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        owner = _owner_of(ctx)
        PROGRESS.set(ctx.session.report_progress)  # this call's task only: a long tool reports progress
        return await door.call_tool(owner.id, params.name, params.arguments)

    server: Server[Any] = Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=door.input_schema,
    )
    return untraced(server)  # as on the visitor endpoint: no span per message when nothing records them


class OwnerMCPEndpoint:
    """ASGI endpoint of `/v1/owner/mcp`: verify the owner token (or an OAuth access token the
    owner let a client have), then hand to the SDK."""

    def __init__(
        self,
        owners: OwnerStore,
        mcp_app: ASGIApp,
        tokens: TokenVerifier | None = None,
        resource_metadata: str | None = None,
    ) -> None:
        """`tokens`: the OAuth access tokens bound to this door (None: the owner token only);
        `resource_metadata`: the URL of the door's protected-resource metadata, named in a 401."""
        self._owners = owners
        self._mcp_app = mcp_app
        """The SDK's session manager behind the JSON-RPC edge (`mcp_host.app.wiring` composes them)."""
        self._tokens = tokens
        self._resource_metadata = resource_metadata

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = bearer_token(scope)
        owner = await self._owner_of(token) if token else None
        if owner is None:  # in the REST endpoints' words (401 `denied`, with the bearer challenge)
            refusal = Unauthorized(
                "the owner endpoint needs the owner token", "mcp-host-owner", resource_metadata=self._resource_metadata
            )
            await rest_response(refusal)(scope, receive, send)
            return
        scope[SCOPE_KEY] = owner
        # The token itself never goes into the scope.
        authenticated(scope, f"owner:{owner.id}")
        await self._mcp_app(scope, receive, send)

    async def _owner_of(self, token: str) -> Owner | None:
        owner = await self._owners.verify_token(token)
        if owner is not None or self._tokens is None:
            return owner
        granted = await self._tokens.verify_token(token)  # an OAuth grant's subject is `owner:<id>`
        kind, _, owner_id = (granted.subject or "").partition(":") if granted is not None else ("", "", "")
        return await self._owners.get(owner_id) if kind == "owner" and owner_id else None
