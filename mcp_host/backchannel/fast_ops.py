"""The back-channel's fast path: a host op sent the way the plugin kit sends every op — one
2026-07-28 `tools/call` line, its envelope in `_meta` — is read with `json.loads` and answered
as one JSON line, without the SDK's message models or its server's dispatch (issue 31, item 5).

Above: `server.BackChannel`, which offers each line of a connection here first (through the
framing's `intercept`) and calls `BackChannel.call` for a taken one, exactly as its SDK server
does. Below: nothing but `json`.

Only an exact shape is taken; any other line — `initialize`, `tools/list`, `ping`, a
2025-11-25 call, a call carrying a trace (`traceparent`: the SDK's server continues it), a
call with params this path does not know (a task, a cursor), anything malformed — goes on to
the SDK's server as before, which answers or refuses it with its own errors. So the fast path
changes the cost of an op, never what may be asked or what is answered: both paths end in the
same `BackChannel.call`, and the answer is the same tool result (the tests compare the two).

Each taken op runs in a task of its own, as the SDK's server runs each request: a client that
sends several requests on one connection is not made to wait op by op.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import TaskGroup

from mcp_host.wire import LineWriter

__all__ = ["FastCall", "FastOps", "fast_call"]

logger = logging.getLogger(__name__)

_ERA = "2026-07-28"
_PARAMS = frozenset({"name", "arguments", "_meta"})
_TRACE_KEYS = frozenset({"traceparent", "tracestate", "baggage"})

Answer = Callable[[str, Mapping[str, Any] | None, Mapping[str, Any]], Awaitable[types.CallToolResult]]
"""`BackChannel.call` for one plugin: (op, arguments, `_meta`) → the tool result."""


@dataclass(frozen=True)
class FastCall:
    """A host op as the fast path read it."""

    id: int | str
    name: str
    arguments: dict[str, Any] | None
    meta: dict[str, Any]


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def fast_call(line: bytes) -> FastCall | None:
    """`line` as a 2026-07-28 `tools/call` this path answers, or None (the SDK's server reads it)."""
    try:
        message = json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    if type(message) is not dict or message.get("jsonrpc") != "2.0" or message.get("method") != "tools/call":
        return None
    if message.keys() != {"jsonrpc", "id", "method", "params"}:
        return None
    request_id, params = message["id"], message["params"]
    if type(request_id) not in (int, str) or type(params) is not dict or not params.keys() <= _PARAMS:
        return None
    name, arguments, meta = params.get("name"), params.get("arguments"), params.get("_meta")
    if type(name) is not str or (arguments is not None and type(arguments) is not dict) or type(meta) is not dict:
        return None
    if meta.get(types.PROTOCOL_VERSION_META_KEY) != _ERA or not _TRACE_KEYS.isdisjoint(meta):
        return None
    return FastCall(request_id, name, arguments, meta)


class FastOps:
    """One connection's fast path: takes the lines `fast_call` reads and answers each in a task
    of `tasks`, through `writer` once the framing has made it (`attach`)."""

    def __init__(self, answer: Answer, tasks: TaskGroup, name: str, server_info: Mapping[str, Any]) -> None:
        """`server_info`: the SDK server's `serverInfo`, which a 2026-07-28 result carries in
        its `_meta` as the SDK's own answers do."""
        self._answer = answer
        self._tasks = tasks
        self._name = name
        self._server_info = dict(server_info)
        self._writer: LineWriter | None = None

    def attach(self, writer: LineWriter) -> None:
        self._writer = writer

    def take(self, line: bytes) -> bool:
        """The framing's `intercept`: whether this path answers `line`."""
        if self._writer is None:
            return False
        call = fast_call(line)
        if call is None:
            return False
        self._tasks.start_soon(self._run, call, self._writer)
        return True

    async def _run(self, call: FastCall, writer: LineWriter) -> None:
        result = await self._answer(call.name, call.arguments, call.meta)  # the channel's error boundary
        body = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        body.setdefault("resultType", "complete")  # required at 2026-07-28
        body["_meta"] = {**body.get("_meta", {}), types.SERVER_INFO_META_KEY: self._server_info}
        try:
            line = json.dumps({"jsonrpc": "2.0", "id": call.id, "result": body}, ensure_ascii=False).encode()
        except ValueError:  # a lone surrogate in a connector's text: as the SDK's writer refuses it
            logger.warning("%s: a host op's answer could not be encoded as JSON; not sent", self._name)
            error = {"code": types.INVALID_PARAMS, "message": "the message could not be encoded as JSON"}
            line = json.dumps({"jsonrpc": "2.0", "id": call.id, "error": error}).encode()
        try:
            await writer.send_line(line + b"\n")
        except anyio.BrokenResourceError:
            return  # the plugin hung up; its op is done and nobody waits for the answer
