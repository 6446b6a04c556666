"""Registered OAuth clients (RFC 7591 dynamic registration), kept in PostgreSQL.

Above: `server.AuthorizationServer` (`get_client`, `register_client`). Below: asyncpg, the
table `mcp_host.oauth_clients` (migration 018), the host key's `SecretBox`.

The SDK's `RegistrationHandler` validates the metadata and mints the client id and secret;
this module adds the host's rules on redirect URIs (below) and keeps the record. The secret is
sealed with the host key, bound to the client id, rather than hashed: the SDK's
`ClientAuthenticator` compares the presented secret with the one `get_client` returns.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from mcp.server.auth.provider import RegistrationError
from mcp.shared.auth import OAuthClientInformationFull

from mcp_host.store import PgPool, SecretBox

__all__ = ["ClientRegistry", "check_redirect_uris"]

_logger = logging.getLogger("mcp_host.oauth.clients")

MAX_REDIRECT_URIS = 10
# Schemes a browser would run or read locally rather than hand to an application.
_REFUSED_SCHEMES = frozenset({"javascript", "data", "file", "vbscript", "blob", "about"})


def _loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return host is not None and ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_redirect_uris(client: OAuthClientInformationFull) -> None:
    """The host's rules on a client's redirect URIs (OAuth 2.1 §2.3.1, RFC 8252).

    `https` anywhere; `http` only to a loopback address (a native client's local listener);
    a private-use scheme (`cursor://…`) for a native application; never a fragment, nor a
    scheme a browser runs itself. Raises `RegistrationError("invalid_redirect_uri")`.
    """
    uris = client.redirect_uris or []
    if not uris or len(uris) > MAX_REDIRECT_URIS:
        raise RegistrationError("invalid_redirect_uri", f"register 1 to {MAX_REDIRECT_URIS} redirect URIs")
    for uri in uris:
        scheme = uri.scheme.lower()
        if uri.fragment is not None:
            raise RegistrationError("invalid_redirect_uri", "a redirect URI has no fragment")
        if scheme in _REFUSED_SCHEMES or (scheme == "http" and not _loopback(uri.host)):
            raise RegistrationError("invalid_redirect_uri", f"redirect URI scheme not allowed: {scheme}")


def _bound_to(client_id: str) -> str:
    return f"oauth-client:{client_id}"


class ClientRegistry:
    """The registered clients, on every replica."""

    def __init__(self, pool: PgPool, box: SecretBox) -> None:
        self._pool = pool
        self._box = box

    async def get(self, client_id: str) -> OAuthClientInformationFull | None:
        record = await self._pool.fetchrow(
            "SELECT metadata, secret_sealed FROM mcp_host.oauth_clients WHERE client_id = $1", client_id
        )
        if record is None:
            return None
        fields: dict[str, Any] = dict(record["metadata"])
        if record["secret_sealed"] is not None:
            fields["client_secret"] = self._box.open(record["secret_sealed"], bound_to=_bound_to(client_id))
        return OAuthClientInformationFull.model_validate(fields)

    async def register(self, client: OAuthClientInformationFull) -> None:
        """Keep `client`; raises `RegistrationError` when its redirect URIs break the rules."""
        check_redirect_uris(client)
        secret = client.client_secret
        sealed = None if secret is None else self._box.seal(secret, bound_to=_bound_to(client.client_id))
        await self._pool.execute(
            "INSERT INTO mcp_host.oauth_clients (client_id, metadata, secret_sealed) VALUES ($1, $2, $3)",
            client.client_id,
            client.model_dump(mode="json", exclude={"client_secret"}, exclude_none=True),
            sealed,
        )
        _logger.info("registered OAuth client %s (%s)", client.client_id, client.client_name or "unnamed")
