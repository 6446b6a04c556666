"""The two ways a child asks the egress proxy for a tunnel, on one socket: HTTP (`HttpFront`:
`CONNECT host:port`, or an absolute-form `GET http://host/…`) and SOCKS5 (`SocksFront`:
CONNECT without authentication, to a name, an IPv4 or an IPv6 address). The first byte tells
them apart (`front_for`: 0x05 is SOCKS5; no HTTP method starts with it). Each reads what is
asked (`ask`), answers a refusal in its own protocol (`refuse`) and says the tunnel is open
(`opened`), handing the gate what it sends on first (a forwarded request's head).

Above: `gate` (reads within the head deadline, then dials). Below: `heads` (parsing), anyio's
buffered stream.
"""

from __future__ import annotations

import ipaddress
from typing import Protocol

from anyio import DelimiterNotFound, IncompleteRead
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteStream

from .heads import Destination, HttpAsk, NoTunnel, Outcome, parse_host, read_http_head

__all__ = ["MAX_HEAD_BYTES", "Front", "HttpFront", "SocksFront", "front_for"]

MAX_HEAD_BYTES = 16 * 1024
"""The longest request head the proxy reads (431 past it)."""

_SOCKS = 0x05
_HTTP_STATUS: dict[Outcome, bytes] = {
    "bad": b"400 Bad Request",
    "slow": b"408 Request Timeout",
    "large": b"431 Request Header Fields Too Large",
    "refused": b"403 Forbidden",
    "capped": b"429 Too Many Requests",
    "unreachable": b"502 Bad Gateway",
}
# SOCKS5 reply codes (RFC 1928 §6): a refusal by the rules and at the cap is "not allowed by ruleset".
_SOCKS_REPLY: dict[Outcome, int] = {"bad": 0x01, "refused": 0x02, "capped": 0x02, "unreachable": 0x04}
_SOCKS_COMMAND_UNSUPPORTED = 0x07
_SOCKS_ADDRESS_UNSUPPORTED = 0x08
_SOCKS_NO_METHOD = b"\x05\xff"


class Front(Protocol):
    """One protocol's side of a connection before its tunnel opens."""

    async def ask(self, stream: BufferedByteStream) -> Destination | NoTunnel:
        """The destination the child asks for, or why the head is not read."""
        ...

    async def refuse(self, stream: ByteStream, refusal: NoTunnel) -> None:
        """Tell the child no, in one line where the protocol has room for one."""
        ...

    async def opened(self, stream: ByteStream) -> bytes:
        """Tell the child its tunnel is open, where its protocol says so; returns what goes to
        the destination first on the child's behalf (an absolute-form request's head in
        origin form), b"" for nothing."""
        ...


def front_for(first: int) -> Front:
    """The front that speaks the protocol whose connection starts with the byte `first`."""
    return SocksFront() if first == _SOCKS else HttpFront()


class HttpFront:
    """HTTP/1.x proxy requests; every answer but a tunnel's `200` closes the connection."""

    def __init__(self) -> None:
        self._forward: bytes | None = None

    async def ask(self, stream: BufferedByteStream) -> Destination | NoTunnel:
        try:
            head = await stream.receive_until(b"\r\n\r\n", MAX_HEAD_BYTES)
        except DelimiterNotFound:
            return NoTunnel("large", f"the request head is over {MAX_HEAD_BYTES} bytes")
        except IncompleteRead:
            return NoTunnel("bad", "the connection closed before the request head ended")
        if len(head) > MAX_HEAD_BYTES:  # the blank line came in the read that went past the limit
            return NoTunnel("large", f"the request head is over {MAX_HEAD_BYTES} bytes")
        asked = read_http_head(head)
        if isinstance(asked, NoTunnel):
            return asked
        assert isinstance(asked, HttpAsk)
        self._forward = asked.forward
        return asked.destination

    async def refuse(self, stream: ByteStream, refusal: NoTunnel) -> None:
        body = refusal.reason.encode("ascii", "replace") + b"\n"
        await stream.send(
            b"HTTP/1.1 " + _HTTP_STATUS[refusal.outcome] + b"\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n"
            b"Connection: close\r\n\r\n" + body
        )

    async def opened(self, stream: ByteStream) -> bytes:
        if self._forward is None:
            await stream.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            return b""
        return self._forward  # the destination answers the child itself


class SocksFront:
    """SOCKS5 (RFC 1928), CONNECT only, no authentication. At most one reply is sent."""

    def __init__(self) -> None:
        self._chosen = False  # the method is chosen: a request, and its reply, may follow
        self._replied = False

    async def ask(self, stream: BufferedByteStream) -> Destination | NoTunnel:
        try:
            return await self._ask(stream)
        except IncompleteRead:
            return NoTunnel("bad", "the connection closed before the SOCKS5 request ended")

    async def _ask(self, stream: BufferedByteStream) -> Destination | NoTunnel:
        _, count = await stream.receive_exactly(2)
        methods = await stream.receive_exactly(count)
        if 0x00 not in methods:
            self._replied = True
            await stream.send(_SOCKS_NO_METHOD)
            return NoTunnel("bad", "the SOCKS5 client offers no method without authentication")
        self._chosen = True
        await stream.send(b"\x05\x00")
        version, command, _, kind = await stream.receive_exactly(4)
        if version != _SOCKS:
            return NoTunnel("bad", "the SOCKS5 request has another version")
        if command != 0x01:
            await self._reply(stream, _SOCKS_COMMAND_UNSUPPORTED)
            return NoTunnel("bad", "only SOCKS5 CONNECT is served")
        host = await self._host(stream, kind)
        port = int.from_bytes(await stream.receive_exactly(2), "big")
        if host is None or port == 0:
            await self._reply(stream, _SOCKS_ADDRESS_UNSUPPORTED if host is None else 0x01)
            return NoTunnel("bad", "the SOCKS5 request names no host name or IP address and port")
        return Destination(host, port)

    async def _host(self, stream: BufferedByteStream, kind: int) -> str | None:
        if kind == 0x01:
            return str(ipaddress.IPv4Address(await stream.receive_exactly(4)))
        if kind == 0x04:
            return str(ipaddress.IPv6Address(await stream.receive_exactly(16)))
        if kind == 0x03:
            (length,) = await stream.receive_exactly(1)
            name = await stream.receive_exactly(length)
            return parse_host(name.decode("ascii")) if name.isascii() else None
        return None

    async def refuse(self, stream: ByteStream, refusal: NoTunnel) -> None:
        code = _SOCKS_REPLY.get(refusal.outcome)
        if code is not None and self._chosen and not self._replied:
            await self._reply(stream, code)

    async def opened(self, stream: ByteStream) -> bytes:
        await self._reply(stream, 0x00)
        return b""

    async def _reply(self, stream: ByteStream, code: int) -> None:
        # The bound address is not the child's business: 0.0.0.0:0.
        self._replied = True
        await stream.send(bytes([_SOCKS, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0]))
