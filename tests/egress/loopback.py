"""Real peers on loopback for the egress proxy's tests: an echo server and a byte sink (TCP,
anyio), a hosts file naming them, a client that writes to a gate's unix socket, and a TCP
listener that carries each connection to a gate's socket byte for byte (what the sandbox's
bridge does), so stock clients (`urllib`, httpx) can use a gate as their HTTP proxy."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import ByteStream, SocketStream

__all__ = [
    "HOSTS",
    "Peer",
    "ask",
    "echo_server",
    "open_tunnel",
    "read_all",
    "short_folder",
    "sink_server",
    "tcp_bridge",
    "write_hosts",
]

HOSTS = ("site.example.test", "a.example.test", "evil.example.test")
"""Test names the hosts file maps to 127.0.0.1."""


def write_hosts(folder: Path) -> Path:
    """A hosts file naming `HOSTS` (and `six.example.test` at ::1), with comments."""
    path = folder / "hosts"
    path.write_text(
        "# the egress tests' names\n"
        f"127.0.0.1   {' '.join(HOSTS)}   # all on loopback\n"
        "::1 six.example.test\n"
        "not-an-address ignored.example.test\n"
    )
    return path


@contextmanager
def short_folder() -> Iterator[Path]:
    """A fresh folder with a short path (a unix socket's path holds 107 bytes; tmp_path may not)."""
    folder = Path(tempfile.mkdtemp(prefix="eg-"))
    try:
        yield folder / "gates"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Peer:
    """A server on loopback: its port, the connections it accepted, the bytes it received."""

    port: int
    connections: int = 0
    received: int = 0
    closed: anyio.Event = field(default_factory=anyio.Event)
    """Set when a connection to it ended."""


@asynccontextmanager
async def _serving(host: str, echo: bool) -> AsyncIterator[Peer]:
    listener = await anyio.create_tcp_listener(local_host=host, local_port=0)
    peer = Peer(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def serve(stream: SocketStream) -> None:
        peer.connections += 1
        async with stream:
            try:
                async for chunk in stream:
                    peer.received += len(chunk)
                    if echo:
                        await stream.send(chunk)
            except (anyio.BrokenResourceError, OSError):
                pass
        peer.closed.set()

    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, serve)
        yield peer
        tasks.cancel_scope.cancel()


def echo_server(host: str = "127.0.0.1") -> AbstractAsyncContextManager[Peer]:
    """A TCP server on `host` that sends back what it receives."""
    return _serving(host, echo=True)


def sink_server(host: str = "127.0.0.1") -> AbstractAsyncContextManager[Peer]:
    """A TCP server on `host` that reads and counts, and says nothing."""
    return _serving(host, echo=False)


async def read_all(stream: ByteStream, limit: int = 1 << 20) -> bytes:
    """What `stream` sends until it closes (at most `limit` bytes)."""
    got = bytearray()
    try:
        while len(got) < limit:
            got += await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        pass
    return bytes(got)


async def ask(path: Path, data: bytes) -> bytes:
    """Write `data` to the gate at `path` and read its whole answer (the gate closes after a refusal)."""
    with anyio.fail_after(15):
        async with await anyio.connect_unix(path) as stream:
            await stream.send(data)
            return await read_all(stream)


@asynccontextmanager
async def tcp_bridge(gate: Path) -> AsyncIterator[int]:
    """A TCP port on 127.0.0.1 whose every connection is carried to the unix socket `gate`."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)

    async def carry(client: SocketStream) -> None:
        async with client, await anyio.connect_unix(gate) as upstream, anyio.create_task_group() as both:

            async def one_way(source: ByteStream, sink: ByteStream) -> None:
                try:
                    async for chunk in source:
                        await sink.send(chunk)
                    await sink.send_eof()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    both.cancel_scope.cancel()

            both.start_soon(one_way, client, upstream)
            both.start_soon(one_way, upstream, client)

    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, carry)
        yield listener.extra(anyio.abc.SocketAttribute.local_port)
        tasks.cancel_scope.cancel()


async def open_tunnel(path: Path, port: int, name: str = "site.example.test") -> SocketStream:
    """A CONNECT tunnel through the gate at `path` to `name`:`port`, its 200 read."""
    stream = await anyio.connect_unix(path)
    await stream.send(f"CONNECT {name}:{port} HTTP/1.1\r\n\r\n".encode())
    with anyio.fail_after(10):
        assert await stream.receive() == b"HTTP/1.1 200 Connection established\r\n\r\n"
    return stream
