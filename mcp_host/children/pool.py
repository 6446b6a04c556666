"""`ChildPool`: every child of one host, by plugin id and scope, and the task group they run in.

Above: `ChildFactory` (which asks for a plugin's child for a scope), the catalogue (health of
every instance) and the composition root (which enters the pool in the host's lifespan and ends
a visitor session's instances). Below: `mcp_session.Child` (one child and its MCP session:
a `process.ProcessChild` or a `remote.RemoteChild`), `instances.SessionInstances` (the
per-session ones, capped host-wide and per principal, an idle one stopped to make room) and
`backoff.RunOfFailures` (one per plugin, shared by its instances).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from mcp_host.errors import Unavailable
from mcp_host.observe import HostMetrics
from mcp_host.principal import Asking

from .backoff import RunOfFailures
from .changes import ListChange
from .instances import InstanceShares, SessionInstances
from .lifecycle import ChildLimits
from .mcp_session import Child
from .process import LaunchBuilder, ProcessChild
from .stderr import ChildLog

__all__ = ["ChildPool"]

ChildMaker = Callable[..., Child]
"""What makes a pool's child, called with `ProcessChild`'s arguments (`ProcessChild`, or a remote child)."""

# Why a child's run ended when it did not crash (`lifecycle.ChildLife._ended`).
_CLEAN_EXITS = ("stopped", "idle")


class ChildPool:
    """All children of one host, keyed by (plugin id, scope); an async context manager owning
    their task group.

    Scope None is a shared plugin's one child, or a per-session plugin's owner-context
    instance: at most `max_children` of those, kept for the host's life. A visitor session's id
    is a per-session instance (`SessionInstances`): at most `session_instances.host`, each held
    by the principal asking for its session (`asking`) within its share, an idle one stopped to
    make room, each stopped after `session_idle_timeout_s` without a call and forgotten once
    stopped (a crashed one is kept until evicted or its session ends). Every child of a plugin
    shares its log and its run of failures (`failures`).
    """

    def __init__(
        self,
        limits: ChildLimits,
        *,
        max_children: int,
        session_instances: InstanceShares | None = None,
        asking: Asking | None = None,
        session_idle_timeout_s: float | None = None,
        on_spawn: Callable[[int, str], None] = lambda pid, plugin_id: None,
        on_exit: Callable[[int], None] = lambda pid: None,
        on_tools_changed: Callable[[str], None] = lambda plugin_id: None,
        on_list_changed: Callable[[ListChange], None] = lambda change: None,
        metrics: HostMetrics | None = None,
    ) -> None:
        """`session_instances`: how many per-session instances, and each principal's share (None:
        `InstanceShares()`'s). `asking`: who is asking for each visitor session (the visitor
        endpoint says so around each request); None, each session is its own principal.
        `session_idle_timeout_s`: a per-session instance's idle time (None: `limits`').
        `metrics`: where each child's starts, crashes and restarts are counted (`_counted`)."""
        self._limits = limits
        idle_s = limits.idle_timeout_s if session_idle_timeout_s is None else session_idle_timeout_s
        self._session_limits = dataclasses.replace(limits, idle_timeout_s=idle_s)
        self.sessions: SessionInstances[Child] = SessionInstances(
            InstanceShares() if session_instances is None else session_instances
        )
        """The per-session instances."""
        self.asking = Asking() if asking is None else asking
        """Who is asking for each visitor session while a request of it runs."""
        self._on_list_changed = on_list_changed
        """A child said one of its lists, or a resource, changed."""
        self._max = max_children
        self._on_spawn = on_spawn
        self._on_exit = on_exit
        self._on_tools_changed = on_tools_changed
        self._metrics = metrics
        self._children: dict[str, Child] = {}
        self._session_ends: list[Callable[[str], None]] = []
        self._logs: dict[str, ChildLog] = {}
        self._runs: dict[str, RunOfFailures] = {}
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> ChildPool:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self._tg is not None
        for child in [*self._children.values(), *self.sessions.all()]:
            child.stop()
        await self._tg.__aexit__(None, None, None)
        self._tg = None

    def child(
        self,
        plugin_id: str,
        launch: LaunchBuilder,
        session_id: str | None = None,
        *,
        per_session: bool = False,
        make: ChildMaker = ProcessChild,
    ) -> Child:
        """The child of `plugin_id` for `session_id` (None: the shared or owner-context one),
        created (not started) on first ask. `per_session`: the plugin has per-session instances
        (so scope None is its owner-context instance). `make`: the kind of child (`ProcessChild`, a
        process; `remote.RemoteChild`, a remote server), called as `ProcessChild` is.

        Raises Unavailable when the pool already runs as many children as it may, or, for a
        session, when the principal asking for it may start no instance now (`SessionInstances.add`).
        """
        if session_id is not None:
            return self.sessions.get(plugin_id, session_id) or self.sessions.add(
                self._new(plugin_id, launch, session_id, make=make), self.asking.of(session_id)
            )
        child = self._children.get(plugin_id)
        if child is None:
            if len(self._children) >= self._max:
                raise Unavailable("the host runs as many capabilities as it may")
            child = self._children[plugin_id] = self._new(plugin_id, launch, None, owner_context=per_session, make=make)
        return child

    def _new(
        self,
        plugin_id: str,
        launch: LaunchBuilder,
        session_id: str | None,
        *,
        owner_context: bool = False,
        make: ChildMaker = ProcessChild,
    ) -> Child:
        if self._tg is None:
            raise RuntimeError("ChildPool must be entered before use")
        limits = self._limits if session_id is None else self._session_limits
        log = self._logs.get(plugin_id)
        if log is None:
            log = self._logs[plugin_id] = ChildLog(
                plugin_id,
                keep=limits.log_keep_lines,
                line_bytes=limits.stderr_line_bytes,
                errors_per_s=limits.errors_logged_per_s,
                errors_burst=limits.errors_logged_burst,
            )
        on_spawn, on_ended = self._counted(
            plugin_id, self.sessions.ended if session_id is not None else lambda child: None
        )
        return make(
            plugin_id,
            launch,
            limits,
            self._tg,
            on_spawn=on_spawn,
            on_exit=self._on_exit,
            on_tools_changed=self._on_tools_changed,
            on_list_changed=self._on_list_changed,
            session_id=session_id,
            log=log,
            on_ended=on_ended,
            failures=self._runs.setdefault(plugin_id, RunOfFailures()),
            owner_context=owner_context,
        )

    def _counted(
        self, plugin_id: str, on_ended: Callable[[Child], None]
    ) -> tuple[Callable[[int], None], Callable[[Child], None]]:
        """One child's spawn and end callbacks, counting into `metrics`: a run that ended other
        than stopped or idle is a crash (a failed start too), and the next spawn of the same
        instance a restart."""
        crashed = False

        def spawned(pid: int) -> None:
            nonlocal crashed
            self._on_spawn(pid, plugin_id)
            if self._metrics is not None:
                self._metrics.child_started(plugin_id, restart=crashed)
            crashed = False

        def ended(child: Child) -> None:
            nonlocal crashed
            crashed = child.health().last_exit not in _CLEAN_EXITS
            if crashed and self._metrics is not None:
                self._metrics.child_crashed(plugin_id)
            on_ended(child)

        return spawned, ended

    def failures(self, plugin_id: str) -> RunOfFailures | None:
        """The run of failures every child of `plugin_id` shares; None before its first child."""
        return self._runs.get(plugin_id)

    def runs_own(self, plugin_id: str, session_id: str) -> bool:
        """Whether `session_id` has a running per-session instance of `plugin_id` (it lists
        through that one, not through the owner-context instance: `ChildFactory.lister`)."""
        own = self.sessions.get(plugin_id, session_id)
        return own is not None and own.running

    def log_of(self, plugin_id: str) -> ChildLog | None:
        """What `plugin_id`'s children said (None before its first child was made)."""
        return self._logs.get(plugin_id)

    def get(self, plugin_id: str, session_id: str | None = None) -> Child | None:
        """The child of `plugin_id` for `session_id` (None: shared or owner context), if made."""
        if session_id is not None:
            return self.sessions.get(plugin_id, session_id)
        return self._children.get(plugin_id)

    def end_session(self, session_id: str) -> None:
        """The visitor session ended: stop and forget its per-session instances; tell those
        that asked (`on_session_end`)."""
        self.sessions.end_session(session_id)
        for told in self._session_ends:
            told(session_id)

    def on_session_end(self, told: Callable[[str], None]) -> None:
        """Call `told(session_id)` whenever a visitor session ends (its own sign-ins go)."""
        self._session_ends.append(told)

    def stop_plugin(self, plugin_id: str) -> None:
        """Stop and forget every child of `plugin_id`, shared, owner-context and per-session (it
        was uninstalled while the host runs); its log and run of failures go with them."""
        self.sessions.end_plugin(plugin_id)
        child = self._children.pop(plugin_id, None)
        if child is not None:
            child.retire()
        self._logs.pop(plugin_id, None)
        self._runs.pop(plugin_id, None)

    def running_count(self) -> int:
        return sum(1 for c in [*self._children.values(), *self.sessions.all()] if c.running)

    def running_by_plugin(self) -> dict[str, int]:
        """How many children of each plugin have a live process (shared, owner-context and
        per-session instances alike)."""
        counts: dict[str, int] = {}
        for child in [*self._children.values(), *self.sessions.all()]:
            if child.running:
                counts[child.plugin_id] = counts.get(child.plugin_id, 0) + 1
        return counts
