"""Database outages: noticing one, restarting the embedded server, saying so once.

Above: `database.open_database`, which runs `DatabaseWatch.run` in its task group while the
database is open, and tells it of every failed connect (`suspect`). Below: a probe (`SELECT 1`
through the pool, bounded) and, for the embedded server, the `RestartableServer` seam
(`embedded_postgres.EmbeddedPostgres`; tests use a twin).

What it does:

- It sleeps until something looks wrong: the embedded postmaster exits (seen at once,
  through a pidfd), or a connection to the server cannot be made.
- It probes. An answer means nothing is wrong (a connection the server closed, say). No answer
  starts an outage: one warning, then it restarts the embedded server if its postmaster is
  dead — `attempts` times at most per outage, waiting `backoff_s` doubling to `backoff_max_s`
  between tries, probing after each — until the probe answers: one info line with the
  outage's length. With a database URL nothing is restarted; it probes until the server is
  back.
- An embedded server that could not be restarted ends the watch with `DatabaseLost`, which
  ends the host (a supervisor restarts the process).

Requests do not wait for the watch: each one tries the pool (which replaces connections the
server cut), and during an outage is refused as `unavailable` (`errors.as_unavailable`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from mcp_host.errors import InternalError

__all__ = ["DatabaseLost", "DatabaseWatch", "RecoveryLimits", "RestartableServer"]

_logger = logging.getLogger("mcp_host.store.database")


class DatabaseLost(InternalError):
    """The embedded database died and could not be started again; the host cannot go on."""


class RestartableServer(Protocol):
    """A database server the host runs itself (the embedded PostgreSQL)."""

    def running(self) -> bool:
        """Whether its main process is alive."""
        ...

    async def wait_exit(self) -> None:
        """Return once its main process has exited."""
        ...

    async def restart(self) -> None:
        """Start it again; raises when it does not start."""
        ...


@dataclass(frozen=True)
class RecoveryLimits:
    """How an outage is recovered from; the defaults are the settings' defaults."""

    attempts: int = 5
    """Restarts of the embedded server per outage before giving up."""
    backoff_s: float = 0.25
    """Wait after the first failed restart or probe; doubles each time."""
    backoff_max_s: float = 5.0
    probe_timeout_s: float = 1.0
    """How long `SELECT 1` may take before the database counts as not answering."""


class DatabaseWatch:
    """Notices outages, recovers from them, and says so once per outage."""

    def __init__(
        self,
        probe: Callable[[], Awaitable[bool]],
        *,
        server: RestartableServer | None = None,
        limits: RecoveryLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`probe`: whether the database answers now (bounded by the caller). `server`: the
        embedded server to restart; None for a server reached by URL."""
        self._probe = probe
        self._server = server
        self._limits = limits or RecoveryLimits()
        self._clock = clock
        self._suspect = anyio.Event()
        self._down_since: float | None = None
        self.outages = 0
        """Outages seen since start (each logged once)."""
        self.restarts = 0
        """Successful restarts of the embedded server since start."""

    @property
    def down_since(self) -> float | None:
        """When the current outage began (the watch's clock), or None while the database answers."""
        return self._down_since

    def suspect(self) -> None:
        """Something failed to reach the database: probe it (cheap; safe to call per request)."""
        self._suspect.set()

    async def run(self) -> None:
        """Watch until cancelled. Raises `DatabaseLost` when the embedded server stays down."""
        while True:
            await self._trouble()
            self._suspect = anyio.Event()
            if (self._server is None or self._server.running()) and await self._probe():
                continue  # it answers: a connection was cut, not an outage
            await self._recover()

    async def _trouble(self) -> None:
        """Return when the postmaster exits or a connect fails, whichever comes first."""
        async with anyio.create_task_group() as tg:

            async def until(wait: Callable[[], Awaitable[object]]) -> None:
                await wait()
                tg.cancel_scope.cancel()

            tg.start_soon(until, self._suspect.wait)
            if self._server is not None:
                tg.start_soon(until, self._server.wait_exit)

    async def _recover(self) -> None:
        began = self._down_since = self._clock()
        self.outages += 1
        server = self._server
        _logger.warning(
            "database outage: %s; calls that need it get `unavailable` meanwhile",
            "the embedded server exited, restarting it" if server is not None else "no answer, waiting for it",
        )
        attempts = 0
        delay = self._limits.backoff_s
        while True:
            if server is not None and not server.running():
                if attempts == self._limits.attempts:
                    raise DatabaseLost(
                        f"the embedded database did not restart after {attempts} attempts; stopping the host"
                    )
                attempts += 1
                try:
                    await server.restart()
                    self.restarts += 1
                except Exception as exc:
                    _logger.warning(
                        "embedded PostgreSQL: restart %d of %d failed (%s)",
                        attempts,
                        self._limits.attempts,
                        type(exc).__name__,
                    )
            if await self._probe():
                break
            await anyio.sleep(delay)
            delay = min(delay * 2, self._limits.backoff_max_s)
        self._down_since = None
        _logger.info("database outage over after %.1f s", self._clock() - began)
