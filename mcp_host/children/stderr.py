"""Drain a child's stderr into the host log: never blocking the child, never flooding the log,
never losing the exception that explains a failure.

Above: `children.Child`, which owns one `ChildLog` for as long as the host runs and starts one
`StderrDrain` per process. Below: the pipe, `log_limit` and `text_safety`.

Unread pipes deadlock a child (docs/security.md B6), so the drain always reads; what it logs is
cut to `line_bytes` per line and `lines_per_s` per second (`log_limit.TokenBucket`). Dropped
lines are counted, and the count is logged ("N stderr lines not logged") before the next line
that is logged, after a second with no line, and when the drain ends, however it ends (a
stopped child's drain is cancelled).

A Python traceback on stderr (as the interpreter prints it, or as the SDK's `MCPServer` logs
it through rich) is read as it goes by and summed up in one line — the exception's type and
message and its last frames — which is logged within the child's own error budget, apart from
the stderr lines': a traceback is 20 to 150 lines, and the rate limit drops most of them. The
texts of the child's `isError` tool results are logged the same way (`ChildLog.tool_error`).
The `ChildLog` also keeps the child's last lines, escaped, for the owner's `capability_logs`.
"""

from __future__ import annotations

import collections
import logging
import math
import re
import time
from dataclasses import dataclass
from typing import Literal

import anyio
from anyio.abc import ByteReceiveStream

from mcp_host.plugins import printable
from mcp_host.sandbox import says_out_of_memory
from mcp_host.wire import LimitedLog, TokenBucket

__all__ = ["ChildLog", "LogKind", "LogLine", "StderrDrain", "Tracebacks"]

logger = logging.getLogger("mcp_host.child")

_CHUNK = 65536
_TELL_DROPPED_AFTER_S = 1.0
LogKind = Literal["stderr", "exception", "tool_error", "egress"]
_LAST_FRAMES = 3
_EXCEPTION_LINES = 4  # a wrapped (rich) or multi-line exception message: at most this many lines


def _escaped(text: str, limit: int) -> str:
    """One line for the host log: ASCII only, anything else escaped, at most `limit` characters."""
    return text.encode("unicode_escape").decode("ascii")[:limit]


@dataclass(frozen=True)
class LogLine:
    """One line of a child's recent log: `kind` is stderr, exception or tool_error."""

    at: float
    kind: LogKind
    text: str


class ChildLog:
    """What one plugin's children said, across restarts: the last `keep` lines (escaped, for
    the owner) and the error lines (exceptions, error results) logged within their own bucket."""

    def __init__(self, name: str, *, keep: int, line_bytes: int, errors_per_s: float, errors_burst: int) -> None:
        self.name = name
        self.line_bytes = line_bytes
        self._lines: collections.deque[tuple[float, LogKind, str]] = collections.deque(maxlen=keep)
        self._errors = LimitedLog(logger, per_s=errors_per_s, burst=errors_burst, what="child error lines")

    def keep(self, kind: LogKind, text: str) -> None:
        # Escaped when read, not here: a child may write stderr as fast as a pipe goes.
        self._lines.append((time.time(), kind, text[: self.line_bytes + 1]))  # + 1: `printable` marks the cut

    def recent(self, count: int) -> list[LogLine]:
        """The last `count` lines kept, oldest first, escaped (`text_safety.printable`)."""
        lines = list(self._lines)[-count:] if count > 0 else []
        return [LogLine(at, kind, printable(text, self.line_bytes)) for at, kind, text in lines]

    def exception(self, summary: str) -> None:
        """An exception the child reported (`Tracebacks`): kept, and logged at WARNING."""
        self.keep("exception", summary)
        text = _escaped(summary, self.line_bytes)
        self._errors.log(self.name, logging.WARNING, "%s: exception in the child: %s", self.name, text)

    def tool_error(self, tool: str, text: str) -> None:
        """The text of an `isError` result of `tool`: kept, and logged at INFO for the owner."""
        line = f"tool {tool[:64]!r} answered an error: {text[: self.line_bytes]}"
        self.keep("tool_error", line)
        self._errors.log(self.name, logging.INFO, "%s: %s", self.name, _escaped(line, self.line_bytes))

    def egress_refused(self, destination: str, reason: str) -> None:
        """A destination the host's egress proxy refused one of its children (the proxy logs
        it, once per child): kept for the owner's `capability_logs`."""
        self.keep("egress", f"egress refused {destination[:300]}: {reason[: self.line_bytes]}")

    def flush(self) -> None:
        self._errors.flush()


class StderrDrain:
    """Reads one child's stderr until EOF; `tail` holds its last lines for diagnostics."""

    def __init__(
        self, name: str, *, lines_per_s: int, line_bytes: int, keep: int = 5, log: ChildLog | None = None
    ) -> None:
        self._name = name
        self._line_bytes = line_bytes
        self.tail: collections.deque[str] = collections.deque(maxlen=keep)
        self.out_of_memory = False  # a line said an allocation failed (V8's stack follows its line)
        self.dropped = 0
        self._untold = 0  # dropped lines not yet told in the log
        self._budget = TokenBucket(per_s=lines_per_s, burst=lines_per_s)
        self._log = log or ChildLog(name, keep=keep, line_bytes=line_bytes, errors_per_s=1.0, errors_burst=10)
        self._tracebacks = Tracebacks()

    async def run(self, stream: ByteReceiveStream) -> None:
        partial = bytearray()
        try:
            while True:
                # Dropped lines are told at the next line logged, or after a moment of quiet.
                with anyio.move_on_after(_TELL_DROPPED_AFTER_S if self._untold else math.inf) as quiet:
                    try:
                        chunk = await stream.receive()
                    except anyio.EndOfStream:
                        break
                if quiet.cancelled_caught:
                    self._tell_dropped()
                    continue
                partial.extend(chunk[:_CHUNK])
                *lines, rest = partial.split(b"\n")
                for line in lines:
                    self._emit(line)
                partial = bytearray(rest)
                if len(partial) > self._line_bytes:  # a line with no end yet: cut it now
                    self._emit(partial)
                    partial.clear()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            logger.debug("%s: stderr pipe closed", self._name)
        finally:  # also when cancelled: the child's task cancels the drain once the process ended
            if partial:
                self._emit(bytes(partial))
            if (summary := self._tracebacks.end()) is not None:
                self._log.exception(summary)
            self._tell_dropped()
            self._log.flush()

    def _emit(self, raw: bytes | bytearray) -> None:
        text = bytes(raw[: self._line_bytes]).decode("utf-8", "replace").rstrip()
        if len(raw) > self._line_bytes:
            text += " …[truncated]"
        if (summary := self._tracebacks.feed(text)) is not None:
            self._log.exception(summary)
        if not text:
            return
        self.out_of_memory = self.out_of_memory or says_out_of_memory(text)
        self.tail.append(text)
        self._log.keep("stderr", text)
        if not self._budget.take():
            self.dropped += 1
            self._untold += 1
            return
        self._tell_dropped()
        logger.info("%s: %s", self._name, _escaped(text, self._line_bytes))

    def _tell_dropped(self) -> None:
        if self._untold:
            logger.warning("%s: %d stderr lines not logged (rate limit)", self._name, self._untold)
            self._untold = 0


# -- tracebacks ---------------------------------------------------------------------------------

# Python's own format: `  File "/plugin/server.py", line 12, in boom`.
_PLAIN_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>.+)')
# rich's (the SDK's MCPServer logs through rich): a frame's heading in the box, maybe wrapped
# over lines — `/plugin/server.py:12 in boom` — and numbered code lines, `❱ 12 │ raise …`.
_RICH_FRAME = re.compile(r"(?P<file>.*):(?P<line>\d+) in ?(?P<name>\S+)")
_RICH_CODE = re.compile(r"(❱\s*)?\d+\s*│")
_EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(: .*)?")
# Colours and hyperlinks (SGR and OSC 8 sequences), which rich emits when the child's environment
# forces colour: a traceback reads the same without them. Any other escape stays, shown escaped.
_STYLING = re.compile(r"\x1b\[[0-9;:]*m|\x1b\]8;[^\x07\x1b]*(\x07|\x1b\\)")


class Tracebacks:
    """Reads stderr lines one by one and sums up each traceback in them in one line:
    `RuntimeError: boom-42 (at /plugin/server.py:5 in inner < /plugin/server.py:9 in boom)`.

    Understands Python's plain format and rich's boxed one, each frame heading possibly
    wrapped, and any left margin (a log record's columns). Chained exceptions give one summary
    each. Never holds more than a few frames and lines; a line outside a traceback costs one
    substring search.
    """

    def __init__(self) -> None:
        self._mode: str | None = None  # None, "plain", "rich", "rich-exception"
        self._frames: collections.deque[str] = collections.deque(maxlen=_LAST_FRAMES)
        self._heading: list[str] = []
        self._exception: list[str] = []
        self._margin = 0

    def feed(self, line: str) -> str | None:
        """The summary `line` completes, if any."""
        if "\x1b" in line:
            line = _STYLING.sub("", line)
        if self._mode is None:
            if "Traceback" in line:
                self._start(line.strip())
            return None
        stripped = line.strip()
        if self._mode == "plain":
            return self._plain(line, stripped)
        if self._mode == "rich":
            self._rich(stripped)
            return None
        return self._rich_exception(line, stripped)

    def end(self) -> str | None:
        """The summary of a traceback cut short by the end of the stream, if any."""
        summary = None
        if self._mode == "rich-exception" and self._exception:
            summary = self._summary(" ".join(self._exception))
        self._reset()
        return summary

    def _start(self, stripped: str) -> None:
        if stripped.endswith("Traceback (most recent call last):"):
            self._mode = "plain"
        elif stripped.startswith("╭") and "Traceback" in stripped:
            self._mode = "rich"

    def _plain(self, line: str, stripped: str) -> str | None:
        if not stripped or line[:1].isspace():
            frame = _PLAIN_FRAME.fullmatch(line)
            if frame is not None:
                self._frames.append(f"{frame['file']}:{frame['line']} in {frame['name']}")
            return None
        summary = self._summary(stripped) if _EXCEPTION.fullmatch(stripped) else None
        self._reset()
        self._start(stripped)
        return summary

    def _rich(self, stripped: str) -> None:
        if stripped.startswith("╰"):
            self._heading_done()
            self._mode = "rich-exception"
            return
        if not stripped.startswith("│"):
            return
        inner = stripped.strip("│").strip()
        if not inner or _RICH_CODE.match(inner):
            self._heading_done()
        elif len(self._heading) < 8:
            self._heading.append(inner)

    def _heading_done(self) -> None:
        if self._heading:
            frame = _RICH_FRAME.fullmatch("".join(self._heading))
            if frame is not None:
                self._frames.append(f"{frame['file']}:{frame['line']} in {frame['name']}")
            self._heading = []

    def _rich_exception(self, line: str, stripped: str) -> str | None:
        margin = len(line) - len(line.lstrip())
        if not self._exception:
            self._margin = margin
        # A wrapped message keeps the first line's margin; a new log record does not.
        if stripped and len(self._exception) < _EXCEPTION_LINES and margin == self._margin:
            self._exception.append(stripped)
            return None
        summary = self._summary(" ".join(self._exception)) if self._exception else None
        self._reset()
        self._start(stripped)
        return summary

    def _summary(self, exception: str) -> str:
        # The type by its class name, as rich prints it, whether or not rich wrote the
        # traceback (a sandboxed child's venv holds only the SDK's packages: no rich).
        kind, colon, rest = exception.partition(":")
        if "." in kind and " " not in kind:
            exception = kind.rsplit(".", 1)[1] + colon + rest
        frames = " < ".join(reversed(self._frames))
        return f"{exception} (at {frames})" if frames else exception

    def _reset(self) -> None:
        self._mode = None
        self._frames.clear()
        self._heading = []
        self._exception = []
