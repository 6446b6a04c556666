"""Who a forwarded call is for, as the host wrote it into the call's `_meta`.

Above: `host` (which reads both keys once per call). Below: the SDK's request contexts.

The host puts `_meta["mcp-host/session"]` (the trusted session scope) and
`_meta["mcp-host/grant"]` (the token every host op of this call presents) on each forwarded
`tools/call`; whatever a visitor's client put under `mcp-host/` was dropped before forwarding,
so what a plugin reads here is the host's word.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from mcp.server import ServerRequestContext
from mcp.server.mcpserver import Context
from pydantic import BaseModel, ConfigDict

from .contract import GRANT_KEY, SESSION_KEY

__all__ = [
    "GRANT_KEY",
    "SESSION_KEY",
    "TEST_SESSION",
    "CallSource",
    "SessionInfo",
    "Subject",
    "Visitor",
    "meta_of",
]


class _Frozen(BaseModel):
    # extra="ignore": a newer host may add keys; a plugin built on this kit keeps working.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Subject(_Frozen):
    """The credential a non-public session was opened with."""

    kind: Literal["code", "api_key"]
    id: str


class Visitor(_Frozen):
    """What the visitor said about themselves (unverified)."""

    name: str | None = None
    email: str | None = None


class SessionInfo(_Frozen):
    """The trusted session scope of a call. In owner context `mode` is "owner" and
    `session_id` and `role` are None."""

    owner_id: str
    session_id: str | None
    mode: Literal["public", "code", "api_key", "owner"]
    subject: Subject | None = None
    visitor: Visitor | None = None
    role: str | None = None


TEST_SESSION = SessionInfo(
    owner_id="test-owner", session_id="standalone", mode="public", subject=None, visitor=None, role="public"
)
"""The session a standalone plugin sees when a call carries none."""

CallSource = Context[Any, Any] | ServerRequestContext[Any, Any] | Mapping[str, Any] | None
"""What a call's `_meta` can be read from: an MCPServer tool's `ctx`, a low-level handler's
context, the `_meta` mapping itself, or None (no `_meta`)."""


def meta_of(source: CallSource) -> Mapping[str, Any]:
    """The request `_meta` of `source` (empty when the call carried none)."""
    if isinstance(source, Context):
        meta: Any = source.request_context.meta
    elif isinstance(source, ServerRequestContext):
        meta = source.meta
    else:
        meta = source
    return meta if isinstance(meta, Mapping) else {}
