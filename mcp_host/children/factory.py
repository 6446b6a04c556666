"""`ChildFactory`: a plugin's child for a scope, made in the pool with the launch its manifest,
the host's settings and its back-channel socket give.

Above: the composition root (which builds one per host) and the parts that call a child by
plugin — bindings, listings, the visitor and owner doors, the connector gateway. Below:
`ChildPool` (children by plugin id and scope, created on first ask) and `sandbox.launch_for`
(the command line).

The scope is the visitor session a call is for, or None for owner context (owner calls,
connectors, the startup listing). A shared plugin has one child whatever the scope; a
per-session plugin (`Manifest.per_session`) one per visitor session plus one for the owner.
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

from .lifecycle import Child
from .pool import ChildPool

__all__ = ["ChildFactory", "ChildSource", "SocketPaths"]

logger = logging.getLogger(__name__)


class SocketPaths(Protocol):
    """Where each plugin's host-op socket is (`backchannel.OpSockets.socket_for`)."""

    def socket_for(self, plugin_id: str) -> Path | None: ...


class ChildSource(Protocol):
    """Where the parts that call children get them (`ChildFactory`; a test may give its own)."""

    def __call__(self, plugin: Plugin, session_id: str | None = None) -> Child: ...

    def lister(self, plugin: Plugin, session_id: str | None = None) -> Child: ...


class ChildFactory:
    """`factory(plugin, session_id)`: the child of `plugin` for that scope in `pool`, created
    (not started) on first ask."""

    def __init__(self, pool: ChildPool, settings: Settings, sockets: SocketPaths) -> None:
        self._pool = pool
        self._settings = settings
        self._sockets = sockets

    def __call__(self, plugin: Plugin, session_id: str | None = None) -> Child:
        """The child that serves `session_id` (None: owner context). Raises Unavailable when the
        pool already runs as many children, or busy per-session instances, as it may."""
        socket = self._sockets.socket_for(plugin.manifest.id)
        scope = session_id if plugin.manifest.per_session else None
        return self._pool.child(
            plugin.manifest.id,
            lambda: launch_for(plugin, self._settings, host_socket=socket),
            scope,
            per_session=plugin.manifest.per_session,
        )

    def lister(self, plugin: Plugin, session_id: str | None = None) -> Child:
        """The child whose lists (tools, prompts, resources) `session_id` sees: its own instance
        while that runs, else the owner-context one — a Node process per session only to list
        tools would cost more than the lists are worth. Starts nothing itself."""
        if session_id is not None and plugin.manifest.per_session:
            own = self._pool.get(plugin.manifest.id, session_id)
            if own is not None and own.running:  # as `ChildPool.runs_own`, which the change feed asks
                return own
        return self(plugin)

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
