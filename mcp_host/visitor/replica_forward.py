"""A 2026-07-28 retry whose call is parked on another replica, sent on to that replica.

Above: `app.wiring` puts `ReplicaForward` between the visitor door's JSON-RPC edge
(`edge.RpcEdge`, which has read and checked the body) and the SDK. Below: httpx2 (the SDK's
HTTP client), and the replicas table (`locate`: a replica id to its URL, None when gone).

A parked call's `requestState` is `<replica id>.<token>` (`input_rounds`). Only a POST whose
body holds `b"requestState"` is parsed; when its state names another replica the same request
(path, body, the visitor's credential and MCP headers) is sent there and the answer, JSON or
an SSE stream, is passed back as it comes. The other replica authenticates the visitor again,
as for any request; the header `Mcp-Host-Forwarded: <unix time>.<hex HMAC-SHA256>` over
method, path, time and the body's SHA-256, keyed by a key derived from the shared host key,
says a replica sent it. A forwarded request is never forwarded again; a forged, stale (±60 s)
or malformed header is answered 403 `denied`.

A replica that is gone (no live row, or its connection refused within `connect_timeout_s`)
leaves the request to this replica, whose input rounds refuse the unknown state as they
refuse any: `invalid_arguments` "requestState is unknown, expired, or not for this call".
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable

import httpx2
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_host.edge import read_body, rest_response
from mcp_host.errors import Denied, Unavailable

__all__ = ["FORWARD_HEADER", "ReplicaForward", "client", "forward_key", "sign"]

logger = logging.getLogger(__name__)

FORWARD_HEADER = "mcp-host-forwarded"
_HEADER_KEY = FORWARD_HEADER.encode()
_SKEW_S = 60
_SENT_HEADERS = frozenset({"authorization", "content-type", "accept", "traceparent", "tracestate"})
_HOP_HEADERS = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"date", b"server"})

Locate = Callable[[str], Awaitable[str | None]]


def forward_key(host_key: bytes) -> bytes:
    """The key replicas sign forwards with: derived, so it is never the sealing key itself."""
    return hmac.new(host_key, b"mcp-host replica forward v1", hashlib.sha256).digest()


def _mac(key: bytes, method: str, path: str, stamp: int, body: bytes) -> str:
    text = f"{method}\n{path}\n{stamp}\n{hashlib.sha256(body).hexdigest()}".encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def sign(key: bytes, method: str, path: str, body: bytes, *, now: float | None = None) -> str:
    """The `Mcp-Host-Forwarded` value of one request."""
    stamp = int(time.time() if now is None else now)
    return f"{stamp}.{_mac(key, method, path, stamp, body)}"


def _verify(key: bytes, value: bytes, method: str, path: str, body: bytes) -> bool:
    stamp_text, _, mac = value.decode("latin-1").partition(".")
    if not stamp_text.isdigit() or len(stamp_text) > 12 or len(mac) != 64:
        return False
    stamp = int(stamp_text)
    if abs(time.time() - stamp) > _SKEW_S:
        return False
    return hmac.compare_digest(mac, _mac(key, method, path, stamp, body))


def _path(scope: Scope) -> str:
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else str(scope.get("path", ""))
    query = scope.get("query_string", b"")
    return f"{path}?{query.decode('latin-1')}" if query else path


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def _target(body: bytes) -> str | None:
    """The replica a message's `params.requestState` names, if it names one."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    params = message.get("params") if isinstance(message, dict) else None
    state = params.get("requestState") if isinstance(params, dict) else None
    if not isinstance(state, str) or len(state) >= 200:
        return None
    replica, dot, _ = state.partition(".")
    return replica if dot and replica else None


class _NotReached(Unavailable):
    """The other replica took no part of the request (no connection)."""

    def __init__(self, message: str = "the replica that parked the call cannot be reached") -> None:
        super().__init__(message)


class ReplicaForward:
    """ASGI wrapper: a retry parked elsewhere goes there; a forward from a replica is checked."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        replica_id: str,
        key: bytes,
        locate: Locate,
        http: httpx2.AsyncClient,
        max_body_bytes: int,
    ) -> None:
        self._app = app
        self._id = replica_id
        self._key = key
        self._locate = locate
        self._http = http
        self._max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        # The JSON-RPC edge in front has read the body already: this is one message.
        body, trailing = await read_body(receive, self._max_body_bytes)
        if body is None:  # cannot happen behind the edge; let the SDK answer it
            body = b""
        replay = _replayer(body, trailing, receive)
        signed = _header(scope, _HEADER_KEY)
        if signed is not None:
            if not _verify(self._key, signed, "POST", _path(scope), body):
                logger.warning("refused a request claiming to come from a replica (forged or stale header)")
                await rest_response(Denied("not a request from a replica of this host"))(scope, replay, send)
                return
            await self._app(scope, replay, send)  # a forwarded request is never forwarded again
            return
        target = _target(body) if b"requestState" in body else None
        if target is not None and target != self._id:
            url = await self._locate(target)
            if url is not None:
                try:
                    await self._forward(url, scope, body, send)
                    return
                except _NotReached:
                    logger.info("replica %s did not answer; its parked calls are refused here", target)
            else:
                logger.info("a retry names replica %s, which is gone; refused here", target)
        await self._app(scope, replay, send)

    async def _forward(self, url: str, scope: Scope, body: bytes, send: Send) -> None:
        path = _path(scope)
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope.get("headers", ())
            if k.decode("latin-1") in _SENT_HEADERS or k.startswith(b"mcp-")
        ]
        headers.append((FORWARD_HEADER, sign(self._key, "POST", path, body)))
        request = self._http.build_request("POST", url.rstrip("/") + path, content=body, headers=headers)
        try:
            response = await self._http.send(request, stream=True)
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            raise _NotReached from exc
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_HEADERS],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


def _replayer(body: bytes, trailing: Message | None, receive: Receive) -> Receive:
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    if trailing is not None:
        pending.append(trailing)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


def client(connect_timeout_s: float = 2.0) -> httpx2.AsyncClient:
    """The HTTP client forwards go out on: a short connect timeout, none on reading (a call
    may run as long as its own timeout), no proxies from the environment."""
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(None, connect=connect_timeout_s, write=30.0, pool=connect_timeout_s),
        trust_env=False,
        follow_redirects=False,
    )
