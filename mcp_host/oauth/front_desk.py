"""The seam where a person decides: the front desk a client's authorization request is sent to.

Above: the host (later: the visitor front desk and the owner's consent page implement
`FrontDesk`). Below: nothing; `server.AuthorizationServer` calls `page_for` from `/authorize`.

The contract, in the order it happens:
1. `/authorize` checks the client, its redirect URI, PKCE and the resource, keeps the request
   (in PostgreSQL, so any replica can finish it) and asks the desk for the URL of its page,
   passing a `PendingAuthorization`. The client's browser is sent there; the page reads the
   request again by its id (`AuthorizationServer.pending`).
2. The desk's page asks whatever it asks (a name, an access code), opens what the grant will
   stand for (a visitor session) and calls `AuthorizationServer.approve(request_id, subject)`,
   `subject` being an opaque string naming it (the session id). The answer is the URL to send
   the browser back to the client with (code, state, iss). `deny(request_id)` gives the URL of
   an `access_denied` answer instead. Both give None for a request that is unknown, already
   decided or expired: the desk then says to start again from the client.
3. Every token of the grant carries `subject`; refreshing keeps it, so refreshing keeps the
   session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["FrontDesk", "PendingAuthorization"]


@dataclass(frozen=True)
class PendingAuthorization:
    """An authorization request waiting for a person: what the desk's page may show.

    `request_id` is a secret of the browser's visit (the desk puts it in its page's URL or
    form); only its sha256 is kept. `client_name` is what the client says it is called, not an
    identity. `resource` is the door the token will be bound to.
    """

    request_id: str
    client_id: str
    client_name: str | None
    resource: str
    scopes: tuple[str, ...]
    redirect_uri: str = ""
    """Where the browser goes back to once the person decided (the desk shows its host)."""


class FrontDesk(Protocol):
    """Where `/authorize` sends the client's browser."""

    async def page_for(self, pending: PendingAuthorization) -> str:
        """The absolute URL of the page where the person behind the client decides."""
        ...
