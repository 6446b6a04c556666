"""How a visitor session opens: with an access code, an API key, or neither (a public session),
for `POST /v1/sessions` and the front desk alike, so both open it the same way.

Above: `http.SessionsEndpoint` and the front desk (`mcp_host.desk`), which share one
`SessionOpener`: one throttle of wrong codes and keys, one pace of public sessions per
address. Below: `access.Access` (which credential opens which session, under which role) and
the edge's throttle and rates.

A wrong, expired, used-up or revoked code or key gets one fixed refusal that does not say which;
a client that keeps failing waits longer and longer for it (by its address, as every
per-address cap counts it: `edge.client_address`). A public session opens only while the owner
allows them, and one address opens them no faster than `public_rate`.
"""

from __future__ import annotations

import logging
from typing import NoReturn

import anyio
from starlette.types import Scope

from mcp_host.access import Access, Session, Visitor
from mcp_host.edge import FailureThrottle, PrincipalRate, TooFast, Unauthorized, client_address
from mcp_host.principal import Principal

__all__ = ["NO_CREDENTIAL", "REFUSED", "SessionOpener"]

logger = logging.getLogger(__name__)

REFUSED = "the access code or API key was not accepted"
"""The one answer to a code or key that was not accepted, whatever was wrong with it."""
NO_CREDENTIAL = "this host opens sessions only with an access code or an API key"
"""The answer to a request with neither while the owner allows no public sessions."""


class SessionOpener:
    """Opens visitor sessions of one owner, throttling wrong credentials and pacing public sessions."""

    def __init__(
        self, access: Access, throttle: FailureThrottle, owner_id: str, public_rate: PrincipalRate | None = None
    ) -> None:
        """`throttle`: wrong codes and keys by client address. `public_rate`: how fast one
        client address may open public sessions (None: no limit)."""
        self._access = access
        self._throttle = throttle
        self.owner_id = owner_id
        self._public_rate = public_rate

    async def open(
        self, scope: Scope, visitor: Visitor | None, *, code: str | None = None, key: str | None = None
    ) -> tuple[Session, str]:
        """Open a code session (`code`), else an API-key session (`key`; "" for a credential
        that is no bearer token), else a public one; the session and its bearer token.

        Raises `Unauthorized` (after the throttle's delay for a wrong code or key) and
        `TooFast` (an address opening public sessions faster than its share).
        """
        if code is not None:
            opened = await self._access.open_with_code(self.owner_id, code, visitor)
        elif key is not None:
            opened = await self._access.open_with_key(self.owner_id, key, visitor) if key else None
        else:
            self._pace_public(scope)
            opened = await self._access.open_public(self.owner_id, visitor)
            if opened is None:
                raise Unauthorized(NO_CREDENTIAL)
        if opened is None:
            await self._refused(scope)
        logger.info("session %s opened (%s)", opened[0].id, opened[0].mode)
        return opened

    async def public_sessions(self) -> bool:
        """Whether the owner lets sessions open without a credential now."""
        return (await self._access.host_settings(self.owner_id)).public_sessions

    def _pace_public(self, scope: Scope) -> None:
        if self._public_rate is None:
            return
        principal = Principal.of_client(scope.get("client"))
        wait = self._public_rate.wait(principal)
        if wait > 0:
            logger.info("public session refused: %s opens them faster than its share", principal)
            raise TooFast("this address opens public sessions faster than the host allows", wait)

    async def _refused(self, scope: Scope) -> NoReturn:
        client = client_address(scope)
        delay = self._throttle.failed(client)
        logger.info("session refused: a code or key from %s was not accepted (answered after %.2f s)", client, delay)
        if delay > 0:
            await anyio.sleep(delay)
        raise Unauthorized(REFUSED)
