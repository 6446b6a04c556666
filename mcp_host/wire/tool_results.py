"""Tool results the host writes itself: an op's structured answer, and a refusal in DESIGN.md's
error vocabulary (`error_result`, built beside the exception tree in `mcp_host.errors` and
named here too, with the other results).

Above: the doors (visitor door, owner door, back-channel). Below: `errors`, the SDK's types.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types

from mcp_host.errors import error_result

__all__ = ["error_result", "structured_result"]


def structured_result(value: dict[str, Any]) -> types.CallToolResult:
    """A successful call whose answer is `value`, as structured content and as JSON text."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=value)
