"""`EgressProxy`: the host's filtering proxy for its sandboxed children, one unix socket (an
`EgressGate`) per child instance, each with its plugin's policy and caps; an async context
manager that runs the gates' tasks and closes them all on exit.

The sockets live in `folder` (made mode 0700, removed on exit), under short random names, so a path stays under
the 108 bytes of a unix socket's address.

Above: the composition root (makes one proxy per host) and the child factory (opens a gate
per child start, closes it when the child ends). Below: `gate`, `resolver`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import anyio
from anyio.abc import TaskGroup

from mcp_host.observe import HostMetrics
from mcp_host.plugins import EgressPolicy

from .caps import EgressCaps
from .gate import HEAD_TIMEOUT_S, EgressGate, Refusal
from .resolver import Resolver

__all__ = ["EgressProxy"]

# sockaddr_un.sun_path holds 108 bytes, the final NUL included.
_MAX_SOCKET_PATH = 107


class EgressProxy:
    """Serves one gate per child instance that may reach the network."""

    def __init__(
        self,
        folder: Path,
        resolver: Resolver,
        *,
        on_refused: Callable[[Refusal], None] | None = None,
        metrics: HostMetrics | None = None,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        """`on_refused`: told each destination a gate refused, once per gate; `metrics`: where
        connections and bytes are counted, by plugin; `head_timeout_s`: how long a connection
        may take to say where it goes."""
        self._head_timeout_s = head_timeout_s
        self._folder = folder
        self._resolver = resolver
        self._on_refused = on_refused
        self._metrics = metrics
        self._gates: set[EgressGate] = set()
        self._tasks: TaskGroup | None = None

    async def __aenter__(self) -> EgressProxy:
        self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self._folder, 0o700)
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tasks is not None
        with anyio.CancelScope(shield=True):
            for gate in list(self._gates):
                await gate.aclose()
        tasks, self._tasks = self._tasks, None
        try:
            return await tasks.__aexit__(kind, exc, tb)
        finally:
            with contextlib.suppress(OSError):  # not empty: a socket some gate left; kept, harmless
                self._folder.rmdir()

    async def open(self, plugin_id: str, scope: str | None, policy: EgressPolicy, caps: EgressCaps) -> EgressGate:
        """A fresh socket served for one child instance of `plugin_id` (for `scope`, its visitor
        session, or None); raises ValueError when its path would be too long for a unix socket,
        RuntimeError outside the context."""
        if self._tasks is None:
            raise RuntimeError("the egress proxy is not running")
        path = self._folder / f"{secrets.token_hex(6)}.sock"
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            raise ValueError(f"egress socket path {path} is over {_MAX_SOCKET_PATH} bytes; use a shorter folder")
        listener = await anyio.create_unix_listener(path, mode=0o600)
        gate = EgressGate(
            path,
            plugin_id,
            scope,
            policy,
            caps,
            self._resolver,
            on_refused=self._on_refused,
            metrics=self._metrics,
            head_timeout_s=self._head_timeout_s,
        )
        await self._tasks.start(self._serve, gate, listener)
        return gate

    def gates_of(self, plugin_id: str) -> list[Path]:
        """The sockets of `plugin_id`'s open gates (one per running child instance of it that
        has egress), sorted; read-only, for diagnostics and tests."""
        return sorted(gate.path for gate in self._gates if gate.plugin_id == plugin_id)

    async def _serve(
        self, gate: EgressGate, listener: anyio.abc.SocketListener, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        self._gates.add(gate)
        try:
            await gate.serve(listener, task_status=task_status)
        finally:
            self._gates.discard(gate)
