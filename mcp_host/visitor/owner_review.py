"""The owner reviews before the visitors: every capability's tools listed in owner context.

Above: the composition root, which starts `all` once the pins are loaded (in the background:
readiness does not wait) and calls `changed` for each "tools list changed" a child sends.
Below: `bindings.review` (the same vetting a visitor's list gets, so the pins record the very
list a visitor would be shown, and dropped tools get their cause).

Without this, a tool reached the pins only when a visitor listed it: a fresh host's
`tools_pending` was empty, and a `role_granted` plugin's tools waited for a role, a code and a
session. A child not yet running is started in owner context (`child_of(plugin)`, no session).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
from anyio.abc import TaskGroup

from mcp_host.plugins import Plugin, Registry

from .bindings import Bindings

__all__ = ["OwnerReview"]

logger = logging.getLogger(__name__)

# Children started at once for the first review: a few at a time, so a host with many plugins
# does not fork them all in one burst (each still bounded by the pool's `max_running`).
_AT_ONCE = 4


class OwnerReview:
    """Lists capabilities' tools for the owner's review: all at start, one when it changes."""

    def __init__(self, bindings: Bindings, plugins: Registry, background: TaskGroup) -> None:
        self._bindings = bindings
        self._plugins = plugins
        self._background = background
        self._running: set[str] = set()
        self._again: set[str] = set()
        self._first = anyio.Event()

    async def settled(self, *, within_s: float) -> bool:
        """Wait (at most `within_s`) for the review at start to have listed every capability;
        whether it has. The owner's `tools_pending` waits for it, so a fresh host answers with
        every plugin's tools rather than an empty list while the first children start."""
        with anyio.move_on_after(within_s):
            await self._first.wait()
        return self._first.is_set()

    async def all(self, capabilities: Sequence[Plugin]) -> None:
        """List and vet every one of `capabilities` (a child's last list when it has one)."""
        limiter = anyio.CapacityLimiter(_AT_ONCE)

        async def one(plugin: Plugin) -> None:
            async with limiter:
                await self._review(plugin, fresh=False)

        try:
            async with anyio.create_task_group() as tg:
                for plugin in capabilities:
                    tg.start_soon(one, plugin)
        finally:
            self._first.set()
        logger.debug("tools of %d capabilities listed for the owner's review", len(capabilities))

    def changed(self, plugin_id: str) -> None:
        """`plugin_id`'s child said its tools changed: list them again in owner context, in the
        background. Changes told while one listing runs make one more listing, not one each."""
        plugin = self._plugins.get(plugin_id, "capability")
        if plugin is None:
            return  # a connector: its verbs are no visitor's tools
        if plugin_id in self._running:
            self._again.add(plugin_id)
            return
        self._running.add(plugin_id)
        self._background.start_soon(self._relist, plugin)

    async def _relist(self, plugin: Plugin) -> None:
        pid = plugin.manifest.id
        try:
            while True:
                self._again.discard(pid)
                await self._review(plugin, fresh=True)
                if pid not in self._again:
                    return
        finally:
            self._running.discard(pid)

    async def _review(self, plugin: Plugin, *, fresh: bool) -> None:
        try:
            await self._bindings.review(plugin, fresh=fresh)
        except Exception:  # a background task: one plugin's fault must not stop the host
            logger.exception("%s: its tools could not be listed for the owner's review", plugin.manifest.id)
