"""OAuth clients, kept in PostgreSQL: those registered (RFC 7591 dynamic registration) and those
known by the URL of their metadata document (CIMD, `client_documents`).

Above: `server.AuthorizationServer` (`get_client`, `register_client`). Below: asyncpg, the
table `mcp_host.oauth_clients` (migrations 018, 020), the host key's `SecretBox`, and
`client_documents.ClientDocuments` for a client id that is an https URL: its document is
fetched (or taken from the cache) on each `get`, and what it says is stored, so the grants'
rows can refer to the client and the owner's list can name it; a stored row is never used in
place of a document that can no longer be fetched or checked.

The SDK's `RegistrationHandler` validates the metadata and mints the client id and secret;
this module applies the host's rules on redirect URIs (`redirect_uris`) and keeps the record. The secret is
sealed with the host key, bound to the client id, rather than hashed: the SDK's
`ClientAuthenticator` compares the presented secret with the one `get_client` returns.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.shared.auth import OAuthClientInformationFull

from mcp_host.store import PgPool, SecretBox

from .client_documents import ClientDocuments, is_document_url
from .redirect_uris import check_redirect_uris

__all__ = ["ClientRegistry"]

_logger = logging.getLogger("mcp_host.oauth.clients")

# What a client's document said last; written only when it changed.
_KEEP_DOCUMENT = """
INSERT INTO mcp_host.oauth_clients (client_id, metadata) VALUES ($1, $2)
ON CONFLICT (client_id) DO UPDATE SET metadata = EXCLUDED.metadata
WHERE mcp_host.oauth_clients.metadata IS DISTINCT FROM EXCLUDED.metadata
"""


def _bound_to(client_id: str) -> str:
    return f"oauth-client:{client_id}"


class ClientRegistry:
    """The clients, on every replica."""

    def __init__(self, pool: PgPool, box: SecretBox, documents: ClientDocuments | None) -> None:
        """`documents`: how a client known by its metadata document's URL is read; None: such a
        client is unknown (the host advertises no CIMD)."""
        self._pool = pool
        self._box = box
        self._documents = documents

    async def get(self, client_id: str) -> OAuthClientInformationFull | None:
        if is_document_url(client_id):
            return None if self._documents is None else await self._from_document(client_id)
        record = await self._pool.fetchrow(
            "SELECT metadata, secret_sealed FROM mcp_host.oauth_clients WHERE client_id = $1", client_id
        )
        if record is None:
            return None
        fields: dict[str, Any] = dict(record["metadata"])
        if record["secret_sealed"] is not None:
            fields["client_secret"] = self._box.open(record["secret_sealed"], bound_to=_bound_to(client_id))
        return OAuthClientInformationFull.model_validate(fields)

    async def _from_document(self, url: str) -> OAuthClientInformationFull | None:
        assert self._documents is not None
        client = await self._documents.client(url)
        if client is not None:
            await self._pool.execute(_KEEP_DOCUMENT, url, client.model_dump(mode="json", exclude_none=True))
        return client

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
