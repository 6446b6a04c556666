"""`EgressGate`: one child instance's unix socket on the egress proxy, and what it costs:
each connection asks for a destination (`fronts`), is refused or dialled (`dial`), and its
bytes are pumped (`tunnel`) within the child's `EgressCaps`; `stats` counts it all.

A connection past `caps.connections` is answered "too many" (429, SOCKS 0x02) once its head is
read; past twice that many it is closed at once, so a flood of connections holds no more than
that. A refused destination is logged (warning) and told to `on_refused` once per gate; the
log and the refusal name the destination only as the proxy parsed it (a host name grammar, an
address), never other bytes the child sent, and at most `_MAX_REPORTED` destinations.

Above: `proxy` (opens and closes gates in its task group). Below: `fronts`, `dial`, `tunnel`,
`observe.HostMetrics`.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketListener, SocketStream, TaskStatus
from anyio.streams.buffered import BufferedByteStream

from mcp_host.observe import HostMetrics
from mcp_host.plugins import EgressPolicy

from .caps import EgressCaps
from .dial import dial
from .fronts import Front, HttpFront, front_for
from .heads import Destination, NoTunnel
from .resolver import Resolver
from .tunnel import Direction, MinuteBudget, pump, send_counted

__all__ = ["HEAD_TIMEOUT_S", "EgressGate", "GateStats", "Refusal"]

logger = logging.getLogger(__name__)

HEAD_TIMEOUT_S = 10.0
"""How long a connection may take to say where it goes (408 past it)."""
_ACCEPT_PAUSE_S = 0.1  # after an accept failed (no file descriptor left): not a busy loop
_MAX_REPORTED = 256  # refused destinations logged and reported per gate; more are counted only


@dataclass(frozen=True)
class Refusal:
    """A destination a child instance was refused: `destination` is `host:port` as the proxy
    read it (an IPv6 address in brackets), `reason` the line the child was answered."""

    plugin_id: str
    scope: str | None
    destination: str
    reason: str


@dataclass(frozen=True)
class GateStats:
    """What a gate carried: connections open now and since it opened, connections answered
    without a tunnel (`refused`, the capped ones too), bytes from the child to its destinations
    (`bytes_up`: a forwarded request's head counted as sent on, in origin form) and back to it
    (`bytes_down`), and reads paused at the byte budget (`throttled`)."""

    connections_now: int = 0
    connections_total: int = 0
    refused: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    throttled: int = 0


class EgressGate:
    """One child instance's socket on the proxy; made by `EgressProxy.open`."""

    def __init__(
        self,
        path: Path,
        plugin_id: str,
        scope: str | None,
        policy: EgressPolicy,
        caps: EgressCaps,
        resolver: Resolver,
        *,
        on_refused: Callable[[Refusal], None] | None,
        metrics: HostMetrics | None,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        self.path = path
        """The socket's path on the host (bind it into the child's sandbox)."""
        self.plugin_id = plugin_id
        self.scope = scope
        self._policy = policy
        self._caps = caps
        self._resolver = resolver
        self._on_refused = on_refused
        self._metrics = metrics
        self._head_timeout_s = head_timeout_s
        self._budget = MinuteBudget(caps.bytes_per_minute)
        self._now = self._total = self._refused = self._up = self._down = 0
        self._held = 0  # connections being served, the capped ones too
        self._reported: set[Destination] = set()
        self._capped_logged = False
        self._serving = anyio.CancelScope()
        self._listener: SocketListener | None = None
        self._stopped = anyio.Event()

    @property
    def stats(self) -> GateStats:
        return GateStats(self._now, self._total, self._refused, self._up, self._down, self._budget.throttled)

    async def serve(self, listener: SocketListener, *, task_status: TaskStatus[None]) -> None:
        """Accept and serve connections until `aclose`; the listener is closed on the way out."""
        self._listener = listener
        try:
            with self._serving:
                async with listener, anyio.create_task_group() as connections:
                    task_status.started()
                    while True:
                        try:
                            accepted = await listener.accept()
                        except anyio.ClosedResourceError:
                            break  # `aclose` closed it
                        except anyio.BrokenResourceError:  # out of file descriptors, most likely
                            logger.warning("plugin %s: the egress gate could not accept a connection", self.plugin_id)
                            await anyio.sleep(_ACCEPT_PAUSE_S)
                            continue
                        connections.start_soon(self._serve_one, accepted)
                    connections.cancel_scope.cancel()
        finally:
            self.path.unlink(missing_ok=True)
            self._stopped.set()

    async def aclose(self) -> None:
        """Stop listening, close every tunnel of this gate and remove its socket."""
        if self._listener is not None:
            # Closed rather than cancelled: anyio's unix listener may raise InvalidStateError
            # from a callback when its accept is cancelled as a connection arrives.
            await self._listener.aclose()
        else:
            self._serving.cancel()
        await self._stopped.wait()

    async def _serve_one(self, accepted: SocketStream) -> None:
        try:
            connection = await _over_transport(accepted)
        except (OSError, ValueError):
            return  # gone before it was served
        async with connection:
            if self._held >= 2 * self._caps.connections:
                self._count_capped()
                return
            capped = self._held >= self._caps.connections
            self._held += 1
            try:
                if capped:
                    self._count_capped()
                    await self._answer(connection, capped=True)
                else:
                    self._now += 1
                    try:
                        await self._answer(connection, capped=False)
                    finally:
                        self._now -= 1
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass  # the child hung up: nothing to answer
            except Exception:  # a fault of the proxy's: this connection ends, the gate serves on
                logger.exception("plugin %s: an egress connection failed", self.plugin_id)
            finally:
                self._held -= 1

    async def _answer(self, connection: SocketStream, *, capped: bool) -> None:
        stream = BufferedByteStream(connection)
        front: Front = HttpFront()  # what answers a connection that said nothing in time
        asked: Destination | NoTunnel = NoTunnel("slow", f"the request head took over {self._head_timeout_s:g} s")
        with anyio.move_on_after(self._head_timeout_s):
            try:
                first = await stream.receive_exactly(1)
            except anyio.IncompleteRead:
                return  # closed without a word
            stream.feed_data(first)
            front = front_for(first[0])
            asked = await front.ask(stream)
        if capped:
            asked = NoTunnel("capped", f"the plugin has {self._caps.connections} connections open, its limit")
        if isinstance(asked, NoTunnel):
            await self._refuse(front, stream, asked, None)
            return
        upstream = await dial(asked, self._policy, self._resolver)
        if isinstance(upstream, NoTunnel):
            await self._refuse(front, stream, upstream, asked)
            return
        async with upstream:
            self._count("allowed")
            first = await front.opened(stream)
            if first:
                await send_counted(upstream, first, self._budget, lambda n: self._carried("up", n))
            await pump(stream, upstream, self._budget, self._caps.idle_s, self._carried)

    async def _refuse(self, front: Front, stream: ByteStream, refusal: NoTunnel, asked: Destination | None) -> None:
        if refusal.outcome != "capped":  # counted when it came
            self._count("refused")
        if refusal.outcome == "refused" and asked is not None:
            self._report(asked, refusal.reason)
        else:
            logger.debug("plugin %s: an egress connection got no tunnel (%s)", self.plugin_id, refusal.outcome)
        with anyio.move_on_after(self._head_timeout_s):  # a child that reads nothing does not hold this
            await front.refuse(stream, refusal)

    def _report(self, destination: Destination, reason: str) -> None:
        """Log and report a refused destination, the first time this gate refuses it."""
        if destination in self._reported or len(self._reported) > _MAX_REPORTED:
            return
        self._reported.add(destination)
        if len(self._reported) > _MAX_REPORTED:
            logger.warning(
                "plugin %s: over %d egress destinations refused; no more are logged", self.plugin_id, _MAX_REPORTED
            )
            return
        logger.warning("plugin %s: egress to %s refused: %s", self.plugin_id, destination, reason)
        if self._on_refused is not None:
            self._on_refused(Refusal(self.plugin_id, self.scope, str(destination), reason))

    def _count_capped(self) -> None:
        self._count("capped")
        if not self._capped_logged:
            self._capped_logged = True
            logger.warning(
                "plugin %s: egress connections refused at the limit of %d open", self.plugin_id, self._caps.connections
            )

    def _count(self, outcome: str) -> None:
        self._total += 1
        if outcome != "allowed":
            self._refused += 1
        if self._metrics is not None:
            self._metrics.egress_connection(self.plugin_id, outcome)

    def _carried(self, direction: Direction, count: int) -> None:
        if direction == "up":
            self._up += count
        else:
            self._down += count
        if self._metrics is not None:
            self._metrics.egress_bytes_carried(self.plugin_id, direction, count)


async def _over_transport(accepted: SocketStream) -> SocketStream:
    """`accepted`'s socket as a stream over an asyncio transport. anyio's own unix stream waits
    on the raw socket with a future its reader callback completes, and a receive cancelled as
    bytes arrive (as a tunnel's is when its other way breaks) makes that callback raise
    InvalidStateError (agronholm/anyio#1267); a transport's reads are cancelled cleanly."""
    raw = socket.socket(fileno=accepted.extra(SocketAttribute.raw_socket).detach())
    try:
        return await SocketStream.from_socket(raw)
    except BaseException:
        raw.close()
        raise
