"""Tool search: the ranking, the threshold, the working set and the two host tools' arguments
(logic, `ToolSearch` on its own), then through a real host in both eras: the list above and at
the threshold, find_tools, the list change, and call_tool under every gate of a direct call."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_host.access.sessions import RoleSnapshot, Session
from mcp_host.errors import InvalidArguments
from mcp_host.visitor.tool_search import CALL_TOOL, FIND_TOOLS, InnerCall, ToolIndex, ToolSearch, host_tools, words
from tests.hosting import RunningHost, host_settings, modern_request, refusal, running_host
from tests.owner_facade.test_door import call, owner_client
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

HELD, UNKNOWN, INVALID_ARGUMENTS = "held", "unknown", "invalid_arguments"
MODERN = "2026-07-28"


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


async def test_a_threshold_that_cannot_be_read_is_the_last_one_read_else_no_search() -> None:
    values: list[int | Exception] = [RuntimeError("database away"), 3, RuntimeError("database away")]

    async def threshold_of(owner_id: str) -> int:
        value = values.pop(0)
        if isinstance(value, Exception):
            raise value
        return value

    search, tools = ToolSearch(threshold_of), list(CATALOGUE)
    assert await search.shown(_session(), tools) is tools  # never read: every tool, as before
    search._thresholds["owner"].until = 0  # a second later
    assert await search.shown(_session(), tools) == host_tools()
    search._thresholds["owner"].until = 0
    assert await search.shown(_session(), tools) == host_tools()  # the last one read holds
    assert values == []


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


# -- through a real host -------------------------------------------------------------------------

# A public session sees echo's 4 tools and vault's 3 (guarded's are role_granted: not its own).
VISIBLE = ["echo", "whoami", "sleep", "die", "wipe", "peek", "calls"]
ERAS = ["legacy", "auto"]  # auto negotiates 2026-07-28 with this host


async def _threshold(running: RunningHost, value: int) -> None:
    async with owner_client(running) as owner:
        failed, answer = await call(owner, "host_settings_set", tool_search_threshold=value)
    assert not failed and answer["tool_search_threshold"] == value, answer


@asynccontextmanager
async def _changes(client: Client, mode: str, heard: anyio.Event) -> AsyncIterator[None]:
    """Sets `heard` when the session is told its tool list changed, in either era."""
    if mode == "legacy":
        yield  # the client's message handler sets it (see `_on_message`)
        return
    async with client.listen(tools_list_changed=True) as subscription, anyio.create_task_group() as tg:

        async def hear() -> None:
            async for event in subscription:
                if type(event).__name__ == "ToolsListChanged":
                    heard.set()

        tg.start_soon(hear)
        yield
        tg.cancel_scope.cancel()


@needs_bwrap
@pytest.mark.parametrize("mode", ERAS)
async def test_a_session_above_the_threshold_finds_and_calls_its_tools_through_every_gate(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    heard = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.set()

    async with running_host(host_settings(tmp_path, database_url, ["echo", "vault", "guarded"])) as running:
        await _threshold(running, 3)
        session = await running.new_session()
        async with running.client(session, mode, message_handler=on_message) as client, owner_client(running) as owner:
            assert (mode == "auto") == (client.protocol_version == "2026-07-28")
            before = [t.name for t in (await client.list_tools()).tools]
            async with _changes(client, mode, heard):
                found = await client.call_tool(FIND_TOOLS, {"query": "echo back some text", "limit": 1})
                with anyio.fail_after(20):
                    await heard.wait()
            after = (await client.list_tools()).tools
            echoed = await client.call_tool(CALL_TOOL, {"name": "echo", "arguments": {"text": "hi"}})
            direct_echo = await client.call_tool("echo", {"text": "hi"})
            hidden = await client.call_tool(CALL_TOOL, {"name": "guarded_hello", "arguments": {}})
            hidden_direct = await client.call_tool("guarded_hello", {})
            never = await client.call_tool(FIND_TOOLS, {"query": "guarded hello scope greeting", "limit": 50})
            wipe_direct = await client.call_tool("wipe", {"target": "x"})
            wipe_searched = await client.call_tool(CALL_TOOL, {"name": "wipe", "arguments": {"target": "x"}})
            ran_before = await client.call_tool(CALL_TOOL, {"name": "calls"})
            hold = refusal(wipe_searched)
            assert hold is not None and hold["code"] == HELD, hold
            hold_id = hold["message"].split("(hold ")[1].split(")")[0]
            failed, _ = await call(owner, "hold_decide", id=hold_id, approve=True)
            assert not failed
            approved = await client.call_tool(CALL_TOOL, {"name": "wipe", "arguments": {"target": "x"}})
            itself = await client.call_tool(CALL_TOOL, {"name": CALL_TOOL, "arguments": {"name": "echo"}})
            ran_after = await client.call_tool("calls", {})

    assert before == [FIND_TOOLS, CALL_TOOL]
    assert not found.is_error and found.structured_content is not None
    [definition] = found.structured_content["tools"]
    assert definition["name"] == "echo"
    echo_tool = next(t for t in after if t.name == "echo")
    assert definition == echo_tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert [t.name for t in after] == ["echo", FIND_TOOLS, CALL_TOOL]
    assert not echoed.is_error and echoed.structured_content == direct_echo.structured_content == {"text": "hi"}
    assert (
        refusal(hidden)
        == refusal(hidden_direct)
        == {
            "code": UNKNOWN,
            "message": "no tool named 'guarded_hello' is available in this session",
        }
    )
    assert never.structured_content is not None
    assert not {t["name"] for t in never.structured_content["tools"]} & {"guarded_hello", "guarded_scope"}
    assert refusal(wipe_direct) == hold  # the same hold: held just as the direct call was
    assert ran_before.structured_content == {"wipe": 0, "peek": 0}
    assert not approved.is_error and approved.structured_content == {"wiped": "x"}
    assert refusal(itself) is not None and refusal(itself)["code"] == INVALID_ARGUMENTS  # type: ignore[index]
    assert ran_after.structured_content == {"wipe": 1, "peek": 0}


class _Held(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, released: anyio.Event) -> None:
        self._inner = inner
        self._released = released

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await self._released.wait()
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _LateStandalone(httpx2.AsyncBaseTransport):
    """An HTTP transport on which the standalone stream (the client's GET) arrives late: its
    bytes reach the client once `released` is set, as across a slow or buffering network path."""

    def __init__(self, released: anyio.Event) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._released = released

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if request.method != "GET":
            return response
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_Held(response.stream, self._released),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


@needs_bwrap
async def test_find_tools_tells_the_list_change_before_its_result(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 2025-11-25 client hears `tools/list_changed` before find_tools' result, whatever its
    standalone stream does, and leaving right after the result logs nothing (defect 7: the
    notice came after the result, on the standalone stream, and the SDK client that left logged
    `Error parsing SSE message` with a BrokenResourceError)."""
    heard: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.append("tools/list_changed")

    caplog.set_level(logging.ERROR, logger="mcp")
    released = anyio.Event()
    async with running_host(host_settings(tmp_path, database_url, ["echo", "vault"])) as running:
        await _threshold(running, 1)
        session = await running.new_session()
        headers = {"Authorization": f"Bearer {session['token']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30, transport=_LateStandalone(released)) as http,
            Client(
                streamable_http_client(session["mcp_url"], http_client=http),
                mode="legacy",
                cache=None,
                message_handler=on_message,
            ) as client,
        ):
            found = await client.call_tool(FIND_TOOLS, {"query": "echo back some text", "limit": 1})
            heard.append("find_tools answered")
            released.set()  # and leave at once
    assert not found.is_error
    assert heard == ["tools/list_changed", "find_tools answered"]
    assert [(r.name, r.getMessage()) for r in caplog.records if r.name.startswith("mcp.")] == []


def _modern_list(token: str) -> tuple[bytes, dict[str, str]]:
    body, headers = modern_request("tools/list", {})
    return json.dumps(body).encode(), {**headers, "Authorization": f"Bearer {token}"}


def _message(body: bytes, content_type: str) -> bytes:
    """The JSON-RPC answer's bytes, sent as JSON or as the one event of an SSE stream."""
    if content_type.startswith("application/json"):
        return body
    [data] = [line[len(b"data: ") :] for line in body.splitlines() if line.startswith(b"data: ")]
    return data


@needs_bwrap
async def test_at_or_under_the_threshold_a_session_lists_exactly_what_it_did_without_search(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo", "vault", "guarded"])) as running:
        session = await running.new_session()

        async def listed_once_set(threshold: int) -> bytes:
            """The raw tools/list answer once the door has read `threshold` (it keeps an owner's
            for a second): each threshold here lists differently from the one before."""
            await _threshold(running, threshold)
            body, headers = _modern_list(session["token"])
            with anyio.fail_after(10):
                while True:
                    answer = await running.http.post(session["mcp_url"], content=body, headers=headers)
                    assert answer.status_code == 200, answer.text
                    message = _message(answer.content, answer.headers["content-type"])
                    names = [t["name"] for t in json.loads(message)["result"]["tools"]]
                    if (names == [FIND_TOOLS, CALL_TOOL]) == (threshold < len(VISIBLE)):
                        return message
                    await anyio.sleep(0.1)

        far_under = await listed_once_set(100_000)
        searched = await listed_once_set(len(VISIBLE) - 1)
        at = await listed_once_set(len(VISIBLE))
    assert [t["name"] for t in json.loads(far_under)["result"]["tools"]] == VISIBLE
    assert [t["name"] for t in json.loads(searched)["result"]["tools"]] == [FIND_TOOLS, CALL_TOOL]
    assert at == far_under  # at the threshold: byte for byte what every tool listed is
