"""The reference servers from npm (everything, memory, filesystem) and mcp-server-time from
PyPI as plugins of a host with default settings: the owner reviews all their tools before any
visitor, approves them, and visitors list and call them through the Python SDK in both eras;
server-memory keeps one graph per visitor; server-filesystem reads nothing outside its folder.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import pytest

from tests.ecosystem.support import (
    ALL_EXPECTED,
    ERA_VERSION,
    ERAS,
    EXPECTED_TOOLS,
    LISTS_EVERY_TOOL,
    Ecosystem,
    owner_token,
    pending_names,
    python_visitor,
    set_tool_search_threshold,
    text_of,
)
from tests.hosting import REPO

pytestmark = pytest.mark.anyio


async def test_every_tool_of_the_four_servers_is_pending_before_any_visitor_and_the_owner_approves_them(
    eco: Ecosystem,
) -> None:
    pending = pending_names(eco.pending_at_start)
    missing = {plugin: sorted(expected - pending.get(plugin, set())) for plugin, expected in EXPECTED_TOOLS.items()}
    assert {plugin: names for plugin, names in missing.items() if names} == {}
    assert eco.rejected_at_start == []  # none dropped (their draft-07 schemas included)
    assert eco.refused == {}
    approved = {tool for plugin, tool in eco.approved if plugin in EXPECTED_TOOLS}
    assert ALL_EXPECTED <= approved
    # What the owner approved is each tool's definition as its server wrote it (draft-07 and all).
    echo = eco.approved[("eco.everything", "echo")]["approved"]["definition"]
    assert echo["name"] == "echo"
    assert echo["inputSchema"]["properties"]["message"]["type"] == "string"


@pytest.mark.parametrize("mode", ERAS)
async def test_python_sdk_visitors_list_and_call_the_tools_of_every_server(eco: Ecosystem, mode: str) -> None:
    async with python_visitor(eco, mode) as client:
        era = client.protocol_version
        listed = {tool.name for tool in (await client.list_tools()).tools}
        echo = await client.call_tool("echo", {"message": "hello ecosystem"})
        total = await client.call_tool("get-sum", {"a": 2, "b": 40})
        weather = await client.call_tool("get-structured-content", {"location": "Chicago"})
        now = await client.call_tool("get_current_time", {"timezone": "UTC"})
        tokyo = await client.call_tool(
            "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
        )
        hello = await client.call_tool("read_text_file", {"path": "/plugin/files/notes/hello.txt"})
        graph = await client.call_tool("read_graph", {})

    assert era == ERA_VERSION[mode]
    assert sorted(ALL_EXPECTED - listed) == []
    assert (echo.is_error, text_of(echo)) == (False, "Echo: hello ecosystem")
    assert text_of(total) == "The sum of 2 and 40 is 42."
    assert weather.structured_content == {"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}
    assert not now.is_error and json.loads(text_of(now))["timezone"] == "UTC"
    converted = json.loads(text_of(tokyo))
    assert (converted["source"]["datetime"][11:16], converted["target"]["datetime"][11:16]) == ("12:00", "21:00")
    assert not hello.is_error and text_of(hello).strip() == "hello from the filesystem plugin"
    assert not graph.is_error and json.loads(text_of(graph)) == {"entities": [], "relations": []}


@pytest.mark.parametrize("mode", ERAS)
async def test_with_the_default_threshold_the_44_tools_are_found_and_called_through_tool_search(
    eco: Ecosystem, mode: str
) -> None:
    """An owner who keeps the default (40) gives visitors `find_tools` and `call_tool` instead of
    the 44 tools; a visitor finds the reference servers' tools by what they do and calls them."""
    await set_tool_search_threshold(eco.running, 40)
    try:
        async with python_visitor(eco, mode) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            found = await client.call_tool("find_tools", {"query": "echo back a message", "limit": 3})
            echo = await client.call_tool("call_tool", {"name": "echo", "arguments": {"message": "via search"}})
            clock = await client.call_tool("find_tools", {"query": "current time in a timezone"})
    finally:
        await set_tool_search_threshold(eco.running, LISTS_EVERY_TOOL)
    assert listed == {"find_tools", "call_tool"}
    assert not found.is_error and "echo" in text_of(found)
    assert (echo.is_error, text_of(echo)) == (False, "Echo: via search")
    assert not clock.is_error and "get_current_time" in text_of(clock)


async def test_server_memory_gives_two_concurrent_visitors_two_separate_graphs(eco: Ecosystem) -> None:
    graphs: dict[str, Any] = {}

    async def remember(mode: str, who: str, started: anyio.Event, other_started: anyio.Event) -> None:
        async with python_visitor(eco, mode) as client:
            made = await client.call_tool(
                "create_entities",
                {"entities": [{"name": who, "entityType": "person", "observations": [f"{who} was here"]}]},
            )
            assert not made.is_error, text_of(made)
            started.set()
            with anyio.fail_after(60):
                await other_started.wait()  # both graphs written before either is read
            graphs[who] = json.loads(text_of(await client.call_tool("read_graph", {})))
            found = await client.call_tool("search_nodes", {"query": "was here"})
            graphs[f"{who} found"] = [node["name"] for node in json.loads(text_of(found))["entities"]]

    ada, bob = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(remember, "legacy", "Ada", ada, bob)
        tg.start_soon(remember, "auto", "Bob", bob, ada)

    assert [e["name"] for e in graphs["Ada"]["entities"]] == ["Ada"]
    assert [e["name"] for e in graphs["Bob"]["entities"]] == ["Bob"]
    assert graphs["Ada"]["entities"][0]["observations"] == ["Ada was here"]
    assert (graphs["Ada found"], graphs["Bob found"]) == (["Ada"], ["Bob"])


# Paths outside server-filesystem's one folder (/plugin/files): its own plugin folder, the
# system's, the repository's and the host's virtual environment, each with a line its content has.
OUTSIDE = {
    "/plugin/files/../manifest.yaml": "eco.filesystem",
    "/plugin/manifest.yaml": "eco.filesystem",
    "/etc/passwd": "root:",
    str(REPO / "pyproject.toml"): "[project]",
    str(REPO / "mcp_host" / "settings" / "host.py"): "BaseSettings",
    str(REPO / ".venv" / "pyvenv.cfg"): "home",
    str(sys.prefix) + "/pyvenv.cfg": "home",
}


@pytest.mark.parametrize("mode", ERAS)
async def test_server_filesystem_reads_nothing_outside_its_folder(eco: Ecosystem, mode: str) -> None:
    async with python_visitor(eco, mode) as client:
        allowed = await client.call_tool("list_allowed_directories", {})
        tree = await client.call_tool("directory_tree", {"path": "/plugin/files"})
        answers = {path: await client.call_tool("read_text_file", {"path": path}) for path in OUTSIDE}
        listing = await client.call_tool("list_directory", {"path": "/plugin"})

    assert [line for line in text_of(allowed).splitlines() if line.startswith("/")] == ["/plugin/files"]
    assert json.loads(text_of(tree)) == [
        {"name": "notes", "type": "directory", "children": [{"name": "hello.txt", "type": "file"}]}
    ]
    for path, content in OUTSIDE.items():
        assert answers[path].is_error, f"{path} was read: {text_of(answers[path])[:200]}"
        assert content not in text_of(answers[path])
    assert listing.is_error and "manifest.yaml" not in text_of(listing)


async def test_a_child_sees_none_of_the_hosts_secrets_in_its_environment(eco: Ecosystem) -> None:
    async with python_visitor(eco, "legacy") as client:
        shown = await client.call_tool("get-env", {})
    env: dict[str, str] = json.loads(text_of(shown))
    assert [key for key in env if key.startswith("MCP_HOST")] == []
    assert not [key for key, value in env.items() if owner_token(eco.running) in value]
    assert "VIRTUAL_ENV" not in env
