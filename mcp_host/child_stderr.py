"""Drain a child's stderr into the host log: never blocking the child, never flooding the log.

Above: `children.Child`, which starts one drain per process. Below: the pipe.
Unread pipes deadlock a child (SECURITY.md B6), so the drain always reads; what it logs is
cut to `line_bytes` per line and `lines_per_s` per second (`log_limit.TokenBucket`), and
dropped lines are counted.
The last few lines are kept so a child that dies at start can be explained.
"""

from __future__ import annotations

import collections
import logging

import anyio
from anyio.abc import ByteReceiveStream

from .log_limit import TokenBucket

__all__ = ["StderrDrain"]

logger = logging.getLogger("mcp_host.child")

_CHUNK = 65536


class StderrDrain:
    """Reads one child's stderr until EOF; `tail` holds its last lines for diagnostics."""

    def __init__(self, name: str, *, lines_per_s: int, line_bytes: int, keep: int = 5) -> None:
        self._name = name
        self._line_bytes = line_bytes
        self.tail: collections.deque[str] = collections.deque(maxlen=keep)
        self.dropped = 0
        self._budget = TokenBucket(per_s=lines_per_s, burst=lines_per_s)

    async def run(self, stream: ByteReceiveStream) -> None:
        partial = bytearray()
        try:
            async for chunk in stream:
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
        if partial:
            self._emit(bytes(partial))
        if self.dropped:
            logger.warning("%s: %d stderr lines not logged (rate limit)", self._name, self.dropped)

    def _emit(self, raw: bytes | bytearray) -> None:
        text = bytes(raw[: self._line_bytes]).decode("utf-8", "replace").rstrip()
        if len(raw) > self._line_bytes:
            text += " …[truncated]"
        if not text:
            return
        self.tail.append(text)
        if not self._budget.take():
            self.dropped += 1
            return
        logger.info("%s: %s", self._name, text.encode("unicode_escape").decode("ascii")[: self._line_bytes])
