"""The HTTP server under the host: one uvicorn config for `mcp-host serve` and the tests.

Above: `cli._serve` and `tests/hosting.running_host`, which both run `server_config(app,
settings)`, so the tests run what users run. Below: uvicorn (its httptools protocol) and the
host's ASGI app (`app.create_app`).

uvicorn bounds an idle keep-alive connection and, with `limit_concurrency`, answers 503 to
every request that arrives while that many connections (or requests) are open, but it never
closes a connection that is slow to send its request: 300 connections dribbling their headers
stayed open for good (issue 11, defect 6). Here:

- **request head** — `GuardedHttpToolsProtocol` closes a connection whose request line and
  headers are not complete within `header_timeout_s` of the connection's start, or of the
  first byte after its previous response (408), and one whose head passes `max_head_bytes`
  (431; httptools sets no limit of its own);
- **request body** — `BodyTimeout` answers 408 and closes the connection when one read of a
  request body waits more than `body_timeout_s`; the application's part of the request is
  cancelled, so it never runs on a body it did not get;
- **connections** — `limit_concurrency` (503 past it, `connection: close`) and
  `timeout_keep_alive`, from settings;
- **connections per client address** — `ConnectionsPerClient`: past
  `max_connections_per_client` open connections from one address, a new one is answered 503
  and closed as soon as it is accepted, before anything it sent is parsed (1,100 connections
  from one address held the whole host-wide cap). An address uvicorn trusts as a proxy
  (`forwarded_allow_ips`, for `X-Forwarded-For`) is not capped: it speaks for many clients.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import anyio
import anyio.lowlevel
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import _TrustedHosts  # uvicorn's own test, not a copy of it
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from mcp_host.settings import Settings
from mcp_host.wire import LimitedLog

__all__ = ["BodyTimeout", "ConnectionsPerClient", "GuardedHttpToolsProtocol", "HttpLimits", "server_config"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpLimits:
    """Settings `http_header_timeout_s`, `http_max_head_bytes`, `http_body_timeout_s`,
    `http_max_connections_per_client`."""

    header_timeout_s: float = 10.0
    max_head_bytes: int = 64 * 1024
    body_timeout_s: float = 30.0
    max_connections_per_client: int = 64


class ConnectionsPerClient:
    """The connections open from each client address, and the cap on them.

    One per server (its config); the protocol opens a connection's slot when it is accepted
    and closes it when it is lost. Addresses `exempt` says yes to are counted, never refused.
    """

    def __init__(self, cap: int, exempt: Callable[[str], bool]) -> None:
        self.cap = cap
        self._exempt = exempt
        self._open: Counter[str] = Counter()

    def open(self, address: str) -> bool:
        """Take a slot for a new connection from `address`; False (nothing taken) past the cap."""
        if self._open[address] >= self.cap and not self._exempt(address):
            return False
        self._open[address] += 1
        return True

    def close(self, address: str) -> None:
        """Give back the slot of a connection `open` let in."""
        self._open[address] -= 1
        if self._open[address] <= 0:
            del self._open[address]  # no entry outlives an address's last connection

    def count(self, address: str | None = None) -> int:
        """Connections open from `address`, else from every address."""
        return self._open[address] if address is not None else self._open.total()

    def addresses(self) -> int:
        """Addresses with a connection open: the entries the table holds."""
        return len(self._open)


class HostServerConfig(uvicorn.Config):
    """uvicorn's `Config` carrying the limits its protocol enforces, and the per-client counts."""

    def __init__(self, app: ASGIApp, *, limits: HttpLimits, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.limits = limits
        # Exempt exactly the addresses whose `X-Forwarded-For` uvicorn believes (its
        # `forwarded_allow_ips`: FORWARDED_ALLOW_IPS, by default 127.0.0.1 and ::1): behind such
        # a proxy every client shares its address, and the host-wide cap still applies.
        trusted = _TrustedHosts(self.forwarded_allow_ips if self.proxy_headers else [])
        self.connections_per_client = ConnectionsPerClient(limits.max_connections_per_client, trusted.__contains__)
        self.refusals_log = LimitedLog(logger, per_s=0.1, burst=3, what="refused connections")


def server_config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
    """The uvicorn config that serves `app` (the host's ASGI app) as `settings` say."""
    limits = HttpLimits(
        header_timeout_s=settings.http.header_timeout_s,
        max_head_bytes=settings.http.max_head_bytes,
        body_timeout_s=settings.http.body_timeout_s,
        max_connections_per_client=settings.http.max_connections_per_client,
    )
    return HostServerConfig(
        BodyTimeout(app, limits.body_timeout_s),
        limits=limits,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        # Never uvloop: its subprocess spawn hands inheritable descriptors to children
        # (mcp_host/README.md). asyncio's honours close_fds.
        loop="asyncio",
        http=GuardedHttpToolsProtocol,
        ws="none",  # no WebSocket route: no upgrade path around the limits
        limit_concurrency=settings.http.max_connections,
        timeout_keep_alive=settings.http.keep_alive_s,
        timeout_graceful_shutdown=5,
    )


_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
_TOO_MANY = b"too many connections from this address"


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size cap on each request head, and a
    cap on the connections open from one client address.

    Needs the config `server_config` makes (TypeError otherwise).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not isinstance(config, HostServerConfig):
            raise TypeError("GuardedHttpToolsProtocol runs with the config of server_config()")
        super().__init__(config, server_state, app_state, _loop)
        self._limits = config.limits
        self._per_client = config.connections_per_client
        self._refusals_log = config.refusals_log
        self._counted_as: str | None = None  # the address whose slot this connection holds
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(cast(asyncio.Transport, CoalescedWrites(transport, self.loop)))
        address = self.client[0] if self.client else None  # None: not an IP socket
        if address is not None:
            if not self._per_client.open(address):
                self._refuse_connection(address)
                return
            self._counted_as = address
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted_as is not None:
            self._per_client.close(self._counted_as)
            self._counted_as = None
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _refuse_connection(self, address: str) -> None:
        """503 and close, before reading a byte: the address has its cap of connections open."""
        self.connections.discard(self)  # nor does it count toward uvicorn's host-wide cap
        self._refusals_log.log(
            "per-address cap",
            logging.WARNING,
            "refused a connection from %s: %d open, the cap per client address",
            address,
            self._per_client.cap,
        )
        # Closed at once, so a flood of refused connections holds no descriptor. Whatever the
        # client already sent is unread, so the kernel may follow the answer with a reset; a
        # client that reads in order (Linux) still gets the 503 first.
        self.transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_TOO_MANY), _TOO_MANY)
        )
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        between_requests = self.cycle is None or self.cycle.response_complete
        if between_requests and self._head_timer is None:
            # A byte after a response starts the next head's clock, even one that does not
            # begin a request (llhttp skips blank lines before a request line).
            self._arm_head_timer()
        super().data_received(data)
        if self._head_timer is not None and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.max_head_bytes:
                self._refuse_head(431)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:  # a pipelined request's head
            self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._disarm_head_timer()
        super().on_headers_complete()

    def _arm_head_timer(self) -> None:
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self._limits.header_timeout_s, self._refuse_head, 408)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._head_bytes = 0

    def _refuse_head(self, status: int) -> None:
        self._disarm_head_timer()
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            # Nothing else is being written on this connection: say why it ends.
            reason = _REASONS[status]
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (status, reason, len(reason), reason)
            )
        self.transport.close()


class CoalescedWrites:
    """A transport whose writes within one turn of the event loop go out as one write.

    uvicorn writes a response's head when the app sends `http.response.start` and its body
    at `http.response.body`: two system calls, and on loopback two wake-ups of the client for
    one small answer. Joined, an MCP answer is one segment: a first write waits (until the end
    of the loop's turn at most), a second one goes out with it at once. Closing (or a
    write-EOF) first writes what is pending; everything else is the transport's own.
    """

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._pending is None:  # perhaps a response's head: its body may follow at once
            self._pending = [bytes(data)]
            self._loop.call_soon(self._flush)
        else:  # the second write of the turn (the body): both go now, not a turn later
            self._pending.append(bytes(data))
            self._flush()

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        held = sum(len(data) for data in self._pending) if self._pending else 0
        return self._transport.get_write_buffer_size() + held

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BodyTimeout:
    """ASGI wrapper: a request body read that waits more than `timeout_s` ends the request with 408.

    Only reads of the body are timed: once the body is complete, a `receive()` waits for the
    client to go away (as a streaming response does) for as long as it takes.
    """

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done = False
        timed_out = False
        started = False

        async def timed_receive() -> Message:
            nonlocal body_done, timed_out
            if body_done:
                return await receive()
            with anyio.move_on_after(self.timeout_s):
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body", False):
                    body_done = True
                return message
            timed_out = True
            request.cancel()
            await anyio.lowlevel.checkpoint()  # a reader inside the request's scope stops here
            return {"type": "http.disconnect"}  # one outside it (another task) is told this

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if timed_out:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            with anyio.CancelScope() as request:
                await self.app(scope, timed_receive, tracked_send)
        except Exception:
            if not timed_out:
                raise
            # A part of the app that read in another task saw the disconnect and failed on it.
            logger.debug("request failed after its body timed out", exc_info=True)
        if timed_out and not started:
            body = b"the request body stopped arriving"
            await send(
                {
                    "type": "http.response.start",
                    "status": 408,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
