"""The host as an OAuth 2.1 client of a remote plugin's server: the MCP SDK's
`OAuthClientProvider` (discovery by RFC 9728 then RFC 8414, a client ID metadata document where
the server supports one, else dynamic registration, PKCE S256, RFC 8707 resource, refresh) over
the host's storage (`PluginTokens`: `store.SignInStore`, sealed in PostgreSQL).

Above: `remote_sign_in.RemoteSignIns` (the owner's connect flow, and the provider each remote
child's start uses). Below: the SDK's `mcp.client.auth` and `store.SignInStore`.

`HostOAuthProvider` changes two things of the SDK's provider, both about tokens kept between
processes: it loads what the SDK keeps only in memory (the access token's expiry and the
server's metadata, so a refresh after a restart goes to the token endpoint the server named),
and it refreshes a token `_margin` before its expiry under the store's per-plugin lock, reading the
store first, since another child or replica may have refreshed it already (the refresh token
rotates: the old one no longer works, and a server may revoke the whole grant when it is reused).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import ValidationError

from mcp_host.store import SignInRecord, SignInStore

__all__ = ["HostOAuthProvider", "PluginTokens"]

_MARGIN_S = 60.0  # refresh this long before expiry, or a fifth of the lifetime when shorter


def _margin(tokens: OAuthToken | None) -> float:
    lifetime = tokens.expires_in if tokens is not None and tokens.expires_in is not None else None
    return _MARGIN_S if lifetime is None else min(_MARGIN_S, lifetime / 5)


class PluginTokens:
    """One plugin's tokens and registration in `store`: the SDK's `TokenStorage`. `fresh`: reads
    no tokens (a new sign-in), though it keeps the registration and writes what it gets."""

    def __init__(self, store: SignInStore, plugin_id: str, *, fresh: bool = False) -> None:
        self.store = store
        self.plugin_id = plugin_id
        self._fresh = fresh
        self.metadata: Callable[[], dict[str, Any] | None] = lambda: None
        """The server's metadata as the provider knows it, written beside each token."""

    async def record(self) -> SignInRecord | None:
        record = await self.store.read(self.plugin_id)
        if record is not None and self._fresh:
            return SignInRecord(record.client, None, None, record.metadata, record.needs_sign_in)
        return record

    async def get_tokens(self) -> OAuthToken | None:
        record = await self.record()
        return _parsed(OAuthToken, record.tokens if record is not None else None)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self.store.set_tokens(self.plugin_id, tokens.model_dump(mode="json", exclude_none=True), self.metadata())
        self._fresh = False

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        record = await self.record()
        return _parsed(OAuthClientInformationFull, record.client if record is not None else None)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self.store.set_client(self.plugin_id, client_info.model_dump(mode="json", exclude_none=True))


_M = TypeVar("_M", OAuthToken, OAuthClientInformationFull, OAuthMetadata, ProtectedResourceMetadata)


def _parsed(model: type[_M], value: dict[str, Any] | None) -> _M | None:
    """`value` as `model`; None for none, or for a stored value that no longer parses (a newer
    SDK's shape): the owner signs in again rather than the host failing."""
    if value is None:
        return None
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


class HostOAuthProvider(OAuthClientProvider):
    """The SDK's provider over `PluginTokens`, loading expiry and metadata, refreshing early."""

    def __init__(
        self,
        server_url: str,
        client_metadata: OAuthClientMetadata,
        tokens: PluginTokens,
        *,
        redirect_handler: Callable[[str], Awaitable[None]],
        callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]],
        client_metadata_url: str | None = None,
    ) -> None:
        super().__init__(
            server_url,
            client_metadata,
            tokens,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
            client_metadata_url=client_metadata_url,
        )
        self._tokens = tokens
        self._expires_at: float | None = None
        tokens.metadata = self._metadata

    def _metadata(self) -> dict[str, Any] | None:
        context = self.context
        if context.oauth_metadata is None:
            return None
        resource = context.protected_resource_metadata
        return {
            "server": context.oauth_metadata.model_dump(mode="json", exclude_none=True),
            "resource": resource.model_dump(mode="json", exclude_none=True) if resource is not None else None,
        }

    @property
    def server_metadata(self) -> OAuthMetadata | None:
        return self.context.oauth_metadata

    async def _initialize(self) -> None:
        record = await self._tokens.record()
        context = self.context
        tokens = _parsed(OAuthToken, record.tokens if record is not None else None)
        context.current_tokens = tokens
        context.client_info = _parsed(OAuthClientInformationFull, record.client if record is not None else None)
        self._expires_at = record.expires_at if record is not None and tokens is not None else None
        context.token_expiry_time = None if self._expires_at is None else self._expires_at - _margin(tokens)
        metadata = record.metadata if record is not None else {}
        server = _parsed(OAuthMetadata, metadata.get("server"))
        if server is not None and context.oauth_metadata is None:
            context.oauth_metadata = server
            context.auth_server_url = str(server.issuer)
            context.protected_resource_metadata = _parsed(ProtectedResourceMetadata, metadata.get("resource"))
        self._initialized = True

    def _due(self) -> bool:
        """Whether the token is within its refresh margin (or past its expiry)."""
        expiry = self._expires_at if self._expires_at is not None else self.context.token_expiry_time
        return expiry is not None and time.time() >= expiry - _margin(self.context.current_tokens)

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        refused: str | None = None
        """The access token the server answered 401 to: refreshed once before a new sign-in (the
        SDK goes straight to a sign-in on a 401; the token may have expired in flight, or the
        server's clock or revocation may differ from its `expires_in`)."""
        for _ in range(2):
            async with AsyncExitStack() as held:
                await self._prepare(held, refused)
                flow = super()._auth_flow(request)
                try:
                    outgoing = await flow.__anext__()
                    while True:
                        if outgoing is request:
                            await held.aclose()  # refreshed (or not needed): the call itself holds nothing
                        response = yield outgoing
                        sent = _bearer(outgoing) if outgoing is request else None
                        if sent is not None and refused is None and self._refused(response):
                            refused = sent
                            break
                        outgoing = await flow.asend(response)
                except StopAsyncIteration:
                    return
                finally:
                    await flow.aclose()

    async def _prepare(self, held: AsyncExitStack, refused: str | None) -> None:
        """Load the sign-in; when its token is due (or was refused), take the store's lock and
        read it again: another holder may have refreshed (and so rotated) it meanwhile."""
        if not self._initialized:
            await self._initialize()
        if refused is None and not self._due():
            return
        await held.enter_async_context(self._tokens.store.refreshing(self._tokens.plugin_id))
        await self._initialize()
        tokens = self.context.current_tokens
        if refused is not None and tokens is not None and tokens.access_token == refused:
            self.context.token_expiry_time = 1.0  # long past: the SDK refreshes it now

    def _refused(self, response: httpx2.Response) -> bool:
        """Whether the server refused the token the request carried, and the host can refresh it."""
        return response.status_code == 401 and self.context.can_refresh_token()


def _bearer(request: httpx2.Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token or None if scheme.lower() == "bearer" else None
