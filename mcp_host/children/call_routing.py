"""Which forwarded call a child's server→client request or log message belongs to.

Above: `children` (each child's MCP client session hands its sampling, elicitation, roots and
logging callbacks here). Below: `visitor_client` (the client of each call in flight).

MCP's stdio wire does not say which of our requests a server→client request is about. So:
- every forwarded call carries a random id in `_meta["mcp-host/call"]`; a child that echoes it
  in its request's `_meta` (the plugin kit does) is routed to exactly that call;
- a request about an MCP task (`_meta["io.modelcontextprotocol/related-task"]`, as a server sends
  while serving `tasks/result`) goes to the call serving that task's `tasks/result` (`serving(...,
  task=...)`; `visitor.tasks` binds each task to its session), waiting for one to come (at most
  the input timeout, a few at a time) when the visitor has not asked for the result yet; never
  to another call, whichever session it is of;
- otherwise a per-session child's request goes to its own session's latest call in flight (the
  child serves that one session only, so it cannot be about anyone else);
- otherwise — a shared child that names no call, or no call of the session in flight — nobody
  gets it: a request is refused with an error that tells the plugin's author to name the call,
  and a log message stays in the host log. The host never guesses between visitors, nor from
  "the one session calling right now": a question meant for visitor A is never put to visitor
  B, and A's log never reaches B (docs/security.md E4).

What passes on passes `meta.without_host_keys` first (after routing, which reads the call's id): a
child's request or log message never carries the host's `_meta` keys (its `mcp-host/call` id
included) or reserved protocol keys to a visitor; a request routed by its task gets its
`related-task` key back from the host, which checked it.

A child's `notifications/tasks/status` is handed to the listener `follow_tasks` set (the visitor
side knows which session owns each task); without one it stays in the host log.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import mcp.types as types
from mcp import MCPError
from mcp.client.context import ClientRequestContext

from mcp_host.wire import ClientLacks, InputRequest, InputResponse, VisitorClient, without_host_keys
from mcp_host_kit.contract import CALL_KEY

__all__ = ["CALL_KEY", "RELATED_TASK_KEY", "CallRouter", "InFlight", "TaskStatusListener"]

logger = logging.getLogger(__name__)

RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"
"""Where a message about an MCP task names it (2025-11-25): `{"taskId": ...}`."""
# Requests about a task whose result nobody awaits yet, waiting at once per child.
_MAX_PARKED = 16

TaskStatusListener = Callable[[str, types.TaskStatusNotificationParams], Awaitable[None]]
"""(plugin id, the child's task status notification's params)."""


@dataclass
class InFlight:
    """One forwarded call a child is serving."""

    id: str
    client: VisitorClient | None
    task: str | None = None
    """The MCP task whose `tasks/result` this call awaits (its requests about that task come here)."""
    deadline: anyio.CancelScope | None = None
    """The call's timeout; it does not run while the visitor is being asked something."""
    asked: int = 0
    """How many requests this call has put to its visitor's client (see `CallRouter.budget`)."""
    _waits: int = 0
    _left_s: float = 0.0
    _logs_passing: int = 0
    _logs_passed: anyio.Event | None = None

    def spend(self, budget: int) -> bool:
        """Count one more request to the visitor; False once `budget` is spent."""
        if self.asked >= budget:
            return False
        self.asked += 1
        return True

    @contextmanager
    def passing_log(self) -> Iterator[None]:
        """Around passing one of the child's log messages on to the visitor."""
        self._logs_passing += 1
        try:
            yield
        finally:
            self._logs_passing -= 1
            if self._logs_passing == 0 and self._logs_passed is not None:
                self._logs_passed.set()

    async def logs_passed(self, within_s: float) -> None:
        """Wait (at most `within_s`) until the log messages the child sent before its answer
        have been passed on. The SDK hands each notification to a task of its own, so the
        answer can overtake the log messages written before it; a visitor must still see them
        first (on 2025-11-25 the call's stream closes with its answer)."""
        await anyio.lowlevel.checkpoint()  # a log message read before the answer starts passing
        if self._logs_passing == 0:
            return
        self._logs_passed = anyio.Event()
        with anyio.move_on_after(within_s):
            await self._logs_passed.wait()

    @contextmanager
    def waiting_for_visitor(self) -> Iterator[None]:
        scope = self.deadline
        if scope is None:
            yield
            return
        if self._waits == 0:
            self._left_s = max(scope.deadline - anyio.current_time(), 0.0)
            scope.deadline = math.inf
        self._waits += 1
        try:
            yield
        finally:
            self._waits -= 1
            if self._waits == 0:
                scope.deadline = anyio.current_time() + self._left_s


class CallRouter:
    """The calls one child is serving, and the client each came from."""

    def __init__(
        self,
        plugin_id: str,
        *,
        request_timeout_s: float,
        budget: int = 16,
        session_id: str | None = None,
        owner_context: bool = False,
    ) -> None:
        """`budget`: requests one call may put to its visitor's client. Sampling spends the
        visitor's model tokens and elicitation their attention: a plugin cannot flood either.
        `session_id`: the visitor session a per-session child serves (its unnamed requests go to
        that session's calls); None for a shared or owner-context child (only named calls).
        `owner_context`: a per-session plugin's owner-context instance (only what its refusals
        and logs say differs)."""
        self._plugin_id = plugin_id
        self._session_id = session_id
        self._owner_context = owner_context
        self._timeout_s = request_timeout_s
        self.budget = budget
        self._calls: dict[str, InFlight] = {}
        self._task_calls = anyio.Event()  # set (and replaced) when a call for a task registers
        self._parked = 0
        self._task_listener: TaskStatusListener | None = None

    @contextmanager
    def serving(self, client: VisitorClient | None, *, task: str | None = None) -> Iterator[InFlight]:
        """Register one forwarded call while it runs; its id travels to the child in `_meta`.
        `task`: the MCP task whose `tasks/result` the call awaits."""
        call = InFlight(secrets.token_urlsafe(16), client, task)
        self._calls[call.id] = call
        if task is not None:
            self._task_calls.set()
            self._task_calls = anyio.Event()
        try:
            yield call
        finally:
            del self._calls[call.id]

    def follow_tasks(self, listener: TaskStatusListener) -> None:
        """Where the child's task status notifications go from now on."""
        self._task_listener = listener

    async def task_status(self, params: types.TaskStatusNotificationParams) -> None:
        """A `notifications/tasks/status` of the child (its `NotificationBinding`)."""
        if self._task_listener is None:
            logger.info("%s: task status notification with no task followed; kept in the host log", self._plugin_id)
            return
        try:
            await self._task_listener(self._plugin_id, params)
        except Exception:  # a visitor that went away must not break the child's session
            logger.debug("%s: a task status could not be passed on", self._plugin_id, exc_info=True)

    def in_flight(self) -> int:
        """How many calls the child is serving right now."""
        return len(self._calls)

    def target(self, meta: Mapping[str, Any] | None) -> InFlight | None:
        """The call a request or log message with `meta` belongs to, or None: the named call;
        one about a task, the latest call awaiting that task's result; else (a task nobody
        awaits included) the latest call of a per-session child's own session."""
        named = (meta or {}).get(CALL_KEY)
        if isinstance(named, str) and named:
            call = self._calls.get(named)
            return call if call is not None and call.client is not None else None
        task = related_task(meta)
        if task is not None:
            awaiting = [c for c in self._calls.values() if c.client is not None and c.task == task]
            if awaiting:
                return awaiting[-1]
            # A task no call awaits (or a forged task id): a per-session child's message is its
            # own session's all the same; a shared child's is no one's.
        if self._session_id is None:
            return None  # a shared child serves many sessions: a message that names no call is no one's
        own = [c for c in self._calls.values() if c.client is not None and c.client.session_key == self._session_id]
        return own[-1] if own else None

    async def _awaiting_task(self, meta: Mapping[str, Any] | None) -> InFlight | None:
        """`target(meta)`; for a request about a task whose result nobody awaits yet, the call that
        comes to await it (within the input timeout, `_MAX_PARKED` waiting at once), or None."""
        call = self.target(meta)
        if call is not None or related_task(meta) is None or self._parked >= _MAX_PARKED:
            return call
        self._parked += 1
        try:
            with anyio.move_on_after(self._timeout_s):
                while call is None:
                    await self._task_calls.wait()
                    call = self.target(meta)
        finally:
            self._parked -= 1
        return call

    async def _ask(self, request: InputRequest, meta: Mapping[str, Any] | None) -> InputResponse | types.ErrorData:
        what = request.method
        call = await self._awaiting_task(meta)
        if call is None or call.client is None:
            # Many servers ask for roots as they start, with no call in flight: routine, not a
            # warning. With calls in flight and none of them its own, it may be a misroute.
            logger.log(
                logging.WARNING if self._calls else logging.INFO,
                "%s: sent %s that belongs to no call in flight (%d in flight, %s); refused",
                self._plugin_id,
                what,
                len(self._calls),
                self._kind(),
            )
            return types.ErrorData(code=types.INVALID_REQUEST, message=self._unrouted(what, related_task(meta)))
        if not call.spend(self.budget):
            logger.warning("%s: a call asked its visitor more than %d times; refused", self._plugin_id, self.budget)
            return types.ErrorData(
                code=types.INVALID_REQUEST, message=f"a call may ask its visitor at most {self.budget} times"
            )
        try:
            with call.waiting_for_visitor():
                answer = await call.client.request(_about(call, without_host_keys(request)), timeout_s=self._timeout_s)
            return without_host_keys(answer)  # nor does the visitor's answer speak for the host to the child
        except ClientLacks as exc:
            return types.ErrorData(code=types.INVALID_REQUEST, message=exc.message)
        except MCPError as exc:
            # The visitor's client refused: the child gets its answer as it was given.
            return exc.error
        except TimeoutError:
            return types.ErrorData(code=types.REQUEST_TIMEOUT, message="the visitor's client did not answer in time")

    def _unrouted(self, what: str, task: str | None) -> str:
        if task is not None:
            return f"{what} about a task reaches the visitor only while they await its result (tasks/result)"
        if self._session_id is not None:
            return f"{what} must be sent while serving a call of this session"
        if self._owner_context:
            return f"{what} reaches no visitor from the owner's instance of a per-session plugin"
        return (
            f"{what} must name the call it is about with _meta[{CALL_KEY!r}] (this plugin's child is "
            "shared by every session; declare `instances: per_session` in its manifest otherwise)"
        )

    def _kind(self) -> str:
        if self._session_id is not None:
            return "per-session child"
        return "owner-context child" if self._owner_context else "shared child"

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        answer = await self._ask(types.CreateMessageRequest(params=params), params.meta)
        if isinstance(answer, types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData):
            return answer
        return types.ErrorData(code=types.INTERNAL_ERROR, message="the visitor's client answered out of turn")

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        answer = await self._ask(types.ElicitRequest(params=params), params.meta)
        if isinstance(answer, types.ElicitResult | types.ErrorData):
            return answer
        return types.ErrorData(code=types.INTERNAL_ERROR, message="the visitor's client answered out of turn")

    async def list_roots(self, context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        answer = await self._ask(types.ListRootsRequest(), None)
        if isinstance(answer, types.ListRootsResult | types.ErrorData):
            return answer
        return types.ErrorData(code=types.INTERNAL_ERROR, message="the visitor's client answered out of turn")

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        call = self.target(params.meta)
        if call is None or call.client is None:
            logger.info(
                "%s: log message that belongs to no call; kept in the host log only: %s",
                self._plugin_id,
                _brief(params),
            )
            return
        try:
            with call.passing_log():
                await call.client.log(without_host_keys(params))
        except Exception:  # a visitor that went away must not break the child's session
            logger.debug("%s: a log message could not be passed on", self._plugin_id, exc_info=True)


def related_task(meta: Mapping[str, Any] | None) -> str | None:
    """The task id `meta` names under `RELATED_TASK_KEY`, or None."""
    related = (meta or {}).get(RELATED_TASK_KEY)
    task = related.get("taskId") if isinstance(related, Mapping) else None
    return task if isinstance(task, str) and task else None


def _about(call: InFlight, request: InputRequest) -> InputRequest:
    """`request` (its host and reserved keys dropped) naming the task its call awaits, as the
    protocol wants a task's request to: the host checked that the task is this call's."""
    if call.task is None or isinstance(request, types.ListRootsRequest):
        return request
    meta = {**(request.params.meta or {}), RELATED_TASK_KEY: {"taskId": call.task}}
    params = request.params.model_copy(update={"meta": meta})
    return request.model_copy(update={"params": params})


def _brief(params: types.LoggingMessageNotificationParams) -> str:
    """A log message for the host log: its level, logger and data, escaped and cut."""
    text = params.data if isinstance(params.data, str) else repr(params.data)
    shown = text[:300].encode("unicode_escape").decode("ascii")
    return f"[{params.level}{'/' + params.logger[:80] if params.logger else ''}] {shown}"
