"""Blocking work (npm, pip) run off the event loop while the owner hears how it goes: each line
an installer prints becomes an MCP progress notification with that line as its message, and
each second without one a line saying the work still runs.

Above: `plugin_tools` (`plugin_add`, `plugin_upgrade`: the `Blocking` of `plugins.PluginAdmin`).
Below: `services.PROGRESS` (the call's reporter, a no-op unless the caller sent a progress
token) and `mcp_host.plugins`' `installer_output` (the installers' lines, in the worker thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread

from mcp_host.plugins import installer_output

from .services import PROGRESS

__all__ = ["with_progress"]

T = TypeVar("T")
_QUIET_S = 1.0  # after this long without an installer's line, say that the work still runs
logger = logging.getLogger("owner_facade")


async def with_progress(label: str, work: Callable[[], T]) -> T:
    """`work()` in a worker thread; each line its installers print, and `"<label>: N s"` after
    each quiet second, reported to the owner through `PROGRESS` (progress: how many reports so
    far, no total). A report that fails is dropped: the work goes on. Raises what `work` raises."""
    report = PROGRESS.get()
    if report is None:
        return await anyio.to_thread.run_sync(work)
    started = last = time.monotonic()
    sent = 0
    lock = anyio.Lock()  # progress must grow: one report at a time, numbered in the order sent

    async def say(message: str) -> None:
        nonlocal sent, last
        async with lock:
            sent += 1
            last = time.monotonic()
            try:
                await report(sent, None, message)
            except Exception:  # the owner's client went away: the install goes on without it
                logger.debug("a progress report of %s was not delivered", label, exc_info=True)

    def lined() -> T:
        with installer_output(lambda line: anyio.from_thread.run(say, line)):
            return work()

    async def tick() -> None:
        while True:
            await anyio.sleep(_QUIET_S)
            if time.monotonic() - last >= _QUIET_S:
                await say(f"{label}: {time.monotonic() - started:.0f} s")

    failed: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        try:
            done = await anyio.to_thread.run_sync(lined)
        except Exception as exc:  # raised below, outside the task group (not in an exception group)
            failed = exc
        finally:
            tg.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return done
