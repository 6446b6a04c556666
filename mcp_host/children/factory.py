"""`ChildFactory`: a plugin's child for a scope, made in the pool with the launch its manifest,
the host's settings and its back-channel socket give.

Above: the composition root (which builds one per host) and the parts that call a child by
plugin — bindings, listings, the visitor and owner doors, the connector gateway. Below:
`ChildPool` (children by plugin id and scope, created on first ask) and `sandbox.launch_for`
(the command line).

The scope is the visitor session a call is for, or None for owner context (owner calls,
connectors, the startup listing). A shared plugin has one child whatever the scope; a
per-session plugin (`Manifest.per_session`) one per visitor session plus one for the owner.

A plugin whose children need the owner's config (`Transport.env_from_config`, `${config.KEY}`
in its arguments or environment, a required field: `plugins.needs_config`) reads it from the
env source (`use_env`, given once the database is open) each time a child starts, so a child
started after the owner changed a value sees the new one; until the source is given, such a
start waits for it (at most the start timeout).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

import anyio

from mcp_host.errors import HostError, Unavailable
from mcp_host.plugins import ChildConfig, Plugin, PrivateReach, Transport, needs_config
from mcp_host.sandbox import Launch, launch_for
from mcp_host.settings import Settings

from .mcp_session import Child
from .pool import ChildPool
from .remote import RemoteChild, RemoteLink
from .remote_sign_in import RemoteSignIns, SignInLink

__all__ = ["ChildFactory", "ChildSource", "EnvSource", "SocketPaths"]

logger = logging.getLogger(__name__)


class SocketPaths(Protocol):
    """Where each plugin's host-op socket is (`backchannel.OpSockets.socket_for`)."""

    def socket_for(self, plugin_id: str) -> Path | None: ...


class EnvSource(Protocol):
    """A plugin's variables from the owner's config (`store.OwnerEnv`)."""

    async def env_for(self, plugin: Plugin) -> dict[str, str]:
        """Raises `store.ConfigUnset` naming a required setting left unset."""
        ...

    async def child_config(self, plugin: Plugin) -> ChildConfig:
        """Variables and arguments; raises `store.ConfigUnset` as `env_for`."""
        ...


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
        self._env: EnvSource | None = None
        self._remote_calls: dict[str, Callable[[str, str], Awaitable[None]]] = {}
        self._env_given = anyio.Event()
        self._sign_ins: RemoteSignIns | None = None

    def use_sign_ins(self, sign_ins: RemoteSignIns) -> None:
        """Sign remote plugins' requests in with `sign_ins` from now on (the database is open)."""
        self._sign_ins = sign_ins

    def tell_calls(self, plugin_id: str, on_call: Callable[[str, str], Awaitable[None]]) -> None:
        """A remote plugin's children tell `on_call` (tool, request id) before each call (a
        node's parent capabilities: the node's audit names the call as the parent's does).
        Raises RuntimeError once the plugin's child is made: it was made without `on_call`, and
        a child is made once (the composition root tells before anything lists one)."""
        if self._pool.get(plugin_id) is not None:
            raise RuntimeError(f"{plugin_id}: its calls are told of only before its child is made")
        self._remote_calls[plugin_id] = on_call

    def use_env(self, source: EnvSource) -> None:
        """Read children's config-fed variables from `source` from now on (the database is open)."""
        self._env = source
        self._env_given.set()

    def __call__(self, plugin: Plugin, session_id: str | None = None) -> Child:
        """The child that serves `session_id` (None: owner context). Raises Unavailable when the
        pool already runs as many children, or busy per-session instances, as it may."""
        scope = session_id if plugin.manifest.per_session else None
        transport = plugin.manifest.transport
        if transport is not None and transport.kind == "http":
            return self._remote(plugin, transport, scope)
        socket = self._sockets.socket_for(plugin.manifest.id)

        async def launch() -> Launch:
            if not needs_config(plugin.manifest):
                return launch_for(plugin, self._settings, host_socket=socket)
            given = await self._config_of(plugin)
            return launch_for(plugin, self._settings, host_socket=socket, extra_env=given.env, args=given.args)

        return self._pool.child(plugin.manifest.id, launch, scope, per_session=plugin.manifest.per_session)

    def _remote(self, plugin: Plugin, transport: Transport, scope: str | None) -> Child:
        """A remote plugin's child: no launch, a `RemoteLink` from its manifest (headers from the
        owner's config read at each start, as a stdio child's variables are)."""
        assert transport.url is not None  # the manifest requires it for http

        async def config_headers() -> dict[str, str]:
            return await self._env_of(plugin)

        link = RemoteLink(
            url=transport.url,
            allowed_hosts=frozenset(transport.reachable_hosts()),
            allow_private=frozenset(transport.allow_private),
            timeout_s=float(transport.timeout_s or self._settings.children.call_timeout_s),
            headers=dict(transport.headers),
            config_headers=config_headers if needs_config(plugin.manifest) else None,
            on_call=self._remote_calls.get(plugin.manifest.id),
            sign_in=SignInLink(
                lambda: self._sign_ins,
                plugin.manifest.id,
                transport.url,
                session_id=scope,
                per_visitor=transport.sign_in == "per_visitor",
                reach=PrivateReach.of(transport.allow_private),
            ),
        )

        def no_launch() -> Launch:
            raise RuntimeError("a remote plugin launches nothing")

        return self._pool.child(
            plugin.manifest.id,
            no_launch,
            scope,
            per_session=plugin.manifest.per_session,
            make=functools.partial(RemoteChild, link=link),
        )

    async def _env_of(self, plugin: Plugin) -> dict[str, str]:
        return dict((await self._config_of(plugin)).env)

    async def _config_of(self, plugin: Plugin) -> ChildConfig:
        with anyio.move_on_after(self._settings.children.start_timeout_s):
            await self._env_given.wait()
        if self._env is None:
            raise Unavailable("the host's config is not open yet; try again")
        return await self._env.child_config(plugin)

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
