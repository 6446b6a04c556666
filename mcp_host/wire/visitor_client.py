"""The visitor's client, as a forwarded call sees it: what a child may ask of it while the call runs.

Above: `call_routing` (a child's server→client request or log message, routed to the call it
belongs to) and `backchannel.ops` (`inference.generate`). Below: the SDK's `ServerSession` of the
visitor's request.

Two eras, one interface (`VisitorClient`):
- `PushClient` — a 2025-11-25 client: the request goes to the client as a server→client
  request on the stream of the visitor's own `tools/call` (so it reaches that client and no
  other), and its answer comes back to the child.
- `input_rounds.RoundsClient` — a 2026-07-28 client: there are no server→client requests; the
  call answers `InputRequiredResult` and the client retries with its input responses.

A client that did not declare the capability a request needs gets the child a clear
`ClientLacks` error rather than a request it would refuse.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeAlias

import mcp.types as types
from mcp.server import ServerRequestContext
from mcp.server.connection import allowed_log_levels
from mcp.shared.message import ServerMessageMetadata

from mcp_host.errors import Unavailable

__all__ = [
    "ClientLacks",
    "InputRequest",
    "InputResponse",
    "LOG_LEVELS",
    "LogSink",
    "PushClient",
    "log_sink",
    "VisitorClient",
    "lacking",
]

InputRequest: TypeAlias = types.ElicitRequest | types.CreateMessageRequest | types.ListRootsRequest
InputResponse: TypeAlias = (
    types.ElicitResult | types.CreateMessageResult | types.CreateMessageResultWithTools | types.ListRootsResult
)

LOG_LEVELS: tuple[types.LoggingLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


LogSink: TypeAlias = Callable[[types.LoggingMessageNotificationParams], Awaitable[None]]


def log_sink(ctx: ServerRequestContext[Any, Any], level: types.LoggingLevel | None) -> LogSink:
    """Log messages onto the stream of the visitor's request `ctx`, at the levels it wants:
    from `level` (set with 2025-11-25's `logging/setLevel`) up, or on 2026-07-28 from the
    level the request itself opted in to (`_meta` log level), none without it."""
    allowed = allowed_log_levels(ctx.protocol_version, ctx.meta)
    if level is not None:
        allowed = allowed & frozenset(LOG_LEVELS[LOG_LEVELS.index(level) :])

    async def send(params: types.LoggingMessageNotificationParams) -> None:
        if params.level not in allowed:
            return
        # Sent as the notification itself: the SDK's `send_log_message` is deprecated (the
        # 2026-07-28 era dropped logging/setLevel), and the opt-in is checked above.
        await ctx.session.send_notification(
            types.LoggingMessageNotification(params=params), related_request_id=ctx.request_id
        )

    return send


class ClientLacks(Unavailable):
    """The visitor's client did not declare the capability this request needs."""

    def __init__(self, what: str) -> None:
        super().__init__(f"the visitor's client does not support {what}")


class VisitorClient(Protocol):
    """The client behind one forwarded call."""

    @property
    def session_key(self) -> str:
        """Whose client this is (the visitor session's id, or `owner`): calls of one session
        may share a child's unattributed requests, calls of two sessions never do."""
        ...

    async def request(self, request: InputRequest, *, timeout_s: float) -> InputResponse:
        """Ask the client; its answer. Raises ClientLacks, or MCPError when the client refuses."""
        ...

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        """Pass a child's log message on, when the client wants that level."""
        ...


def lacking(capabilities: types.ClientCapabilities | None, request: InputRequest) -> str | None:
    """What `capabilities` lack for `request` (a name for the error), or None."""
    caps = capabilities or types.ClientCapabilities()
    if isinstance(request, types.CreateMessageRequest):
        if caps.sampling is None:
            return "sampling"
        if request.params.tools and caps.sampling.tools is None:
            return "sampling with tools"
        return None
    if isinstance(request, types.ListRootsRequest):
        return "roots" if caps.roots is None else None
    if caps.elicitation is None:
        return "elicitation"
    url_mode = isinstance(request.params, types.ElicitRequestURLParams)
    declared = caps.elicitation
    if url_mode:
        return "URL elicitation" if declared.url is None else None
    # An elicitation capability declared empty means form mode (2025-06-18 clients).
    if declared.form is None and declared.url is not None:
        return "form elicitation"
    return None


def result_type(request: InputRequest) -> type[Any]:
    if isinstance(request, types.CreateMessageRequest):
        return types.CreateMessageResultWithTools if request.params.tools else types.CreateMessageResult
    if isinstance(request, types.ListRootsRequest):
        return types.ListRootsResult
    return types.ElicitResult


class PushClient:
    """A 2025-11-25 visitor client: requests and logs ride its `tools/call` stream."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], session_key: str, level: types.LoggingLevel | None) -> None:
        self._ctx = ctx
        self._session_key = session_key
        self._log = log_sink(ctx, level)

    @property
    def session_key(self) -> str:
        return self._session_key

    async def request(self, request: InputRequest, *, timeout_s: float) -> InputResponse:
        missing = lacking(self._ctx.session.client_capabilities, request)
        if missing is not None:
            raise ClientLacks(missing)
        answer: InputResponse = await self._ctx.session.send_request(
            request,
            result_type(request),
            request_read_timeout_seconds=timeout_s,
            metadata=ServerMessageMetadata(related_request_id=self._ctx.request_id),
        )
        return answer

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        await self._log(params)
