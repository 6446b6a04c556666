"""The `_meta` a forwarded `tools/call` carries: the visitor's part, cleaned and capped, plus ours.

Above: the visitor endpoint. Below: nothing (pure functions).

The host's identity keys live under `mcp-host/` (DESIGN.md "Plugin ABI"). Nothing in MCP
protects `_meta`, so whatever a visitor's client put under that prefix is dropped before
forwarding — compared after Unicode normalisation and case folding, so `MCP-Host/session` or
a full-width variant cannot slip through (SECURITY.md E1). Protocol envelope keys
(`io.modelcontextprotocol/…`) and `progressToken` belong to the hop, not the call: the SDK
stamps its own on the way to the child. The rest is capped in keys, depth and bytes.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArguments

__all__ = ["GRANT_KEY", "HOST_PREFIX", "SESSION_KEY", "MetaCaps", "forwarded_meta", "visitor_meta"]

HOST_PREFIX = "mcp-host/"
SESSION_KEY = "mcp-host/session"
GRANT_KEY = "mcp-host/grant"
_HOP_PREFIXES = ("io.modelcontextprotocol/",)
# The SDK hands inbound `_meta` over with `progressToken` renamed `progress_token`.
_HOP_KEYS = frozenset({"progresstoken", "progress_token"})
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u200e\u200f\u2060\ufeff\u00ad"))


@dataclass(frozen=True)
class MetaCaps:
    max_keys: int
    max_depth: int
    max_bytes: int


def _folded(key: str) -> str:
    return unicodedata.normalize("NFKC", key).translate(_INVISIBLE).casefold().strip()


def _is_dropped(key: str) -> bool:
    folded = _folded(key)
    return folded.startswith(HOST_PREFIX) or folded.startswith(_HOP_PREFIXES) or folded in _HOP_KEYS


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, without recursion (inputs may be hostile)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item)
    return deepest


def visitor_meta(raw: Mapping[str, Any] | None, caps: MetaCaps) -> dict[str, Any]:
    """The visitor's own `_meta` keys that may travel to the child.

    Raises InvalidArguments when what remains is over a cap.
    """
    kept = {k: v for k, v in (raw or {}).items() if not _is_dropped(k)}
    if len(kept) > caps.max_keys:
        raise InvalidArguments(f"_meta has {len(kept)} keys; at most {caps.max_keys} are accepted")
    if kept and _depth(kept) > caps.max_depth:
        raise InvalidArguments(f"_meta is nested deeper than {caps.max_depth} levels")
    if kept:
        try:
            size = len(json.dumps(kept, ensure_ascii=False, separators=(",", ":")).encode())
        except (UnicodeEncodeError, ValueError) as exc:
            raise InvalidArguments("_meta holds text that is not valid Unicode") from exc
        if size > caps.max_bytes:
            raise InvalidArguments(f"_meta is {size} bytes; at most {caps.max_bytes} are accepted")
    return kept


def forwarded_meta(visitor: Mapping[str, Any], scope: Mapping[str, Any], grant: str | None = None) -> dict[str, Any]:
    """The `_meta` of the forwarded call: the visitor's cleaned keys, the trusted scope, and
    the call's grant token when its plugin named host ops."""
    meta = {**visitor, SESSION_KEY: dict(scope)}
    if grant is not None:
        meta[GRANT_KEY] = grant
    return meta
