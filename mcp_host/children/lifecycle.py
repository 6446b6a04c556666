"""Children: running plugin processes, spoken to over stdio with MCP.

Above: the bindings (which list and call tools) and the catalogue (which reads health).
Below: `launch` (what argv starts a plugin, sandboxed or not), `framing` (bounded stdio
lines) and the MCP SDK's `ClientSession`.

A child is started on first use, kept and reused, stopped after an idle time, and started
again on the next use after it dies — with a backoff that grows with consecutive failures
(the first restart is immediate). Only an answered `tools/call`, or a process that stayed up
`stable_after_s`, ends a run of failures: a restarted child that answers initialize and
`tools/list` and then dies on the call is a crash loop, not a recovery. Enough consecutive
failures mark it `failing`, with the cause; meanwhile a call is refused at once
(`unavailable`, with when to retry) and spawns nothing. Every child runs in a task of the
pool's task group, which is owned by the host's lifespan; that task owns the process and the
MCP session, so cancel scopes open and close in one task.

Processes are spawned from the event-loop thread (anyio's asyncio backend calls `Popen`
there): bubblewrap's parent-death signal follows the spawning thread (docs/security.md B5).
"""

from __future__ import annotations

import enum
import inspect
import logging
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import anyio
import mcp.types as types
from anyio.abc import Process, TaskGroup
from mcp import MCPError
from mcp.client import NotificationBinding
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from pydantic import ValidationError

from mcp_host.errors import CallTimeout, HostError, TransportFailure, Unavailable
from mcp_host.plugins import printable
from mcp_host.sandbox import Launch
from mcp_host.store import ConfigUnset
from mcp_host.wire import UNREADABLE_ANSWER, framed_transport

from .backoff import RunOfFailures
from .call_routing import CALL_KEY, CallRouter, InFlight
from .changes import ListChange
from .stderr import ChildLog, StderrDrain

__all__ = ["Child", "ChildHealth", "ChildLimits", "ChildState", "LaunchBuilder"]

logger = logging.getLogger(__name__)

_R = TypeVar("_R", bound=types.Result)
_CLIENT_INFO = types.Implementation(name="mcp-host", version="0.1.0")
_MAX_LIST_PAGES = 20
_STOP_GRACE_S = 1.0
# How long a call's answer waits for the log messages the child sent before it to be passed on.
_LOGS_PASSED_S = 1.0
# A live task keeps its process busy at most this long (its ttl, if shorter): `visitor.tasks`
# forgets a task after its ttl, capped at a day.
_TASK_KEPT_S = 86_400.0
_TASK_ENDED = ("completed", "failed", "cancelled")


class ChildState(enum.StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    FAILING = "failing"


@dataclass(frozen=True)
class ChildHealth:
    state: ChildState
    cause: str | None
    pid: int | None
    starts: int
    failures: int = 0
    """Consecutive failures (crashes, failed starts) not yet ended by an answered call or a
    stable run."""
    retry_in_s: float = 0.0
    """How long until the child may be started again (its backoff); 0 when it may now."""
    last_exit: str | None = None
    """Why its last process ended (a crash explained, or stopped, idle), kept once it recovers."""
    last_exit_at: float | None = None
    """When (seconds since the epoch)."""
    unconfigured: bool = False
    """`cause` is something the owner must set up (a remote server refused the host's
    credentials), not a failure of the plugin."""


@dataclass(frozen=True)
class ChildLimits:
    start_timeout_s: float
    idle_timeout_s: float
    max_line_bytes: int
    stderr_lines_per_s: int
    stderr_line_bytes: int
    backoff_max_s: float
    crash_loop_threshold: int
    timeouts_before_recycle: int
    input_timeout_s: float = 600.0
    """How long a visitor's client may take to answer a child's elicitation or sampling request;
    the call's own timeout does not run meanwhile."""
    input_budget: int = 16
    """How many such requests one call may make."""
    backoff_base_s: float = 0.25
    """The delay before the start after a second failure in a row; it doubles with each
    further one, up to `backoff_max_s` (the first restart is immediate)."""
    stable_after_s: float = 30.0
    """A process that stayed up this long ends the run of failures, however it ends."""
    log_keep_lines: int = 200
    """The child's last stderr, exception and error-result lines kept for the owner."""
    errors_logged_per_s: float = 1.0
    """Exceptions and error results logged per second, after a burst of `errors_logged_burst`."""
    errors_logged_burst: int = 10


LaunchBuilder = Callable[[], Launch | Awaitable[Launch]]
"""What makes a child's launch each time it starts; async when it reads the owner's config."""


@dataclass
class _Start:
    done: anyio.Event = field(default_factory=anyio.Event)
    error: str | None = None
    refusal: HostError | None = None
    """Why the start was refused before any spawn, told to the caller as it is (a setting unset)."""


class Child:
    """One plugin's process and MCP session; safe to share between many concurrent callers.

    `session_id`: the visitor session this child serves alone (a per-session instance), or None
    (a shared child, or a per-session plugin's owner-context instance)."""

    def __init__(
        self,
        plugin_id: str,
        launch: LaunchBuilder,
        limits: ChildLimits,
        task_group: TaskGroup,
        *,
        on_spawn: Callable[[int], None] = lambda pid: None,
        on_exit: Callable[[int], None] = lambda pid: None,
        on_tools_changed: Callable[[str], None] = lambda plugin_id: None,
        on_list_changed: Callable[[ListChange], None] = lambda change: None,
        session_id: str | None = None,
        log: ChildLog | None = None,
        on_ended: Callable[[Child], None] = lambda child: None,
        failures: RunOfFailures | None = None,
        owner_context: bool = False,
    ) -> None:
        """`log`: where its lines are kept (the pool gives every instance of a plugin one log);
        `on_ended`: told after each of its processes has ended (`health()` says how);
        `failures`: the plugin's run of failures (the pool gives every instance of a plugin one:
        a crash loop's backoff holds for all of them); `owner_context`: a per-session plugin's
        owner-context instance (its list changes reach only the sessions that list through it)."""
        self.plugin_id = plugin_id
        self.session_id = session_id
        self.owner_context = owner_context
        self._on_ended = on_ended
        self.router = CallRouter(
            plugin_id,
            request_timeout_s=limits.input_timeout_s,
            budget=limits.input_budget,
            session_id=session_id,
            owner_context=owner_context,
        )
        """Where the child's server→client requests and log messages go: the call they are about."""
        self._on_list_changed = on_list_changed
        self._launch = launch
        self._limits = limits
        self._tg = task_group
        self._on_spawn = on_spawn
        self._on_exit = on_exit
        self._on_tools_changed = on_tools_changed
        self._session: ClientSession | None = None
        self._raw: JSONRPCDispatcher[Any] | None = None  # the running session's wire, for `raw_request`
        self._process: Process | None = None
        self._start_lock = anyio.Lock()
        self._previous_run = anyio.Event()
        self._previous_run.set()  # no process yet
        self._stop = anyio.Event()
        self._pipe_closed = False  # a call found this process's pipe closed
        self._retired = False
        self._state = ChildState.STOPPED  # FAILING is derived from the run of failures (`health`)
        self._run_of = failures or RunOfFailures()
        self._tasks: dict[str, float] = {}
        """Live tasks of the running process: task id -> when (monotonic) the host stops
        waiting to see it end (its ttl). Such a process is busy, even with no call in flight."""
        self._starts = 0
        self._timeouts = 0
        self._in_flight = 0
        self._last_used = time.monotonic()
        self._tools: tuple[types.Tool, ...] | None = None
        self._tools_from = 0  # the start (`_starts`) whose process gave `_tools`
        self._last_exit: tuple[str, float] | None = None
        self.log = log or ChildLog(
            plugin_id,
            keep=limits.log_keep_lines,
            line_bytes=limits.stderr_line_bytes,
            errors_per_s=limits.errors_logged_per_s,
            errors_burst=limits.errors_logged_burst,
        )
        """What its processes said (stderr, exceptions, error results), across restarts."""

    # -- health -----------------------------------------------------------------------

    def health(self) -> ChildHealth:
        pid = self._process.pid if self._process is not None else None
        last_exit, last_exit_at = self._last_exit or (None, None)
        run = self._run_of
        return ChildHealth(
            self._state_now(),
            run.cause,
            pid,
            self._starts,
            run.count,
            run.retry_in_s(),
            last_exit,
            last_exit_at,
            run.unconfigured,
        )

    def _state_now(self) -> ChildState:
        if self._state == ChildState.STOPPED and self._run_of.failing(self._limits.crash_loop_threshold):
            return ChildState.FAILING
        return self._state

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
    def running(self) -> bool:
        return self._session is not None

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

    def _task_ended(self, task_id: object) -> None:
        if isinstance(task_id, str) and self._tasks.pop(task_id, None) is not None:
            self._last_used = time.monotonic()  # its idle time starts now

    def _live_tasks(self) -> bool:
        now = time.monotonic()
        for task_id in [t for t, until in self._tasks.items() if until <= now]:
            del self._tasks[task_id]
        return bool(self._tasks)

    @property
    def last_used(self) -> float:
        """When (monotonic) a call last began or ended."""
        return self._last_used

    # -- calls --------------------------------------------------------------------------

    async def list_tools(self, *, timeout_s: float) -> tuple[types.Tool, ...]:
        """The child's real `tools/list` (all pages); also remembered in `self.tools`."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        async with self._use() as session:
            listed_from = self._starts
            for _ in range(_MAX_LIST_PAGES):
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                request = types.ListToolsRequest(params=params)
                page = await self._send(session, request, types.ListToolsResult, timeout_s, None)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
        self._tools, self._tools_from = tuple(tools), listed_from
        return self._tools

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
        async with self._use() as session:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout_s) as deadline:
                call.deadline = deadline
                result = await self._send(session, request, types.CallToolResult, None, progress)
            if not deadline.cancelled_caught:
                await call.logs_passed(within_s=_LOGS_PASSED_S)
                return result
            raise self._timed_out(request.method, timeout_s)

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
            if exc.error.code == types.CONNECTION_CLOSED and self._session is session:
                # The pipe is gone: the next call must start a new process, not reach this one
                # before its task has noticed the exit. Whichever its task notices first, the
                # exit or this stop, the child failed.
                self._session = None
                self._pipe_closed = True
                self._stop.set()
            raise self._map_error(exc, request.method, timeout_s) from exc
        except ValidationError as exc:
            logger.warning("%s: malformed %s result: %s", self.plugin_id, request.method, exc)
            raise TransportFailure(f"the capability returned a malformed {request.method} result") from exc
        if isinstance(request, types.CallToolRequest):
            # Only an answered call (its result, an isError one too) proves the child works: a
            # crash-looping child answers initialize and tools/list after every restart.
            self._timeouts = 0
            self._run_of.answered()
            if isinstance(result, types.CallToolResult) and result.is_error:
                self.log.tool_error(request.params.name, _error_text(result))
        return result

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
        if code == types.CONNECTION_CLOSED:
            return Unavailable("the capability stopped while answering; try again")
        if code == UNREADABLE_ANSWER:  # the framing answered for the child (`wire.framing`)
            return Unavailable("the capability's answer could not be read; try again")
        logger.info("%s: %s answered with protocol error %s: %s", self.plugin_id, method, code, exc.error.message)
        return TransportFailure(f"the capability refused the request (error {code})")

    # -- lifecycle -----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the running process (if any) to stop; returns at once."""
        self._stop.set()

    def retire(self) -> None:
        """Stop for good: the pool forgot this instance, so it must not start again (a later
        use of the plugin for its session makes a new one, counted by the pool)."""
        self._retired = True
        self._stop.set()

    def _use(self) -> _InUse:
        return _InUse(self)

    async def _session_for_call(self) -> ClientSession:
        self._last_used = time.monotonic()
        session = self._session
        if session is not None:
            return session
        async with self._start_lock:
            if self._session is not None:
                return self._session
            if self._retired:
                raise Unavailable("the capability's instance for this session was stopped; try again")
            # A previous process may still be winding down (its session was found dead by a
            # call before its own task noticed the exit): one process per child at a time, and
            # its end, which may set a backoff, comes before the backoff is read.
            await self._previous_run.wait()
            wait = self._run_of.retry_in_s()
            if wait > 0:
                # Refused before any spawn: a crash loop costs the host nothing while it waits,
                # however many sessions' instances ask (the run of failures is the plugin's).
                failing = self._state_now() == ChildState.FAILING
                what = "keeps failing" if failing else "is restarting after a failure"
                raise Unavailable(f"the capability {what}; retry in {wait:.1f} s")
            start = _Start()
            self._stop = anyio.Event()
            self._pipe_closed = False
            self._previous_run = anyio.Event()
            self._state = ChildState.STARTING
            self._tg.start_soon(self._run_to_end, start, self._previous_run)
            await start.done.wait()
            if start.refusal is not None:
                raise start.refusal
            if start.error is not None or self._session is None:
                raise Unavailable("the capability could not be started")
            return self._session

    async def _run_to_end(self, start: _Start, ended: anyio.Event) -> None:
        try:
            await self._run(start)
        except Exception:
            # Whatever went wrong ends this child's run, never the pool's task group (and with
            # it every other child and the host).
            logger.exception("%s: the child's run failed", self.plugin_id)
            self._session = None
            self._state = ChildState.STOPPED
            if not start.done.is_set():
                start.error = "failed"
                start.done.set()
        finally:
            ended.set()
            self._on_ended(self)

    async def _run(self, start: _Start) -> None:
        started_at = time.monotonic()
        try:
            built = self._launch()
            launch = await built if inspect.isawaitable(built) else built
        except ConfigUnset as exc:  # the owner must set a value first: not a crash, no backoff
            self._run_of.cause = exc.message  # the catalogue's cause until the next start
            start.refusal = exc
            self._finish(start, exc.message, started_at, crashed=False)
            return
        except Exception as exc:  # a launch that cannot be built must not end the pool's task group
            logger.exception("%s: could not prepare the launch", self.plugin_id)
            why = exc.message if isinstance(exc, HostError) else "could not prepare its launch"
            self._finish(start, why, started_at, crashed=True)
            return
        drain = StderrDrain(
            self.plugin_id,
            lines_per_s=self._limits.stderr_lines_per_s,
            line_bytes=self._limits.stderr_line_bytes,
            log=self.log,
        )
        reason: str | None = None
        try:
            process = await anyio.open_process(
                launch.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=launch.cwd,
                env=launch.env,
                start_new_session=True,
                # The one place a process inherits a descriptor of the host's: the launch's own
                # (its seccomp filter), made inheritable in the child only (docs/security.md D5).
                pass_fds=launch.pass_fds,
            )
        except OSError as exc:
            await launch.release()
            self._finish(start, f"could not be spawned: {exc.strerror or exc}", started_at, crashed=True)
            return
        finally:
            launch.close_passed_fds()  # the child has its copies now, or never will
        self._process = process
        self._starts += 1
        self._on_spawn(process.pid)
        try:
            reason = await self._serve(process, start, drain)
        finally:
            # Forget the session before any await, so no new call reaches a dead child. Its
            # tool list stays only if it crashed (see `tools`).
            self._session = None
            self._state = ChildState.STOPPED  # _finish below says whether it failed
            with anyio.CancelScope(shield=True):
                await _terminate(process)
            self._on_exit(process.pid)
            self._process = None
            self._tasks.clear()  # they ended with the process
            if reason is None:  # cancelled: the host is shutting down
                reason = "stopped"
            crashed = reason not in ("stopped", "idle")
            if crashed:
                reason = _explain(reason, process.returncode, drain, launch)
            else:
                self._tools = None
            self._finish(start, reason, started_at, crashed=crashed)
            with anyio.CancelScope(shield=True):  # last: callers already see the child gone
                await launch.release()  # kills what the sandbox left, removes its pids cgroup

    async def _serve(self, process: Process, start: _Start, drain: StderrDrain) -> str | None:
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        outcome: list[str] = []

        def overflow() -> None:
            outcome.append("wrote an over-long line")
            _kill(process)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain.run, process.stderr)
            async with framed_transport(
                process.stdout,
                process.stdin,
                max_line_bytes=self._limits.max_line_bytes,
                on_overflow=overflow,
                name=self.plugin_id,
            ) as (read, write):
                async with self._client_session(read, write) as session:
                    try:
                        with anyio.fail_after(self._limits.start_timeout_s):
                            await session.initialize()
                    except TimeoutError:
                        return f"did not answer initialize within {self._limits.start_timeout_s:g} s"
                    except MCPError:
                        return "exited during start"
                    self._session = session
                    self._state = ChildState.RUNNING
                    start.done.set()
                    logger.info("%s: started (pid %d)", self.plugin_id, process.pid)
                    ended = await self._supervise(process)
                    outcome.append(ended)
            tg.cancel_scope.cancel()
        return outcome[0] if outcome else "exited"

    def _client_session(self, read: Any, write: Any) -> ClientSession:
        """The MCP client session over a child's wire (`read`, `write`), its server→client
        requests and log messages routed by `self.router`; `raw_request` uses its dispatcher."""
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
        )

    async def _supervise(self, process: Process | None) -> str:
        """Wait until the process exits, a stop is asked, or it has been idle too long (a
        remote child has no process: only the last two)."""
        result = "stopped"
        async with anyio.create_task_group() as tg:

            async def exited() -> None:
                nonlocal result
                assert process is not None
                await process.wait()
                result = "exited"
                tg.cancel_scope.cancel()

            async def stop_asked() -> None:
                nonlocal result
                await self._stop.wait()
                if self._pipe_closed:
                    result = "exited"  # not a stop: the child's end reached a call first
                tg.cancel_scope.cancel()

            async def idle() -> None:
                nonlocal result
                limit = self._limits.idle_timeout_s
                while True:
                    await anyio.sleep(min(limit, 5.0))
                    if self._in_flight == 0 and not self._live_tasks() and time.monotonic() - self._last_used >= limit:
                        result = "idle"
                        tg.cancel_scope.cancel()
                        return

            if process is not None:
                tg.start_soon(exited)
            tg.start_soon(stop_asked)
            tg.start_soon(idle)
        return result

    def _finish(self, start: _Start, reason: str, started_at: float, *, crashed: bool) -> None:
        self._last_exit = (reason, time.time())
        if time.monotonic() - started_at >= self._limits.stable_after_s:
            self._run_of.stayed_up(crashed=crashed)
        self._state = ChildState.STOPPED  # FAILING when the plugin's run of failures says so
        if crashed:
            run = self._run_of
            run.crashed(reason, base_s=self._limits.backoff_base_s, max_s=self._limits.backoff_max_s)
            logger.error("%s: %s (failure %d in a row)", self.plugin_id, reason, run.count)
        else:
            logger.info("%s: %s", self.plugin_id, reason)
        if not start.done.is_set():
            start.error = reason
            start.done.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._tools = None
            self._on_tools_changed(self.plugin_id)
            self._changed("tools")
        elif isinstance(message, types.PromptListChangedNotification):
            self._changed("prompts")
        elif isinstance(message, types.ResourceListChangedNotification):
            self._changed("resources")
        elif isinstance(message, types.ResourceUpdatedNotification):
            self._changed(f"resource:{message.params.uri}")
        elif isinstance(message, Exception):
            logger.warning("%s: wrote a line that is not JSON-RPC", self.plugin_id)

    def _changed(self, what: str) -> None:
        self._on_list_changed(ListChange(self.plugin_id, what, self.session_id, self.owner_context))


class _InUse:
    """`async with child._use() as session`: counts the call in flight for the idle timer."""

    def __init__(self, child: Child) -> None:
        self._child = child

    async def __aenter__(self) -> ClientSession:
        # Counted before the start is awaited, so a starting child is never taken for idle
        # (stopped to make room for another session's instance) under its first caller.
        self._child._in_flight += 1
        try:
            return await self._child._session_for_call()
        except BaseException:
            self._child._in_flight -= 1
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._child._in_flight -= 1
        self._child._last_used = time.monotonic()


def _explain(reason: str, returncode: int | None, drain: StderrDrain, launch: Launch) -> str:
    """Why a child crashed, for its health and the log: the sandbox's memory limit first when
    it hit it (`Launch.out_of_memory`; read before the launch's release removes its cgroup),
    then the reason, how the process ended and its last stderr line."""
    parts = [reason]
    if (memory := launch.out_of_memory(returncode, drain.out_of_memory)) is not None:
        parts.insert(0, memory)
    if returncode is not None:
        parts.append(f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}")
    if drain.tail:
        parts.append(f"last stderr: {printable(drain.tail[-1], 300)}")
    return "; ".join(parts)


def _error_text(result: types.CallToolResult) -> str:
    """The text of an error result (its text blocks, else its structured content), for the log."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    if texts:
        return " ".join(texts)
    return repr(result.structured_content) if result.structured_content is not None else "(no text)"


def _kill(process: Process) -> None:
    """SIGKILL the child's process group (bwrap's --die-with-parent takes the sandbox down)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def _terminate(process: Process) -> None:
    """Close stdin, give the child a moment to exit, then kill it; always reaps it."""
    if process.returncode is None and process.stdin is not None:
        try:
            await process.stdin.aclose()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        with anyio.move_on_after(_STOP_GRACE_S):
            await process.wait()
    if process.returncode is None:
        _kill(process)
    with anyio.move_on_after(5.0):
        await process.aclose()  # reaps it and closes every pipe
