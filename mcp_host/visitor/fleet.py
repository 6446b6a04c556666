"""This replica among the others on one database: its row, its forwards, its change notices.

Above: `app.wiring` (builds one `Fleet` per host, before the change feed and input rounds).
Below: `store.Replicas` and `store.ChangeChannel` (the replicas table, `LISTEN/NOTIFY`),
`replica_forward` (a retry parked on another replica, sent there).

- The replica registers its row at start (`register`), beats every `heartbeat_s` while it
  runs (`run`), and deletes its row on a clean stop (`stop`).
- A list change or resource update said by a child here (`ChangeFeed.publish`) is also sent
  as a notice: JSON `{origin, plugin, what, session, owner_context}`, at most
  `MAX_NOTICE_BYTES` (a longer one, a very long resource URI, is skipped with a debug log).
  Every replica hears every notice and publishes those of other origins to its own listeners
  (`ChangeFeed.publish_remote`): a per-session instance's change reaches that session's
  listeners wherever they are; a shared child's, every session that sees the plugin. The
  notice only tells listeners to list again; each replica lists from its own children.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.types import ASGIApp

from mcp_host.children import (
    Changed,
    ListChange,
    PromptsChanged,
    ResourceContentChanged,
    ResourcesChanged,
    ToolsChanged,
)
from mcp_host.store import MAX_NOTICE_BYTES, ChangeChannel, PgPool, Replicas, new_replica_id

from .replica_forward import ReplicaForward, client, forward_key

__all__ = ["Fleet"]

logger = logging.getLogger(__name__)


class _Notice(BaseModel):
    """One change notice between replicas."""

    model_config = ConfigDict(extra="forbid", strict=True)
    origin: str = Field(max_length=64)
    plugin: str = Field(max_length=256)
    what: str = Field(pattern=r"(?s)^(tools|prompts|resources|resource:.+)$")
    session: str | None = Field(default=None, max_length=256)
    owner_context: bool = False


class Fleet:
    """This replica's part in the cluster (one per host, also when it runs alone)."""

    def __init__(
        self, pool: PgPool, *, url: str, host_key: bytes, task_group: TaskGroup, heartbeat_s: float = 2.0
    ) -> None:
        self.id = new_replica_id()
        self._replicas = Replicas(pool, self.id, url, heartbeat_s=heartbeat_s)
        self._channel = ChangeChannel(pool)
        self._key = forward_key(host_key)
        self._tg = task_group
        self._http = client()
        self._scope = anyio.CancelScope()

    async def register(self) -> None:
        """This replica's row, before it takes any request."""
        await self._replicas.beat()

    async def run(self, heard: Callable[[ListChange], None], *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Beat and listen until `stop`; `heard` gets other replicas' changes. For
        `TaskGroup.start`: returns once it listens (or the database was down at that moment)."""
        with self._scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._replicas.run)
                await tg.start(self._channel.listen, lambda payload: self._heard(payload, heard))
                task_status.started()

    async def stop(self) -> None:
        """A clean stop: no more beats or notices, the row deleted, the HTTP client closed."""
        self._scope.cancel()
        with anyio.CancelScope(shield=True):
            await self._replicas.remove()
            await self._http.aclose()

    def forward(self, app: ASGIApp, *, max_body_bytes: int) -> ASGIApp:
        """`app` behind the forward of retries parked on other replicas (`replica_forward`)."""
        return ReplicaForward(
            app,
            replica_id=self.id,
            key=self._key,
            locate=self._replicas.url_of,
            http=self._http,
            max_body_bytes=max_body_bytes,
        )

    def relay(self, change: ListChange) -> None:
        """Tell the other replicas of a change said by a child of this one."""
        notice = _Notice(
            origin=self.id,
            plugin=change.plugin_id,
            what=_text(change.what),
            session=change.session_id,
            owner_context=change.owner_context,
        )
        payload = notice.model_dump_json()
        if len(payload.encode()) > MAX_NOTICE_BYTES:
            logger.debug("a change of %s was not told to other replicas: its notice is too long", change.plugin_id)
            return
        self._tg.start_soon(self._channel.notify, payload)

    def _heard(self, payload: str, deliver: Callable[[ListChange], None]) -> None:
        try:
            notice = _Notice.model_validate_json(payload)
        except ValidationError:
            logger.warning("a change notice that is not one of this host's was ignored")
            return
        if notice.origin == self.id:
            return
        deliver(ListChange(notice.plugin, _changed(notice.what), notice.session, notice.owner_context))


_LISTS: dict[str, Changed] = {"tools": ToolsChanged(), "prompts": PromptsChanged(), "resources": ResourcesChanged()}


def _text(what: Changed) -> str:
    """A change as a notice carries it: "tools", "prompts", "resources" or "resource:<uri>"."""
    if isinstance(what, ResourceContentChanged):
        return f"resource:{what.uri}"
    return next(text for text, listed in _LISTS.items() if listed == what)


def _changed(text: str) -> Changed:
    """A notice's change (its `what`, checked by `_Notice`'s pattern)."""
    listed = _LISTS.get(text)
    return listed if listed is not None else ResourceContentChanged(text.removeprefix("resource:"))
