"""The bytes of an open tunnel: pumped both ways (`pump`) within the gate's rolling-minute
budget (`MinuteBudget`: reads pause while the last minute's bytes reach it), closed when no
byte moved either way for the idle time; and the bytes the proxy sends on a child's behalf
before (`send_counted`: a forwarded request's head), within the same budget.

Above: `gate` (one budget per gate, shared by its tunnels). Below: anyio streams.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Literal

import anyio
from anyio.abc import ByteStream

__all__ = ["Direction", "MinuteBudget", "pump", "send_counted"]

Direction = Literal["up", "down"]
"""`up`: from the child to its destination; `down`: back."""

_CHUNK = 64 * 1024
_WINDOW_S = 60


class MinuteBudget:
    """At most `limit` bytes in any rolling minute, counted per second of the event loop's
    clock; `room` waits while the last minute's bytes reach the limit. Readers that wait on
    their sockets at once may each read what was left: past the limit by at most one read
    (64 KiB) per other reader, then paused until a minute has passed."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seconds: deque[list[int]] = deque()  # [second, bytes], oldest first
        self._used = 0
        self.throttled = 0
        """How many reads waited for room."""

    def _forget_old(self, now: float) -> None:
        while self._seconds and self._seconds[0][0] <= now - _WINDOW_S:
            self._used -= self._seconds.popleft()[1]

    async def room(self) -> int:
        """Bytes that may be read now (at least one), after waiting for them when needed."""
        now = anyio.current_time()
        self._forget_old(now)
        if self._used >= self._limit:
            self.throttled += 1
            while self._used >= self._limit:
                await anyio.sleep(self._seconds[0][0] + _WINDOW_S - now)
                now = anyio.current_time()
                self._forget_old(now)
        return self._limit - self._used

    def spend(self, count: int) -> None:
        second = math.floor(anyio.current_time())
        if self._seconds and self._seconds[-1][0] == second:
            self._seconds[-1][1] += count
        else:
            self._seconds.append([second, count])
        self._used += count


class _Idle:
    """When a byte last moved; `watch` cancels `scope` once none has for `idle_s`."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.last = anyio.current_time()

    def moved(self) -> None:
        self.last = anyio.current_time()

    async def watch(self, scope: anyio.CancelScope) -> None:
        left = self.idle_s
        while left > 0:
            await anyio.sleep(left)
            left = self.last + self.idle_s - anyio.current_time()
        scope.cancel()


async def pump(
    child: ByteStream,
    upstream: ByteStream,
    budget: MinuteBudget,
    idle_s: float,
    counted: Callable[[Direction, int], None],
) -> None:
    """Carry bytes both ways until both sides end, either breaks, or the tunnel is idle for
    `idle_s`; `counted` is told each chunk's size and direction."""
    idle = _Idle(idle_s)
    watching = anyio.CancelScope()
    ended: list[Direction] = []
    async with anyio.create_task_group() as tasks:

        async def one_way(source: ByteStream, sink: ByteStream, direction: Direction) -> None:
            try:
                await _carry(source, sink, budget, idle, lambda n: counted(direction, n))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                tasks.cancel_scope.cancel()  # one side is gone: so is the tunnel
                return
            ended.append(direction)
            if len(ended) == 2:
                watching.cancel()

        async def watch() -> None:
            with watching:
                await idle.watch(tasks.cancel_scope)

        tasks.start_soon(watch)
        tasks.start_soon(one_way, child, upstream, "up")
        tasks.start_soon(one_way, upstream, child, "down")


async def send_counted(sink: ByteStream, data: bytes, budget: MinuteBudget, counted: Callable[[int], None]) -> None:
    """Send `data`, bytes the proxy writes on the child's behalf before the tunnel is pumped
    (an absolute-form request's head, at most 16 KiB), as a pumped read is: after waiting for
    room in the budget, then spent and counted whole. Waiting first matters: a child could
    otherwise send a head per connection past any budget."""
    await budget.room()
    budget.spend(len(data))
    counted(len(data))
    await sink.send(data)


async def _carry(
    source: ByteStream,
    sink: ByteStream,
    budget: MinuteBudget,
    idle: _Idle,
    counted: Callable[[int], None],
) -> None:
    while True:
        allowed = await budget.room()
        idle.moved()  # a wait for the budget is not idleness
        try:
            data = await source.receive(min(_CHUNK, allowed))
        except anyio.EndOfStream:
            break
        budget.spend(len(data))
        counted(len(data))
        idle.moved()
        await sink.send(data)
    await sink.send_eof()
