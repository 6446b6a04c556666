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
env source given at construction each time a child starts, so a child started after the owner
changed a value sees the new one. The host's env source is `OnceOpen`, which the composition
root opens once the database is (until then such a start waits for it, at most the start
timeout); it is also the factory's `ParentCalls`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

import anyio

from mcp_host.egress import EgressCaps, EgressGate, egress_caps_for
from mcp_host.errors import HostError
from mcp_host.plugins import ChildConfig, EgressPolicy, Plugin, PrivateReach, Transport, needs_config
from mcp_host.sandbox import Launch, launch_for
from mcp_host.settings import Settings
from mcp_host.store import OwnerEgress

from .mcp_session import Child
from .pool import ChildPool
from .remote import RemoteChild, RemoteLink
from .remote_sign_in import RemoteSignIns, SignInLink

__all__ = [
    "ChildFactory",
    "ChildSource",
    "EgressGates",
    "EgressGrantSource",
    "EnvSource",
    "OnCall",
    "ParentCalls",
    "SocketPaths",
]

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


class EgressGates(Protocol):
    """Where a child's egress gate is opened (`egress.EgressProxy`)."""

    async def open(self, plugin_id: str, scope: str | None, policy: EgressPolicy, caps: EgressCaps) -> EgressGate: ...


class EgressGrantSource(Protocol):
    """The egress the owner added to a plugin (`OnceOpen`, over `store.EgressGrants`)."""

    async def owner_egress(self, plugin_id: str) -> OwnerEgress: ...


class _NoGrants:
    async def owner_egress(self, plugin_id: str) -> OwnerEgress:
        return OwnerEgress()


_NO_GRANTS = _NoGrants()

OnCall = Callable[[str, str], Awaitable[None]]
"""Told (tool, request id) before each call a remote child sends."""


class ParentCalls(Protocol):
    """Which remote plugins are capabilities a node's parent lent it, and who is told of each
    call to one (`app.parent`: the node's audit names the call as the parent's does)."""

    def on_call(self, plugin_id: str) -> OnCall | None:
        """What `plugin_id`'s children tell before each call; None: not lent by a parent."""
        ...


class ChildSource(Protocol):
    """Where the parts that call children get them (`ChildFactory`; a test may give its own)."""

    def __call__(self, plugin: Plugin, session_id: str | None = None) -> Child: ...

    def lister(self, plugin: Plugin, session_id: str | None = None) -> Child: ...


class ChildFactory:
    """`factory(plugin, session_id)`: the child of `plugin` for that scope in `pool`, created
    (not started) on first ask."""

    def __init__(
        self,
        pool: ChildPool,
        settings: Settings,
        sockets: SocketPaths,
        env: EnvSource,
        parent_calls: ParentCalls | None = None,
        sign_ins: Callable[[], RemoteSignIns | None] = lambda: None,
        egress: EgressGates | None = None,
        egress_grants: EgressGrantSource = _NO_GRANTS,
    ) -> None:
        """`env`: where a child's config-fed variables are read at each start; `parent_calls`:
        asked once per remote plugin, when its child is made (a child is made once);
        `sign_ins`: the host's sign-ins to remote servers, read at each remote child's start
        (None until the database is open: no sign-in yet); `egress`: the host's egress proxy,
        which opens a gate for each start of a child that may reach the network (None: every
        child offline); `egress_grants`: the egress the owner added to each plugin, read at
        each start."""
        self._pool = pool
        self._settings = settings
        self._sockets = sockets
        self._env = env
        self._parent_calls = parent_calls
        self._sign_ins = sign_ins
        self._egress = egress
        self._egress_grants = egress_grants

    def __call__(self, plugin: Plugin, session_id: str | None = None) -> Child:
        """The child that serves `session_id` (None: owner context). Raises Unavailable when the
        pool already runs as many children, or busy per-session instances, as it may."""
        scope = session_id if plugin.manifest.per_session else None
        transport = plugin.manifest.transport
        if transport is not None and transport.kind == "http":
            return self._remote(plugin, transport, scope)
        socket = self._sockets.socket_for(plugin.manifest.id)

        async def launch() -> Launch:
            given = await self._env.child_config(plugin) if needs_config(plugin.manifest) else None
            gate = await self._gate(plugin, scope)
            try:
                built = launch_for(
                    plugin,
                    self._settings,
                    host_socket=socket,
                    extra_env=None if given is None else given.env,
                    args=None if given is None else given.args,
                    egress_socket=None if gate is None else gate.path,
                )
            except BaseException:
                if gate is not None:
                    with anyio.CancelScope(shield=True):
                        await gate.aclose()
                raise
            return built if gate is None else built.closing(gate.aclose)

        return self._pool.child(plugin.manifest.id, launch, scope, per_session=plugin.manifest.per_session)

    async def _gate(self, plugin: Plugin, scope: str | None) -> EgressGate | None:
        """The egress gate of one child of `plugin` for `scope`: its manifest's egress with the
        owner's, through the host's proxy; None when it may reach nothing (or runs unsandboxed,
        on the host's network: development only)."""
        if self._egress is None or self._settings.sandbox.mode != "on":
            return None
        declared = plugin.manifest.transport
        assert declared is not None
        sandbox = declared.sandbox
        owner = await self._egress_grants.owner_egress(plugin.manifest.id)
        policy = EgressPolicy.of(
            (*sandbox.egress, *owner.entries),
            allow_net=sandbox.allow_net,
            allow_private=(*sandbox.allow_private, *owner.private),
        )
        if policy.offline:
            return None
        caps = egress_caps_for(plugin, self._settings.egress)
        return await self._egress.open(plugin.manifest.id, scope, policy, caps)

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
            on_call=self._parent_calls.on_call(plugin.manifest.id) if self._parent_calls is not None else None,
            sign_in=SignInLink(
                self._sign_ins,
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
        return dict((await self._env.child_config(plugin)).env)

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
