"""A child as the host speaks to it: one MCP client session per run, over whatever the run
opened (a process's stdio, a remote server's streamable HTTP), and the requests forwarded over
it — `tools/call` with the call it belongs to, the other requests, raw task requests — with
the one mapping of the SDK's errors to the host's (`unavailable`, `call_timeout`,
`transport_failure`). The child's server→client requests and log messages go to the call
they are about (`call_routing`), its list changes to `on_list_changed`.

Above: the pool, the bindings (which list and call tools) and the catalogue (which reads
health). Below: `lifecycle.ChildLife` (when it runs), the MCP SDK's `ClientSession`. The two
kinds of child below this one are `process.ProcessChild` and `remote.RemoteChild`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar, cast

import anyio
import mcp.types as types
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.client import NotificationBinding
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from mcp_host.errors import AnswerTooLarge, CallTimeout, TransportFailure, Unavailable
from mcp_host.wire import APPS_SETTINGS, UNREADABLE_ANSWER, error_text, is_error, plain_tool_result

from .call_routing import CALL_KEY, CallRouter, InFlight
from .changes import Changed, ListChange, PromptsChanged, ResourceContentChanged, ResourcesChanged, ToolsChanged
from .lifecycle import ChildLife, ChildLimits, ChildState, Start
from .tool_pages import ToolPages, next_cursor, read_as_client

__all__ = ["Answer", "Child"]

logger = logging.getLogger(__name__)

_R = TypeVar("_R", bound=types.Result)
_T = TypeVar("_T")
_CLIENT_INFO = types.Implementation(name="mcp-host", version="0.1.0")
_MAX_LIST_PAGES = 20
# How long a call's answer waits for the log messages the child sent before it to be passed on.
_LOGS_PASSED_S = 1.0
# A live task keeps its process busy at most this long (its ttl, if shorter): `visitor.tasks`
# forgets a task after its ttl, capped at a day.
_TASK_KEPT_S = 86_400.0
_TASK_ENDED = ("completed", "failed", "cancelled")
_HANDSHAKE = LATEST_HANDSHAKE_VERSION  # what the SDK's client reads a result at before a handshake

Answer = types.CallToolResult | dict[str, Any]
"""A child's `tools/call` result on the direct path (`Child.call_tool_raw`): its plain raw JSON
(`wire.plain_tool_result`), or the SDK's model of what is not plain."""


class Child(ChildLife):
    """One plugin's child as the host calls it; safe to share between many concurrent callers.
    What a run opens is a subclass's (`process.ProcessChild`, `remote.RemoteChild`)."""

    def __init__(
        self,
        plugin_id: str,
        limits: ChildLimits,
        task_group: TaskGroup,
        *,
        on_tools_changed: Callable[[str], None] = lambda plugin_id: None,
        on_list_changed: Callable[[ListChange], None] = lambda change: None,
        **life: Any,
    ) -> None:
        """`on_tools_changed`, `on_list_changed`: told of the child's list changes; `life`: as
        `ChildLife` takes them (session_id, log, on_ended, failures, owner_context)."""
        super().__init__(plugin_id, limits, task_group, **life)
        self.router = CallRouter(
            plugin_id,
            request_timeout_s=limits.input_timeout_s,
            budget=limits.input_budget,
            session_id=self.session_id,
            owner_context=self.owner_context,
        )
        """Where the child's server→client requests and log messages go: the call they are about."""
        self._on_tools_changed = on_tools_changed
        self._on_list_changed = on_list_changed
        self._raw: JSONRPCDispatcher[Any] | None = None  # the running session's wire, for `raw_request`
        self._timeouts = 0
        self._over_long = False  # this run's wire ended at a line past the limit (`answer_over_limit`)
        self._tools: tuple[types.Tool, ...] | None = None
        self._tools_from = 0  # the start (`_starts`) whose run gave `_tools`
        self._pages = ToolPages()  # the raw pages `_tools` was checked from

    _raw_calls: ClassVar[bool] = True
    """`call_tool_raw` writes to the run's dispatcher itself (a process's stdio carries no
    headers, and a handshake-era session stamps nothing on a request)."""

    @property
    def tools(self) -> tuple[types.Tool, ...] | None:
        """The child's last real tool list, or None when it must be listed again.

        The list of the running process; while the child is down after a crash, the list of
        the process that crashed, so a call to one of its tools is routed here and refused as
        `unavailable` (with when to retry) rather than `unknown`, and the next process is
        listed again once it runs. None after a clean stop and after `list_changed`.
        """
        if self._tools is None:
            return None
        if self._state in (ChildState.STARTING, ChildState.RUNNING):
            return self._tools if self._tools_from == self._starts else None
        return self._tools if self._run_of.count else None

    @property
    def busy(self) -> bool:
        """A call is in flight, registered, or waiting for the process to start, or a task runs."""
        return self._in_flight > 0 or self.router.in_flight() > 0 or self._start_lock.locked() or self._live_tasks()

    def _follow_tasks(self, method: str, params: dict[str, Any], result: dict[str, Any]) -> None:
        """Keep track of the process's live tasks from the task requests the host forwards: a
        task the process took on (a task-augmented `tools/call`) keeps it busy, neither stopped
        for idleness nor to make room for another session's instance (either would end the
        task), until the host sees the task end (a terminal status from `tasks/get`,
        `tasks/cancel` or `tasks/list`, or its `tasks/result`) or its ttl passes."""
        if method == "tools/call":
            task = result.get("task")
            if isinstance(task, dict) and isinstance(task.get("taskId"), str) and self._session is not None:
                ttl_ms = task.get("ttl")
                ttl_s = _TASK_KEPT_S if not isinstance(ttl_ms, int) else min(max(ttl_ms, 0) / 1000.0, _TASK_KEPT_S)
                self._live_tasks()  # the expired ones go first: the table stays bounded by the ttls
                self._tasks[task["taskId"]] = time.monotonic() + ttl_s
        elif method == "tasks/result":
            self._task_ended(params.get("taskId"))
        elif method in ("tasks/get", "tasks/cancel") and result.get("status") in _TASK_ENDED:
            self._task_ended(result.get("taskId"))
        elif method == "tasks/list" and isinstance(listed := result.get("tasks"), list):
            for task in listed:
                if isinstance(task, dict) and task.get("status") in _TASK_ENDED:
                    self._task_ended(task.get("taskId"))

    # -- calls --------------------------------------------------------------------------

    async def list_tools(self, *, timeout_s: float) -> tuple[types.Tool, ...]:
        """The child's real `tools/list` (all pages); also remembered in `self.tools`.

        Asked as raw JSON-RPC and checked as the SDK's client checks it only when the pages
        changed (`ToolPages`); a child serving the 2026-07-28 era (a remote one) is asked
        through the client, whose per-request envelope it needs. Raises as `forward`."""
        async with self._use() as session:
            listed_from = self._starts
            version = session.protocol_version
            if self._raw is None or version is None or version not in HANDSHAKE_PROTOCOL_VERSIONS:
                tools = await self._listed_through_client(session, timeout_s)
            else:
                tools = await self._listed_raw(session, self._raw, version, timeout_s)
        self._tools, self._tools_from = tools, listed_from
        return self._tools

    async def _listed_through_client(self, session: ClientSession, timeout_s: float) -> tuple[types.Tool, ...]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_LIST_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._send(
                session, types.ListToolsRequest(params=params), types.ListToolsResult, timeout_s, None
            )
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(tools)

    async def _listed_raw(
        self, session: ClientSession, raw: JSONRPCDispatcher[Any], version: str, timeout_s: float
    ) -> tuple[types.Tool, ...]:
        """Every page of the list over the run's wire, as the client's handshake-era stamp sends it."""
        pages: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_MAX_LIST_PAGES):
            opts: CallOptions = {"timeout": timeout_s, "headers": {MCP_PROTOCOL_VERSION_HEADER: version}}
            try:
                page = await raw.send_raw_request("tools/list", {"cursor": cursor} if cursor else None, opts)
            except MCPError as exc:
                raise self._failed(session, exc, "tools/list", timeout_s) from exc
            pages.append(page)
            cursor = next_cursor(page)
            if cursor is None:
                break
        try:
            return self._pages.tools(version, pages)
        except ValueError as exc:  # pydantic's ValidationError among them
            raise self._malformed("tools/list", exc) from exc

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any],
        *,
        timeout_s: float,
        progress: ProgressFnT | None = None,
        call: InFlight | None = None,
    ) -> types.CallToolResult:
        """Forward one `tools/call`; the result is returned as the child gave it.

        `call` is the call as registered with `self.router` (by the caller, who knows the
        visitor's client): the child's elicitation, sampling and roots requests and its log
        messages during the call go to that client, and the timeout does not run while the
        client is being asked something. Without it the call is registered with no client.

        Raises Unavailable (child would not start or died), CallTimeout, TransportFailure
        (the child answered with a protocol error or a malformed result).
        """
        if call is None:
            with self.router.serving(None) as anonymous:
                return await self.call_tool(
                    name, arguments, meta, timeout_s=timeout_s, progress=progress, call=anonymous
                )
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=name,
                arguments=arguments,
                _meta=cast(types.RequestParamsMeta, {**meta, CALL_KEY: call.id}),
            )
        )
        return await self._timed(
            call, timeout_s, lambda session: self._send(session, request, types.CallToolResult, None, progress)
        )

    async def call_tool_raw(
        self, call: InFlight, name: str, arguments: dict[str, Any] | None, meta: dict[str, Any], *, timeout_s: float
    ) -> Answer:
        """`call_tool` without the SDK's models on the way (the 2026-07-28 direct `tools/call`):
        the request is written as raw JSON-RPC, and the child's answer is returned as
        `wire.plain_tool_result` makes it when it has the plain shape, else as the SDK's client
        would read it (the same model, the same refusals). Routing, timeout and errors as
        `call_tool`. A child whose requests carry the SDK's headers and envelope (a remote
        server's, `_raw_calls`) is called through `call_tool`.
        """
        if not self._raw_calls:
            return await self.call_tool(name, arguments, meta, timeout_s=timeout_s, call=call)
        params: dict[str, Any] = {"name": name, "_meta": {**meta, CALL_KEY: call.id}}
        if arguments is not None:
            params["arguments"] = arguments
        return await self._timed(call, timeout_s, lambda session: self._send_call(session, params))

    async def _timed(self, call: InFlight, timeout_s: float, ask: Callable[[ClientSession], Awaitable[_T]]) -> _T:
        """`ask` the running child within `timeout_s` (`call.deadline`: the router pauses it while
        the visitor is asked something), then let the call's log messages pass."""
        async with self._use() as session:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout_s) as deadline:
                call.deadline = deadline
                result = await ask(session)
            if not deadline.cancelled_caught:
                await call.logs_passed(within_s=_LOGS_PASSED_S)
                return result
            raise self._timed_out("tools/call", timeout_s)

    async def capabilities(self) -> types.ServerCapabilities:
        """What the child declared at its start (it is started if it is not running)."""
        async with self._use() as session:
            return session.server_capabilities or types.ServerCapabilities()

    async def forward(self, request: types.ClientRequest, result_type: type[_R], *, timeout_s: float) -> _R:
        """Forward one request other than `tools/call` (prompts, resources, completion)."""
        async with self._use() as session:
            return await self._send(session, request, result_type, timeout_s, None)

    async def raw_request(self, method: str, params: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """Forward one request and return the child's raw result, unchecked by the SDK's result
        tables: a task-augmented `tools/call` answers a `CreateTaskResult`, which the SDK's
        client would reject as a malformed `CallToolResult` (tasks are types-only in the SDK;
        `visitor.tasks` checks the shape). Errors as `forward`."""
        async with self._use():
            raw = self._raw
            if raw is None:
                raise Unavailable("the capability stopped while answering; try again")
            try:
                result = await raw.send_raw_request(method, params, {"timeout": timeout_s})
            except MCPError as exc:
                raise self._map_error(exc, method, timeout_s) from exc
            self._follow_tasks(method, params, result)  # still in use: no idle moment in between
            return result

    async def _send(
        self,
        session: ClientSession,
        request: types.ClientRequest,
        result_type: type[_R],
        timeout_s: float | None,
        progress: ProgressFnT | None,
    ) -> _R:
        try:
            result = await session.send_request(
                request, result_type, request_read_timeout_seconds=timeout_s, progress_callback=progress
            )
        except MCPError as exc:
            raise self._failed(session, exc, request.method, timeout_s) from exc
        except ValidationError as exc:
            raise self._malformed(request.method, exc) from exc
        if isinstance(request, types.CallToolRequest):
            self._answered(request.params.name, result if isinstance(result, types.CallToolResult) else None)
        return result

    async def _send_call(self, session: ClientSession, params: dict[str, Any]) -> Answer:
        """`_send` of a `tools/call` over the run's dispatcher, its answer checked as raw JSON
        (`call_tool_raw`)."""
        raw = self._raw
        if raw is None:
            raise Unavailable("the capability stopped while answering; try again")
        try:
            answer = await raw.send_raw_request("tools/call", params, None)
        except MCPError as exc:
            raise self._failed(session, exc, "tools/call", None) from exc
        plain = plain_tool_result(answer)
        if plain is not None:
            self._answered(params["name"], plain)
            return plain
        try:  # not plain: read exactly as the SDK's client reads it
            result = read_as_client("tools/call", session.protocol_version or _HANDSHAKE, answer, types.CallToolResult)
        except ValueError as exc:  # pydantic's ValidationError among them
            raise self._malformed("tools/call", exc) from exc
        self._answered(params["name"], result)
        return result

    def _failed(self, session: ClientSession, exc: MCPError, method: str, timeout_s: float | None) -> Exception:
        """What a request that got `exc` from the child raises (the host's error for it)."""
        if exc.error.code == types.CONNECTION_CLOSED and self._session is session:
            # The pipe is gone: the next call must start a new process, not reach this one
            # before its task has noticed the exit. Whichever its task notices first, the
            # exit or this stop, the child failed.
            self._session = None
            self._pipe_closed = True
            self._stop.set()
        return self._map_error(exc, method, timeout_s)

    def _malformed(self, method: str, exc: ValueError) -> TransportFailure:
        logger.warning("%s: malformed %s result: %s", self.plugin_id, method, exc)
        return TransportFailure(f"the capability returned a malformed {method} result")

    def _answered(self, tool: str, result: Answer | None) -> None:
        """A `tools/call` was answered: only an answered call (its result, an isError one too)
        proves the child works — a crash-looping child answers initialize and tools/list after
        every restart. An error result is logged with the child's words."""
        self._timeouts = 0
        self._run_of.answered()
        if result is not None and is_error(result):
            self.log.tool_error(tool, error_text(result))

    def _timed_out(self, method: str, timeout_s: float | None) -> CallTimeout:
        self._timeouts += 1
        logger.warning("%s: %s timed out after %.1fs", self.plugin_id, method, timeout_s or 0.0)
        if self._timeouts >= self._limits.timeouts_before_recycle:
            logger.warning("%s: %d timeouts in a row; recycling the child", self.plugin_id, self._timeouts)
            self._timeouts = 0
            self.stop()
        return CallTimeout(f"the call did not finish within {timeout_s or 0.0:g} s")

    def _map_error(self, exc: MCPError, method: str, timeout_s: float | None) -> Exception:
        code = exc.error.code
        if code == types.REQUEST_TIMEOUT:
            return self._timed_out(method, timeout_s)
        if code == types.CONNECTION_CLOSED and self._over_long:
            limit = self._limits.max_line_bytes
            return AnswerTooLarge(f"the capability's answer was over the {limit} bytes a child may send at once")
        if code == types.CONNECTION_CLOSED:
            return Unavailable("the capability stopped while answering; try again")
        if code == UNREADABLE_ANSWER:  # the framing answered for the child (`wire.framing`)
            return Unavailable("the capability's answer could not be read; try again")
        logger.info("%s: %s answered with protocol error %s: %s", self.plugin_id, method, code, exc.error.message)
        return TransportFailure(f"the capability refused the request (error {code})")

    # -- the session over a run ---------------------------------------------------------

    def _forget_tools(self) -> None:
        self._tools = None

    def _closed(self) -> None:
        super()._closed()
        self._raw = None

    def answer_over_limit(self) -> None:
        """The run's wire ended at a line past `max_line_bytes` (told by the framing before the
        requests waiting on it fail): they fail `AnswerTooLarge`, not `unavailable`."""
        self._over_long = True

    def _client_session(self, read: Any, write: Any) -> ClientSession:
        """The MCP client session over a child's wire (`read`, `write`), its server→client
        requests and log messages routed by `self.router`; `raw_request` uses its dispatcher."""
        self._over_long = False  # a new run
        self._raw = JSONRPCDispatcher(read, write)
        return ClientSession(
            dispatcher=self._raw,
            message_handler=self._on_message,
            client_info=_CLIENT_INFO,
            sampling_callback=self.router.sample,
            elicitation_callback=self.router.elicit,
            list_roots_callback=self.router.list_roots,
            logging_callback=self.router.log,
            # The SDK's client drops what its core tables lack, task status included.
            notification_bindings=[
                NotificationBinding(
                    method="notifications/tasks/status",
                    params_type=types.TaskStatusNotificationParams,
                    handler=self.router.task_status,
                )
            ],
            sampling_capabilities=types.SamplingCapability(),
            # Apps pass through the host unchanged: a server that offers its app only to a
            # client that says it carries apps offers it here (mcp_host/README.md, "Apps").
            extensions=APPS_SETTINGS,
        )

    async def _initialized(
        self,
        session: ClientSession,
        start: Start,
        refused: str,
        *,
        negotiate: Callable[[ClientSession], Awaitable[object]] = ClientSession.initialize,
        refusals: tuple[type[Exception], ...] = (MCPError,),
    ) -> str | None:
        """Open `session` (`negotiate`: initialize, or a remote server's era) within the start
        timeout and mark the child running; None once it runs, else why the start failed
        (`refused`, for one of `refusals`)."""
        try:
            with anyio.fail_after(self._limits.start_timeout_s):
                await negotiate(session)
        except TimeoutError:
            return f"did not answer initialize within {self._limits.start_timeout_s:g} s"
        except refusals:
            return refused
        self._running(session, start)
        return None

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._tools = None
            self._on_tools_changed(self.plugin_id)
            self._changed(ToolsChanged())
        elif isinstance(message, types.PromptListChangedNotification):
            self._changed(PromptsChanged())
        elif isinstance(message, types.ResourceListChangedNotification):
            self._changed(ResourcesChanged())
        elif isinstance(message, types.ResourceUpdatedNotification):
            self._changed(ResourceContentChanged(message.params.uri))
        elif isinstance(message, Exception):
            logger.warning("%s: wrote a line that is not JSON-RPC", self.plugin_id)

    def _changed(self, what: Changed) -> None:
        self._on_list_changed(ListChange(self.plugin_id, what, self.session_id, self.owner_context))
