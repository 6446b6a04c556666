"""The requirement gate: what a session sees depends on what its owner has connected.

Above: the visitor door (lists and calls). Below: `connections` (connected categories) and
the connector gateway (`can_perform`).

`requires: [category]` hides a whole capability until the owner has connected every category
it names. `visitor_tool_requires: {tool: ["category:action"]}` hides just that tool while the
owner's connection for the category cannot perform the action — a read-only account hides
the writing tools only. Fail closed: a question that cannot be answered hides, and says why
in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from mcp_host.errors import log_unless_outage
from mcp_host.plugins import Plugin

from .connections import Connections
from .gateway import ConnectorGateway

__all__ = ["RequirementGate"]

logger = logging.getLogger(__name__)


class RequirementGate:
    def __init__(self, connections: Connections, gateway: ConnectorGateway) -> None:
        self._connections = connections
        self._gateway = gateway

    async def connected(self, owner_id: str, capabilities: Sequence[Plugin]) -> list[Plugin]:
        """The capabilities whose `requires` are all connected for the owner."""
        if not any(p.manifest.requires for p in capabilities):
            return list(capabilities)
        try:
            categories = await self._connections.categories(owner_id)
        except Exception as exc:
            log_unless_outage(
                exc, logger, "owner %s: connections could not be read; capabilities that need one are hidden", owner_id
            )
            categories = frozenset()
        return [p for p in capabilities if set(p.manifest.requires) <= categories]

    async def hidden_tools(self, owner_id: str, capabilities: Sequence[Plugin]) -> set[str]:
        """Names of tools whose `visitor_tool_requires` the owner's connections cannot perform."""
        wanted = {
            (plugin.manifest.id, tool, requirement)
            for plugin in capabilities
            for tool, requirements in plugin.manifest.visitor_tool_requires.items()
            for requirement in requirements
        }
        if not wanted:
            return set()
        answers: dict[str, bool] = {}

        async def ask(requirement: str) -> None:
            category, _, action = requirement.partition(":")
            answers[requirement] = await self._gateway.can_perform(owner_id, category, action)

        async with anyio.create_task_group() as tg:
            for requirement in {r for _, _, r in wanted}:
                tg.start_soon(ask, requirement)
        hidden = {tool for _, tool, requirement in wanted if not answers[requirement]}
        return hidden
