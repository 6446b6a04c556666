"""Tool results the host writes itself: an op's structured answer, and a refusal in docs/design.md's
error vocabulary (`error_result`, built beside the exception tree in `mcp_host.errors` and
named here too, with the other results), reading a refusal back (`refusal_of`, the plugin
contract's: the host's `_meta["mcp-host/error"]`, else a plugin's structured `{code, message}`),
and a child's result read as raw JSON (`plain_tool_result`, the 2026-07-28 direct `tools/call`).

A refusal always carries `{code, message}` in `_meta["mcp-host/error"]` and as text; as
structured content only for a tool without an `outputSchema` (clients check structured content
against that schema even on an error: the TypeScript SDK client and the MCP Inspector fail the
call with an invalid-params error otherwise).

Above: the doors (visitor door, owner door, back-channel). Below: `errors`, the SDK's types.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import mcp.types as types

from mcp_host.errors import error_result
from mcp_host_kit.contract import ERROR_KEY, Refusal, refusal_of

from .meta import speaks_for_host

__all__ = [
    "ERROR_KEY",
    "Refusal",
    "error_result",
    "error_text",
    "is_error",
    "plain_tool_result",
    "refusal_of",
    "structured_result",
]


def structured_result(value: dict[str, Any]) -> types.CallToolResult:
    """A successful call whose answer is `value`, as structured content and as JSON text."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=value)


_RESULT_KEYS = frozenset({"content", "isError", "structuredContent", "_meta"})
_TEXT_KEYS = frozenset({"type", "text", "_meta"})


def plain_tool_result(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """A child's raw `tools/call` result as the visitor is answered it, when it has the plain
    shape: exactly the dict the SDK's models would give (its client's `CallToolResult`, then the
    visitor door and `serve_one`'s 2026-07-28 dump), in the 2026-07-28 wire's key order and with
    `resultType`, but without the `serverInfo` stamp.

    Plain: no key but `content` (text blocks only: `type`, `text`, `_meta`), `isError` (a bool),
    `structuredContent` (an object) and `_meta`; every `_meta` an object with no key that speaks
    for the host (`meta.speaks_for_host`: the SDK types some of them, and the door drops them)
    and no null value (the dump drops those); no float that is not finite (the dump makes it
    null). None: not plain — the SDK's models read it, and refuse what they refuse.
    """
    if not raw.keys() <= _RESULT_KEYS:
        return None
    content = raw.get("content")
    if type(content) is not list:
        return None
    blocks = [_plain_block(block) for block in content]
    if None in blocks:
        return None
    is_error = raw.get("isError", False)
    if type(is_error) is not bool:
        return None
    shaped: dict[str, Any] = {}
    if "_meta" in raw:
        meta = _plain_meta(raw["_meta"])
        if meta is None:
            return None
        shaped["_meta"] = meta
    shaped["content"] = blocks
    shaped["isError"] = is_error
    shaped["resultType"] = "complete"
    if "structuredContent" in raw:
        structured = raw["structuredContent"]
        if type(structured) is not dict or not _finite(structured):
            return None
        shaped["structuredContent"] = structured
    return shaped


def _plain_block(block: object) -> dict[str, Any] | None:
    if type(block) is not dict or block.get("type") != "text" or not block.keys() <= _TEXT_KEYS:
        return None
    text = block.get("text")
    if type(text) is not str:
        return None
    if "_meta" not in block:
        return {"text": text, "type": "text"}
    meta = _plain_meta(block["_meta"])
    return None if meta is None else {"_meta": meta, "text": text, "type": "text"}


def _plain_meta(meta: object) -> dict[str, Any] | None:
    if type(meta) is not dict:
        return None
    if None in meta.values() or any(speaks_for_host(key) for key in meta) or not _finite(meta):
        return None
    return meta


def _finite(value: dict[str, Any]) -> bool:
    """Whether no float in `value` is infinite or NaN (a child's JSON may hold them; the SDK's
    dump writes them as null). Without recursion: the value is the child's."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
        elif type(item) is float and not math.isfinite(item):
            return False
    return True


def is_error(result: types.CallToolResult | Mapping[str, Any]) -> bool:
    """Whether a result, the SDK's model or a plain answer (`plain_tool_result`), is an error."""
    return result.is_error if isinstance(result, types.CallToolResult) else bool(result["isError"])


def error_text(result: types.CallToolResult | Mapping[str, Any]) -> str:
    """The text of an error result, the SDK's model or a plain answer (`plain_tool_result`): its
    text blocks, else its structured content, for the log."""
    if isinstance(result, types.CallToolResult):
        texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
        structured = result.structured_content
    else:
        texts = [block["text"] for block in result["content"]]
        structured = result.get("structuredContent")
    if texts:
        return " ".join(texts)
    return repr(structured) if structured is not None else "(no text)"
