"""A 2026-07-28 visitor's `tools/call` answered without the SDK's server or models (issue 31).

Above: `exchange.ModernExchange`, which offers it a request after every check of its own
(headers, Accept, Host/Origin, the envelope, `Mcp-Param-*`), and has already left to the SDK a
request that may stream (a progress token, a log level) or carries a `requestState`. Below:
`input_rounds.InputRounds` (a call whose child asks the visitor something is parked as today),
`door.VisitorDoor.call_tool_raw` (the same gates as every call, and the child asked with a raw
JSON-RPC request), `wire.plain_tool_result` (the child's answer checked as raw JSON).

A call goes this way only when its params are what the SDK would accept and read the same: a
string `name`, `arguments` an object (or absent, or null), a `_meta` object with no key the SDK
reads itself beyond the envelope the exchange checked; nothing else (no `task`, no
`inputResponses`). Anything else is declined (None) and `serve_one` answers it. The answer is
shaped as `serve_one` shapes the visitor server's: a plain dict of the child's as it is; a
model (the host's refusals, tool search's results, a child's answer that is not plain, an
`InputRequiredResult`) dumped and checked against the 2026-07-28 surface; then `resultType` and
the `serverInfo` stamp. Tracing on (the SDK's span middleware): every call is declined, so
each one gets its span.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import mcp.types as types
from mcp import MCPError
from mcp.server.connection import Connection
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INTERNAL_ERROR,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)
from mcp_types.methods import serialize_server_result, validate_client_request
from pydantic import BaseModel, ValidationError
from starlette.types import Scope

from mcp_host.access import Session
from mcp_host.children import Answer
from mcp_host.errors import HostError, tool_error
from mcp_host.observe import tracing_configured
from mcp_host.wire import LogSink, speaks_for_host

from .door import VisitorDoor
from .input_rounds import InputRounds
from .server import SCOPE_KEY
from .tasks import offered_in_modern

__all__ = ["DirectCall"]

logger = logging.getLogger(__name__)

_PARAM_KEYS: Final = frozenset({"name", "arguments", "_meta"})
_ENVELOPE: Final = frozenset({PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY})
# The one `_meta` key of the SDK's request model that is not under a reserved prefix: the SDK
# types it (and drops the whole `_meta` when it does not fit), and the visitor server reads it.
_SNAKE_PROGRESS: Final = "progress_token"


async def _unheard(params: types.LoggingMessageNotificationParams) -> None:
    """The log sink of a request that opted in to no log level: every message is dropped (as
    `wire.log_sink` drops them then)."""


def _plain_params(params: Mapping[str, Any], version: str) -> tuple[str, dict[str, Any] | None, dict[str, Any]] | None:
    """`params` as name, arguments and `_meta`, when the SDK would accept them and read them
    the same (see the module); None otherwise. The SDK's own check of the params (its
    2026-07-28 surface, ~8 µs) decides what it would accept: client info and capabilities are
    typed there, and the exchange checked only that they are there."""
    if not params.keys() <= _PARAM_KEYS:
        return None
    name, arguments, meta = params.get("name"), params.get("arguments"), params.get("_meta")
    if type(name) is not str or (arguments is not None and type(arguments) is not dict) or type(meta) is not dict:
        return None
    if _SNAKE_PROGRESS in meta or any(key not in _ENVELOPE and speaks_for_host(key) for key in meta):
        return None
    try:
        validate_client_request("tools/call", version, params)
    except (ValidationError, KeyError, ValueError):
        return None
    return name, arguments, meta


class DirectCall:
    """The `exchange.DirectAnswer` of `tools/call` (see the module)."""

    def __init__(self, door: VisitorDoor, rounds: InputRounds, server_info: Mapping[str, Any]) -> None:
        """`server_info`: the visitor server's `serverInfo` stamp (`Server.server_info_stamp`)."""
        self._door = door
        self._rounds = rounds
        self._server_info = dict(server_info)
        self._traced = tracing_configured()

    async def __call__(self, scope: Scope, params: Mapping[str, Any], connection: Connection) -> dict[str, Any] | None:
        if self._traced:
            return None
        plain = _plain_params(params, connection.protocol_version)
        session = scope.get(SCOPE_KEY)
        if plain is None or not isinstance(session, Session):  # no session: `serve_one` refuses it
            return None
        name, arguments, meta = plain

        async def forward(client: Any) -> Answer:
            return await self._door.call_tool_raw(client, session, name, arguments, meta, offered=offered_in_modern)

        sink: LogSink = _unheard
        try:
            answer = await self._rounds.start(
                session.id, connection.client_capabilities, name, arguments, forward, sink
            )
        except HostError as exc:  # as `VisitorServer.call_tool`: the call itself never raises
            answer = tool_error(exc, structured=False)
        return self._shaped(answer, connection.protocol_version)

    def _shaped(self, answer: Answer | types.InputRequiredResult, version: str) -> dict[str, Any]:
        """`answer` as `serve_one` writes the visitor server's result (`ServerRunner._serialize`)."""
        if isinstance(answer, BaseModel):
            dumped = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
            try:
                answer = serialize_server_result("tools/call", version, dumped)
            except ValidationError:
                logger.exception("a tools/call result of the host's did not fit the %s surface", version)
                raise MCPError(code=INTERNAL_ERROR, message="Handler returned an invalid result") from None
        if answer.get("resultType") is None:
            answer["resultType"] = "complete"
        meta = answer.get("_meta")
        if meta is None:
            answer["_meta"] = {SERVER_INFO_META_KEY: dict(self._server_info)}
        elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
            answer["_meta"] = {**meta, SERVER_INFO_META_KEY: dict(self._server_info)}
        return answer
