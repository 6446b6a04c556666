"""Reading a refusal back from a tool result: its `{code, message}`, wherever it travels.

Above: the host (the owner door's audit, `mcp-host owner`), the kit (`channel`, which turns a
host op's refusal into a `HostOpError`) and tests. Below: the MCP SDK's types and `meta`.

A refusal the host writes itself (`mcp_host.errors.error_result`) always carries `{code,
message}` in its `_meta` under `ERROR_KEY`, and as text (`"code: message"`) for people and
agents; as structured content only when the refused tool declares no `outputSchema`, because
clients (the TypeScript SDK, the MCP Inspector) check structured content against the tool's
output schema even on an error. A plugin's own refusal (the kit's `error_result`) carries
`{code, message}` as structured content only: a child cannot write the host's key (the host drops
it), so `refusal_of` reads the host's key first and a plugin's structured content after.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
from pydantic import BaseModel, ConfigDict

from .meta import ERROR_KEY

__all__ = ["Refusal", "refusal_of"]


class Refusal(BaseModel):
    """A refused call's code (docs/design.md's error vocabulary, or a plugin's own) and message."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str


def _pair(value: Any) -> Refusal | None:
    if not isinstance(value, dict):
        return None
    code, message = value.get("code"), value.get("message")
    if isinstance(code, str) and code and isinstance(message, str):
        return Refusal(code=code, message=message)
    return None


def refusal_of(result: types.CallToolResult) -> Refusal | None:
    """The refusal `result` carries, or None when it is no `isError` result with one: the host's
    `_meta[ERROR_KEY]` first, else a plugin's structured `{code, message}`."""
    if not result.is_error:
        return None
    return _pair((result.meta or {}).get(ERROR_KEY)) or _pair(result.structured_content)
