"""The measured operations: MCP clients to each server under test, and the timing loop."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

__all__ = ["ERAS", "Leg", "call_echo", "http_client", "list_tools", "stdio_client", "timed"]

ERAS = ("legacy", "2026-07-28")
"""The client's `mode=`: the 2025-11-25 handshake era (stateful) and the 2026-07-28 era."""

Op = Callable[[], Awaitable[Any]]


@dataclass
class Leg:
    """One measured series: an operation on one connected client, and its samples (ns)."""

    key: str
    title: str
    era: str
    op: Op
    samples: list[int] = field(default_factory=list)


async def stdio_client(stack: AsyncExitStack, echo_server: Path, mode: str) -> Client:
    """The SDK client, spawning the echo child over stdio itself (leg a)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(echo_server)],
        env={"ECHO_TOOL_NAME": "echo"},
        cwd=str(echo_server.parent),
    )
    return await stack.enter_async_context(Client(params, mode=mode, cache=None))


async def http_client(stack: AsyncExitStack, url: str, mode: str, token: str | None = None) -> Client:
    """The SDK client over streamable HTTP, with a bearer token when given (legs b, c, d, f)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)))
    transport = streamable_http_client(url, http_client=http)
    return await stack.enter_async_context(Client(transport, mode=mode, cache=None))


def call_echo(client: Client, tool: str = "echo") -> Op:
    """`tools/call echo {"text": "hi"}`; checks the answer, which costs the same on every leg."""

    async def op() -> None:
        result = await client.call_tool(tool, {"text": "hi"})
        if result.is_error or result.structured_content != {"text": "hi"}:
            raise RuntimeError(f"{tool} answered {result!r}")

    return op


def list_tools(client: Client, expect: set[str]) -> Op:
    """`tools/list`; checks that exactly the `expect` tools are listed."""

    async def op() -> None:
        result = await client.list_tools()
        names = {t.name for t in result.tools}
        if names != expect:
            raise RuntimeError(f"tools/list gave {sorted(names)}, expected {sorted(expect)}")

    return op


async def timed(op: Op, n: int) -> list[int]:
    """Run `op` `n` times one after another; each call's latency in nanoseconds."""
    samples: list[int] = []
    for _ in range(n):
        started = time.perf_counter_ns()
        await op()
        samples.append(time.perf_counter_ns() - started)
    return samples
