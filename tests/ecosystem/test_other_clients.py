"""The ecosystem's own clients on a visitor session: the official TypeScript SDK client
(1.32.2, which speaks the 2025-11-25 era only) and the MCP Inspector CLI (2.12.0, both eras:
`--protocol-era legacy | modern`) list the tools of all four servers and call them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ecosystem.support import ALL_EXPECTED, Ecosystem, inspector, typescript_visitor

pytestmark = pytest.mark.anyio


CALLS = [
    {"name": "echo", "arguments": {"message": "from TypeScript"}},
    {"name": "get-structured-content", "arguments": {"location": "Los Angeles"}},
    {"name": "get_current_time", "arguments": {"timezone": "UTC"}},
    {"name": "read_text_file", "arguments": {"path": "/plugin/files/notes/hello.txt"}},
    {"name": "create_entities", "arguments": {"entities": [{"name": "Tess", "entityType": "t", "observations": []}]}},
    {"name": "read_graph", "arguments": {}},
]


def texts(result: dict[str, Any]) -> str:
    return "\n".join(block["text"] for block in result.get("content", []) if block.get("type") == "text")


async def test_the_typescript_sdk_client_lists_and_calls_the_tools_of_every_server(eco: Ecosystem) -> None:
    answer = await typescript_visitor(await eco.new_session(), CALLS)

    assert answer["protocolVersion"] == "2025-11-25"
    assert sorted(ALL_EXPECTED - set(answer["tools"])) == []
    errors = [(call["name"], got["error"]) for call, got in zip(CALLS, answer["calls"], strict=True) if "error" in got]
    assert errors == []
    echo, weather, now, hello, made, graph = (got["result"] for got in answer["calls"])
    assert texts(echo) == "Echo: from TypeScript"
    assert weather["structuredContent"] == {"temperature": 73, "conditions": "Sunny / Clear", "humidity": 48}
    assert json.loads(texts(now))["timezone"] == "UTC"
    assert texts(hello).strip() == "hello from the filesystem plugin"
    assert not made.get("isError")
    assert [e["name"] for e in json.loads(texts(graph))["entities"]] == ["Tess"]


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_the_inspector_cli_lists_and_calls_the_tools_of_every_server(
    eco: Ecosystem, era: str, tmp_path: Path
) -> None:
    session = await eco.new_session()
    listed = await inspector(session, era, tmp_path, "--method", "tools/list")
    echo = await inspector(
        session, era, tmp_path, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=inspected"
    )
    weather = await inspector(
        session,
        era,
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "get-structured-content",
        "--tool-args-json",
        '{"location": "New York"}',
    )
    now = await inspector(
        session,
        era,
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "get_current_time",
        "--tool-arg",
        "timezone=UTC",
    )

    for run in (listed, echo, weather, now):
        assert run.returncode == 0, run.stderr[-2000:]
    assert sorted(ALL_EXPECTED - {tool["name"] for tool in listed.result()["tools"]}) == []
    assert texts(echo.result()) == "Echo: inspected"
    assert weather.result()["structuredContent"] == {"temperature": 33, "conditions": "Cloudy", "humidity": 82}
    assert json.loads(texts(now.result()))["timezone"] == "UTC"
