"""Calls of 2026-07-28 visitors that wait for the visitor's input between rounds.

Above: the visitor server (`visitor.http`), for a `tools/call` from a 2026-07-28 client. Below:
the forwarded call itself (a coroutine taking the `RoundsClient` the child's requests go to).

A 2026-07-28 client takes no server→client requests: when a child asks for elicitation,
sampling or roots during a call, the call's answer to the client is `InputRequiredResult`
(the child's requests under `inputRequests`, and a `requestState`), and the client retries
the same `tools/call` with `inputResponses` and that `requestState`. The child, meanwhile, is
still inside its call, waiting for its answer: the forwarded call runs in the host's task
group and is parked between rounds.

`requestState` is a random 256-bit handle to the parked call, never data the host trusts
(docs/security.md E16): it is bound to the visitor session, the tool name and a digest of the
arguments; it is single use; it expires with the input timeout (the child's request then
fails and the call is cancelled). A state that fails any of these is refused as
`invalid_arguments`. Parked calls live in this replica's memory: the state is
`<replica id>.<token>`, so a retry that reaches another replica is sent on to this one
(`replica_forward`).

A client that declared none of elicitation, sampling and roots can be asked nothing: its calls
run inline in the request's own task (the child's requests fail at once), since the task hop
a parkable call needs costs about 0.6 ms per call over HTTP.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import anyio
import mcp.types as types
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import MCPError

from mcp_host.children import Answer
from mcp_host.errors import INVALID_REQUEST, InvalidArguments, Unavailable
from mcp_host.wire import ClientLacks, InputRequest, InputResponse, LogSink, lacking

__all__ = ["InputRounds", "RoundsClient"]

logger = logging.getLogger(__name__)

_STATE_BYTES = 32


@dataclass
class _Pending:
    """One request of the child waiting for the visitor's answer."""

    key: str
    request: InputRequest
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: InputResponse | None = None


@dataclass
class _Done:
    result: Answer | None = None
    error: BaseException | None = None


_Event = _Pending | _Done


class RoundsClient:
    """A 2026-07-28 visitor client, as the child's requests reach it: through input rounds."""

    def __init__(
        self,
        session_key: str,
        capabilities: types.ClientCapabilities | None,
        events: MemoryObjectSendStream[_Event],
    ) -> None:
        self._session_key = session_key
        self._capabilities = capabilities
        self._events = events
        self._count = 0
        self.log_sink: LogSink | None = None
        """Where log messages go: the stream of the round in progress; none while parked."""

    @property
    def session_key(self) -> str:
        return self._session_key

    async def request(self, request: InputRequest, *, timeout_s: float) -> InputResponse:
        missing = lacking(self._capabilities, request)
        if missing is not None:
            raise ClientLacks(missing)
        self._count += 1
        pending = _Pending(f"input-{self._count}", request)
        await self._events.send(pending)
        with anyio.fail_after(timeout_s):
            await pending.answered.wait()
        if pending.answer is None:
            raise MCPError(code=INVALID_REQUEST, message="the visitor's client gave no answer to this request")
        return pending.answer

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        # Log delivery on 2026-07-28 rides the request's own stream, which a parked call
        # does not have: messages sent while parked stay in the host's log.
        if self.log_sink is None:
            logger.debug("a log message of a call parked between input rounds was not passed on")
            return
        await self.log_sink(params)


class _Unasked:
    """A 2026-07-28 client that declared none of elicitation, sampling and roots: every
    request of the child fails at once, so the call runs inline, with no rounds to park."""

    def __init__(self, session_key: str, capabilities: types.ClientCapabilities | None, log: LogSink | None) -> None:
        self._session_key = session_key
        self._capabilities = capabilities
        self._log = log

    @property
    def session_key(self) -> str:
        return self._session_key

    async def request(self, request: InputRequest, *, timeout_s: float) -> InputResponse:
        raise ClientLacks(lacking(self._capabilities, request) or request.method)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if self._log is not None:
            await self._log(params)


def _can_answer(capabilities: types.ClientCapabilities | None) -> bool:
    caps = capabilities or types.ClientCapabilities()
    return caps.elicitation is not None or caps.sampling is not None or caps.roots is not None


@dataclass
class _Parked:
    session_key: str
    tool: str
    digest: str
    expires_at: float
    events: MemoryObjectReceiveStream[_Event]
    waiting: list[_Pending]
    cancel: anyio.CancelScope
    client: RoundsClient


def _digest(tool: str, arguments: Mapping[str, Any] | None) -> str:
    canonical = json.dumps([tool, arguments or {}], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


_T = TypeVar("_T", bound=Answer)
Forward = Callable[["RoundsClient | _Unasked"], Awaitable[_T]]
"""The forwarded call of a first round (the visitor door's), given the client its child's
requests reach: its answer, the SDK's model (`serve_one`'s way) or raw (`visitor.direct_call`)."""


class InputRounds:
    """Parked calls of this replica, by request state."""

    def __init__(
        self,
        task_group: TaskGroup,
        *,
        timeout_s: float,
        max_parked: int = 1024,
        max_per_session: int = 8,
        replica_id: str = "",
    ) -> None:
        """`replica_id`: the prefix of every state this replica hands out (none: no prefix)."""
        self._tg = task_group
        self._prefix = f"{replica_id}." if replica_id else ""
        self._timeout_s = timeout_s
        self._max_parked = max_parked
        self._max_per_session = max_per_session
        self._parked: dict[str, _Parked] = {}

    def parked_count(self) -> int:
        return len(self._parked)

    async def call(
        self,
        session_key: str,
        capabilities: types.ClientCapabilities | None,
        params: types.CallToolRequestParams,
        forward: Forward[types.CallToolResult],
        log: LogSink | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The first round of a call (`forward` starts it), or the next one of a parked call.
        `log`: where the child's log messages go during this round."""
        if params.request_state is None:
            return await self.start(session_key, capabilities, params.name, params.arguments, forward, log)
        self._expire()
        digest = _digest(params.name, params.arguments)
        parked = self._resume(session_key, params, digest)
        parked.client.log_sink = log
        result = await self._next(parked.events, parked.cancel, parked.client, params.name, digest)
        if isinstance(result, dict):  # a call whose first round was direct (`visitor.direct_call`)
            return types.CallToolResult.model_validate(result, by_name=False)
        return result

    async def start(
        self,
        session_key: str,
        capabilities: types.ClientCapabilities | None,
        tool: str,
        arguments: Mapping[str, Any] | None,
        forward: Forward[_T],
        log: LogSink | None = None,
    ) -> _T | types.InputRequiredResult:
        """The first round of a call of `tool` with `arguments`: `forward` starts it, and its
        answer is returned, or the call is parked at the child's first request (`call` goes on)."""
        if not _can_answer(capabilities):
            # Nothing could be asked of this client: no task, no parking (a task hop costs
            # ~0.6 ms per call on the bench's HTTP path).
            return await forward(_Unasked(session_key, capabilities, log))
        self._expire()
        digest = _digest(tool, arguments)
        send, receive = anyio.create_memory_object_stream[_Event](16)
        client = RoundsClient(session_key, capabilities, send)
        client.log_sink = log
        cancel = anyio.CancelScope()

        async def run() -> None:
            with cancel:
                async with send:
                    try:
                        done = _Done(result=await forward(client))
                    except Exception as exc:
                        done = _Done(error=exc)
                    # Nobody may be waiting any more (the visitor went away): then it is dropped.
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        await send.send(done)

        self._tg.start_soon(run)
        return cast("_T | types.InputRequiredResult", await self._next(receive, cancel, client, tool, digest))

    def _resume(self, session_key: str, params: types.CallToolRequestParams, digest: str) -> _Parked:
        state = params.request_state or ""
        parked = self._parked.pop(state, None) if len(state) < 200 else None
        if parked is None or parked.session_key != session_key or parked.digest != digest:
            if parked is not None:  # not this session's, or another call's: it stays parked
                self._parked[state] = parked
            raise InvalidArguments("requestState is unknown, expired, or not for this call")
        answers = params.input_responses or {}
        for pending in parked.waiting:
            pending.answer = answers.get(pending.key)
            pending.answered.set()
        return parked

    async def _next(
        self,
        events: MemoryObjectReceiveStream[_Event],
        cancel: anyio.CancelScope,
        client: RoundsClient,
        tool: str,
        digest: str,
    ) -> Answer | types.InputRequiredResult:
        parked = False
        try:
            try:
                event = await events.receive()
            except anyio.EndOfStream:
                raise Unavailable("the call ended without a result") from None
            if isinstance(event, _Done):
                events.close()
                if event.error is not None:
                    raise event.error
                assert event.result is not None
                return event.result
            waiting = [event]
            while True:  # the child may have asked several things at once
                try:
                    more = events.receive_nowait()
                except anyio.WouldBlock:
                    break
                if isinstance(more, _Done):  # cannot happen while a request waits; keep order anyway
                    break
                waiting.append(more)
            # One visitor that never answers cannot take every slot from the others.
            mine = sum(1 for p in self._parked.values() if p.session_key == client.session_key)
            if mine >= self._max_per_session or len(self._parked) >= self._max_parked:
                raise Unavailable("too many calls are waiting for their visitors' input")
            state = self._prefix + secrets.token_urlsafe(_STATE_BYTES)
            self._parked[state] = _Parked(
                client.session_key, tool, digest, time.monotonic() + self._timeout_s, events, waiting, cancel, client
            )
            client.log_sink = None  # this round's stream ends with its answer
            parked = True
            return types.InputRequiredResult(input_requests={p.key: p.request for p in waiting}, request_state=state)
        finally:
            if not parked:
                # The visitor went away or the round failed: the call ends with it.
                cancel.cancel()
                events.close()

    def close(self) -> None:
        """End every parked call (the host is stopping)."""
        for parked in self._parked.values():
            parked.cancel.cancel()
            parked.events.close()
        self._parked.clear()

    def _expire(self) -> None:
        now = time.monotonic()
        for state in [s for s, p in self._parked.items() if p.expires_at <= now]:
            parked = self._parked.pop(state)
            parked.cancel.cancel()
            parked.events.close()
            logger.info("a call waiting for its visitor's input expired; it was cancelled")
