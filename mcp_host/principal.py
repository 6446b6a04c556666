"""Who is asking: the principal by which every per-visitor cap and share is kept.

Above: `access.principals` (a visitor session's principal, from its credential or its request's
address), the visitor endpoint (which says who is asking while a request of a session runs:
`Asking`), `children.instances` (each principal's share of the per-session instances) and the
edge's caps kept per principal (`edge.rates`, `edge.protocol_sessions`). Below: `ipaddress` only:
a word of the whole host, it sits at the root beside `errors`, below every sub-package.

A principal is the access code or the API key a session was opened with, or for a public
session the client address its request comes from — behind a proxy uvicorn trusts (its
`FORWARDED_ALLOW_IPS`), the forwarded address, which uvicorn has already put in the ASGI scope.
An IPv6 address counts by its /64: a subscriber is commonly given a whole /64, and counting its
2^64 addresses apart would let one visitor take as many shares as it likes. A principal is no
secret: its id is a credential's row id (never the code or key) or an address, fit for the log.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Asking", "Principal", "PrincipalKind"]

PrincipalKind = Literal["code", "api_key", "address", "session"]
"""`session`: a visitor session nobody is known to be asking for (see `Asking.of`)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking; equal principals share every cap kept per principal."""

    kind: PrincipalKind
    id: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"

    @classmethod
    def of_client(cls, client: Any) -> Principal:
        """The principal of an ASGI scope's `client` (`(host, port)` or None): its address, an
        IPv6 one by its /64 (an IPv4-mapped one as the IPv4 address it is); a client with no
        address (a unix socket) is `unknown`, one principal for all of them."""
        host = client[0] if isinstance(client, (tuple, list)) and client else None
        if not isinstance(host, str) or not host:
            return cls("address", "unknown")
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])  # without an IPv6 zone
        except ValueError:
            return cls("address", host[:64])  # a name a proxy sent: counted as given
        if isinstance(address, ipaddress.IPv6Address):
            if address.ipv4_mapped is not None:
                return cls("address", str(address.ipv4_mapped))
            return cls("address", str(ipaddress.IPv6Network((address, 64), strict=False)))
        return cls("address", str(address))


class Asking:
    """Who is asking for each visitor session while a request of it runs.

    The visitor endpoint wraps each request it authenticated in `request(session_id, principal)`;
    whatever that request starts for its session (a per-session instance) is the principal's.
    Only sessions with a request in flight are kept, so memory follows the requests, not the
    sessions. While two requests of one session overlap, the first one's principal stands.
    """

    def __init__(self) -> None:
        self._now: dict[str, tuple[Principal, int]] = {}

    @contextmanager
    def request(self, session_id: str, principal: Principal) -> Iterator[Principal]:
        """Around one request of `session_id`; yields the principal asking for it."""
        held = self._now.get(session_id)
        asking = principal if held is None else held[0]
        self._now[session_id] = (asking, 1 if held is None else held[1] + 1)
        try:
            yield asking
        finally:
            _, count = self._now[session_id]
            if count <= 1:
                del self._now[session_id]
            else:
                self._now[session_id] = (asking, count - 1)

    def of(self, session_id: str) -> Principal:
        """The principal asking for `session_id` now; with no request of it in flight (a caller
        outside the visitor endpoint), the session is its own principal."""
        held = self._now.get(session_id)
        return held[0] if held is not None else Principal("session", session_id)
