"""`OnceOpen`: what the child factory needs from the parts built once the database is open, given
to it at construction, before they exist: the owner's config (a child's config-fed variables),
the audit of a node's calls to its parent, the host's sign-ins to remote servers and the egress
the owner added to each plugin.

Above: the composition root (`app/early` makes one empty with the factory; `app/shared` opens
it once the owner's config and the audit log exist; `app/wiring` gives it the sign-ins once the
change feed they tell exists). Below: `ChildFactory`, which reads it as its `EnvSource`,
`ParentCalls` and source of sign-ins.

Why a seam made empty and opened later, not a setter on the factory: the factory is built
before the database opens (children boot while it starts), and the parts it reads are built
after; the factory holds one collaborator from its construction on, and the one place that
fills it is this seam's `open`, called once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import anyio

from mcp_host.errors import Unavailable
from mcp_host.plugins import ChildConfig, Plugin
from mcp_host.store import OwnerEgress

from .factory import EnvSource, OnCall
from .remote_sign_in import RemoteSignIns

__all__ = ["OnceOpen", "OwnerEgressStore"]


class OwnerEgressStore(Protocol):
    """Where the egress the owner added to each plugin is kept (`store.EgressGrants`)."""

    async def entries(self, plugin_id: str) -> OwnerEgress: ...


class OnceOpen:
    """An `EnvSource`, `ParentCalls` and `EgressGrantSource` whose answers come once `open` is called. Until then a
    child that needs the owner's config waits for it (at most `wait_s`), then is refused
    Unavailable; a remote plugin's child made before then tells no one of its calls (none of a
    parent's lent capabilities is loaded before the database opens)."""

    def __init__(self, *, wait_s: float) -> None:
        self._wait_s = wait_s
        self._env: EnvSource | None = None
        self._parent_calls: Mapping[str, OnCall] = {}
        self._sign_ins: RemoteSignIns | None = None
        self._egress: OwnerEgressStore | None = None
        self._opened = anyio.Event()

    def open(self, env: EnvSource, parent_calls: Mapping[str, OnCall], egress: OwnerEgressStore) -> None:
        """The owner's config, what each of a parent's lent capabilities (by id) tells of a
        call (tool, request id) before it is sent, and the egress the owner added to each
        plugin. Raises RuntimeError when called twice."""
        if self._opened.is_set():
            raise RuntimeError("opened once, by the composition root")
        self._env = env
        self._parent_calls = dict(parent_calls)
        self._egress = egress
        self._opened.set()

    def open_sign_ins(self, sign_ins: RemoteSignIns) -> None:
        """The host's sign-ins to remote servers (built after the change feed, so after `open`).
        Raises RuntimeError when called twice."""
        if self._sign_ins is not None:
            raise RuntimeError("opened once, by the composition root")
        self._sign_ins = sign_ins

    def sign_ins(self) -> RemoteSignIns | None:
        """The host's sign-ins to remote servers; None before `open_sign_ins` (no sign-in yet)."""
        return self._sign_ins

    def on_call(self, plugin_id: str) -> OnCall | None:
        return self._parent_calls.get(plugin_id)

    async def owner_egress(self, plugin_id: str) -> OwnerEgress:
        """What the owner added to `plugin_id`'s egress; nothing before `open` (a child started
        while the database starts: the composition root restarts, once it is open, the children
        of each plugin the owner gave egress)."""
        if self._egress is None:
            return OwnerEgress()
        return await self._egress.entries(plugin_id)

    async def env_for(self, plugin: Plugin) -> dict[str, str]:
        return await (await self._given()).env_for(plugin)

    async def child_config(self, plugin: Plugin) -> ChildConfig:
        return await (await self._given()).child_config(plugin)

    async def _given(self) -> EnvSource:
        with anyio.move_on_after(self._wait_s):
            await self._opened.wait()
        if self._env is None:
            raise Unavailable("the host's config is not open yet; try again")
        return self._env
