"""Draining on SIGTERM: a replica leaves its load balancer without failing a call in flight.

Above: `cli._serve`, which runs `DrainingServer` (uvicorn's `Server` with SIGTERM handled here),
and `asgi.HostApp`, which passes every HTTP request through `Drain.run`; `health.readyz` asks
`Drain.draining`. Below: uvicorn, and the host's ASGI routes.

On SIGTERM, in order:
1. `/readyz` answers 503 at once (so the load balancer's health check takes the replica out),
   and every new request is answered 503 with `Retry-After`: a JSON-RPC error body on an MCP
   endpoint (`…/mcp`), `{"error": "unavailable", …}` elsewhere. Still let in, since they finish
   work already under way rather than start new work: a JSON-RPC response or notification
   posted to an MCP endpoint (a 2025-11-25 client answering an elicitation of a call in
   flight, a cancellation), a 2026-07-28 retry carrying a `requestState` (a call parked here
   between input rounds), a DELETE of a protocol session. `/healthz` stays 200: the process
   is alive, and restarting it would cut the drain short.
2. Standing streams end: a 2025-11-25 GET stream and a 2026-07-28 `subscriptions/listen` stream
   are told their client went away (`http.disconnect`, the path the SDK already handles), and
   cancelled after `_STREAM_GRACE_S` if still open; the HTTP response is then completed, so the
   client sees the stream end cleanly and reconnects (through the balancer, elsewhere).
3. The requests in flight and the calls parked between input rounds get `drain_timeout_s`
   to finish. A request still running then is cut (`Drain.cut`) and answered in its place:
   `unavailable` with a retry hint, as a JSON-RPC error on an MCP endpoint — an event on its
   stream when its response is one already (the answer's id is the request's, read from the
   first chunk of its body), else a 503 with `Retry-After` — and the REST error shape elsewhere.
   Only then does uvicorn's own shutdown begin: the listener closes, its
   `timeout_graceful_shutdown` runs, the lifespan stops the children and the process exits 0.

Why not uvicorn's own SIGTERM: it closes the listener at once (a balancer still sending there
gets refused connections before its health check noticed), gives requests 5 s, and re-raises
the signal once stopped, so a clean stop exited -15 rather than 0.

A stream is recognised by its method (GET on an MCP endpoint) or by `subscriptions/listen` in the
first chunk of a POST's body; a listen request whose method arrives in a later chunk counts as
a call in flight, and the drain waits for its timeout.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import anyio
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_host.errors import INTERNAL_ERROR

__all__ = ["Drain", "DrainingServer"]

logger = logging.getLogger("mcp_host")

_STREAM_GRACE_S = 1.0
"""How long a standing stream told its client went away may take to end before it is cancelled."""
_UNGUARDED = frozenset({"/healthz", "/readyz", "/metrics"})
_DRAINING = "this replica is shutting down; retry (another replica will answer)"


@dataclass(eq=False)
class _Stream:
    ended: anyio.Event = field(default_factory=anyio.Event)
    cancel: anyio.CancelScope = field(default_factory=anyio.CancelScope)


@dataclass(eq=False)
class _Request:
    """A request in flight (cut when the drain times out) or a stream: how far its response went."""

    cancel: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    started: bool = False
    events: bool = False
    """Its response is a stream of server-sent events."""
    complete: bool = False

    def tracking(self, send: Send) -> Send:
        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.started = True
                headers = dict(message.get("headers", []))
                self.events = headers.get(b"content-type", b"").startswith(b"text/event-stream")
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                self.complete = True
            await send(message)

        return tracking_send


class Drain:
    """One replica's drain: whether it is draining, the requests in flight, the standing streams.

    `parked` counts the calls parked between input rounds (0 while the host starts or stops).
    """

    def __init__(self, timeout_s: float, *, retry_after_s: int, parked: Callable[[], int]) -> None:
        self.timeout_s = timeout_s
        self._retry_after_s = retry_after_s
        self._parked = parked
        self.draining = False
        self.in_flight = 0
        self._requests: set[_Request] = set()
        self._streams: set[_Stream] = set()

    def begin(self) -> None:
        """Start draining (idempotent): refuse new work, end the standing streams."""
        if self.draining:
            return
        self.draining = True
        logger.info(
            "draining: /readyz and new requests answer 503; %d request(s) in flight and %d call(s) parked"
            " get up to %g s to finish, %d stream(s) end",
            self.in_flight,
            self._parked(),
            self.timeout_s,
            len(self._streams),
        )
        for stream in self._streams:
            stream.ended.set()
            stream.cancel.deadline = min(stream.cancel.deadline, anyio.current_time() + _STREAM_GRACE_S)

    def cut(self) -> None:
        """The drain timed out: end every request still in flight; each is answered
        `unavailable` with a retry hint in its place (`run`)."""
        for request in self._requests:
            request.cancel.cancel()

    def settled(self) -> bool:
        """Nothing is left to wait for: no request in flight, no call parked."""
        return self.in_flight == 0 and self._parked() == 0

    def left(self) -> str:
        """What is still under way, for the log."""
        return f"{self.in_flight} request(s) in flight, {self._parked()} call(s) parked"

    async def run(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Run one HTTP request of `app`: counted, refused, or ended as the drain says."""
        path: str = scope["path"]
        if path in _UNGUARDED:
            await app(scope, receive, send)
            return
        method: str = scope["method"]
        mcp = path.endswith("/mcp")
        stream = mcp and method == "GET"
        request_id = None
        if mcp and method == "POST":
            first = await receive()
            body: bytes = first.get("body", b"")
            stream = b"subscriptions/listen" in body
            request_id = _request_id(body)
            if self.draining and _finishes_work(body):
                stream = False  # a response, notification or retry lets in-flight work finish
            elif self.draining:
                await self._refuse(scope, send, mcp, request_id)
                return
            receive = _replaying(first, receive)
        elif self.draining and not (mcp and method == "DELETE"):
            await self._refuse(scope, send, mcp, None)
            return
        if stream:
            await self._stream(app, scope, receive, send)
            return
        request = _Request()
        self._requests.add(request)
        self.in_flight += 1
        try:
            with request.cancel:
                await app(scope, receive, request.tracking(send))
        finally:
            self.in_flight -= 1
            self._requests.discard(request)
        if request.cancel.cancelled_caught:
            await self._answer_cut(scope, send, request, mcp, request_id)

    async def _answer_cut(self, scope: Scope, send: Send, request: _Request, mcp: bool, request_id: Any) -> None:
        """Answer a request the drain cut, in its place, as far as its response allows."""
        logger.info("%s %s cut at the drain timeout; answered unavailable", scope.get("method"), scope.get("path"))
        if request.complete:
            return
        if not request.started:
            await self._refuse(scope, send, mcp, request_id)
            return
        if mcp and request.events:
            event = json.dumps(self._rpc_error(request_id)).encode()
            await send(
                {
                    "type": "http.response.body",
                    "body": b"event: message\r\ndata: " + event + b"\r\n\r\n",
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _rpc_error(self, request_id: Any) -> dict[str, Any]:
        """The JSON-RPC answer of a request this replica will not serve: `unavailable`, retry."""
        data = {"code": "unavailable", "retry_after_s": self._retry_after_s}
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": INTERNAL_ERROR, "message": _DRAINING, "data": data},
        }

    async def _stream(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """A standing stream: not waited for; told its client left, then cancelled, on drain."""
        entry = _Stream()
        response = _Request()  # how far its response went

        async def ending_receive() -> Message:
            message: Message = {"type": "http.disconnect"}
            if entry.ended.is_set():
                return message
            async with anyio.create_task_group() as race:

                async def real() -> None:
                    nonlocal message
                    message = await receive()
                    race.cancel_scope.cancel()

                async def drained() -> None:
                    await entry.ended.wait()
                    race.cancel_scope.cancel()

                race.start_soon(real)
                race.start_soon(drained)
            return message

        self._streams.add(entry)
        try:
            with entry.cancel:
                await app(scope, ending_receive, response.tracking(send))
        finally:
            self._streams.discard(entry)
        if entry.ended.is_set() and not response.complete:
            # Ended by the drain: finish the HTTP response, so the client sees a clean end.
            if response.started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await self._refuse(scope, send, True, None)

    async def _refuse(self, scope: Scope, send: Send, mcp: bool, request_id: Any) -> None:
        """503 with `Retry-After`: a JSON-RPC error on an MCP endpoint, else the REST error shape."""
        logger.debug("%s %s answered 503: draining", scope.get("method"), scope.get("path"))
        payload: dict[str, Any]
        if mcp:
            payload = self._rpc_error(request_id)
        else:
            payload = {"error": "unavailable", "message": _DRAINING}
        body = json.dumps(payload).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(self._retry_after_s).encode()),
            (b"connection", b"close"),  # the client's next request opens a connection elsewhere
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replaying(first: Message, receive: Receive) -> Receive:
    """`receive` with `first`, already read, given back first."""
    pending: list[Message] = [first]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay


def _parsed(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # not JSON, only the first chunk of it, or too deep
        return None


def _finishes_work(body: bytes) -> bool:
    """A JSON-RPC message that finishes work under way: a response, a notification, or a
    2026-07-28 retry of a parked call (its `requestState`)."""
    message = _parsed(body)
    if not isinstance(message, dict):
        return False
    method = message.get("method")
    if method is None or (isinstance(method, str) and method.startswith("notifications/")):
        return True
    params = message.get("params")
    return isinstance(params, dict) and params.get("requestState") is not None


def _request_id(body: bytes) -> Any:
    message = _parsed(body)
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with SIGTERM starting a drain (above) instead of a stop.

    A second SIGTERM, or SIGINT, stops at once (uvicorn's own handling; a second SIGINT forces).
    """

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain
        self._drain_asked = False
        self._drain_deadline: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and not self._drain_asked and not self.should_exit:
            # Only a flag: a signal handler may run in the middle of the event loop's work.
            # Not recorded as uvicorn's captured signal, so it is not raised again at exit (0).
            self._drain_asked = True
            return
        if sig == signal.SIGTERM:
            self.should_exit = True  # a second SIGTERM: stop now
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self._drain_asked and not self.should_exit:
            now = time.monotonic()
            if self._drain_deadline is None:
                self._drain_deadline = now + self.drain.timeout_s
                self.drain.begin()
            if self.drain.settled():
                logger.info("drained: nothing in flight; stopping")
                self.should_exit = True
            elif now >= self._drain_deadline:
                logger.warning("drain timeout (%g s): stopping with %s", self.drain.timeout_s, self.drain.left())
                self.drain.cut()  # answered before uvicorn's shutdown closes their connections
                self.should_exit = True
        return await super().on_tick(counter)
