"""MCP tasks passed through to the child that runs them, each bound to the session that made it.

Above: `visitor.server` (a task-augmented `tools/call` and `tasks/get|result|cancel|list` of a
2025-11-25 client). Below: `door` (the gates a call passes, as for a plain call) and the
child's raw request (`Child.raw_request`: the SDK's client has tasks as types only and would
reject a `CreateTaskResult` as a malformed `CallToolResult`).

The host remembers which session and plugin own each task id (`TaskBook`): a task id another
session made, or one the host never handed out, is `not found` (invalid params), and `tasks/list`
shows only the session's own tasks. A child's task status notification goes to the connection
that made the task (its standalone stream; nobody else's); the child's elicitation and sampling
requests about a task reach the visitor on the stream of their `tasks/result`, which is served as
a call of the child's `CallRouter` bound to the task (so a shared child's request names the task,
a per-session child's need not); the first result of a task is recorded as a turn receipt, as a
plain call's is. What it remembers is bounded per session, per principal (who is asking:
`principal.Asking`) and in total, a further task-augmented call refused `unavailable` with a retry
hint before the child is called — never another principal's task forgotten to make room (issue
26, defect 4) — and each task for its ttl (capped at `max_ttl_s`; a task with no ttl is kept
that long), after which it is forgotten and cancelled in its child (`TaskBook.keep`, run for
the host's life by the composition root).

2026-07-28 has no tasks in the core protocol (a tasks extension the SDK does not serve), and
its `Tool` has no `execution`: such a session is never offered a task-required tool
(`hidden_for_modern`; a call of one by name is `unknown`, `offered_in_modern`), and the owner's
log says why, once per tool.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import anyio
import mcp.types as types
from mcp import MCPError
from mcp.server.session import ServerSession
from pydantic import ValidationError

from mcp_host.access import Session
from mcp_host.backchannel import CallScope, named_ops
from mcp_host.children import Child
from mcp_host.errors import INVALID_PARAMS, CallTimeout, TransportFailure, Unavailable
from mcp_host.principal import Asking, Principal
from mcp_host.wire import MetaCaps, VisitorClient, forwarded_meta, visitor_meta, without_host_keys
from mcp_host_kit.contract import CALL_KEY

from .door import VisitorDoor

__all__ = ["TaskBook", "VisitorTasks", "hidden_for_modern", "offered_in_modern", "task_required"]

logger = logging.getLogger(__name__)

_NOT_FOUND = "task not found"
# How long passing one task status notification to its visitor may take.
_NOTIFY_S = 5.0
# Cancelling the tasks the host forgot: how long each may take, and how many go at once.
_CANCEL_S = 5.0
_CANCELS_AT_ONCE = 16
_ENDED = frozenset({"completed", "failed", "cancelled"})
_R = TypeVar("_R", bound=types.Result)


def task_required(tool: types.Tool) -> bool:
    """Whether `tool` can only be called as a task (`execution.taskSupport: required`)."""
    return tool.execution is not None and tool.execution.task_support == "required"


def offered_in_modern(tool: types.Tool) -> bool:
    """Whether a 2026-07-28 session is offered `tool` (and may call it): not task-required."""
    return not task_required(tool)


_told_hidden: set[str] = set()


def hidden_for_modern(tools: list[types.Tool]) -> list[types.Tool]:
    """`tools` less those a 2026-07-28 session cannot call (task-required: that era has no
    core tasks and the SDK serves no tasks extension); the log says so once per tool name."""
    kept = []
    for tool in tools:
        if not task_required(tool):
            kept.append(tool)
        elif tool.name not in _told_hidden and len(_told_hidden) < 1000:
            _told_hidden.add(tool.name)
            logger.warning(
                "tool %r is not offered to 2026-07-28 sessions: it requires MCP tasks, which that "
                "protocol era does not have (2025-11-25 sessions can call it as a task)",
                tool.name[:80],
            )
    return kept


@dataclass(eq=False)
class _Owned:
    session_id: str
    principal: Principal
    plugin_id: str
    task_id: str
    expires_at: float
    tool: str = ""
    """The tool the task runs (for its receipt)."""
    connection: ServerSession | None = None
    """The visitor's connection that made the task: where its status notifications go."""
    child: Child | None = None
    """The child that runs it: where it is cancelled when the host forgets it."""
    receipted: bool = False
    ended: bool = False
    """The host saw it end (a terminal status or its result): forgetting it cancels nothing."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.plugin_id, self.task_id)


class TaskBook:
    """Task id → the session, principal and plugin that own it; bounded per session, per
    principal, in total and in time.

    A new task needs a place (`place`): within its session's `per_session`, its principal's
    `per_principal` and the host's `in_all`, whose last quarter goes only to a principal holding
    fewer than `per_session`; else `Unavailable` with a retry hint (when the first task that
    would free a place ends its ttl). Nothing is forgotten to make room. A task is forgotten
    when its ttl ends (capped at `max_ttl_s`; a task with no ttl is kept that long), and then
    cancelled in its child unless the host saw it end: `keep` does both while the host runs.
    """

    def __init__(
        self,
        *,
        per_session: int = 64,
        per_principal: int = 128,
        in_all: int = 10_000,
        max_ttl_s: float = 86_400.0,
        asking: Asking | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`asking`: who is asking for each visitor session (the visitor endpoint says so around
        each request); None, each session is its own principal."""
        self._per_session = per_session
        self._per_principal = per_principal
        self._in_all = in_all
        self._max_ttl_s = max_ttl_s
        self._asking = asking
        self._clock = clock
        self._tasks: dict[tuple[str, str], _Owned] = {}  # (plugin id, task id)
        self._by_session: dict[str, dict[tuple[str, str], _Owned]] = {}
        self._by_principal: dict[Principal, dict[tuple[str, str], _Owned]] = {}
        self._expiry: list[tuple[float, int, _Owned]] = []  # a heap; an entry no longer held is skipped
        self._seq = itertools.count()
        # Places given (`place`) whose task is not remembered yet, so concurrent calls count too.
        self._placing_session: Counter[str] = Counter()
        self._placing_principal: Counter[Principal] = Counter()
        self._placing = 0
        self._ending: deque[_Owned] = deque(maxlen=in_all)
        """Forgotten tasks to cancel in their children (`keep`)."""
        self._wake: anyio.Event | None = None

    def principal_of(self, session_id: str) -> Principal:
        """Who is asking for `session_id` now (`principal.Asking`)."""
        return Principal("session", session_id) if self._asking is None else self._asking.of(session_id)

    @contextmanager
    def place(self, session_id: str, principal: Principal) -> Iterator[_Place]:
        """A place for one more task of `session_id`, asked for by `principal`, kept until the
        block ends; `_Place.remember` fills it. Raises Unavailable, with a retry hint, when the
        session, the principal or the host holds as many tasks as it may."""
        self._expire()
        self._check_room(session_id, principal)
        self._placing_session[session_id] += 1
        self._placing_principal[principal] += 1
        self._placing += 1
        place = _Place(self, session_id, principal)
        try:
            yield place
        finally:
            self._release(place)

    def _release(self, place: _Place) -> None:
        """`place` is no longer pending: its task is remembered, or it never came."""
        if place.released:
            return
        place.released = True
        self._placing -= 1
        self._placing_session[place.session_id] -= 1
        if self._placing_session[place.session_id] <= 0:
            del self._placing_session[place.session_id]
        self._placing_principal[place.principal] -= 1
        if self._placing_principal[place.principal] <= 0:
            del self._placing_principal[place.principal]

    def _check_room(self, session_id: str, principal: Principal) -> None:
        session = self._by_session.get(session_id, {})
        if len(session) + self._placing_session[session_id] >= self._per_session:
            raise Unavailable(
                f"this session holds as many tasks as it may ({self._per_session}); "
                f"retry in {self._retry_in(session.values())} s"
            )
        own = self._by_principal.get(principal, {})
        held = len(own) + self._placing_principal[principal]
        if held >= self._per_principal:
            raise Unavailable(
                "this visitor (its access code, API key or address) holds as many tasks as one may "
                f"({self._per_principal}); retry in {self._retry_in(own.values())} s"
            )
        taken = len(self._tasks) + self._placing
        if taken >= self._in_all or (taken >= self._in_all - self._in_all // 4 and held >= self._per_session):
            logger.debug("refused a task of %s: the host holds %d tasks (cap %d)", principal, taken, self._in_all)
            soonest = (entry[2] for entry in self._expiry[:1])
            raise Unavailable(f"the host holds as many tasks as it may; retry in {self._retry_in(soonest)} s")

    def _retry_in(self, tasks: Iterable[_Owned]) -> int:
        """Whole seconds until the first of `tasks` ends its ttl (at least 1)."""
        soonest = min((t.expires_at for t in tasks), default=self._clock() + 1)
        return max(1, math.ceil(soonest - self._clock()))

    def _remember(self, owned: _Owned, ttl_ms: int | None) -> None:
        ttl_s = self._max_ttl_s if ttl_ms is None else min(max(ttl_ms, 0) / 1000.0, self._max_ttl_s)
        owned.expires_at = self._clock() + ttl_s
        replaced = self._tasks.get(owned.key)
        if replaced is not None:
            self._forget(replaced)  # the child reused the id: it names the new task now, nothing to cancel
        self._tasks[owned.key] = owned
        self._by_session.setdefault(owned.session_id, {})[owned.key] = owned
        self._by_principal.setdefault(owned.principal, {})[owned.key] = owned
        sooner = not self._expiry or owned.expires_at < self._expiry[0][0]
        heapq.heappush(self._expiry, (owned.expires_at, next(self._seq), owned))
        if sooner and self._wake is not None:
            self._wake.set()

    def owned(self, session_id: str, task_id: str) -> _Owned:
        """What the host knows of the session's task `task_id`; MCPError (invalid params) when
        it is not the session's."""
        self._expire()
        for owned in self._by_session.get(session_id, {}).values():
            if owned.task_id == task_id:
                return owned
        raise MCPError(INVALID_PARAMS, _NOT_FOUND)

    def of_child(self, plugin_id: str, task_id: str) -> _Owned | None:
        """Who owns task `task_id` of `plugin_id`'s children, if the host handed it out."""
        self._expire()
        return self._tasks.get((plugin_id, task_id))

    def of_session(self, session_id: str) -> dict[str, set[str]]:
        """The session's task ids by plugin."""
        self._expire()
        found: dict[str, set[str]] = {}
        for plugin_id, task_id in self._by_session.get(session_id, {}):
            found.setdefault(plugin_id, set()).add(task_id)
        return found

    def count(self, *, principal: Principal | None = None) -> int:
        """Tasks remembered (of one principal, else in all)."""
        return len(self._tasks) if principal is None else len(self._by_principal.get(principal, {}))

    async def keep(self) -> None:
        """Run for the host's life: forget each task as its ttl ends, and cancel in its child each
        forgotten one the host did not see end (a child process that ended took its tasks along)."""
        limiter = anyio.CapacityLimiter(_CANCELS_AT_ONCE)
        while True:
            self._wake = anyio.Event()
            self._expire()
            if self._ending:
                async with anyio.create_task_group() as tg:
                    while self._ending:
                        tg.start_soon(self._cancel, self._ending.popleft(), limiter)
                continue
            wait = math.inf if not self._expiry else max(0.0, self._expiry[0][0] - self._clock())
            with anyio.move_on_after(wait):
                await self._wake.wait()

    async def _cancel(self, owned: _Owned, limiter: anyio.CapacityLimiter) -> None:
        child = owned.child
        if child is None or not child.running:
            return
        async with limiter:
            try:
                await child.raw_request("tasks/cancel", {"taskId": owned.task_id}, timeout_s=_CANCEL_S)
            except Exception:  # it ended meanwhile (the child refuses), or the child went away
                logger.debug(
                    "%s: cancelling forgotten task %s failed", owned.plugin_id, owned.task_id[:80], exc_info=True
                )
                return
        logger.info(
            "session %s: task %s outlived its ttl; forgotten and cancelled in %s",
            owned.session_id,
            owned.task_id[:80],
            owned.plugin_id,
        )

    def _expire(self) -> None:
        now = self._clock()
        while self._expiry and self._expiry[0][0] <= now:
            _, _, owned = heapq.heappop(self._expiry)
            if self._tasks.get(owned.key) is owned:
                self._forget(owned)
                if not owned.ended:
                    self._ending.append(owned)
                    if self._wake is not None:
                        self._wake.set()

    def _forget(self, owned: _Owned) -> None:
        del self._tasks[owned.key]
        of_session = self._by_session[owned.session_id]
        del of_session[owned.key]
        if not of_session:
            del self._by_session[owned.session_id]
        of_principal = self._by_principal[owned.principal]
        del of_principal[owned.key]
        if not of_principal:
            del self._by_principal[owned.principal]


class _Place:
    """A place for one task in a `TaskBook` (`TaskBook.place`)."""

    def __init__(self, book: TaskBook, session_id: str, principal: Principal) -> None:
        self._book = book
        self.session_id = session_id
        self.principal = principal
        self.released = False

    def remember(
        self,
        plugin_id: str,
        task_id: str,
        ttl_ms: int | None,
        *,
        tool: str = "",
        connection: ServerSession | None = None,
        child: Child | None = None,
    ) -> None:
        """The task the child made in this place: held for its ttl (`ttl_ms`; None: the longest)."""
        owned = _Owned(self.session_id, self.principal, plugin_id, task_id, 0.0, tool, connection, child)
        self._book._release(self)
        self._book._remember(owned, ttl_ms)


class VisitorTasks:
    """The task methods of a 2025-11-25 visitor session, forwarded to the owning child."""

    def __init__(self, door: VisitorDoor, meta_caps: MetaCaps, book: TaskBook | None = None) -> None:
        self._door = door
        self._meta_caps = meta_caps
        self._book = book or TaskBook()

    async def create(
        self, session: Session, params: Mapping[str, Any], connection: ServerSession | None = None
    ) -> dict[str, Any]:
        """A task-augmented `tools/call`: the same gates as a call, then the child's
        `CreateTaskResult` (wire form). `connection`: the visitor's, told of the task's status.
        Raises a `HostError` the caller answers as a tool error."""
        name = params.get("name")
        arguments = params.get("arguments")
        if not isinstance(name, str) or not (arguments is None or isinstance(arguments, dict)):
            raise MCPError(INVALID_PARAMS, "tools/call needs a tool name and arguments as an object")
        with self._book.place(session.id, self._book.principal_of(session.id)) as place:
            return await self._create(session, name, arguments, params, connection, place)

    async def _create(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any] | None,
        params: Mapping[str, Any],
        connection: ServerSession | None,
        place: _Place,
    ) -> dict[str, Any]:
        plugin, tool = await self._door.admit(session, name, arguments)
        if named_ops(plugin):
            # The host-op token lives as long as one call; a task outlives it.
            raise Unavailable("this capability cannot run tasks through the host")
        kept = visitor_meta(params.get("_meta") if isinstance(params.get("_meta"), Mapping) else None, self._meta_caps)
        forwarded: dict[str, Any] = {
            "name": tool.name,
            "task": params.get("task") or {},
            "_meta": forwarded_meta(kept, CallScope(session.owner_id, session).wire()),
        }
        if arguments is not None:
            forwarded["arguments"] = arguments
        child = self._child(plugin.manifest.id, session)
        child.router.follow_tasks(self._status)  # before the task exists: its first status may be quick
        raw = await child.raw_request("tools/call", forwarded, timeout_s=self._timeout)
        created = self._checked(types.CreateTaskResult, raw, "tools/call")
        place.remember(
            plugin.manifest.id,
            created.task.task_id,
            created.task.ttl,
            tool=tool.name,
            connection=connection,
            child=child,
        )
        logger.info("session %s: %s started task %s", session.id, name[:80], created.task.task_id[:80])
        return _wire(without_host_keys(created))

    async def get(self, session: Session, task_id: str) -> types.GetTaskResult:
        return await self._forward(session, "tasks/get", task_id, types.GetTaskResult)

    async def cancel(self, session: Session, task_id: str) -> types.CancelTaskResult:
        return await self._forward(session, "tasks/cancel", task_id, types.CancelTaskResult)

    async def result(self, session: Session, task_id: str, client: VisitorClient | None = None) -> types.CallToolResult:
        """The task's `CallToolResult` (the child waits until the task has ended). Meanwhile the
        child's requests about the task reach `client` (the visitor's, on this request's stream);
        the call timeout does not run while the visitor is being asked. The first result of a
        task is its turn receipt."""
        owned = self._book.owned(session.id, task_id)
        child = self._child(owned.plugin_id, session)
        with child.router.serving(client, task=task_id) as call:
            with anyio.CancelScope(deadline=anyio.current_time() + self._timeout) as deadline:
                call.deadline = deadline
                try:
                    raw = await child.raw_request(
                        "tasks/result", {"taskId": task_id, "_meta": {CALL_KEY: call.id}}, timeout_s=math.inf
                    )
                except TransportFailure:
                    raise MCPError(INVALID_PARAMS, _NOT_FOUND) from None  # the child no longer has it
            if deadline.cancelled_caught:
                raise CallTimeout(f"the task's result did not come within {self._timeout:g} s")
        result = without_host_keys(self._checked(types.CallToolResult, raw, "tasks/result"))
        owned.ended = True  # a task's result comes once it has ended
        if not owned.receipted:
            owned.receipted = True
            await self._door.receipt(session, owned.plugin_id, owned.tool, result)
        return result

    async def _status(self, plugin_id: str, params: types.TaskStatusNotificationParams) -> None:
        """A child's task status notification, passed to the connection that made the task only."""
        owned = self._book.of_child(plugin_id, params.task_id)
        if owned is not None and params.status in _ENDED:
            owned.ended = True
        if owned is None or owned.connection is None:
            logger.debug("%s: status of a task no visitor holds; dropped", plugin_id)
            return
        notification = types.TaskStatusNotification(params=without_host_keys(params))
        with anyio.fail_after(_NOTIFY_S):
            # Sent without a related request: on the connection's standalone stream, as list
            # changes are. The SDK's union leaves task status out (types-only); the wire takes it.
            await owned.connection.send_notification(cast(types.ServerNotification, notification))

    async def listed(self, session: Session) -> types.ListTasksResult:
        """The session's own tasks, as their children list them (one page)."""
        tasks: list[types.Task] = []
        for plugin_id, ids in self._book.of_session(session.id).items():
            listed = await self._list_child(plugin_id, session)
            tasks.extend(t for t in listed if t.task_id in ids)
        return types.ListTasksResult(tasks=tasks)

    async def _list_child(self, plugin_id: str, session: Session) -> list[types.Task]:
        tasks: list[types.Task] = []
        cursor: str | None = None
        for _ in range(20):
            raw = await self._child(plugin_id, session).raw_request(
                "tasks/list", {"cursor": cursor} if cursor else {}, timeout_s=self._timeout
            )
            page = self._checked(types.ListTasksResult, raw, "tasks/list")
            tasks.extend(page.tasks)
            cursor = page.next_cursor
            if not cursor:
                break
        return tasks

    async def _forward(self, session: Session, method: str, task_id: str, result_type: type[_R]) -> _R:
        owned = self._book.owned(session.id, task_id)
        try:
            raw = await self._child(owned.plugin_id, session).raw_request(
                method, {"taskId": task_id}, timeout_s=self._timeout
            )
        except TransportFailure:
            raise MCPError(INVALID_PARAMS, _NOT_FOUND) from None  # the child no longer has it
        if raw.get("status") in _ENDED:
            owned.ended = True
        return without_host_keys(self._checked(result_type, raw, method))

    def _child(self, plugin_id: str, session: Session) -> Child:
        """The child that runs `session`'s tasks of `plugin_id` (a per-session plugin's own instance)."""
        return self._door.child_for(plugin_id, session.id)

    @property
    def _timeout(self) -> float:
        return self._door.call_timeout_s

    @staticmethod
    def _checked(result_type: type[_R], raw: dict[str, Any], method: str) -> _R:
        try:
            return result_type.model_validate(raw, by_name=False)
        except ValidationError as exc:
            logger.warning("malformed %s result from a child: %s", method, exc.error_count())
            raise TransportFailure(f"the capability returned a malformed {method} result") from None


def _wire(result: types.Result) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)
