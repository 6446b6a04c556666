"""MCP Apps pass through the host unchanged, both eras: the `apps` test plugin (Python SDK)
serves every shape of the extension; a real host, real sandboxed child, real SDK clients over
streamable HTTP. What the visitor gets is compared with what the plugin answers directly."""

from __future__ import annotations

from pathlib import Path

import mcp.types as types
import pytest

from mcp_host.visitor.tool_search import FIND_TOOLS
from mcp_host.wire import APP_MIME_TYPE, APPS_SETTINGS
from tests.apps.support import ERAS, app_bytes, direct_fixture, set_tool_search_threshold, tool_metas, wire
from tests.hosting import host_settings, running_host
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

APP = "ui://board/app.html"
LEGACY_APP = "ui://board/legacy.html"


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_keep_their_meta_ui_nested_flat_and_app_only(tmp_path: Path, database_url: str, mode: str) -> None:
    async with direct_fixture() as plugin:
        served = tool_metas((await plugin.list_tools()).tools)
    async with running_host(host_settings(tmp_path, database_url, ["apps"])) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            listed = tool_metas((await client.list_tools()).tools)

    assert listed == served
    assert listed["show_board"] == {"ui": {"resourceUri": APP, "visibility": ["model", "app"]}}
    assert listed["legacy_board"] == {"ui/resourceUri": LEGACY_APP}
    assert listed["move_piece"] == {"ui": {"resourceUri": APP, "visibility": ["app"]}}


@pytest.mark.parametrize("mode", ERAS)
async def test_the_app_is_listed_and_read_as_the_plugin_serves_it(tmp_path: Path, database_url: str, mode: str) -> None:
    async with direct_fixture() as plugin:
        served_list = wire((await plugin.list_resources()).resources)
        served = app_bytes(await plugin.read_resource(APP))
    async with running_host(host_settings(tmp_path, database_url, ["apps"])) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            listed = wire((await client.list_resources()).resources)
            read = await client.read_resource(APP)
            legacy = await client.read_resource(LEGACY_APP)

    assert listed == served_list
    assert {(r["uri"], r["mimeType"]) for r in listed} == {
        (APP, APP_MIME_TYPE),
        (LEGACY_APP, APP_MIME_TYPE),
        ("ui://board/unnamed.html", APP_MIME_TYPE),
    }
    assert app_bytes(read) == served
    (content,) = read.contents
    assert isinstance(content, types.TextResourceContents)
    ui = (content.meta or {})["ui"]
    assert (ui["csp"]["connectDomains"], ui["permissions"], ui["domain"], ui["prefersBorder"]) == (
        ["https://api.example.com"],
        {"clipboardWrite": {}},
        "https://board.example.com",
        True,
    )
    assert [c.uri for c in legacy.contents] == [LEGACY_APP]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_result_naming_the_app_keeps_it(tmp_path: Path, database_url: str, mode: str) -> None:
    async with direct_fixture() as plugin:
        served = await plugin.call_tool("board_links", {})
    async with running_host(host_settings(tmp_path, database_url, ["apps"])) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            result = await client.call_tool("board_links", {})

    assert not result.is_error
    assert wire(result.content) == wire(served.content)
    link, embedded = result.content
    assert isinstance(link, types.ResourceLink) and str(link.uri) == APP
    assert isinstance(embedded, types.EmbeddedResource) and embedded.resource.mime_type == APP_MIME_TYPE
    assert (result.meta or {}).get("ui") == {"resourceUri": APP}


async def test_the_host_says_it_carries_apps_to_a_2026_visitor_and_to_its_children(
    tmp_path: Path, database_url: str
) -> None:
    """At 2025-11-25 the SDK's wire has no `capabilities.extensions`: it is not sent (README)."""
    async with running_host(host_settings(tmp_path, database_url, ["apps"])) as host:
        session = await host.new_session()
        async with host.client(session, "auto") as client:
            era, capabilities = client.protocol_version, client.server_capabilities
            told = await client.call_tool("client_extensions", {})

    assert era == "2026-07-28"
    assert capabilities.extensions is not None
    assert capabilities.extensions.items() >= APPS_SETTINGS.items()
    assert told.structured_content == {"extensions": APPS_SETTINGS}


@pytest.mark.parametrize("mode", ERAS)
async def test_an_app_only_tool_is_listed_and_callable_but_never_found_for_the_model(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["apps"])) as host:
        await set_tool_search_threshold(host, 2)  # the plugin has 5 tools: the session lists through search
        session = await host.new_session()
        async with host.client(session, mode) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            found = await client.call_tool(FIND_TOOLS, {"query": "move a chess piece on the board", "limit": 50})
            moved = await client.call_tool("move_piece", {"square": "e4"})

    assert FIND_TOOLS in listed and "move_piece" in listed and "show_board" not in listed
    found_names = [t["name"] for t in (found.structured_content or {})["tools"]]
    assert "show_board" in found_names and "move_piece" not in found_names
    assert not moved.is_error and moved.content == [types.TextContent(type="text", text="moved to e4")]
