"""Resting (issue 26, defect 7): an idle recorded session ended in the SDK and kept here, woken
by its next request.

Above: `asgi.ProtocolSessions` (which runs `run` for the host's life and wakes a resting session
a request reaches). Below: the table, the records and the SDK as a client (`as_client`).

An open session costs the SDK ~40 KB (its server task, streams and task groups), however long
its client stays away. A recorded session that had no request in flight for `rest_s` is ended in
the SDK (a DELETE as its client would) and rests here: it keeps its place under every cap, its
record stays alive, and its next request wakes it — opened again from its record as an adopted
one is (the stored initialize, then `notifications/initialized`), its client's id renamed to the
new one. A resting session costs a few hundred bytes. A session with an open GET stream is never
idle, so a connected SDK client never rests. What its client cannot see across a rest: the SDK's
per-connection state (the host's servers keep none there: logging levels and resource
subscriptions are kept per visitor session), and a task's status notifications, which go to the
connection that made the task (its client polls `tasks/get`). Waking reads the record: when it
cannot be read the request is answered 503 (`unavailable`, Retry-After) and the session keeps
resting. `on_ended` is told as a session rests, so what is kept per connection above (the
visitor's change feed) goes with it.
"""

from __future__ import annotations

import logging

import anyio
from starlette.types import ASGIApp, Scope

from .as_client import delete_in_sdk, open_as_client
from .messages import opened_by
from .records import SessionRecords, forget_record
from .table import OpenSession, SessionTable

__all__ = ["Resting"]

logger = logging.getLogger(__package__)  # every part of the protocol sessions logs under one name


class Resting:
    """Letting this endpoint's idle recorded sessions rest, and waking them."""

    def __init__(self, app: ASGIApp, table: SessionTable, records: SessionRecords | None) -> None:
        self._app = app
        self._table = table
        self._records = records
        self._running = anyio.CancelScope()

    async def run(self) -> None:
        """Run for the host's life (until `stop`): every quarter of `rest_s`, let each recorded
        session idle that long rest (without records, or with `rest_s >= idle_s`, none does and
        this returns)."""
        limits = self._table.limits
        if self._records is None or limits.rest_s >= limits.idle_s:
            return
        with self._running:
            while True:
                await anyio.sleep(limits.rest_s / 4)
                for record in [r for r in self._table.open.values() if self._may_rest(r, anyio.current_time())]:
                    if self._may_rest(record, anyio.current_time()):  # no request came while others rested
                        await self._rest(record)

    def stop(self) -> None:
        self._running.cancel()

    def count(self) -> int:
        """How many of the sessions open rest."""
        return sum(record.resting for record in self._table.open.values())

    async def woken(self, record: OpenSession, scope: Scope) -> bool | None:
        """Open `record`, which rests, in the SDK again (one request does; the others that come
        meanwhile wait for it): True once it is open, False when it is gone (its record expired
        or is not for this path: it is forgotten), None when it cannot be opened now (its record
        could not be read, or the SDK did not open it: it keeps resting)."""
        waking = record.waking
        if waking is None:
            record.waking = waking = anyio.Event()
            record.in_flight += 1  # never picked to make room while it wakes
            try:
                await self._wake(record, scope)
            finally:
                record.in_flight -= 1
                record.waking = None
                waking.set()
        else:
            await waking.wait()
        if not record.resting:
            return True
        return None if self._table.open.get(record.session_id) is record else False

    def _may_rest(self, record: OpenSession, now: float) -> bool:
        return (
            record.recorded
            and not record.resting
            and record.in_flight == 0
            and now - record.last_used >= self._table.limits.rest_s
        )

    async def _rest(self, record: OpenSession) -> None:
        """End `record` in the SDK and keep it here, resting, until its next request wakes it."""
        in_sdk = (record.session_id, record.user, record.host, record.path)
        record.resting = True
        record.user, record.host, record.path = None, b"", ""
        self._table.ended(record.credential, record.session_id)
        status = await delete_in_sdk(self._app, *in_sdk)
        logger.debug("a protocol session of %s (%s) rests (%s)", record.principal, record.credential, status)

    async def _wake(self, record: OpenSession, scope: Scope) -> None:
        assert self._records is not None
        table = self._table
        client_id = record.alias if record.alias is not None else record.session_id
        if anyio.current_time() - record.last_used >= table.limits.idle_s:  # it expired while resting
            table.forget(record)
            await forget_record(self._records, record)
            return
        try:
            stored = await self._records.lookup(record.key)
        except Exception:  # the database may be away a while: the client may retry
            logger.exception("looking up the record of a resting protocol session of %s failed", record.principal)
            return
        if stored is None or stored.principal != record.credential or stored.path != scope.get("path"):
            logger.info("a resting protocol session of %s ended: its record is gone", record.principal)
            table.forget(record)
            return
        new_id = await open_as_client(self._app, stored, scope)
        if new_id is None:
            return
        table.forget(record)  # linked again at once, under its new id (resting: no one is told)
        record.session_id, record.alias = new_id, client_id
        record.user, record.host, record.path = opened_by(scope)
        record.resting = False
        table.link(record)
        logger.debug("a resting protocol session of %s woke", record.principal)
