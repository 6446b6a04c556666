"""Tool results the host writes itself: an op's structured answer, and a refusal in docs/design.md's
error vocabulary (`error_result`, built beside the exception tree in `mcp_host.errors` and
named here too, with the other results), and reading a refusal back (`refusal_of`, the plugin
contract's: the host's `_meta["mcp-host/error"]`, else a plugin's structured `{code, message}`).

A refusal always carries `{code, message}` in `_meta["mcp-host/error"]` and as text; as
structured content only for a tool without an `outputSchema` (clients check structured content
against that schema even on an error: the TypeScript SDK client and the MCP Inspector fail the
call with an invalid-params error otherwise).

Above: the doors (visitor door, owner door, back-channel). Below: `errors`, the SDK's types.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types

from mcp_host.errors import error_result
from mcp_host_kit.contract import ERROR_KEY, Refusal, refusal_of

__all__ = ["ERROR_KEY", "Refusal", "error_result", "refusal_of", "structured_result"]


def structured_result(value: dict[str, Any]) -> types.CallToolResult:
    """A successful call whose answer is `value`, as structured content and as JSON text."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=value)
