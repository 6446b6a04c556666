"""Reading and rewriting what passes through the protocol-session wrapper: the headers of an
ASGI scope and of a response's start, a client's id renamed both ways, and the JSON-RPC error
answers the wrapper gives itself.

Above: every module of `protocol_sessions`. Below: Starlette's ASGI types, the SDK's protocol
versions.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Message, Scope, Send

__all__ = [
    "HANDSHAKE_VERSIONS",
    "SESSION_HEADER",
    "VERSION_HEADER",
    "header",
    "json_error",
    "opened_by",
    "renaming",
    "response_header",
    "with_session",
]

SESSION_HEADER = b"mcp-session-id"
VERSION_HEADER = b"mcp-protocol-version"
HANDSHAKE_VERSIONS = frozenset(v.encode("latin-1") for v in HANDSHAKE_PROTOCOL_VERSIONS)
"""The protocol versions whose clients open a session with `initialize` (2025-11-25 and older)."""


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def response_header(message: Message, name: bytes) -> bytes | None:
    for key, value in message.get("headers", ()):
        if bytes(key).lower() == name:
            return bytes(value)
    return None


def opened_by(scope: Scope) -> tuple[Any, bytes, str]:
    """What closing a session opened by this request takes: its `scope["user"]`, Host and path."""
    return scope.get("user"), header(scope, b"host") or b"", str(scope.get("path", "/"))


def with_session(scope: Scope, session_id: bytes) -> Scope:
    """`scope` with its `Mcp-Session-Id` replaced."""
    headers = [(k, session_id if k == SESSION_HEADER else v) for k, v in scope.get("headers", ())]
    return {**scope, "headers": headers}


def renaming(send: Send, ours: bytes, theirs: bytes) -> Send:
    """`send` with the response's `Mcp-Session-Id` `ours` shown as `theirs`."""

    async def renamed(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (k, theirs if bytes(k).lower() == SESSION_HEADER and bytes(v) == ours else v)
                for k, v in message.get("headers", ())
            ]
            message = {**message, "headers": headers}
        await send(message)

    return renamed


async def json_error(send: Send, status: int, error: dict[str, Any], retry_after_s: int) -> None:
    """Answer a JSON-RPC `error` (no id) with HTTP `status` and a Retry-After."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(retry_after_s).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
