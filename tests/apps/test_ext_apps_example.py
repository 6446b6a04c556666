"""Proof with a server nobody here wrote: the ext-apps project's `system-monitor` example, built
with @modelcontextprotocol/ext-apps (pinned, scripts/install-apps), as a sandboxed plugin. Its
tools reach a visitor with `_meta.ui` intact and its `ui://` app is read through the host, byte
for byte what the server answers directly, by the Python SDK client in both eras and by the
TypeScript SDK client; its app-only tool is callable but never found for the model.

Skipped, with the reason, without Node, bubblewrap or the install."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest

from mcp_host.visitor.tool_search import FIND_TOOLS
from mcp_host.wire import APP_MIME_TYPE
from tests.apps.support import (
    ERA_VERSION,
    ERAS,
    SYSTEM_MONITOR,
    app_bytes,
    direct_example,
    missing_example,
    missing_typescript_sdk,
    set_tool_search_threshold,
    tool_metas,
    typescript_visitor,
    wire,
)
from tests.hosting import RunningHost, host_settings, running_host
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

APP = "ui://system-monitor/mcp-app.html"
APP_TOOL, APP_ONLY_TOOL = "get-system-info", "poll-system-stats"


@pytest.fixture(scope="module")
async def direct_answers() -> dict[str, Any]:
    """What the example answers without the host: its tools' `_meta`, its resources, its app."""
    reason = missing_example()
    if reason is not None:
        pytest.skip(reason)
    async with direct_example() as server:
        tools = (await server.list_tools()).tools
        resources = (await server.list_resources()).resources
        read = await server.read_resource(APP)
    return {"metas": tool_metas(tools), "resources": wire(resources), "app": app_bytes(read), "read": read}


@pytest.fixture
async def host(tmp_path: Path, database_url: str, direct_answers: dict[str, Any]) -> AsyncIterator[RunningHost]:
    settings = host_settings(tmp_path, database_url, [str(SYSTEM_MONITOR)])  # an absolute path
    async with running_host(settings) as running:
        yield running


@pytest.mark.parametrize("mode", ERAS)
async def test_the_examples_tools_and_app_reach_the_visitor_as_it_serves_them(
    host: RunningHost, direct_answers: dict[str, Any], mode: str
) -> None:
    session = await host.new_session()
    async with host.client(session, mode) as client:
        era = client.protocol_version
        metas = tool_metas((await client.list_tools()).tools)
        resources = wire((await client.list_resources()).resources)
        read = await client.read_resource(APP)

    assert era == ERA_VERSION[mode]
    assert metas == direct_answers["metas"]
    assert metas[APP_TOOL] == {"ui": {"resourceUri": APP}, "ui/resourceUri": APP}  # ext-apps writes both
    assert metas[APP_ONLY_TOOL] == {"ui": {"visibility": ["app"]}}
    assert resources == direct_answers["resources"]
    assert [(r["uri"], r["mimeType"]) for r in resources] == [(APP, APP_MIME_TYPE)]
    assert app_bytes(read) == direct_answers["app"]
    assert len(direct_answers["app"][0]) > 100_000  # the whole bundled app, not a stub


async def test_the_typescript_sdk_client_reads_the_same_app(host: RunningHost, direct_answers: dict[str, Any]) -> None:
    reason = missing_typescript_sdk()
    if reason is not None:
        pytest.skip(reason)
    session = await host.new_session()

    answer = await typescript_visitor(session, APP, [{"name": APP_ONLY_TOOL}])

    assert {t["name"]: t.get("_meta") for t in answer["tools"]} == direct_answers["metas"]
    (content,) = answer["read"]["contents"]
    (served,) = direct_answers["read"].contents
    assert isinstance(served, types.TextResourceContents)
    assert (content["uri"], content["mimeType"]) == (APP, APP_MIME_TYPE)
    assert content["text"].encode() == served.text.encode()
    (called,) = answer["calls"]
    assert "error" not in called and not called["result"].get("isError"), called


@pytest.mark.parametrize("mode", ERAS)
async def test_the_examples_app_only_tool_is_callable_but_never_found(host: RunningHost, mode: str) -> None:
    await set_tool_search_threshold(host, 1)  # 2 tools: the session lists through search
    session = await host.new_session()
    async with host.client(session, mode) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        found = await client.call_tool(FIND_TOOLS, {"query": "system stats cpu memory uptime polling", "limit": 50})
        polled = await client.call_tool(APP_ONLY_TOOL, {})

    assert APP_ONLY_TOOL in listed and APP_TOOL not in listed
    assert [t["name"] for t in (found.structured_content or {})["tools"]] == [APP_TOOL]
    assert not polled.is_error and set(polled.structured_content or {}) >= {"cpu", "memory", "uptime"}
