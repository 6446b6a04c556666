"""A child's life, whatever it runs over: started on first use, kept and reused, stopped after
an idle time, and started again on the next use after it ends — with a backoff that grows with
consecutive failures (the first restart is immediate). Only an answered `tools/call`, or a run
that stayed up `stable_after_s`, ends a run of failures: a restarted child that answers
initialize and `tools/list` and then dies on the call is a crash loop, not a recovery. Enough
consecutive failures mark it `failing`, with the cause; meanwhile a call is refused at once
(`unavailable`, with when to retry) and starts nothing. Every run is a task of the pool's task
group, which is owned by the host's lifespan; that task owns what the run opened (a process or
a connection, and the MCP session over it), so cancel scopes open and close in one task.

Above: `mcp_session.Child` (the MCP session a run holds, and the requests forwarded over it),
and below it the two kinds of run, `process.ProcessChild` (a local process over stdio) and
`remote.RemoteChild` (a remote server over streamable HTTP). Below: `backoff` (the plugin's
run of failures) and `stderr.ChildLog` (what its runs said).
"""

from __future__ import annotations

import abc
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Self, TypeVar

import anyio
from anyio.abc import TaskGroup
from mcp.client.session import ClientSession

from mcp_host.errors import HostError, Unavailable
from mcp_host.store import ConfigUnset

from .backoff import RunOfFailures
from .stderr import ChildLog

__all__ = ["ChildHealth", "ChildLife", "ChildLimits", "ChildState", "Start"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_CLEAN_ENDS = ("stopped", "idle")
"""Why a run ended when it did not fail."""


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


@dataclass
class Start:
    """One start, as its caller waits for it: done once the run holds a session, or has ended."""

    done: anyio.Event = field(default_factory=anyio.Event)
    error: str | None = None
    refusal: HostError | None = None
    """Why the start was refused before anything was opened, told to the caller as it is (a
    setting unset, the remote server refusing the host's credentials)."""


class ChildLife(abc.ABC):
    """When one child runs: its starts, its idle stop, its backoff and its health; safe to share
    between many concurrent callers. What a run opens is a subclass's (`_run`).

    `session_id`: the visitor session this child serves alone (a per-session instance), or None
    (a shared child, or a per-session plugin's owner-context instance)."""

    def __init__(
        self,
        plugin_id: str,
        limits: ChildLimits,
        task_group: TaskGroup,
        *,
        session_id: str | None = None,
        log: ChildLog | None = None,
        on_ended: Callable[[Self], None] = lambda child: None,
        failures: RunOfFailures | None = None,
        owner_context: bool = False,
    ) -> None:
        """`log`: where its lines are kept (the pool gives every instance of a plugin one log);
        `on_ended`: told after each of its runs has ended (`health()` says how);
        `failures`: the plugin's run of failures (the pool gives every instance of a plugin one:
        a crash loop's backoff holds for all of them); `owner_context`: a per-session plugin's
        owner-context instance (its list changes reach only the sessions that list through it)."""
        self.plugin_id = plugin_id
        self.session_id = session_id
        self.owner_context = owner_context
        self._on_ended: Callable[[Self], None] = on_ended
        self._limits = limits
        self._tg = task_group
        self._session: ClientSession | None = None
        self._start_lock = anyio.Lock()
        self._previous_run = anyio.Event()
        self._previous_run.set()  # no run yet
        self._stop = anyio.Event()
        self._pipe_closed = False  # a call found this run's connection closed
        self._retired = False
        self._state = ChildState.STOPPED  # FAILING is derived from the run of failures (`health`)
        self._run_of = failures or RunOfFailures()
        self._tasks: dict[str, float] = {}
        """Live tasks of the running process: task id -> when (monotonic) the host stops
        waiting to see it end (its ttl). Such a process is busy, even with no call in flight."""
        self._starts = 0
        self._in_flight = 0
        self._last_used = time.monotonic()
        self._last_exit: tuple[str, float] | None = None
        self.log = log or ChildLog(
            plugin_id,
            keep=limits.log_keep_lines,
            line_bytes=limits.stderr_line_bytes,
            errors_per_s=limits.errors_logged_per_s,
            errors_burst=limits.errors_logged_burst,
        )
        """What its runs said (stderr, exceptions, error results), across restarts."""

    # -- health -----------------------------------------------------------------------

    def health(self) -> ChildHealth:
        pid = self._pid()
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

    def _pid(self) -> int | None:
        """The running process's id, for its health; None for a run that has no process."""
        return None

    def _state_now(self) -> ChildState:
        if self._state == ChildState.STOPPED and self._run_of.failing(self._limits.crash_loop_threshold):
            return ChildState.FAILING
        return self._state

    @property
    def running(self) -> bool:
        return self._session is not None

    @property
    def last_used(self) -> float:
        """When (monotonic) a call last began or ended."""
        return self._last_used

    def _task_ended(self, task_id: object) -> None:
        if isinstance(task_id, str) and self._tasks.pop(task_id, None) is not None:
            self._last_used = time.monotonic()  # its idle time starts now

    def _live_tasks(self) -> bool:
        now = time.monotonic()
        for task_id in [t for t, until in self._tasks.items() if until <= now]:
            del self._tasks[task_id]
        return bool(self._tasks)

    # -- lifecycle -----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the running child (if any) to stop; returns at once."""
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
            start = Start()
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

    async def _run_to_end(self: Self, start: Start, ended: anyio.Event) -> None:
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

    @abc.abstractmethod
    async def _run(self, start: Start) -> None:
        """One run: open what the child runs over, hold its session until it ends, then tell
        `_finish` (through `_ended`) why. A subclass's."""

    async def _prepared(
        self, start: Start, started_at: float, prepare: Callable[[], Awaitable[_T]], what: str
    ) -> _T | None:
        """What `prepare` makes before a run opens anything (a launch, a connection's headers),
        or None when it could not be made, the start then finished: a setting the owner must
        set first refuses the start without a failure or a backoff; anything else fails it
        (`what` names the thing: "launch", "connection") without ending the pool's task
        group."""
        try:
            return await prepare()
        except ConfigUnset as exc:
            self._run_of.cause = exc.message  # the catalogue's cause until the next start
            start.refusal = exc
            self._finish(start, exc.message, started_at, crashed=False)
        except Exception as exc:
            logger.exception("%s: could not prepare the %s", self.plugin_id, what)
            why = exc.message if isinstance(exc, HostError) else f"could not prepare its {what}"
            self._finish(start, why, started_at, crashed=True)
        return None

    def _running(self, session: ClientSession, start: Start) -> None:
        """The run holds `session`, initialized: calls may use it now."""
        self._session = session
        self._state = ChildState.RUNNING
        start.done.set()

    def _closed(self) -> None:
        """The run's session is gone: forgotten before any await, so no new call reaches it."""
        self._session = None
        self._state = ChildState.STOPPED  # `_finish` says whether it failed
        self._tasks.clear()  # they ended with the run

    def _ended(self, start: Start, reason: str | None, started_at: float, explain: Callable[[str], str]) -> None:
        """Finish a run that opened its session: `reason` None is a cancellation (the host is
        shutting down); a reason other than stopped or idle is a failure, told as `explain` puts
        it (its exit code, its last stderr line)."""
        if reason is None:
            reason = "stopped"
        crashed = reason not in _CLEAN_ENDS
        if crashed:
            reason = explain(reason)
        else:
            self._forget_tools()
        self._finish(start, reason, started_at, crashed=crashed)

    def _forget_tools(self) -> None:  # noqa: B027 - a hook; only a child that keeps tools overrides it
        """A clean end: the next run is listed again (`mcp_session.Child.tools`)."""

    async def _supervise(self, exited: Callable[[], Awaitable[object]] | None) -> str:
        """Wait until the run's end comes by itself (`exited`, a process's; a remote run has
        none), a stop is asked, or it has been idle too long; returns which."""
        result = "stopped"
        async with anyio.create_task_group() as tg:

            async def ends(by_itself: Callable[[], Awaitable[object]]) -> None:
                nonlocal result
                await by_itself()
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

            if exited is not None:
                tg.start_soon(ends, exited)
            tg.start_soon(stop_asked)
            tg.start_soon(idle)
        return result

    def _finish(self, start: Start, reason: str, started_at: float, *, crashed: bool) -> None:
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


class _InUse:
    """`async with child._use() as session`: counts the call in flight for the idle timer."""

    def __init__(self, child: ChildLife) -> None:
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
