"""The host's OAuth 2.1 authorization server: the SDK's `OAuthAuthorizationServerProvider`, in
PostgreSQL.

Above: `routes` (the SDK's handlers call this) and the front desk (`approve`, `deny`).
Below: `clients` (registered clients), `front_desk` (the seam a person decides at),
`resources` (RFC 8707), asyncpg and the tables of migration 018.

What the SDK's handlers already check, and this module does not repeat: PKCE S256 (the
verifier against the challenge), a code's expiry, the client's secret, a redirect URI being
one the client registered and the same at `/token` as at `/authorize`. What this module adds:

- `/authorize` needs an explicit `redirect_uri`, a well-formed S256 challenge and a
  `resource` that is one of the host's doors; the request waits at the front desk
  (`oauth_requests`) until a person decides.
- A grant is one client, one `subject` (the visitor session it stands for), one resource.
  Its code is single use: a code shown again revokes the grant (RFC 6749 §4.1.2).
- Access tokens live `Lifetimes.access_s`; each refresh spends its refresh token and issues a
  new pair (rotation). A spent refresh token shown again is a replay, and revokes the whole
  grant (OAuth 2.1 §4.3.1): the thief and the client both have to sign in again.
- Revoking either token (RFC 7009) revokes the grant, and so both tokens.
- Codes, tokens and pending requests are stored as sha256 digests only; every replica reads
  the same rows, so a token is valid on every replica the moment it is issued.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter

from mcp_host.store import PgConnection, PgPool, SecretBox

from .client_documents import ClientDocuments
from .clients import ClientRegistry
from .front_desk import FrontDesk, PendingAuthorization
from .grants import OAuthGrants
from .resources import canonical_resource

__all__ = ["AuthorizationServer", "GrantedAccessToken", "GrantedCode", "GrantedRefreshToken", "Lifetimes", "digest"]

_logger = logging.getLogger("mcp_host.oauth.server")

# RFC 9207 compares `iss` as a string with the metadata's issuer, which the SDK renders with an
# empty path kept empty (no trailing slash added).
_ISSUER = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))
# base64url of a sha256, unpadded (RFC 7636 §4.2); the SDK takes any string.
_S256_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")
_SECRET_BYTES = 32  # 256 bits: codes, tokens and request ids (RFC 6749 §10.10 asks for 128+)


@dataclass(frozen=True)
class Lifetimes:
    """How long each thing lives, in seconds."""

    request_s: float = 600.0  # a request waiting at the front desk for a person
    code_s: float = 60.0  # RFC 6749 §4.1.2 recommends at most 10 minutes
    access_s: float = 900.0
    refresh_s: float = 30 * 86_400.0  # from its issue; each rotation starts a new one


class GrantedCode(AuthorizationCode):
    grant_id: str


class GrantedRefreshToken(RefreshToken):
    grant_id: str


class GrantedAccessToken(AccessToken):
    grant_id: str


def digest(secret: str) -> bytes:
    """The sha256 a code, token or request id is stored and looked up by."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _new_secret() -> str:
    return secrets.token_urlsafe(_SECRET_BYTES)


_CODE = """
SELECT c.grant_id, c.code_challenge, c.redirect_uri, extract(epoch FROM c.expires_at)::float8 AS expires_at,
       c.used_at, g.client_id, g.subject, g.resource, g.scopes, g.revoked_at
FROM mcp_host.oauth_codes c JOIN mcp_host.oauth_grants g ON g.id = c.grant_id
WHERE c.code_sha256 = $1
"""
_REFRESH = """
SELECT t.grant_id, t.scopes, extract(epoch FROM t.expires_at)::bigint AS expires_at, t.used_at,
       g.client_id, g.subject, g.resource, g.revoked_at
FROM mcp_host.oauth_tokens t JOIN mcp_host.oauth_grants g ON g.id = t.grant_id
WHERE t.token_sha256 = $1 AND t.kind = 'refresh'
"""
_ACCESS = """
SELECT t.grant_id, t.scopes, extract(epoch FROM t.expires_at)::bigint AS expires_at,
       g.client_id, g.subject, g.resource
FROM mcp_host.oauth_tokens t JOIN mcp_host.oauth_grants g ON g.id = t.grant_id
WHERE t.token_sha256 = $1 AND t.kind = 'access' AND t.expires_at > now() AND g.revoked_at IS NULL
"""
_INSERT_TOKEN = """
INSERT INTO mcp_host.oauth_tokens (token_sha256, grant_id, kind, scopes, expires_at)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
"""
# Locks the live grant while its tokens are issued; a refresh is noted for the owner's list.
_LIVE_GRANT = """
UPDATE mcp_host.oauth_grants SET refreshed_at = CASE WHEN $2 THEN now() ELSE refreshed_at END
WHERE id = $1 AND revoked_at IS NULL RETURNING true
"""
_EXPIRING = ("oauth_requests", "oauth_codes", "oauth_tokens")
_EMPTY_GRANTS = """
DELETE FROM mcp_host.oauth_grants g
WHERE revoked_at IS NULL AND created_at < now() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM mcp_host.oauth_tokens t WHERE t.grant_id = g.id)
  AND NOT EXISTS (SELECT 1 FROM mcp_host.oauth_codes c WHERE c.grant_id = g.id)
"""
_OLD_REVOKED_GRANTS = "DELETE FROM mcp_host.oauth_grants WHERE revoked_at < now() - make_interval(secs => $1)"


class AuthorizationServer(OAuthAuthorizationServerProvider[GrantedCode, GrantedRefreshToken, GrantedAccessToken]):
    """Clients, grants, codes and tokens for the doors in `resources`, issued as `issuer`."""

    def __init__(
        self,
        pool: PgPool,
        box: SecretBox,
        *,
        issuer: str,
        resources: Iterable[str],
        desk: FrontDesk,
        lifetimes: Lifetimes | None = None,
        documents: ClientDocuments | None = None,
        client_documents: bool = True,
        default_resource: str | None = None,
    ) -> None:
        """`documents`: how clients' metadata documents are fetched (default: through the
        remote plugins' guard, public addresses only, `DocumentLimits()`). `client_documents`
        False: no client is known by a document (CIMD off; a host that cannot reach the
        internet), so clients register (RFC 7591) instead. `default_resource`: the door a request
        naming no `resource` is for (None: such a request is refused)."""
        self._pool = pool
        self.default_resource = default_resource
        """The door of a request that names none: clients older than MCP's RFC 8707 rule
        (2025-06-18) send no `resource`; their tokens are bound to this door alone."""
        self.client_documents = client_documents
        """Whether a client may be known by its metadata document's URL (and the metadata says so)."""
        self._clients = ClientRegistry(pool, box, (documents or ClientDocuments()) if client_documents else None)
        self.grants = OAuthGrants(pool)
        """The grants as the owner sees them, and how they end."""
        self.issuer = _ISSUER.validate_python(issuer)
        self.resources = frozenset(canonical_resource(r) for r in resources)
        self._desk = desk
        self.lifetimes = lifetimes or Lifetimes()

    @property
    def issuer_id(self) -> str:
        """The issuer identifier as `iss` carries it (RFC 9207) and the metadata names it."""
        return str(self.issuer)

    # Clients

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return await self._clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        await self._clients.register(client_info)

    # The authorization request, and the front desk's answer

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        """Keep the request and send the browser to the front desk's page."""
        if not params.redirect_uri_provided_explicitly:
            raise AuthorizeError("invalid_request", "redirect_uri is required")
        if _S256_CHALLENGE.fullmatch(params.code_challenge) is None:
            raise AuthorizeError("invalid_request", "code_challenge is not an S256 challenge")
        named = params.resource or self.default_resource
        resource = None if named is None else canonical_resource(named)
        if resource is None or resource not in self.resources:
            raise AuthorizeError("invalid_target", "resource must name one of this host's MCP endpoints")
        request_id = _new_secret()
        kept = params.model_copy(update={"resource": resource})
        await self._pool.execute("DELETE FROM mcp_host.oauth_requests WHERE expires_at < now()")
        await self._pool.execute(
            "INSERT INTO mcp_host.oauth_requests (request_sha256, client_id, params, expires_at) "
            "VALUES ($1, $2, $3, now() + make_interval(secs => $4))",
            digest(request_id),
            client.client_id,
            kept.model_dump(mode="json"),
            self.lifetimes.request_s,
        )
        pending = PendingAuthorization(
            request_id=request_id,
            client_id=client.client_id,
            client_name=client.client_name,
            resource=resource,
            scopes=tuple(params.scopes or ()),
            redirect_uri=str(params.redirect_uri),
        )
        return await self._desk.page_for(pending)

    async def pending(self, request_id: str) -> PendingAuthorization | None:
        """The request `request_id` still waiting for a person, as the desk's page shows it;
        None when it is unknown, decided already or expired."""
        record = await self._pool.fetchrow(
            "SELECT r.client_id, r.params, c.metadata ->> 'client_name' AS client_name"
            " FROM mcp_host.oauth_requests r JOIN mcp_host.oauth_clients c USING (client_id)"
            " WHERE r.request_sha256 = $1 AND r.expires_at > now()",
            digest(request_id),
        )
        if record is None:
            return None
        params = AuthorizationParams.model_validate(record["params"])
        return PendingAuthorization(
            request_id=request_id,
            client_id=record["client_id"],
            client_name=record["client_name"],
            resource=params.resource or "",
            scopes=tuple(params.scopes or ()),
            redirect_uri=str(params.redirect_uri),
        )

    async def approve(self, request_id: str, subject: str) -> str | None:
        """Grant the waiting request to `subject`: the URL that brings the browser back to the
        client with a code, the request's `state` and `iss`. None when the request is unknown,
        decided already or expired. `subject` is the host's own id, at most 256 characters."""
        async with self._pool.acquire() as conn, conn.transaction():
            taken = await self._take_request(conn, request_id)
            if taken is None:
                return None
            client_id, params = taken
            grant_id = secrets.token_hex(16)
            await conn.execute(
                "INSERT INTO mcp_host.oauth_grants (id, client_id, subject, resource, scopes) "
                "VALUES ($1, $2, $3, $4, $5)",
                grant_id,
                client_id,
                subject,
                params.resource,
                params.scopes or [],
            )
            code = _new_secret()
            await conn.execute(
                "INSERT INTO mcp_host.oauth_codes (code_sha256, grant_id, code_challenge, redirect_uri, expires_at) "
                "VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))",
                digest(code),
                grant_id,
                params.code_challenge,
                str(params.redirect_uri),
                self.lifetimes.code_s,
            )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=self.issuer_id)

    async def deny(self, request_id: str) -> str | None:
        """Refuse the waiting request: the URL of the client's `access_denied` answer; None as
        for `approve`."""
        async with self._pool.acquire() as conn:
            taken = await self._take_request(conn, request_id)
        if taken is None:
            return None
        params = taken[1]
        return construct_redirect_uri(
            str(params.redirect_uri), error="access_denied", state=params.state, iss=self.issuer_id
        )

    async def _take_request(self, conn: PgConnection, request_id: str) -> tuple[str, AuthorizationParams] | None:
        record = await conn.fetchrow(
            "DELETE FROM mcp_host.oauth_requests WHERE request_sha256 = $1 AND expires_at > now() "
            "RETURNING client_id, params",
            digest(request_id),
        )
        if record is None:
            return None
        return record["client_id"], AuthorizationParams.model_validate(record["params"])

    # Codes

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> GrantedCode | None:
        record = await self._pool.fetchrow(_CODE, digest(authorization_code))
        if record is None or record["revoked_at"] is not None or record["client_id"] != client.client_id:
            return None
        if record["used_at"] is not None:
            await self._revoke_replayed(record["grant_id"], "an authorization code")
            return None
        return GrantedCode(
            code=authorization_code,
            scopes=list(record["scopes"]),
            expires_at=record["expires_at"],
            client_id=record["client_id"],
            code_challenge=record["code_challenge"],
            redirect_uri=record["redirect_uri"],
            redirect_uri_provided_explicitly=True,
            resource=record["resource"],
            subject=record["subject"],
            grant_id=record["grant_id"],
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: GrantedCode
    ) -> OAuthToken:
        spent = await self._pool.fetchval(
            "UPDATE mcp_host.oauth_codes SET used_at = now() WHERE code_sha256 = $1 AND used_at IS NULL "
            "RETURNING grant_id",
            digest(authorization_code.code),
        )
        if spent is None:  # another request redeemed it first
            await self._revoke_replayed(authorization_code.grant_id, "an authorization code")
            raise TokenError("invalid_grant", "authorization code does not exist")
        return await self._issue(authorization_code.grant_id, authorization_code.scopes)

    # Tokens

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> GrantedRefreshToken | None:
        record = await self._pool.fetchrow(_REFRESH, digest(refresh_token))
        if record is None or record["revoked_at"] is not None or record["client_id"] != client.client_id:
            return None
        if record["used_at"] is not None:
            await self._revoke_replayed(record["grant_id"], "a refresh token")
            return None
        return GrantedRefreshToken(
            token=refresh_token,
            client_id=record["client_id"],
            scopes=list(record["scopes"]),
            expires_at=record["expires_at"],
            resource=record["resource"],
            subject=record["subject"],
            grant_id=record["grant_id"],
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: GrantedRefreshToken, scopes: list[str]
    ) -> OAuthToken:
        spent = await self._pool.fetchval(
            "UPDATE mcp_host.oauth_tokens SET used_at = now() "
            "WHERE token_sha256 = $1 AND kind = 'refresh' AND used_at IS NULL RETURNING grant_id",
            digest(refresh_token.token),
        )
        if spent is None:  # spent by a request that came at the same time: a replay all the same
            await self._revoke_replayed(refresh_token.grant_id, "a refresh token")
            raise TokenError("invalid_grant", "refresh token does not exist")
        return await self._issue(refresh_token.grant_id, scopes, rotating=True)

    async def load_access_token(self, token: str) -> GrantedAccessToken | None:
        record = await self._pool.fetchrow(_ACCESS, digest(token))
        if record is None:
            return None
        return GrantedAccessToken(
            token=token,
            client_id=record["client_id"],
            scopes=list(record["scopes"]),
            expires_at=record["expires_at"],
            resource=record["resource"],
            subject=record["subject"],
            claims={"iss": self.issuer_id},
            grant_id=record["grant_id"],
        )

    async def verify_token(self, token: str) -> GrantedAccessToken | None:
        """The SDK's `TokenVerifier`: the live access token `token`, bound to whichever door
        (wrap in a `DoorTokenVerifier` to accept one door's tokens only)."""
        return await self.load_access_token(token)

    async def _issue(self, grant_id: str, scopes: list[str], *, rotating: bool = False) -> OAuthToken:
        """A new access and refresh token of the live grant `grant_id` (rotating: its earlier
        access tokens end)."""
        access, refresh = _new_secret(), _new_secret()
        async with self._pool.acquire() as conn, conn.transaction():
            live = await conn.fetchval(_LIVE_GRANT, grant_id, rotating)
            if live is None:
                raise TokenError("invalid_grant", "the grant was revoked")
            if rotating:
                await conn.execute(
                    "DELETE FROM mcp_host.oauth_tokens WHERE grant_id = $1 AND kind = 'access'", grant_id
                )
            await conn.execute(_INSERT_TOKEN, digest(access), grant_id, "access", scopes, self.lifetimes.access_s)
            await conn.execute(_INSERT_TOKEN, digest(refresh), grant_id, "refresh", scopes, self.lifetimes.refresh_s)
        return OAuthToken(
            access_token=access,
            expires_in=int(self.lifetimes.access_s),
            scope=" ".join(scopes) or None,
            refresh_token=refresh,
        )

    # Revocation

    async def revoke_token(self, token: GrantedAccessToken | GrantedRefreshToken) -> None:
        """RFC 7009: either token ends the whole grant."""
        await self.revoke_grant(token.grant_id)

    async def revoke_grant(self, grant_id: str) -> None:
        """End the grant: its codes and tokens are deleted, the grant kept as revoked."""
        await self.grants.revoke(grant_id)

    async def revoke_subject(self, subject: str) -> int:
        """End every live grant that stands for `subject` (its session ended); how many."""
        return await self.grants.revoke_subject(subject)

    async def sweep(self, revoked_kept_s: float | None = 30 * 86_400.0) -> int:
        """For the host's retention sweep (`store.Retention`): end the live grants of visitor
        sessions that ended (the owner ended one, a public one expired idle) or are gone, then
        delete what can no longer be used: expired requests, codes and tokens (a spent refresh
        token is kept until it expires, for replay detection), grants left with neither (their
        refresh tokens expired), and revoked grants after `revoked_kept_s` (None: kept for
        ever). Returns how many grants ended and rows went."""
        expired = [(f"DELETE FROM mcp_host.{t} WHERE expires_at < now()", ()) for t in _EXPIRING]
        # A grant younger than a code's lifetime may be waiting for its code's exchange.
        grants: list[tuple[str, tuple[float, ...]]] = [(_EMPTY_GRANTS, (self.lifetimes.code_s,))]
        if revoked_kept_s is not None:
            grants.append((_OLD_REVOKED_GRANTS, (revoked_kept_s,)))
        gone = await self.grants.end_of_ended_sessions()
        for statement, args in [*expired, *grants]:
            status = await self._pool.execute(statement, *args)
            gone += int(status.rsplit(" ", 1)[1])  # "DELETE <n>"
        return gone

    async def _revoke_replayed(self, grant_id: str, what: str) -> None:
        _logger.warning("%s of OAuth grant %s was shown again; the grant is revoked", what, grant_id)
        await self.revoke_grant(grant_id)
