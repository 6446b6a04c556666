"""A child's `tools/list` answer as raw JSON-RPC pages, checked as the SDK's client checks them
only when they changed (issue 31): a warm list costs a dict comparison, not a model per tool.

Above: `mcp_session.Child.list_tools`, which asks for the pages over the run's wire
(`send_raw_request`) and maps errors. Below: the SDK's per-version result surface
(`mcp_types.methods`) and `types.ListToolsResult`, exactly the checks `ClientSession.send_request`
makes: a page either of them refuses fails the whole list, as it did through the client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import mcp.types as types
from mcp.client.session import _later_revision_fields  # the client's own rule; the SDK is pinned
from mcp_types import methods as _methods
from pydantic import BaseModel

__all__ = ["ToolPages", "next_cursor", "read_as_client"]

_METHOD = "tools/list"
_M = TypeVar("_M", bound=BaseModel)


def next_cursor(page: dict[str, Any]) -> str | None:
    """The page's `nextCursor` when it is a non-empty string; None otherwise (a page whose cursor
    is malformed fails `ToolPages.tools`, as the client's check would)."""
    cursor = page.get("nextCursor")
    return cursor if isinstance(cursor, str) and cursor else None


class ToolPages:
    """One child's last raw pages and the tools they gave: pages equal to the last (for the same
    protocol version) give the very same tuple, so everything keyed on it above stays cached."""

    def __init__(self) -> None:
        self._last: tuple[str, Sequence[dict[str, Any]], tuple[types.Tool, ...]] | None = None

    def tools(self, version: str, pages: Sequence[dict[str, Any]]) -> tuple[types.Tool, ...]:
        """The tools of `pages` (answers at `version`, the child's negotiated protocol version).

        Raises pydantic.ValidationError (or ValueError: an unknown version) where the SDK's
        client would refuse a page; nothing is remembered then."""
        last = self._last
        if last is not None and last[0] == version and last[1] == pages:
            return last[2]
        tools: list[types.Tool] = []
        for page in pages:
            tools.extend(read_as_client(_METHOD, version, page, types.ListToolsResult).tools)
        self._last = (version, pages, tuple(tools))
        return self._last[2]

    def forget(self) -> None:
        self._last = None


def read_as_client(method: str, version: str, raw: dict[str, Any], model: type[_M]) -> _M:
    """`raw`, a child's result of `method`, read as `ClientSession.send_request` reads a result:
    a negative `ttlMs` floored to 0, the version's surface, a later revision's fields dropped,
    then the version-free `model`. `raw` itself is never changed (pages are kept and compared).
    Raises pydantic.ValidationError (or ValueError: an unknown version) where the client would."""
    result = dict(raw)
    ttl = result.get("ttlMs")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < 0:
        result["ttlMs"] = 0
    try:
        _methods.validate_server_result(method, version, result)
    except KeyError:
        pass  # no surface row for this version: the client checks the model alone
    foreign = _later_revision_fields(method, version)
    if not foreign.isdisjoint(result):
        result = {key: value for key, value in result.items() if key not in foreign}
    return model.model_validate(result, by_name=False)
