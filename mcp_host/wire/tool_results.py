"""Tool results the host writes itself: a refusal in DESIGN.md's error vocabulary, and an op's
structured answer.

Above: the doors (visitor door, back-channel; later the owner door). Below: the SDK's types.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types

__all__ = ["error_result", "structured_result"]


def error_result(code: str, message: str) -> types.CallToolResult:
    """A refused or failed call: `isError` with structured `{code, message}`."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structured_content={"code": code, "message": message},
        is_error=True,
    )


def structured_result(value: dict[str, Any]) -> types.CallToolResult:
    """A successful call whose answer is `value`, as structured content and as JSON text."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=value)
