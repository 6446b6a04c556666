"""The `_meta` that travels with a forwarded call, and what of a child's `_meta` reaches a visitor
(pure functions; the end-to-end cases are in test_visitor_door.py and test_child_meta.py)."""

from __future__ import annotations

import sys
import unicodedata
from typing import Any, cast

import mcp.types as types
import pytest

from mcp_host.errors import InvalidArguments
from mcp_host.wire.meta import (
    _DASHES,
    SESSION_KEY,
    MetaCaps,
    forwarded_meta,
    speaks_for_host,
    visitor_meta,
    without_host_keys,
)

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


@pytest.mark.parametrize(
    "key",
    [
        "mcp\u2010host/session",  # HYPHEN
        "mcp\u2011host/grant",  # NON-BREAKING HYPHEN
        "mcp\u2212host/quota",  # MINUS SIGN
        "mcp\ufe63host/quota",  # SMALL HYPHEN-MINUS
        "mcp\uff0dhost/quota",  # FULLWIDTH HYPHEN-MINUS
        "mcp\u2014host/quota",  # EM DASH
        "mcp-host\u2215quota",  # DIVISION SLASH
        "ＭＣＰ-ＨＯＳＴ/session",
        "mcp-\u200bhost/session",
        " Mcp-Host/Session",
        "io.modelcontextprotocol/related-task",
        "IO.ModelContextProtocol/serverInfo",
        "dev.mcp/anything",
    ],
)
def test_host_and_reserved_keys_are_dropped_however_spelt(key: str) -> None:
    assert speaks_for_host(key)
    assert visitor_meta({key: "forged", "trace": "t"}, CAPS) == {"trace": "t"}


@pytest.mark.parametrize("key", ["trace", "mcp-hostess", "mcphost/x", "com.example.mcp/x", "example/mcp-host/x"])
def test_other_keys_are_nobody_elses(key: str) -> None:
    assert not speaks_for_host(key)


def test_every_unicode_dash_folds_to_a_hyphen() -> None:
    dashes = {chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Pd"} - {"-"}
    assert dashes <= set(_DASHES)
    for dash in _DASHES:
        assert speaks_for_host(f"mcp{dash}host/quota"), hex(ord(dash))


def test_a_childs_result_loses_the_keys_that_speak_for_the_host_everywhere_and_nothing_else() -> None:
    forged = {"mcp\u2010host/quota": {"x": 1}, "io.modelcontextprotocol/related-task": {}, "trace": "t"}
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text="hi", _meta=forged)],
        structured_content={"mcp-host/quota": "data, not an envelope"},
        _meta=forged,
    )
    clean = without_host_keys(result)
    assert clean.meta == {"trace": "t"}
    assert clean.content[0].meta == {"trace": "t"}
    assert clean.structured_content == {"mcp-host/quota": "data, not an envelope"}
    assert result.meta == forged and result.content[0].meta == forged  # what was given is unchanged


def test_a_clean_message_is_passed_on_as_it_is() -> None:
    tools = [types.Tool(name="t", input_schema={"type": "object"}, _meta={"trace": "t"})]
    assert without_host_keys(tools) is tools
    params = types.LoggingMessageNotificationParams(level="info", data="x")
    assert without_host_keys(params) is params


def test_requests_nested_in_a_result_are_cleaned_too() -> None:
    ask = types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message="?",
            requested_schema={"type": "object", "properties": {}},
            _meta=cast(types.RequestParamsMeta, {"mcp-host/call": "c1"}),
        )
    )
    clean = without_host_keys({"a": ask})
    assert clean["a"].params.meta == {}
