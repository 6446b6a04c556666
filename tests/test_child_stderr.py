"""Draining a child's stderr: everything is read, little is logged, nothing is unbounded."""

from __future__ import annotations

import logging

import anyio
import pytest

from mcp_host.child_stderr import StderrDrain

pytestmark = pytest.mark.anyio


async def _drain(chunks: list[bytes], **limits: int) -> StderrDrain:
    drain = StderrDrain("test.child", lines_per_s=limits.get("lines_per_s", 3), line_bytes=limits.get("line_bytes", 80))
    send, receive = anyio.create_memory_object_stream[bytes](len(chunks) + 1)
    async with send:
        for chunk in chunks:
            await send.send(chunk)
    async with receive:
        await drain.run(receive)  # type: ignore[arg-type]
    return drain


async def test_a_flood_is_read_to_the_end_but_logged_at_the_rate_limit(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.child")
    drain = await _drain([b"".join(f"line {i}\n".encode() for i in range(1000))])
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("test.child: line")]
    assert logged == ["test.child: line 0", "test.child: line 1", "test.child: line 2"]
    assert drain.dropped == 997
    assert list(drain.tail) == [f"line {i}" for i in range(995, 1000)]
    assert "test.child: 997 stderr lines not logged (rate limit)" in caplog.messages


async def test_long_lines_and_lines_without_end_are_cut(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.child")
    drain = await _drain([b"x" * 50, b"y" * 50, b"z" * 500], line_bytes=80, lines_per_s=100)
    assert list(drain.tail) == ["x" * 50 + "y" * 30 + " …[truncated]", "z" * 80 + " …[truncated]"]


async def test_terminal_escapes_never_reach_the_log_raw(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.child")
    await _drain([b"\x1b[31mred\x1b[0m \xff\n"], lines_per_s=10)
    assert caplog.messages == ["test.child: \\x1b[31mred\\x1b[0m \\ufffd"]
