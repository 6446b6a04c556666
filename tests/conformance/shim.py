"""A loopback reverse proxy that adds headers to every HTTP request: the suite's missing `--header`.

The conformance CLI cannot send `Authorization: Bearer <session token>`, which a visitor
session's endpoint requires. This shim listens on 127.0.0.1, rewrites each request's head
(adds the headers, replaces any `Authorization` the client sent, and asks for
`Connection: close` so that every request arrives on a connection of its own), and then
relays raw bytes both ways, unbuffered: SSE streams, chunked bodies and disconnects pass
through as they happen. Everything else, `Host` and `Origin` included, is left as the client
sent it, so the host's own DNS-rebinding protection is what the suite sees.

Above: `targets.through_host`. Below: anyio TCP streams.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ["HeaderShim", "header_shim"]

MAX_HEAD_BYTES = 64 * 1024
CHUNK_BYTES = 64 * 1024
# Request headers the shim owns: it sets the first itself and closes every connection after one exchange.
_REPLACED = {b"authorization", b"connection", b"keep-alive", b"proxy-connection"}
_RELAY_ERRORS = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


@dataclass
class HeaderShim:
    """Where to forward (`route`) and what to add; `port` is where the shim listens."""

    port: int
    upstream: tuple[str, int] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def route(self, host: str, port: int, headers: Mapping[str, str]) -> None:
        self.upstream = (host, port)
        self.headers = dict(headers)

    def rewrite(self, head: bytes) -> bytes:
        """The request line and headers of `head` (without its blank line), with ours applied."""
        request_line, *lines = head.split(b"\r\n")
        kept = [line for line in lines if line.split(b":", 1)[0].strip().lower() not in _REPLACED]
        added = [f"{name}: {value}".encode("latin-1") for name, value in self.headers.items()]
        return b"\r\n".join([request_line, *kept, *added, b"Connection: close"]) + b"\r\n\r\n"

    async def serve(self, client: SocketStream) -> None:
        async with client:
            buffered = BufferedByteReceiveStream(client)
            try:
                head = await buffered.receive_until(b"\r\n\r\n", MAX_HEAD_BYTES)
            except (anyio.IncompleteRead, anyio.DelimiterNotFound, *_RELAY_ERRORS):
                return
            if self.upstream is None:
                await client.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            async with await anyio.connect_tcp(*self.upstream) as upstream:
                await upstream.send(self.rewrite(head))
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_request_body, buffered, upstream, tg.cancel_scope)
                    await _relay(upstream, client)
                    tg.cancel_scope.cancel()


async def _request_body(client: ByteReceiveStream, upstream: SocketStream, scope: anyio.CancelScope) -> None:
    """Client → upstream until the client half-closes (passed on) or goes away (ends the exchange)."""
    try:
        while True:
            await upstream.send(await client.receive(CHUNK_BYTES))
    except anyio.EndOfStream:
        await upstream.send_eof()
    except _RELAY_ERRORS:
        scope.cancel()


async def _relay(source: ByteReceiveStream, sink: ByteSendStream) -> None:
    """Upstream → client, chunk by chunk as it arrives, until either side closes."""
    try:
        while True:
            await sink.send(await source.receive(CHUNK_BYTES))
    except _RELAY_ERRORS:
        return


@asynccontextmanager
async def header_shim() -> AsyncIterator[HeaderShim]:
    """A shim listening on a free loopback port; `route` it before sending it requests."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        shim = HeaderShim(port=int(listener.extra(anyio.abc.SocketAttribute.local_port)))
        tg.start_soon(listener.serve, shim.serve)
        yield shim
        tg.cancel_scope.cancel()
