"""The records of the protocol sessions born here, so another replica can open them again.

Above: `asgi.ProtocolSessions` (records each session it sees born, forgets one its client
deleted or that was closed to make room, keeps the open ones' records alive), `adoption` and
`resting` (which read them). Below: a `SessionRecords` (the database's is
`store.ProtocolSessionRecords`, given by wiring).

A record holds the sha256 of the session's id (`store.record_key`), the credential, the endpoint
path and the initialize request's params; the opening body is kept only when it is at most
`MAX_KEPT_INITIALIZE`. Records of open sessions are kept alive (`keep_alive`), the others expire
after `idle_s`. Nothing here fails its caller: without a record a session still works on its
own replica, only adoption elsewhere and resting are lost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from typing import Any, Protocol

import anyio

from mcp_host.store import SessionRecord

from .table import OpenSession

__all__ = ["MAX_KEPT_INITIALIZE", "SessionRecords", "forget_record", "keep_alive", "record_opened"]

logger = logging.getLogger(__package__)  # every part of the protocol sessions logs under one name

MAX_KEPT_INITIALIZE = 64 * 1024
"""The largest opening body kept to record its initialize (a larger one opens a session that
only its own replica serves)."""
_INITIALIZE_KEYS = ("protocolVersion", "capabilities", "clientInfo")


class SessionRecords(Protocol):
    """Where the protocol sessions born on any replica are recorded, by `record_key` of their id."""

    async def record(self, key: bytes, record: SessionRecord) -> None:
        """Record a session just born."""

    async def lookup(self, key: bytes) -> SessionRecord | None:
        """The live record (used within the idle timeout), if any."""

    async def forget(self, key: bytes) -> None:
        """The client ended it (DELETE) or it was closed to make room."""

    async def touch(self, keys: Collection[bytes]) -> None:
        """Keep the records of sessions open here alive; let every record idle too long go."""

    def closed(self) -> bool:
        """Whether the records are gone for good (their pool closed): keeping them alive ends."""


async def record_opened(records: SessionRecords, opened: OpenSession, body: bytes) -> bool:
    """Record a session born here from its opening `body` (never fails the opening); whether it
    is recorded."""
    initialize = _initialize_params(body)
    if initialize is None:
        return False
    try:
        await records.record(opened.key, SessionRecord(opened.credential, opened.path, initialize))
    except Exception:  # the session works here without it; only adoption elsewhere (and rest) is lost
        logger.exception("recording a protocol session of %s failed", opened.principal)
        return False
    return True


async def forget_record(records: SessionRecords | None, record: OpenSession) -> None:
    if records is None:
        return
    try:
        await records.forget(record.key)
    except Exception:  # it expires with the idle timeout anyway
        logger.exception("forgetting the record of a protocol session of %s failed", record.principal)


async def keep_alive(records: SessionRecords, keys: Callable[[], list[bytes]], every_s: float) -> None:
    """Every `every_s`, keep the records of `keys()` alive (and let the others expire), until
    cancelled or the records' pool closes. A failure is said once per run of failures of one
    kind, not every round."""
    failing: type[BaseException] | None = None
    while True:
        await anyio.sleep(every_s)
        try:
            await records.touch(keys())
        except Exception as exc:  # the database may be away for a while; the next round tries again
            if records.closed():
                logger.debug("the protocol session records' pool is closed: no longer kept alive")
                return
            if type(exc) is not failing:
                logger.warning("keeping the protocol session records alive failed", exc_info=True)
            else:
                logger.debug("keeping the protocol session records alive failed again")
            failing = type(exc)
        else:
            failing = None


def _initialize_params(body: bytes) -> dict[str, Any] | None:
    """The params of an initialize request body (what adopting its session needs), if it is one."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict) or request.get("method") != "initialize":
        return None
    params = request.get("params")
    if not isinstance(params, dict):
        return None
    return {key: params[key] for key in _INITIALIZE_KEYS if key in params}
