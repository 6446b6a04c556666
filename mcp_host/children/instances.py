"""Per-session instances: the children of plugins whose manifest says `instances: per_session`,
one per (plugin, visitor session), bounded host-wide.

Above: `ChildPool` (which makes each child and hands it here). Below: `Child` (its health,
whether a call is in flight, when it was last used), seen only through `Instance`.

The table holds at most `cap` instances. Making room stops the least recently used instance
with no call in flight (nor a start under way); when every one is busy the new session's use
is refused `unavailable`, saying why. An instance is forgotten (and never started again) when
its process stops cleanly (idle, or stopped to make room) and when its session ends; one that
crashed is kept (the owner's `capability_logs` shows its exit) until it is evicted or its
session ends. The restart backoff is not an instance's but the plugin's
(`backoff.RunOfFailures`, shared by all its children): a new session's instance of a
crash-looping plugin waits it out like the others. The table never grows past `cap`,
whatever the number of sessions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

from mcp_host.errors import Unavailable

__all__ = ["Instance", "SessionInstances"]

logger = logging.getLogger(__name__)

_CLEAN_EXITS = ("stopped", "idle")


class _Health(Protocol):
    @property
    def last_exit(self) -> str | None: ...


class Instance(Protocol):
    """What the table reads of a child (`lifecycle.Child`)."""

    @property
    def plugin_id(self) -> str: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def busy(self) -> bool: ...
    @property
    def last_used(self) -> float: ...
    @property
    def running(self) -> bool: ...
    def health(self) -> _Health: ...
    def retire(self) -> None: ...


C = TypeVar("C", bound=Instance)


class SessionInstances(Generic[C]):
    """The per-session instances of one host, by (plugin id, session id)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._table: dict[tuple[str, str], C] = {}

    def get(self, plugin_id: str, session_id: str) -> C | None:
        return self._table.get((plugin_id, session_id))

    def add(self, child: C) -> C:
        """Keep `child` (a new instance), stopping the least recently used idle one first when
        the table is full. Raises Unavailable when every instance is busy."""
        assert child.session_id is not None
        if len(self._table) >= self.cap:
            self._make_room()
        self._table[(child.plugin_id, child.session_id)] = child
        return child

    def _make_room(self) -> None:
        idle = [c for c in self._table.values() if not c.busy]
        if not idle:
            logger.warning("all %d per-session instances are serving calls; a new session's use is refused", self.cap)
            raise Unavailable(
                f"the host runs as many per-session instances as it may ({self.cap}), each serving a call; "
                "try again shortly"
            )
        victim = min(idle, key=lambda c: c.last_used)
        logger.info(
            "%s: the instance of session %s is stopped to make room (%d per-session instances at most)",
            victim.plugin_id,
            victim.session_id,
            self.cap,
        )
        self._forget(victim)

    def ended(self, child: C) -> None:
        """A process of `child` ended: forgotten when it stopped cleanly, kept when it crashed."""
        health = child.health()
        if health.last_exit is None or health.last_exit in _CLEAN_EXITS:
            if child.session_id is not None and self._table.get((child.plugin_id, child.session_id)) is child:
                self._forget(child)

    def end_session(self, session_id: str) -> None:
        """Stop and forget every instance of `session_id`."""
        for child in [c for (_, sid), c in self._table.items() if sid == session_id]:
            self._forget(child)

    def end_plugin(self, plugin_id: str) -> None:
        """Stop and forget every instance of `plugin_id` (it was uninstalled)."""
        for child in self.of(plugin_id):
            self._forget(child)

    def _forget(self, child: C) -> None:
        assert child.session_id is not None
        self._table.pop((child.plugin_id, child.session_id), None)
        child.retire()

    def all(self) -> Iterator[C]:
        return iter(list(self._table.values()))

    def of(self, plugin_id: str) -> list[C]:
        """The instances of `plugin_id` the table holds (running, starting, or crashed)."""
        return [c for (pid, _), c in self._table.items() if pid == plugin_id]

    def __len__(self) -> int:
        return len(self._table)
