"""The HTTP server under the host: one uvicorn config for `mcp-host serve` and the tests.

Above: `app.cli._serve` and `tests/hosting.running_host`, which both run `server_config(app,
settings)`, so the tests run what users run. Below: uvicorn (its httptools protocol) and the
host's ASGI app (`app.asgi.create_app`).

uvicorn bounds an idle keep-alive connection and, with `limit_concurrency`, answers 503 to
every request that arrives while that many connections (or requests) are open, but it never
closes a connection that is slow to send its request: 300 connections dribbling their headers
stayed open for good (issue 11, defect 6), and bodies sending a byte every 2 s from 17
addresses held the host-wide cap (issue 26, defect 3). Here:

- **request head** — `GuardedHttpToolsProtocol` closes a connection whose request line and
  headers are not complete within `header_timeout_s` of the request's start (the connection's
  start, or the first byte after its previous response) (408), and one whose head passes
  `max_head_bytes` (431; httptools sets no limit of its own);
- **the whole request** — the same protocol closes a connection whose request (head and body)
  is not complete within `request_timeout_s` of its start, or whose body brings fewer than
  `body_min_bytes_per_s` over any `body_rate_window_s` (the first window is the grace a
  body gets; a window in which the host itself held the body back does not count) (408). One
  timer per connection keeps all three clocks, re-armed only for a request that is still
  arriving when it fires; the answer has no deadline (a tool call may take its time);
- **request body** — `BodyTimeout` answers 408 and closes the connection when one read of a
  request body waits more than `body_timeout_s`; the application's part of the request is
  cancelled, so it never runs on a body it did not get;
- **connections** — `limit_concurrency` (503 past it, `connection: close`) and
  `timeout_keep_alive`, from settings;
- **connections per client address** — `ConnectionsPerClient`: past
  `max_connections_per_client` open connections from one address (an IPv6 address counts as
  its /64, which one subscriber holds whole), a new one is answered 503 and closed as soon as
  it is accepted, before anything it sent is parsed (1,100 connections from one address held
  the whole host-wide cap); and once all but the reserved share of `max_connections` are open,
  only an address with fewer than `reserved_per_client` open gets one, so however many
  addresses an attacker fills the rest from, a newcomer still gets in. An address uvicorn
  trusts as a proxy (`forwarded_allow_ips`, for `X-Forwarded-For`) is not capped: it speaks
  for many clients.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

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
    `http_request_timeout_s`, `http_body_min_bytes_per_s`, `http_body_rate_window_s`,
    `http_max_connections`, `http_max_connections_per_client`, `http_reserved_share`,
    `http_reserved_per_client`."""

    header_timeout_s: float = 10.0
    max_head_bytes: int = 64 * 1024
    body_timeout_s: float = 30.0
    request_timeout_s: float = 30.0
    body_min_bytes_per_s: int = 1024
    body_rate_window_s: float = 5.0
    max_connections: int = 1000
    max_connections_per_client: int = 64
    reserved_share: float = 0.25
    reserved_per_client: int = 4

    @property
    def open_to_all(self) -> int:
        """Open connections past which only addresses holding few get another (the rest is reserved)."""
        return self.max_connections - int(self.max_connections * self.reserved_share)


Refusal = Literal["per-address cap", "reserved share"]


def client_key(address: str) -> str:
    """What the caps count an address as: an IPv4 address itself (also when it arrives
    IPv4-mapped), an IPv6 address its /64, anything else (a unix socket's name) as given."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return address


class ConnectionsPerClient:
    """The connections open from each client address, and the caps on them.

    One per server (its config); the protocol opens a connection's slot when it is accepted
    and closes it when it is lost. An address may hold `cap`; once `open_to_all` connections
    are open host-wide, only one holding fewer than `reserved_per_client`. Addresses `exempt`
    says yes to are counted, never refused.
    """

    def __init__(
        self,
        cap: int,
        exempt: Callable[[str], bool],
        *,
        open_to_all: int | None = None,
        reserved_per_client: int | None = None,
    ) -> None:
        """`open_to_all` None: nothing reserved."""
        self.cap = cap
        self.open_to_all = open_to_all
        self.reserved_per_client = cap if reserved_per_client is None else reserved_per_client
        self._exempt = exempt
        self._open: Counter[str] = Counter()
        self._total = 0

    def open(self, address: str) -> Refusal | None:
        """Take a slot for a new connection from `address`; past a cap, nothing is taken and
        the answer names the cap."""
        key = client_key(address)
        held = self._open[key]
        if not self._exempt(address):
            if held >= self.cap:
                return "per-address cap"
            if self.open_to_all is not None and self._total >= self.open_to_all and held >= self.reserved_per_client:
                return "reserved share"
        self._open[key] = held + 1
        self._total += 1
        return None

    def close(self, address: str) -> None:
        """Give back the slot of a connection `open` let in."""
        key = client_key(address)
        self._open[key] -= 1
        self._total -= 1
        if self._open[key] <= 0:
            del self._open[key]  # no entry outlives an address's last connection

    def count(self, address: str | None = None) -> int:
        """Connections open from `address` (its key's), else from every address."""
        return self._open[client_key(address)] if address is not None else self._total

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
        self.connections_per_client = ConnectionsPerClient(
            limits.max_connections_per_client,
            trusted.__contains__,
            open_to_all=limits.open_to_all,
            reserved_per_client=limits.reserved_per_client,
        )
        self.refusals_log = LimitedLog(logger, per_s=0.1, burst=3, what="refused connections")


def server_config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
    """The uvicorn config that serves `app` (the host's ASGI app) as `settings` say."""
    http = settings.http
    limits = HttpLimits(
        header_timeout_s=http.header_timeout_s,
        max_head_bytes=http.max_head_bytes,
        body_timeout_s=http.body_timeout_s,
        request_timeout_s=http.request_timeout_s,
        body_min_bytes_per_s=http.body_min_bytes_per_s,
        body_rate_window_s=http.body_rate_window_s,
        max_connections=http.max_connections,
        max_connections_per_client=http.max_connections_per_client,
        reserved_share=http.reserved_share,
        reserved_per_client=http.reserved_per_client,
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
_EARLY_S = 0.001
"""A timer may run a hair before its time (asyncio runs what is due within its clock's resolution)."""

Phase = Literal["idle", "head", "body"]


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size cap on each request head, a
    deadline and a minimum rate on each whole request, and caps on the connections open from
    one client address.

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
        # The request arriving: "head" until its headers are complete, "body" until its body is.
        self._phase: Phase = "idle"
        self._started = 0.0  # when the request began (loop time)
        self._head_bytes = 0
        self._window_start = 0.0  # the body's current rate window
        self._window_bytes = 0
        self._body_slow = False  # the body did not come whole with its head: time its windows
        self._watch: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(cast(asyncio.Transport, CoalescedWrites(transport, self.loop)))
        address = self.client[0] if self.client else None  # None: not an IP socket
        if address is not None:
            refusal = self._per_client.open(address)
            if refusal is not None:
                self._refuse_connection(address, refusal)
                return
            self._counted_as = address
        self._begin_request()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted_as is not None:
            self._per_client.close(self._counted_as)
            self._counted_as = None
        self._end_request()
        super().connection_lost(exc)

    def _refuse_connection(self, address: str, refusal: Refusal) -> None:
        """503 and close, before reading a byte: the address is past a connection cap."""
        self.connections.discard(self)  # nor does it count toward uvicorn's host-wide cap
        per_client = self._per_client
        if refusal == "per-address cap":
            message, limit = "refused a connection from %s: %d open, the cap per client address", per_client.cap
        else:
            message = "refused a connection from %s: the host's last connections are for addresses holding under %d"
            limit = per_client.reserved_per_client
        self._refusals_log.log(refusal, logging.WARNING, message, address, limit)
        # Closed at once, so a flood of refused connections holds no descriptor. Whatever the
        # client already sent is unread, so the kernel may follow the answer with a reset; a
        # client that reads in order (Linux) still gets the 503 first.
        self.transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_TOO_MANY), _TOO_MANY)
        )
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._phase == "idle" and (self.cycle is None or self.cycle.response_complete):
            # A byte after a response starts the next request's clocks, even one that does not
            # begin a request (llhttp skips blank lines before a request line).
            self._begin_request()
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._phase == "head":
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.max_head_bytes:
                self._refuse(431)
        elif self._phase == "body" and not self._body_slow:
            # The body did not come whole with its head: from here its windows are timed.
            self._body_slow = True
            self._rewatch()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase == "idle":  # a pipelined request's head
            self._begin_request()

    def on_headers_complete(self) -> None:
        self._phase = "body"
        self._window_start, self._window_bytes = self.loop.time(), 0
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._window_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._end_request()
        super().on_message_complete()

    # -- the clocks of the request arriving --------------------------------------------------

    def _begin_request(self) -> None:
        self._phase = "head"
        self._started = self.loop.time()
        self._head_bytes = 0
        self._body_slow = False
        self._rewatch()

    def _end_request(self) -> None:
        self._phase = "idle"
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _rewatch(self) -> None:
        """Arm the timer for the request's next due time: its head's deadline, its own, and
        while a slow body arrives, the end of its rate window."""
        if self._watch is not None:
            self._watch.cancel()
        limits = self._limits
        due = self._started + limits.request_timeout_s
        if self._phase == "head":
            due = min(due, self._started + limits.header_timeout_s)
        elif self._body_slow and limits.body_min_bytes_per_s > 0:
            due = min(due, self._window_start + limits.body_rate_window_s)
        self._watch = self.loop.call_at(due, self._check)

    def _check(self) -> None:
        self._watch = None
        if self._phase == "idle" or self.transport.is_closing():
            return
        limits = self._limits
        if self._phase == "body" and self.pipeline:
            # Queued behind a request still being answered: the host holds it back, not the
            # client; its clocks stand still until its turn.
            self._watch = self.loop.call_later(limits.body_rate_window_s, self._check)
            return
        now = self.loop.time() + _EARLY_S
        if self._phase == "head" and now >= self._started + limits.header_timeout_s:
            self._refuse(408)
        elif now >= self._started + limits.request_timeout_s:
            self._refuse(408, f"its request was not complete within {limits.request_timeout_s:g} s")
        elif self._phase == "body" and now >= self._window_start + limits.body_rate_window_s:
            cycle = self.cycle
            # The host holding the body back (the app not reading it yet) is no slowness of the client's.
            held_back = self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue)
            if not held_back and self._window_bytes < limits.body_min_bytes_per_s * (now - self._window_start):
                self._refuse(408, f"its request body came slower than {limits.body_min_bytes_per_s} bytes/s")
                return
            self._window_start, self._window_bytes = now, 0
            self._rewatch()
        else:
            self._rewatch()

    def _refuse(self, status: int, why: str | None = None) -> None:
        """Answer `status` (unless a response is under way) and close: the request broke a limit.
        `why`: logged (a slow request, which may be an attack; a head that never came is often
        a browser's idle preconnection)."""
        self._end_request()
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or not cycle.response_started or cycle.response_complete:
            # Nothing else is being written on this connection: say why it ends.
            reason = _REASONS[status]
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (status, reason, len(reason), reason)
            )
        if cycle is not None and not cycle.response_complete:
            # The app reading this request hears at once that it ended, and writes nothing more.
            cycle.disconnected = True
            cycle.message_event.set()
        if why is not None:
            address = self.client[0] if self.client else "a local socket"
            self._refusals_log.log("slow request", logging.WARNING, "closed a connection from %s: %s", address, why)
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
