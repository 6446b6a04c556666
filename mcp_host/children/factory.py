"""`ChildFactory`: a plugin's child, made in the pool with the launch its manifest, the host's
settings and its back-channel socket give.

Above: the composition root (which builds one per host) and the parts that call a child by
plugin — bindings, the visitor and owner doors, the connector gateway. Below: `ChildPool`
(one child per plugin id, created on first ask) and `sandbox.launch_for` (the command line).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import anyio

from mcp_host.errors import HostError
from mcp_host.plugins import Plugin
from mcp_host.sandbox import launch_for
from mcp_host.settings import Settings

from .lifecycle import Child, ChildPool

__all__ = ["ChildFactory", "SocketPaths"]

logger = logging.getLogger(__name__)


class SocketPaths(Protocol):
    """Where each plugin's host-op socket is (`backchannel.OpSockets.socket_for`)."""

    def socket_for(self, plugin_id: str) -> Path | None: ...


class ChildFactory:
    """`factory(plugin)`: the child of `plugin` in `pool`, created (not started) on first ask."""

    def __init__(self, pool: ChildPool, settings: Settings, sockets: SocketPaths) -> None:
        self._pool = pool
        self._settings = settings
        self._sockets = sockets

    def __call__(self, plugin: Plugin) -> Child:
        """Raises Unavailable when the pool already runs as many children as it may."""
        socket = self._sockets.socket_for(plugin.manifest.id)
        return self._pool.child(plugin.manifest.id, lambda: launch_for(plugin, self._settings, host_socket=socket))

    async def prestart(self, plugins: Sequence[Plugin], *, timeout_s: float) -> None:
        """Start the children of `plugins` concurrently and list their tools (each child keeps
        its list); a child that cannot start is left for its first caller to report."""

        async def start(plugin: Plugin) -> None:
            try:
                await self(plugin).list_tools(timeout_s=timeout_s)
            except HostError as exc:  # its cause is kept by the child and shown by the catalogue
                logger.debug("%s: not prestarted: %s", plugin.manifest.id, exc.message)

        async with anyio.create_task_group() as tg:
            for plugin in plugins:
                tg.start_soon(start, plugin)
