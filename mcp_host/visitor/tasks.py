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
plain call's is. What it remembers is bounded: `per_session` live tasks per
session (a further task-augmented call is refused `unavailable` before the child is called),
`in_all` in total (the oldest is forgotten), and each task for its ttl (capped at `max_ttl_s`;
a task with no ttl is kept that long).

2026-07-28 has no tasks in the core protocol (a tasks extension the SDK does not serve), and
its `Tool` has no `execution`: such a session is never offered a task-required tool
(`hidden_for_modern`; a call of one by name is `unknown`, `offered_in_modern`), and the owner's
log says why, once per tool.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
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
from mcp_host.wire import MetaCaps, VisitorClient, forwarded_meta, visitor_meta, without_host_keys
from mcp_host_kit.contract import CALL_KEY

from .door import VisitorDoor

__all__ = ["TaskBook", "VisitorTasks", "hidden_for_modern", "offered_in_modern", "task_required"]

logger = logging.getLogger(__name__)

_NOT_FOUND = "task not found"
# How long passing one task status notification to its visitor may take.
_NOTIFY_S = 5.0
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


@dataclass
class _Owned:
    session_id: str
    plugin_id: str
    expires_at: float
    tool: str = ""
    """The tool the task runs (for its receipt)."""
    connection: ServerSession | None = None
    """The visitor's connection that made the task: where its status notifications go."""
    receipted: bool = False


class TaskBook:
    """Task id → the session and plugin that own it; bounded per session, in total and in time."""

    def __init__(
        self,
        *,
        per_session: int = 64,
        in_all: int = 10_000,
        max_ttl_s: float = 86_400.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_session = per_session
        self._in_all = in_all
        self._max_ttl_s = max_ttl_s
        self._clock = clock
        self._tasks: OrderedDict[tuple[str, str], _Owned] = OrderedDict()  # (plugin id, task id)
        self._counts: dict[str, int] = {}

    def room_for(self, session_id: str) -> bool:
        self._expire()
        return self._counts.get(session_id, 0) < self._per_session

    def remember(
        self,
        session_id: str,
        plugin_id: str,
        task_id: str,
        ttl_ms: int | None,
        *,
        tool: str = "",
        connection: ServerSession | None = None,
    ) -> None:
        self._expire()
        ttl_s = self._max_ttl_s if ttl_ms is None else min(max(ttl_ms, 0) / 1000.0, self._max_ttl_s)
        self._forget((plugin_id, task_id))
        self._tasks[(plugin_id, task_id)] = _Owned(session_id, plugin_id, self._clock() + ttl_s, tool, connection)
        self._counts[session_id] = self._counts.get(session_id, 0) + 1
        while len(self._tasks) > self._in_all:
            self._forget(next(iter(self._tasks)))

    def owner(self, session_id: str, task_id: str) -> str:
        """The plugin of the session's task `task_id`; MCPError (invalid params) when it is not the session's."""
        return self.owned(session_id, task_id).plugin_id

    def owned(self, session_id: str, task_id: str) -> _Owned:
        """What the host knows of the session's task `task_id`; MCPError (invalid params) when
        it is not the session's."""
        self._expire()
        for (_, tid), owned in self._tasks.items():
            if tid == task_id and owned.session_id == session_id:
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
        for (plugin_id, task_id), owned in self._tasks.items():
            if owned.session_id == session_id:
                found.setdefault(plugin_id, set()).add(task_id)
        return found

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, owned in self._tasks.items() if owned.expires_at <= now]:
            self._forget(key)

    def _forget(self, key: tuple[str, str]) -> None:
        owned = self._tasks.pop(key, None)
        if owned is None:
            return
        left = self._counts[owned.session_id] - 1
        if left:
            self._counts[owned.session_id] = left
        else:
            del self._counts[owned.session_id]


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
        if not self._book.room_for(session.id):
            raise Unavailable("this session holds as many tasks as it may; wait for one to end and expire")
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
        self._book.remember(
            session.id,
            plugin.manifest.id,
            created.task.task_id,
            created.task.ttl,
            tool=tool.name,
            connection=connection,
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
        if not owned.receipted:
            owned.receipted = True
            await self._door.receipt(session, owned.plugin_id, owned.tool, result)
        return result

    async def _status(self, plugin_id: str, params: types.TaskStatusNotificationParams) -> None:
        """A child's task status notification, passed to the connection that made the task only."""
        owned = self._book.of_child(plugin_id, params.task_id)
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
        plugin_id = self._book.owner(session.id, task_id)
        try:
            raw = await self._child(plugin_id, session).raw_request(
                method, {"taskId": task_id}, timeout_s=self._timeout
            )
        except TransportFailure:
            raise MCPError(INVALID_PARAMS, _NOT_FOUND) from None  # the child no longer has it
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
