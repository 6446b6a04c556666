"""The owner door: dispatching owner tool calls from the table, its error boundary, its audit.

Above: `http` (the owner's MCP endpoint). Below: `tools` (the table) and `services`.

This is the one boundary of the owner face that turns exceptions into wire errors: through
`errors.tool_error`, a `HostError` becomes a tool result with `isError: true` and `{code,
message}` (in `_meta["mcp-host/error"]`, as text, and as structured content: no owner tool
declares an `outputSchema`, the rule the visitor door follows too); arguments that
do not fit a tool's model are `invalid_arguments` naming the field; anything else (an
`InternalError` included) is logged
with its traceback and answered opaquely — `str(exc)` never reaches a caller. Every call,
whatever its outcome, writes one audit row (`mcp_host.policy.audit`), with secret values left out.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp.types as types
from pydantic import ValidationError

from mcp_host.errors import (
    InvalidArguments,
    UnknownTool,
    as_unavailable,
    at_boundary,
    tool_error,
)
from mcp_host.wire import refusal_of, structured_result

from .services import OwnerServices
from .tools import TOOLS, OwnerTool

__all__ = ["OwnerDoor"]

logger = logging.getLogger("owner_facade")

_MAX_PROBLEMS = 5


def _invalid(exc: ValidationError) -> InvalidArguments:
    problems = [f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()[:_MAX_PROBLEMS]]
    return InvalidArguments("; ".join(problems))


class OwnerDoor:
    def __init__(self, services: OwnerServices) -> None:
        self._services = services

    def list_tools(self) -> list[types.Tool]:
        return [tool.listed() for tool in TOOLS.values()]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        tool = TOOLS.get(name)
        return tool.input_schema() if tool is not None else None

    async def call_tool(self, owner_id: str, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Answer one owner tool call and audit it; never raises for a refused or failed call."""
        tool = TOOLS.get(name)
        arguments = arguments or {}
        try:
            if tool is None:
                raise UnknownTool(f"no owner tool named {name[:64]!r}")
            result = await self._run(tool, owner_id, arguments)
        except Exception as exc:
            known = at_boundary(exc, logger, "owner %s: %s", owner_id, name[:64])
            result = tool_error(known or exc)
        await self._audit(owner_id, name, tool, arguments, result)
        return result

    async def _run(self, tool: OwnerTool[Any], owner_id: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            parsed = tool.model.model_validate(arguments)
        except ValidationError as exc:
            raise _invalid(exc) from None
        answer = await tool.handler(self._services, owner_id, parsed)
        return answer if isinstance(answer, types.CallToolResult) else structured_result(answer)

    async def _audit(
        self,
        owner_id: str,
        name: str,
        tool: OwnerTool[Any] | None,
        arguments: dict[str, Any],
        result: types.CallToolResult,
    ) -> None:
        outcome = "ok"
        if result.is_error:
            refusal = refusal_of(result)  # the host's refusal, or a plugin's through capability_invoke
            outcome = refusal.code if refusal is not None else "error"
        try:
            summary = tool.summary(arguments) if tool is not None else {}
            await self._services.audit.record(owner_id, name[:64] or "?", summary, outcome[:64])
        except Exception as exc:
            logger.error(
                "owner %s: the audit row of %s could not be written",
                owner_id,
                name[:64],
                exc_info=as_unavailable(exc) is None,  # no traceback per call during an outage
            )
