"""A tool's pin after apps joined it: a tool naming no app hashes exactly as before (approvals
given before the upgrade stand); one naming an app hashes with it (issue 30, item 2)."""

from __future__ import annotations

import mcp.types as types

from mcp_host.policy.pins import definition_hash, definition_of
from mcp_host.wire import AppVersion

PLAIN = types.Tool(
    name="echo",
    title="Echo",
    description="Echo the text back.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    annotations=types.ToolAnnotations(read_only_hint=True),
    _meta={"example.com/other": 1},
)
BOARD = types.Tool(name="show_board", input_schema={"type": "object"}, _meta={"ui": {"resourceUri": "ui://b/app"}})


def app(html: str, csp: list[str]) -> AppVersion:
    content = types.TextResourceContents(uri="ui://b/app", text=html, _meta={"ui": {"csp": {"connectDomains": csp}}})
    return AppVersion.of("ui://b/app", types.ReadResourceResult(contents=[content]))


def test_a_tool_naming_no_app_keeps_the_hash_it_was_approved_at() -> None:
    # The hash `definition_of` gave this tool before apps were pinned (commit 20eac93).
    before = "b56cd17445e6c1da473122aca5547a217116f37799266c1ace4f21187649abbd"
    assert set(definition_of(PLAIN)) == {"name", "title", "description", "inputSchema", "outputSchema", "annotations"}
    assert definition_hash(definition_of(PLAIN, app("<p>x</p>", []))).hex() == before


def test_a_tool_naming_an_app_is_pinned_with_its_content_and_declared_reach() -> None:
    base = definition_hash(definition_of(BOARD, app("<p>x</p>", ["https://a.example"])))
    assert definition_hash(definition_of(BOARD, app("<p>y</p>", ["https://a.example"]))) != base
    assert definition_hash(definition_of(BOARD, app("<p>x</p>", ["*"]))) != base
    assert definition_of(BOARD)["app"] == {"uri": "ui://b/app", "unreadable": True}
    assert definition_of(BOARD)["ui"] == {"resourceUri": "ui://b/app", "visibility": None}
