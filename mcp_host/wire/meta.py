"""`_meta` across the host, both ways: what a visitor's part of a forwarded call may carry
(cleaned and capped, plus ours), and what of a child's messages may reach a visitor.

Above: the visitor endpoint (`visitor.server`, `visitor.door`) and `call_routing` (a child's
requests and log messages). Below: nothing (pure functions).

The host's identity keys live under `mcp-host/` (docs/design.md "Plugin ABI"; the plugin contract,
`mcp_host_kit.contract`, names them). Nothing in MCP
protects `_meta`, so neither side may speak for the host:
- visitor → child (`visitor_meta`): whatever a visitor's client put under that prefix is
  dropped before forwarding, and so are protocol keys (MCP's reserved prefixes, whose second
  label is `modelcontextprotocol` or `mcp`, e.g. `io.modelcontextprotocol/…`) and
  `progressToken`: they belong to the hop, not the call, and the SDK stamps its own on the way
  to the child. The rest is capped in keys, depth and bytes.
- child → visitor (`without_host_keys`): a child's `mcp-host/quota`, `mcp-host/session`,
  `mcp-host/error` (a forged host refusal) or `io.modelcontextprotocol/related-task` would
  reach a client as if the host had said it, so the same keys are dropped from every `_meta` in
  what a child sends (results, their content, list items, log messages, requests), and the host
  writes its own afterwards: it is applied to a child's message where the host receives it
  (the visitor door scrubs a child's tool result before its boundary may answer with the host's
  own refusal), never to a result the host wrote.
Keys are compared after NFKC, removing invisible characters, case folding, and mapping every
dash or hyphen look-alike to `-` (and slash look-alikes to `/`), so `MCP-Host/session`, a
full-width variant or `mcp\u2010host/quota` cannot slip through (docs/security.md E1).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from mcp_host.errors import InvalidArguments
from mcp_host_kit.contract import GRANT_KEY, HOST_PREFIX, RESERVED_LABELS, SESSION_KEY

__all__ = [
    "GRANT_KEY",
    "HOST_PREFIX",
    "SESSION_KEY",
    "MetaCaps",
    "forwarded_meta",
    "without_host_keys",
    "speaks_for_host",
    "visitor_meta",
]

# The SDK hands inbound `_meta` over with `progressToken` renamed `progress_token`.
_HOP_KEYS = frozenset({"progresstoken", "progress_token"})
_INVISIBLE = "\u200b\u200c\u200d\u200e\u200f\u2060\ufeff\u00ad"
# Every dash (Unicode category Pd; a test pins the list against `unicodedata`) and the minus and
# hyphen look-alikes of other categories.
_DASHES = (
    "\u058a\u05be\u1400\u1806\u2010\u2011\u2012\u2013\u2014\u2015\u2e17\u2e1a\u2e3a\u2e3b\u2e40\u2e5d"
    "\u301c\u3030\u30a0\ufe31\ufe32\ufe58\ufe63\uff0d\U00010ead"
    "\u2212\u02d7\u2043\u2796"
)
_SLASHES = "\u2044\u2215\u29f8\uff0f"
_FOLD = str.maketrans({**dict.fromkeys(_INVISIBLE), **dict.fromkeys(_DASHES, "-"), **dict.fromkeys(_SLASHES, "/")})
_M = TypeVar("_M")


@dataclass(frozen=True)
class MetaCaps:
    max_keys: int
    max_depth: int
    max_bytes: int


def _folded(key: str) -> str:
    return unicodedata.normalize("NFKC", key).casefold().translate(_FOLD).strip()


def _speaks_for_host(folded: str) -> bool:
    if folded.startswith(HOST_PREFIX):
        return True
    prefix, slash, _ = folded.partition("/")
    labels = prefix.split(".")
    return bool(slash) and len(labels) > 1 and labels[1].strip() in RESERVED_LABELS


def speaks_for_host(key: str) -> bool:
    """Whether `_meta` key `key` is the host's own (`mcp-host/…`) or a protocol key under one of
    MCP's reserved prefixes, however it is spelt: no visitor or child may set it."""
    return _speaks_for_host(_folded(key))


def _is_dropped(key: str) -> bool:
    folded = _folded(key)
    return _speaks_for_host(folded) or folded in _HOP_KEYS


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


def _child_meta(meta: dict[str, Any]) -> dict[str, Any]:
    if not any(speaks_for_host(k) for k in meta):
        return meta
    return {k: v for k, v in meta.items() if not speaks_for_host(k)}


def without_host_keys(message: _M) -> _M:
    """`message` (a result, notification params or request, or a list of them) as the other side
    may see it: every `_meta` in it — its own and those of its content, list items and nested
    requests — without the keys that speak for the host (`speaks_for_host`). Used on everything
    a child sends a visitor or the owner, and on a visitor's answers to a child's requests.

    Returns `message` itself when nothing was dropped, else a copy: what was given is never
    changed (a child's lists are kept and compared). Plain JSON values (`structuredContent`,
    schemas, arguments) are the child's data, not envelopes, and are not searched.
    """
    return cast(_M, _scrub(message))


def _scrub(value: Any) -> Any:
    if isinstance(value, BaseModel):
        changes: dict[str, Any] = {}
        for name in type(value).model_fields:
            item = getattr(value, name)
            if name == "meta" and isinstance(item, dict):
                kept = _child_meta(item)
            elif isinstance(item, BaseModel | list | tuple | dict):
                kept = _scrub(item)
            else:
                continue
            if kept is not item:
                changes[name] = kept
        return value.model_copy(update=changes) if changes else value
    if isinstance(value, list | tuple):
        items = [_scrub(item) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict) and any(isinstance(v, BaseModel) for v in value.values()):
        scrubbed = {k: _scrub(v) for k, v in value.items()}
        return value if all(scrubbed[k] is v for k, v in value.items()) else scrubbed
    return value
