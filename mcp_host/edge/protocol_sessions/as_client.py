"""Requests to the SDK below as a session's own client would send them: opening a session from
its record (the stored initialize, then `notifications/initialized`) and deleting one.

Above: `adoption` and `resting` (opening), `asgi` and `resting` (deleting). Below: the next ASGI
callable (the JSON-RPC edge, then the SDK's session manager).

Each request carries the credential (`scope["user"]`) and Host of the request it is made for,
so the SDK serves it as that client's; its answer is read to its end and never fails the
request that made it (a failure is logged and answered as no status).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Scope

from mcp_host.store import SessionRecord

from .messages import SESSION_HEADER, VERSION_HEADER, header, response_header

__all__ = ["delete_in_sdk", "open_as_client"]

logger = logging.getLogger(__package__)  # every part of the protocol sessions logs under one name

_INTERNAL_TIMEOUT_S = 10.0


async def open_as_client(app: ASGIApp, stored: SessionRecord, scope: Scope) -> bytes | None:
    """Open a session through `app` as its client would: the stored initialize, then
    `notifications/initialized`, with the request's credential and Host. Its new id, or None."""
    initialize = {"jsonrpc": "2.0", "id": "mcp-host-adopt", "method": "initialize", "params": stored.initialize}
    status, headers = await _internal(app, scope, "POST", [], json.dumps(initialize).encode())
    new_id = response_header({"headers": headers}, SESSION_HEADER)
    if status >= 400 or new_id is None:
        logger.warning("adopting a protocol session failed: initialize answered %s", status)
        return None
    extra = [(SESSION_HEADER, new_id)]
    version = header(scope, VERSION_HEADER)
    if version is not None:
        extra.append((VERSION_HEADER, version))
    notice = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    status, _ = await _internal(app, scope, "POST", extra, json.dumps(notice).encode())
    if status >= 400:
        logger.warning("adopting a protocol session failed: notifications/initialized answered %s", status)
        return None
    return new_id


async def delete_in_sdk(app: ASGIApp, session_id: bytes, user: Any, host: bytes, path: str) -> int | None:
    """DELETE a session through `app` as its client would (with the `user` and Host that opened
    it, at its `path`): the status it was answered (0: none), or None when that failed (logged)."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "DELETE",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("latin-1", "replace"),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", host), (SESSION_HEADER, session_id)],
        "client": None,
        "server": None,
        "user": user,
    }
    status: list[int] = []
    asked = False

    async def receive() -> Message:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            status.append(int(message["status"]))

    try:
        await app(scope, receive, send)
    except Exception:  # closing a session must never fail the request that made room
        logger.exception("closing a protocol session failed")
        return None
    return status[0] if status else 0


async def _internal(
    app: ASGIApp, scope: Scope, method: str, extra: list[tuple[bytes, bytes]], body: bytes
) -> tuple[int, list[tuple[bytes, bytes]]]:
    """One request through `app` with `scope`'s credential, path and Host; its status and
    headers (0 when it gave none). The body is read to its end."""
    headers = [
        (b"host", header(scope, b"host") or b""),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    inner = {**scope, "method": method, "headers": headers, "query_string": b""}
    started: list[Message] = []
    finished = anyio.Event()
    asked = False

    async def receive() -> Message:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            started.append(message)
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            finished.set()

    try:
        with anyio.fail_after(_INTERNAL_TIMEOUT_S):
            await app(inner, receive, send)
    except Exception:
        logger.exception("a request opening a protocol session failed")
        return 0, []
    finally:
        finished.set()
    if not started:
        return 0, []
    return int(started[0]["status"]), [(bytes(k).lower(), bytes(v)) for k, v in started[0].get("headers", ())]
