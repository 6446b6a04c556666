"""The one visitor URL, `/mcp`: the address any MCP client adds the host by.

Above: `app` (the route). Below: `http.VisitorMCPEndpoint.serve` (everything a session's own
MCP endpoint does once it knows the session: the principal's pace, who is asking, the SDK and
both protocol eras, the `Mcp-Session-Id` bound to the session, and behind it list changes,
quota, holds, rules, tool search and the claim gate), `access` (sessions, API keys) and an
OAuth `TokenVerifier` (`oauth.DoorTokenVerifier` of this door).

A request names no session: its bearer credential picks it, and is one of
- an API key (`access.looks_like_api_key`): the key's own session at this URL
  (`Access.key_session`: opened on its first request, then kept while it lives);
- an OAuth access token bound to this door (RFC 8707) whose grant stands for a visitor
  session (the grant's subject is the session id, set when the front desk opened it): that
  session while it lives — a session that ended is refused, whatever the token's lifetime,
  and its grants revoked (`session_gone`);
- a visitor session's own bearer token (from `POST /v1/sessions`): that session.
Anything else, or none, is answered 401 `denied` with a challenge naming this door's
protected-resource metadata (RFC 9728), where a client finds the authorization server.

The credential stays in the request's headers for the SDK's transport only: the scope carries
the session, and what reaches a child or a remote server is the call the door forwards, made
anew, never this request's headers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from mcp.server.auth.provider import TokenVerifier
from starlette.types import Receive, Scope, Send

from mcp_host.access import Access, Session, SessionStore, looks_like_api_key
from mcp_host.edge import Unauthorized, rest_response

from .http import VisitorMCPEndpoint, bearer_token

__all__ = ["ONE_URL_PATH", "OneURLEndpoint"]

logger = logging.getLogger(__name__)

ONE_URL_PATH = "/mcp"
_NO_SESSION = "this door needs a sign-in (OAuth), a visitor session's bearer token or an API key"


class OneURLEndpoint:
    """ASGI endpoint of `/mcp`: find the session of the bearer credential, then serve it."""

    def __init__(
        self,
        endpoint: VisitorMCPEndpoint,
        sessions: SessionStore,
        access: Access,
        owner_id: str,
        tokens: TokenVerifier,
        resource_metadata: str,
        session_gone: Callable[[str], Awaitable[object]] | None = None,
    ) -> None:
        """`tokens`: the OAuth access tokens this door accepts (bound to it); `resource_metadata`:
        the URL of its protected-resource metadata, named in every 401; `session_gone`: told the
        id of a session that ended when a token of a grant standing for it is shown (the
        composition root revokes the session's grants, so the client's refresh fails too and it
        signs in again rather than refreshing into refusals)."""
        self._endpoint = endpoint
        self._sessions = sessions
        self._access = access
        self._owner_id = owner_id
        self._tokens = tokens
        self._resource_metadata = resource_metadata
        self._session_gone = session_gone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = bearer_token(scope)
        session = await self.session_of(token) if token else None
        if session is None:  # outside Starlette (the app's fast path), as the session endpoint answers
            refusal = Unauthorized(_NO_SESSION, resource_metadata=self._resource_metadata)
            await rest_response(refusal)(scope, receive, send)
            return
        await self._endpoint.serve(session, scope, receive, send)

    async def session_of(self, credential: str) -> Session | None:
        """The live session `credential` stands for at this URL (also for its turns, `/mcp/turns`)."""
        if looks_like_api_key(credential):
            return await self._access.key_session(self._owner_id, credential)
        granted = await self._tokens.verify_token(credential)
        if granted is None:
            return await self._sessions.by_token(credential)
        session = await self._sessions.live(granted.subject or "")
        if session is None:
            logger.info("an OAuth token of client %s was refused: its session ended", granted.client_id)
            if self._session_gone is not None and granted.subject:
                await self._session_gone(granted.subject)
        return session
