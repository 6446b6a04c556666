"""Which tools are for an app only (`wire.app_only`), and tool search keeping them from the model
while listing them: in process, no host (tests/apps/test_passthrough.py proves it through one)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import mcp.types as types
import pytest

from mcp_host.access.sessions import RoleSnapshot, Session
from mcp_host.visitor.tool_search import FIND_TOOLS, ToolSearch
from mcp_host.wire import app_only

pytestmark = pytest.mark.anyio


def _tool(name: str, description: str, meta: dict[str, Any] | None = None) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema={"type": "object"}, _meta=meta)


SHOW = _tool("show_board", "Show the chess board.", {"ui": {"resourceUri": "ui://board/app.html"}})
MOVE = _tool("move_piece", "Move a chess piece on the board.", {"ui": {"visibility": ["app"]}})
RESET = _tool("reset_board", "Reset the chess board.", {"ui": {"visibility": ["model", "app"]}})
TOOLS = [SHOW, MOVE, RESET]


@pytest.mark.parametrize(
    ("meta", "only"),
    [
        (None, False),
        ({"ui": {"resourceUri": "ui://a"}}, False),  # no visibility: both
        ({"ui": {"visibility": ["model", "app"]}}, False),
        ({"ui": {"visibility": ["model"]}}, False),
        ({"ui": {"visibility": ["app"]}}, True),
        ({"ui": {"visibility": []}}, True),  # offered to nobody: not to the model either
        ({"ui": {"visibility": "app"}}, False),  # not a list: the default stands
        ({"ui": "app"}, False),
        ({"ui/visibility": ["app"]}, False),  # there is no flat form of visibility
    ],
)
def test_a_tool_is_for_its_app_only_when_its_visibility_lacks_the_model(meta: Any, only: bool) -> None:
    assert app_only(_tool("t", "A tool.", meta)) is only


def _session() -> Session:
    return Session(
        id="0" * 32,
        owner_id="owner",
        mode="public",
        subject=None,
        visitor=None,
        role=RoleSnapshot(id="r", capabilities=(), config={}),
        created_at=datetime(2026, 12, 7, tzinfo=UTC),
    )


def _search(threshold: int) -> ToolSearch:
    async def threshold_of(owner_id: str) -> int:
        return threshold

    return ToolSearch(threshold_of)


async def test_find_tools_never_offers_a_tool_for_the_app_only() -> None:
    search = _search(1)

    found = await search.find("s1", TOOLS, "move a chess piece on the board", 50)

    names = [t["name"] for t in (found.structured_content or {})["tools"]]
    assert "move_piece" not in names and {"show_board", "reset_board"} <= set(names)
    assert "move_piece" not in search.working_set("s1")


async def test_under_search_the_app_only_tools_are_listed_beside_the_working_set() -> None:
    search, session = _search(1), _session()

    before = [t.name for t in await search.shown(session, TOOLS)]
    await search.find(session.id, TOOLS, "reset", 1)
    after = [t.name for t in await search.shown(session, TOOLS)]

    assert before[:1] == ["move_piece"] and FIND_TOOLS in before and "show_board" not in before
    assert after[:2] == ["move_piece", "reset_board"]
    assert await _search(10).shown(session, TOOLS) is TOOLS  # under the threshold: the very same list
