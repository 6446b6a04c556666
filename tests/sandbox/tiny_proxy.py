"""A tiny CONNECT and absolute-form HTTP proxy on a unix socket, for the sandbox's egress tests
(the real one, with its policy, is `mcp_host.egress`'s). It forwards to any host:port and records
each destination asked for; nothing more."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit


@dataclass
class TinyProxy:
    path: Path
    destinations: list[str] = field(default_factory=list)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _handle(proxy: TinyProxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        writer.close()
        return
    method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        first = b"HTTP/1.1 200 Connection established\r\n\r\n"
        forward = b""
    else:
        url = urlsplit(target)
        host, port = url.hostname or "", str(url.port or 80)
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        lines = head.decode("latin-1").split("\r\n")[1:]
        kept = [line for line in lines if line and not line.lower().startswith(("proxy-", "connection:"))]
        forward = "\r\n".join([f"{method} {path} HTTP/1.1", *kept, "Connection: close", "", ""]).encode("latin-1")
        first = b""
    proxy.destinations.append(f"{host.strip('[]')}:{port}")
    try:
        up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
    except OSError:
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        writer.close()
        return
    writer.write(first)
    up_writer.write(forward)
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    writer.close()
    up_writer.close()


@contextlib.asynccontextmanager
async def tiny_proxy(path: Path) -> AsyncIterator[TinyProxy]:
    """Serve a `TinyProxy` on the unix socket `path` for the block's length."""
    proxy = TinyProxy(path)
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await _handle(proxy, reader, writer)
        finally:
            handlers.discard(task)

    server = await asyncio.start_unix_server(handle, str(path), backlog=2048)
    try:
        async with server:
            yield proxy
    finally:
        # asyncio's server leaves its handlers running when it closes: end them here.
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
