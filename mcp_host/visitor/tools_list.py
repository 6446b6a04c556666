"""The direct answer to a 2026-07-28 `tools/list` (issue 31): the session's list, reconciled
afresh every time, written without the SDK's handler chain, and its tools serialised once per
distinct set of tool definitions.

Above: `direct.direct_answers`, which names it for `exchange.ModernExchange`. Below:
`VisitorDoor.list_tools` — the one path every list takes (the children's real lists, the
manifests, pins and holds, the ACL, quota, tool search's working set) — and the SDK's own
result shaping: the per-version surface (`mcp_types.methods.serialize_server_result`), the
cache hint (`server.PRIVATE_HINT`), the `resultType` and the `serverInfo` stamp, in the order
`ServerRunner._serialize` applies them; the answer is exactly `serve_one`'s
(tests/visitor/test_tools_list.py compares them through a real host).

Only the serialisation is reused. A set is keyed on the identity of its tool objects: the
bindings return the very same objects while no child's list, pin, hold or grant changed
(`children.ToolPages`, `Bindings`), and a change gives new objects or another subset — a new
key. The entry keeps its tools alive, so an id in a key is never reused while it is cached.

Declined (None: `serve_one` answers): a request `serve_one` would check differently — a cursor
or any other param besides `_meta`, params the version's surface refuses —, a request with no
session in its scope, and every request while tracing is configured (the SDK's middleware
records a span per request).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final

import mcp.types as types
from mcp.server.caching import apply_cache_hint
from mcp.server.connection import Connection
from mcp_types import SERVER_INFO_META_KEY
from mcp_types import methods as _methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.types import Scope

from mcp_host.access import Session
from mcp_host.observe import tracing_configured
from mcp_host.wire import without_host_keys

from .door import VisitorDoor
from .server import PRIVATE_HINT, SCOPE_KEY, SERVER_NAME, SERVER_VERSION
from .tasks import hidden_for_modern

__all__ = ["ToolsListAnswer"]

_METHOD: Final = "tools/list"
# Distinct tool sets whose serialisation is kept (one per role or working set, in practice).
_MAX_SETS: Final = 256
# The visitor server's identity as `Server.server_info_stamp` dumps it (name, version; no title).
_STAMP: Final = types.Implementation(name=SERVER_NAME, version=SERVER_VERSION).model_dump(
    by_alias=True, mode="json", exclude_none=True
)


class ToolsListAnswer:
    """A `exchange.DirectAnswer` for `tools/list` (see the module)."""

    def __init__(self, door: VisitorDoor) -> None:
        self._door = door
        # (version, ids of the tools) -> (the tools, kept alive; their serialised list)
        self._serialised: OrderedDict[tuple[str, tuple[int, ...]], tuple[Sequence[types.Tool], list[Any]]] = (
            OrderedDict()
        )

    async def __call__(self, scope: Scope, params: Mapping[str, Any], connection: Connection) -> dict[str, Any] | None:
        """The result `serve_one` would give, or None (declined). Raises as the handler does."""
        session = scope.get(SCOPE_KEY)
        version = connection.protocol_version
        if not isinstance(session, Session) or version not in MODERN_PROTOCOL_VERSIONS or tracing_configured():
            return None
        if not params.keys() <= {"_meta"} or not _params_pass(version, params):
            return None
        listed = await self._door.list_tools(session)
        return self._result(version, hidden_for_modern(listed.tools), listed.meta())

    def _result(self, version: str, tools: list[types.Tool], meta: dict[str, Any] | None) -> dict[str, Any]:
        """What `ServerRunner._serialize` makes of `ListToolsResult(tools, _meta=meta)`, its tools
        serialised once per distinct set."""
        hinted = apply_cache_hint(types.ListToolsResult(tools=[], _meta=meta), PRIVATE_HINT)
        head = hinted.model_dump(by_alias=True, mode="json", exclude_none=True)
        result = _methods.serialize_server_result(_METHOD, version, head)
        result["tools"] = self._tools(version, tools, head)
        if result.get("resultType") is None:
            result["resultType"] = "complete"
        stamped = result.get("_meta")
        if stamped is None:
            result["_meta"] = {SERVER_INFO_META_KEY: dict(_STAMP)}
        elif isinstance(stamped, dict) and stamped.get(SERVER_INFO_META_KEY) is None:
            result["_meta"] = {**stamped, SERVER_INFO_META_KEY: dict(_STAMP)}
        return result

    def _tools(self, version: str, tools: list[types.Tool], head: dict[str, Any]) -> list[Any]:
        """`tools` as the surface of `version` writes them in a result like `head` (kept and
        shared between answers: the exchange only writes them out)."""
        key = (version, tuple(map(id, tools)))
        kept = self._serialised.get(key)
        if kept is not None:
            self._serialised.move_to_end(key)
            return kept[1]
        dumped = [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in without_host_keys(tools)]
        serialised: list[Any] = _methods.serialize_server_result(_METHOD, version, {**head, "tools": dumped})["tools"]
        self._serialised[key] = (tuple(tools), serialised)
        if len(self._serialised) > _MAX_SETS:
            self._serialised.popitem(last=False)
        return serialised


def _params_pass(version: str, params: Mapping[str, Any]) -> bool:
    """Whether `params` pass the checks `serve_one` makes of a `tools/list` request's params."""
    try:
        _methods.validate_client_request(_METHOD, version, params)
        types.PaginatedRequestParams.model_validate(params, by_name=False)
    except (ValidationError, KeyError, ValueError):
        return False
    return True
