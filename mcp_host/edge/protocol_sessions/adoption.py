"""Adoption (issue 16, several replicas): a session born on another replica, opened here for its
client.

Above: `asgi.ProtocolSessions`, which asks for a session id it does not know. Below: the table,
the records (`SessionRecords`) and the SDK as a client (`as_client`).

Neither SDK client opens a new session on the 404 the protocol prescribes for an id its replica
does not know, so a client whose replica died would fail. A request whose id this replica does
not know, for which a live record exists with the same credential and path, is served by a
session opened here as its client would (the stored initialize, then
`notifications/initialized`, with the request's credential and Host); from then on that
client's id is renamed on the way in (its id -> the new one) and out (the `Mcp-Session-Id`
response header, the new one -> its id). One opening per id at a time; a request whose id is
known here pays one dict lookup more at most.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
from starlette.types import ASGIApp, Scope

from mcp_host.store import record_key

from .as_client import open_as_client
from .messages import opened_by
from .records import SessionRecords
from .table import OpenSession, SessionTable

__all__ = ["Adoption"]

logger = logging.getLogger(__package__)  # every part of the protocol sessions logs under one name


class Adoption:
    """Sessions of this endpoint born on other replicas, opened here."""

    def __init__(
        self,
        app: ASGIApp,
        table: SessionTable,
        records: SessionRecords,
        close: Callable[[OpenSession], Awaitable[None]],
    ) -> None:
        """`close`: end a session in the SDK (the victims of making room for an adopted one)."""
        self._app = app
        self._table = table
        self._records = records
        self._close = close
        self._adopting: dict[bytes, anyio.Event] = {}

    async def adopted_or_adopt(self, session_id: bytes, credential: str, scope: Scope) -> OpenSession | None:
        """The session opened here for a client's id born elsewhere, opening it if there is a
        record of it for this credential and path (one opening per id at a time)."""
        table = self._table
        new_id = table.adopted.get(session_id)
        if new_id is not None:
            return table.open.get(new_id)
        pending = self._adopting.get(session_id)
        if pending is not None:
            await pending.wait()
            new_id = table.adopted.get(session_id)
            return table.open.get(new_id) if new_id is not None else None
        done = self._adopting[session_id] = anyio.Event()
        try:
            return await self._adopt(session_id, credential, scope)
        finally:
            del self._adopting[session_id]
            done.set()

    async def _adopt(self, session_id: bytes, credential: str, scope: Scope) -> OpenSession | None:
        try:
            stored = await self._records.lookup(record_key(session_id))
        except Exception:  # without the record the request gets the SDK's 404, as before
            logger.exception("looking up a protocol session record failed")
            return None
        if stored is None or stored.principal != credential or stored.path != scope.get("path"):
            return None
        table = self._table
        principal, now = table.principal_of(credential), anyio.current_time()
        victims, refusal = table.make_room(credential, principal, now)
        for victim in victims:
            await self._close(victim)
        if refusal is not None:
            logger.info("did not adopt a protocol session of %s: no room (%s)", principal, refusal)
            return None
        new_id = await open_as_client(self._app, stored, scope)
        if new_id is None:
            return None
        logger.info("adopted a protocol session of %s opened on another replica", principal)
        adopted = table.register(new_id, credential, principal, opened_by(scope), now, alias=session_id)
        adopted.recorded = True
        return adopted
