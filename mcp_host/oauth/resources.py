"""Resource indicators (RFC 8707): a token is bound to one door and refused at every other.

Above: `server` (binds each grant to the resource its authorization request named) and the
doors, which check each bearer token with a `DoorTokenVerifier` (the SDK's `TokenVerifier`
for `BearerAuthBackend`). Below: the SDK's canonical form of a resource URL.

A resource is compared in the SDK's canonical form (scheme and host lower-cased, no
fragment) and otherwise exactly: no prefix matching, so a token for `/mcp` is refused at
`/mcp/owner`, unlike the SDK's client-side `check_resource_allowed`.
"""

from __future__ import annotations

from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.shared.auth_utils import resource_url_from_server_url

__all__ = ["DoorTokenVerifier", "canonical_resource", "token_fits"]


def canonical_resource(url: str) -> str:
    """`url` as tokens are bound to it and doors compare it."""
    return resource_url_from_server_url(url)


def token_fits(token: AccessToken, resource: str) -> bool:
    """Whether `token` was issued for `resource` (a token bound to no resource fits none)."""
    return token.resource is not None and canonical_resource(token.resource) == canonical_resource(resource)


class DoorTokenVerifier(TokenVerifier):
    """The tokens one door accepts: those `verifier` knows, live, and issued for `resource`."""

    def __init__(self, verifier: TokenVerifier, resource: str) -> None:
        self._verifier = verifier
        self._resource = canonical_resource(resource)

    @property
    def resource(self) -> str:
        return self._resource

    async def verify_token(self, token: str) -> AccessToken | None:
        found = await self._verifier.verify_token(token)
        return found if found is not None and token_fits(found, self._resource) else None
