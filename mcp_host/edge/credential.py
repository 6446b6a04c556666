"""The credential a door authenticated, in a request's ASGI scope, where the MCP SDK reads it.

Above: the doors that authenticate a request (`visitor.http`, `visitor.node`,
`owner_facade.http`: `authenticated`) and the edge parts that key on who sent it (the protocol
session caps, the JSON-RPC edge's request ids in flight: `credential_of`). Below: the SDK's
`AuthenticatedUser`, which it binds each 2025-11-25 `Mcp-Session-Id` to: another credential
presenting that id gets 404.

The credential is a name, never a secret: a visitor session's id, `owner:<id>`, `node:<grant id>`.
The token a request presented never goes into the scope.
"""

from __future__ import annotations

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.types import Scope

__all__ = ["authenticated", "credential_of"]


def authenticated(scope: Scope, credential: str) -> None:
    """Put `credential` in `scope` as the SDK's authenticated user."""
    scope["user"] = AuthenticatedUser(AccessToken(token="-", client_id=credential, scopes=[]))


def credential_of(scope: Scope) -> str:
    """The credential `authenticated` put in `scope`; "" when none was."""
    client_id = getattr(getattr(scope.get("user"), "access_token", None), "client_id", None)
    return str(client_id) if client_id is not None else ""
