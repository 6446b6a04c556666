"""A visitor session's principal: who is asking when a request of it comes in.

Above: the visitor endpoint, which derives it once per request it authenticated and says so
for the request's duration (`principal.Asking`), so the caps kept per principal (per-session
instances: `children.instances`) count it. Below: `principal.Principal`, `sessions.Session`.
"""

from __future__ import annotations

from typing import Any

from mcp_host.principal import Principal

from .sessions import Session

__all__ = ["principal_of"]


def principal_of(session: Session, client: Any) -> Principal:
    """Who is asking for `session` in a request from `client` (the ASGI scope's `client`): the
    access code or API key it was opened with, whatever the address; for a public session, the
    request's client address (`Principal.of_client`)."""
    if session.subject is not None:
        return Principal(session.subject.kind, session.subject.id)
    return Principal.of_client(client)
