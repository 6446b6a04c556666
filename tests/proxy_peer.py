"""A small HTTP proxy on loopback, for tests of plugins' clients that go out through the host's
egress proxy (`mcp_host_kit.open_tunnel`, niquests): the same wire as the host's, none of its
policy or limits.

It serves `CONNECT host:port` (a byte pipe to any TCP destination) and absolute-form requests
(`GET http://host:port/path`, forwarded in origin-form with `Connection: close`), answers 403
with a one-line reason for the destinations in `refused`, resolves the names in `names`
itself (as the host's proxy reads its hosts file), and records every request line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

REASON = "not in this plugin's egress"


@dataclass
class ProxyPeer:
    url: str
    names: dict[str, str] = field(default_factory=dict)
    """host name -> the address the proxy connects to instead of resolving it"""
    refused: set[str] = field(default_factory=set)
    """"host:port" destinations answered 403 with `REASON`"""
    requests: list[str] = field(default_factory=list)
    """each request's method and target, in order"""

    def environ(self) -> dict[str, str]:
        """The variables a sandboxed child gets: every proxy variable names this proxy."""
        names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
        return {name: self.url for upper in names for name in (upper, upper.lower())}


@asynccontextmanager
async def running_proxy(names: dict[str, str] | None = None) -> AsyncIterator[ProxyPeer]:
    """The proxy on a free loopback port until the block ends."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    peer = ProxyPeer(f"http://127.0.0.1:{listener.extra(SocketAttribute.local_port)}", dict(names or {}))
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, partial(_serve, peer))
        try:
            yield peer
        finally:
            tasks.cancel_scope.cancel()


async def _serve(peer: ProxyPeer, client: SocketStream) -> None:
    async with client:
        received = BufferedByteReceiveStream(client)
        with suppress(anyio.IncompleteRead, anyio.DelimiterNotFound, anyio.EndOfStream):
            head = (await received.receive_until(b"\r\n\r\n", 16 * 1024)).decode("latin-1")
            method, target, _ = head.split("\r\n", 1)[0].split(" ", 2)
            peer.requests.append(f"{method} {target}")
            host, port, forwarded = _destination(method, target, head)
            if f"{host}:{port}" in peer.refused:
                body = f"{REASON}\n".encode()
                await client.send(b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                return
            try:
                upstream = await anyio.connect_tcp(peer.names.get(host, host), port)
            except OSError:
                await client.send(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            async with upstream:
                await (upstream.send(forwarded) if forwarded else client.send(b"HTTP/1.1 200 OK\r\n\r\n"))
                await _pipe_both_ways(received, client, upstream)


def _destination(method: str, target: str, head: str) -> tuple[str, int, bytes | None]:
    """(host, port, the head to send upstream: None for CONNECT)."""
    if method == "CONNECT":
        host, port = target.rsplit(":", 1)
        return host.strip("[]"), int(port), None
    parts = urlsplit(target)
    assert parts.hostname is not None
    headers = [
        line
        for line in head.split("\r\n")[1:]
        if line and not line.lower().startswith(("proxy-", "connection:", "keep-alive:"))
    ]
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"{method} {path} HTTP/1.1", *headers, "Connection: close", "", ""]
    return parts.hostname, parts.port or 80, "\r\n".join(lines).encode("latin-1")


async def _pipe_both_ways(received: BufferedByteReceiveStream, client: SocketStream, upstream: SocketStream) -> None:
    """Bytes both ways until either side ends; then both are closed."""
    async with anyio.create_task_group() as pipes:

        async def pipe(source: ByteReceiveStream, sink: ByteSendStream) -> None:
            with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                while True:
                    await sink.send(await source.receive())
            pipes.cancel_scope.cancel()

        pipes.start_soon(pipe, received, upstream)
        pipes.start_soon(pipe, upstream, client)
