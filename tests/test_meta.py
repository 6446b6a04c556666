"""The `_meta` that travels with a forwarded call (pure functions; the end-to-end cases are in
test_visitor_door.py)."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_host.errors import InvalidArguments
from mcp_host.meta import SESSION_KEY, MetaCaps, forwarded_meta, visitor_meta

CAPS = MetaCaps(max_keys=16, max_depth=4, max_bytes=4096)


def test_hop_and_host_keys_are_dropped_and_the_rest_kept() -> None:
    raw = {
        "io.modelcontextprotocol/clientInfo": {"name": "x"},
        "progress_token": 7,
        "progressToken": 7,
        "MCP-HOST/grant": "forged",
        "trace": "t-1",
    }
    assert visitor_meta(raw, CAPS) == {"trace": "t-1"}


def test_hostile_nesting_is_refused_without_recursion() -> None:
    deep: Any = "leaf"
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidArguments) as refused:
        visitor_meta({"deep": deep}, CAPS)
    assert refused.value.message == "_meta is nested deeper than 4 levels"


def test_lone_surrogates_are_refused_cleanly() -> None:
    with pytest.raises(InvalidArguments) as refused:
        visitor_meta({"text": "\ud800"}, CAPS)
    assert refused.value.message == "_meta holds text that is not valid Unicode"


def test_the_trusted_scope_overrides_whatever_came_before() -> None:
    scope = {"session_id": "s1", "mode": "public"}
    assert forwarded_meta({"trace": "t"}, scope) == {"trace": "t", SESSION_KEY: scope}
