"""Tool search: the ranking, the threshold, the working set and the two host tools' arguments
(logic, `ToolSearch` on its own)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import mcp.types as types
import pytest

from mcp_host.access.sessions import RoleSnapshot, Session
from mcp_host.errors import InvalidArguments
from mcp_host.visitor.tool_search import CALL_TOOL, FIND_TOOLS, InnerCall, ToolIndex, ToolSearch, host_tools, words

pytestmark = pytest.mark.anyio


def _tool(name: str, description: str, params: dict[str, str] | None = None, **extra: Any) -> types.Tool:
    properties = {key: {"type": "string", "description": text} for key, text in (params or {}).items()}
    return types.Tool(
        name=name, description=description, input_schema={"type": "object", "properties": properties}, **extra
    )


CATALOGUE = [
    _tool("read_file", "Read the complete contents of a file from the file system.", {"path": "Where the file is"}),
    _tool("write_file", "Create a new file or overwrite an existing one.", {"path": "Where", "content": "The text"}),
    _tool("getCurrentTime", "The current time in a given timezone.", {"timezone": "IANA timezone name"}),
    _tool("convert_time", "Convert a time between timezones.", {"source_timezone": "From", "target_timezone": "To"}),
    _tool("create_entities", "Create multiple new entities in the knowledge graph.", {"entities": "What to add"}),
    _tool("search_nodes", "Search for nodes in the knowledge graph based on a query.", {"query": "Words to match"}),
    _tool("send_mail", "Send an email message.", {"recipient": "The address to send the message to"}),
    _tool("list_events", "The events on the owner's calendar between two dates.", {"start": "First day"}),
    _tool("wipe", "Erase everything.", annotations=types.ToolAnnotations(title="Factory reset", destructive_hint=True)),
]


def _session(n: int = 1, owner: str = "owner") -> Session:
    return Session(
        id=f"{n:032x}",
        owner_id=owner,
        mode="public",
        subject=None,
        visitor=None,
        role=RoleSnapshot(id="r", capabilities=(), config={}),
        created_at=datetime(2026, 12, 2, tzinfo=UTC),
    )


def _search(threshold: int, told: list[str] | None = None) -> ToolSearch:
    async def threshold_of(owner_id: str) -> int:
        return threshold

    return ToolSearch(threshold_of, told.append if told is not None else None)


def _names(result: types.CallToolResult) -> list[str]:
    assert result.structured_content is not None
    return [t["name"] for t in result.structured_content["tools"]]


def test_names_split_into_words_whatever_their_case() -> None:
    assert words("getCurrentTime") == "getcurrenttime get current time"  # the whole word, and its parts
    assert words("read_file") == "read file"
    assert words("HTTPServer.list-items") == "httpserver http server list items"
    assert words("Größe der Datei") == "größe der datei"
    assert words('AND OR "(title:x)" -y') == "and or title x y"  # no query syntax survives


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("read a file", "read_file"),
        ("get current", "getCurrentTime"),  # a camelCase name's words
        ("convert between timezones", "convert_time"),
        ("email someone a message", "send_mail"),
        ("recipient address", "send_mail"),  # a parameter's name and description
        ("what is on my calendar", "list_events"),
        ("factory reset", "wipe"),  # the annotations' title
        ("searching the knowledge graph", "search_nodes"),  # stemmed
    ],
)
def test_the_best_match_ranks_first(query: str, expected: str) -> None:
    assert ToolIndex(CATALOGUE).search(query, 3)[0].name == expected


def test_a_query_of_no_words_or_no_match_finds_nothing() -> None:
    index = ToolIndex(CATALOGUE)
    assert index.search("!!! ???", 5) == []
    assert index.search("zebra", 5) == []
    assert len(index.search("file", 1)) == 1


def test_a_childs_tool_named_like_a_host_tool_is_never_found() -> None:
    shadowed = [*CATALOGUE, _tool(FIND_TOOLS, "Find files by name."), _tool(CALL_TOOL, "Call a phone number.")]
    found = ToolIndex(shadowed).search("find files call phone", 20)
    assert {t.name for t in found}.isdisjoint({FIND_TOOLS, CALL_TOOL})


async def test_at_or_under_the_threshold_the_list_is_the_very_same() -> None:
    tools = list(CATALOGUE)
    for threshold in (len(tools), len(tools) + 1, 1000):
        assert await _search(threshold).shown(_session(), tools) is tools


async def test_above_the_threshold_the_list_is_the_working_set_and_the_two_host_tools() -> None:
    told: list[str] = []
    search, session = _search(len(CATALOGUE) - 1, told), _session()
    assert await search.shown(session, CATALOGUE) == host_tools()
    result = await search.answer(session, CATALOGUE, FIND_TOOLS, {"query": "read a file", "limit": 2})
    assert isinstance(result, types.CallToolResult) and not result.is_error
    found = _names(result)
    assert found[0] == "read_file" and len(found) == 2
    assert told == [session.id]
    shown = await search.shown(session, CATALOGUE)
    assert [t.name for t in shown] == [t.name for t in CATALOGUE if t.name in found] + [FIND_TOOLS, CALL_TOOL]
    # The same tools found again: the list did not change, nobody is told.
    await search.answer(session, CATALOGUE, FIND_TOOLS, {"query": "read a file", "limit": 2})
    assert told == [session.id]
    # Another session's working set is its own.
    assert await search.shown(_session(2), CATALOGUE) == host_tools()


async def test_the_full_definitions_come_back() -> None:
    search = _search(0)
    result = await search.answer(_session(), CATALOGUE, FIND_TOOLS, {"query": "factory reset", "limit": 1})
    assert isinstance(result, types.CallToolResult)
    assert result.structured_content == {
        "tools": [CATALOGUE[-1].model_dump(mode="json", by_alias=True, exclude_none=True)]
    }


async def test_the_working_set_keeps_the_most_recently_found() -> None:
    many = [_tool(f"tool_{n}", f"Does thing number {n} with widget{n}.") for n in range(40)]
    search, session = _search(10), _session()
    for n in range(30):
        await search.answer(session, many, FIND_TOOLS, {"query": f"widget{n}", "limit": 1})
    assert search.working_set(session.id) == tuple(f"tool_{n}" for n in range(10, 30))


async def test_only_offered_tools_are_found() -> None:
    search = _search(0)
    result = await search.find(_session().id, CATALOGUE, "file", 5, offered=lambda t: t.name != "read_file")
    assert "read_file" not in _names(result) and "write_file" in _names(result)


async def test_call_tool_names_the_inner_call_and_never_a_host_tool() -> None:
    search, session = _search(0), _session()
    inner = await search.answer(session, CATALOGUE, CALL_TOOL, {"name": "wipe", "arguments": {"target": "x"}})
    assert inner == InnerCall("wipe", {"target": "x"})
    assert await search.answer(session, CATALOGUE, CALL_TOOL, {"name": "read_file"}) == InnerCall("read_file", None)
    for name in (FIND_TOOLS, CALL_TOOL):
        with pytest.raises(InvalidArguments):
            await search.answer(session, CATALOGUE, CALL_TOOL, {"name": name, "arguments": {}})


async def test_under_the_threshold_the_host_tools_are_not_there() -> None:
    search = _search(len(CATALOGUE))
    assert await search.answer(_session(), CATALOGUE, FIND_TOOLS, {"query": "file"}) is None
    assert await search.answer(_session(), CATALOGUE, CALL_TOOL, {"name": "wipe"}) is None


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        (FIND_TOOLS, {}),
        (FIND_TOOLS, None),
        (FIND_TOOLS, {"query": ""}),
        (FIND_TOOLS, {"query": "x" * 501}),
        (FIND_TOOLS, {"query": "\ud800 lone"}),
        (FIND_TOOLS, {"query": "file", "limit": 0}),
        (FIND_TOOLS, {"query": "file", "limit": 51}),
        (FIND_TOOLS, {"query": "file", "limit": 10**100}),
        (FIND_TOOLS, {"query": "file", "limit": 1e308}),
        (FIND_TOOLS, {"query": "file", "limit": True}),
        (FIND_TOOLS, {"query": "file", "limit": "5"}),
        (FIND_TOOLS, {"query": ["file"]}),
        (FIND_TOOLS, {"query": "file", "extra": 1}),
        (CALL_TOOL, {}),
        (CALL_TOOL, {"name": ""}),
        (CALL_TOOL, {"name": "x" * 257}),
        (CALL_TOOL, {"name": 7}),
        (CALL_TOOL, {"name": "wipe", "arguments": [1]}),
        (CALL_TOOL, {"name": "wipe\udc00"}),
        (CALL_TOOL, {"name": "wipe", "arguments": {"n": 10**100, "t": "\ud800"}}),
    ],
)
async def test_hostile_arguments_are_invalid_arguments(name: str, arguments: Any) -> None:
    with pytest.raises(InvalidArguments) as raised:
        await _search(0).answer(_session(), CATALOGUE, name, arguments)
    assert "\ud800" not in raised.value.message and "x" * 50 not in raised.value.message


async def test_one_index_per_distinct_tool_set() -> None:
    search = _search(0)
    first = await search._indexes.of(CATALOGUE)
    assert await search._indexes.of(list(CATALOGUE)) is first  # the same tools
    copies = [t.model_copy(deep=True) for t in CATALOGUE]
    assert await search._indexes.of(copies) is first  # equal definitions
    changed = [*copies[:-1], copies[-1].model_copy(update={"description": "Erase it all, now."})]
    assert await search._indexes.of(changed) is not first
