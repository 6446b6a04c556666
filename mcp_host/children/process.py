"""A child that is a local process: spawned from its launch (sandboxed or not), spoken to over
its stdio (`wire.framing`: bounded lines) with one MCP session per process, supervised until it
exits, is stopped or idles, then terminated (stdin closed, a grace, SIGKILL to its process
group) and reaped; a crash is explained from its exit, its stderr and its sandbox's memory
limit.

Processes are spawned from the event-loop thread (anyio's asyncio backend calls `Popen`
there): bubblewrap's parent-death signal follows the spawning thread (docs/security.md B5).

Above: the pool (which makes one for each stdio plugin and scope). Below: `mcp_session.Child`
(the session and what is forwarded over it), `sandbox.Launch` (what argv starts a plugin),
`wire.framed_transport` and `stderr.StderrDrain`.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup

from mcp_host.plugins import printable
from mcp_host.sandbox import Launch
from mcp_host.wire import framed_transport

from .lifecycle import ChildLimits, Start
from .mcp_session import Child
from .stderr import StderrDrain

__all__ = ["LaunchBuilder", "ProcessChild"]

logger = logging.getLogger(__name__)

_STOP_GRACE_S = 1.0

LaunchBuilder = Callable[[], Launch | Awaitable[Launch]]
"""What makes a child's launch each time it starts; async when it reads the owner's config."""


class ProcessChild(Child):
    """One plugin's local process and its MCP session over stdio."""

    def __init__(
        self,
        plugin_id: str,
        launch: LaunchBuilder,
        limits: ChildLimits,
        task_group: TaskGroup,
        *,
        on_spawn: Callable[[int], None] = lambda pid: None,
        on_exit: Callable[[int], None] = lambda pid: None,
        **child: Any,
    ) -> None:
        """`launch`: what starts each process; `on_spawn`, `on_exit`: told each process's id as
        it starts and once it is reaped; `child`: as `Child` takes them."""
        super().__init__(plugin_id, limits, task_group, **child)
        self._launch = launch
        self._on_spawn = on_spawn
        self._on_exit = on_exit
        self._process: Process | None = None

    def _pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def _run(self, start: Start) -> None:
        started_at = time.monotonic()
        launch = await self._prepared(start, started_at, self._built_launch, "launch")
        if launch is None:
            return
        try:
            process = await _spawn(launch)
        except OSError as exc:
            await launch.release()
            self._finish(start, f"could not be spawned: {exc.strerror or exc}", started_at, crashed=True)
            return
        self._process = process
        self._starts += 1
        self._on_spawn(process.pid)
        drain = StderrDrain(
            self.plugin_id,
            lines_per_s=self._limits.stderr_lines_per_s,
            line_bytes=self._limits.stderr_line_bytes,
            log=self.log,
        )
        reason: str | None = None
        try:
            reason = await self._serve(process, start, drain)
        finally:
            self._closed()
            with anyio.CancelScope(shield=True):
                await _terminate(process)
            self._on_exit(process.pid)
            self._process = None
            self._ended(start, reason, started_at, lambda why: _explain(why, process.returncode, drain, launch))
            with anyio.CancelScope(shield=True):  # last: callers already see the child gone
                await launch.release()  # kills what the sandbox left, removes its pids cgroup

    async def _built_launch(self) -> Launch:
        built = self._launch()
        return await built if inspect.isawaitable(built) else built

    async def _serve(self, process: Process, start: Start, drain: StderrDrain) -> str | None:
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        outcome: list[str] = []

        def overflow() -> None:
            outcome.append("wrote an over-long line")
            self.answer_over_limit()
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
                    refused = await self._initialized(session, start, "exited during start")
                    if refused is not None:
                        return refused
                    logger.info("%s: started (pid %d)", self.plugin_id, process.pid)
                    ended = await self._supervise(process.wait)
                    outcome.append(ended)
            tg.cancel_scope.cancel()
        return outcome[0] if outcome else "exited"


async def _spawn(launch: Launch) -> Process:
    """The launch's process, in a session of its own (its process group is what `_kill` ends).
    Raises OSError when it cannot be spawned."""
    try:
        return await anyio.open_process(
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
    finally:
        launch.close_passed_fds()  # the child has its copies now, or never will


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
