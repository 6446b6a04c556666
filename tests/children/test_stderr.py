"""Draining a child's stderr: everything is read, little is logged, nothing is unbounded."""

from __future__ import annotations

import io
import logging
import sys
import traceback
from pathlib import Path

import anyio
import pytest
from rich.console import Console
from rich.logging import RichHandler

from mcp_host.children.stderr import ChildLog, StderrDrain, Tracebacks
from mcp_host.settings import Settings
from tests.hosting import wait_until

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


def _raise_chained() -> None:
    def inner(n: int) -> None:
        raise RuntimeError(f"boom-{n}")

    try:
        inner(42)
    except RuntimeError as exc:
        raise ValueError("wrapped") from exc


def _plain_traceback() -> list[str]:
    try:
        _raise_chained()
    except ValueError as exc:
        return "".join(traceback.format_exception(exc)).splitlines()
    raise AssertionError("unreachable")


def _rich_traceback(width: int, *, colour: bool = False) -> list[str]:
    """A traceback as the SDK's MCPServer logs it: a RichHandler on a console `width` wide, in
    colour (as when the child's environment sets FORCE_COLOR) or not, whatever this
    process's environment says."""
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=colour, color_system="truecolor" if colour else None)
    handler = RichHandler(console=console, rich_tracebacks=True)
    record = logging.LogRecord("t", logging.ERROR, __file__, 1, "Tool 'boom' raised", None, None)
    try:
        _raise_chained()
    except ValueError:
        record.exc_info = sys.exc_info()
    handler.emit(record)
    return out.getvalue().splitlines()


def _summaries(lines: list[str]) -> list[str]:
    reader = Tracebacks()
    found = [reader.feed(line) for line in lines] + [reader.end()]
    return [summary for summary in found if summary is not None]


def test_a_plain_traceback_is_summed_up_with_type_message_and_last_frames() -> None:
    summaries = _summaries(["some line before", *_plain_traceback(), "a line after"])
    here = __file__
    assert [s.split(" (at ")[0] for s in summaries] == ["RuntimeError: boom-42", "ValueError: wrapped"]
    assert summaries[0].removesuffix(")").split(" (at ")[1].split(" < ") == [
        f"{here}:{_raise_chained.__code__.co_firstlineno + 2} in inner",
        f"{here}:{_raise_chained.__code__.co_firstlineno + 5} in _raise_chained",
    ]


@pytest.mark.parametrize("colour", [False, True], ids=["plain", "colour"])
@pytest.mark.parametrize("width", [80, 200])
def test_a_rich_traceback_is_summed_up_however_it_wraps(width: int, colour: bool) -> None:
    lines = _rich_traceback(width, colour=colour)
    assert any("\x1b[" in line for line in lines) is colour
    summaries = _summaries(lines)
    assert [s.split(" (at ")[0] for s in summaries] == ["RuntimeError: boom-42", "ValueError: wrapped"]
    assert summaries[0].split(" (at ")[1].split(" < ")[0] == (
        f"{__file__}:{_raise_chained.__code__.co_firstlineno + 2} in inner"
    )


async def test_a_traceback_is_logged_whatever_the_rate_limit_dropped_around_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.child")
    noise = [f"noise {n}" for n in range(50)]
    lines = [*noise, *_rich_traceback(80), *noise]
    drain = await _drain(["\n".join(lines).encode() + b"\n"], lines_per_s=5)
    exceptions = [m for m in caplog.messages if "exception in the child" in m]
    assert [m.split(" (at ")[0] for m in exceptions] == [
        "test.child: exception in the child: RuntimeError: boom-42",
        "test.child: exception in the child: ValueError: wrapped",
    ]
    dropped = len([line for line in lines if line.strip()]) - 5  # blank lines are not logged at all
    assert drain.dropped == dropped
    assert f"test.child: {dropped} stderr lines not logged (rate limit)" in caplog.messages


async def test_exceptions_are_logged_within_their_own_budget(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.child")
    log = ChildLog("test.child", keep=100, line_bytes=300, errors_per_s=0.001, errors_burst=3)
    drain = StderrDrain("test.child", lines_per_s=1000, line_bytes=300, log=log)
    send, receive = anyio.create_memory_object_stream[bytes](10)
    async with send:
        await send.send(("\n".join(_plain_traceback() * 5) + "\n").encode())
    async with receive:
        await drain.run(receive)  # type: ignore[arg-type]
    exceptions = [m for m in caplog.messages if "exception in the child" in m]
    assert len(exceptions) == 3
    assert "test.child: 7 more child error lines suppressed" in caplog.messages
    kept = [line.text.split(" (at ")[0] for line in log.recent(100) if line.kind == "exception"]
    assert kept == ["RuntimeError: boom-42", "ValueError: wrapped"] * 5


async def test_a_cancelled_drain_still_tells_what_it_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """A stopped child's drain is cancelled, never reaching the end of its stream."""
    caplog.set_level(logging.INFO, logger="mcp_host.child")
    drain = StderrDrain("test.child", lines_per_s=3, line_bytes=80)
    send, receive = anyio.create_memory_object_stream[bytes](10)
    async with send, receive, anyio.create_task_group() as tg:
        tg.start_soon(drain.run, receive)  # type: ignore[arg-type]
        await send.send(b"".join(f"line {i}\n".encode() for i in range(10)))
        await wait_until(lambda: len(drain.tail) == 5 and drain.tail[-1] == "line 9")
        tg.cancel_scope.cancel()
    assert "test.child: 7 stderr lines not logged (rate limit)" in caplog.messages


async def test_dropped_lines_are_told_after_a_moment_of_quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.child")
    drain = StderrDrain("test.child", lines_per_s=3, line_bytes=80)
    notice = "test.child: 7 stderr lines not logged (rate limit)"
    send, receive = anyio.create_memory_object_stream[bytes](10)
    async with send, receive, anyio.create_task_group() as tg:
        tg.start_soon(drain.run, receive)  # type: ignore[arg-type]
        await send.send(b"".join(f"line {i}\n".encode() for i in range(10)))
        await wait_until(lambda: notice in caplog.messages, within_s=3.0)  # the stream is still open
        tg.cancel_scope.cancel()
    assert caplog.messages.count(notice) == 1


def test_the_child_log_keeps_the_last_lines_escaped() -> None:
    log = ChildLog("test.child", keep=3, line_bytes=40, errors_per_s=1.0, errors_burst=10)
    for n in range(5):
        log.keep("stderr", f"line {n}")
    log.tool_error("boom", "Error \x1b[2J executing tool boom" + "x" * 100)
    assert [(line.kind, line.text) for line in log.recent(10)] == [
        ("stderr", "line 3"),
        ("stderr", "line 4"),
        ("tool_error", "tool 'boom' answered an error: Error \\x1b[…"),
    ]
    assert [line.kind for line in log.recent(1)] == ["tool_error"]


def test_child_log_defaults_are_pinned(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert (
        settings.child_logs.keep_lines,
        settings.child_logs.errors_logged_per_s,
        settings.child_logs.errors_logged_burst,
    ) == (200, 1.0, 10)
