"""The builtin `ask_visitor`: standalone (in-process MCP client) and through a real host."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import mcp.types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext

from tests.hosting import BUILTINS, host_settings, running_host

pytestmark = pytest.mark.anyio


def _load_server() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ask_visitor_server", BUILTINS / "ask_visitor" / "server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_asks_through_elicitation_when_the_client_can_answer() -> None:
    server = _load_server().mcp
    asked: list[str] = []

    async def answer(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "Tuesday"})

    async with Client(server, mode="legacy", elicitation_callback=answer) as client:
        result = await client.call_tool("ask_visitor", {"question": "Which day?", "choices": ["Monday", "Tuesday"]})
    assert asked == ["Which day? (choose one of: Monday, Tuesday)"]
    assert result.structured_content == {"asked": True, "question": "Which day?", "answer": "Tuesday"}


async def test_answers_plainly_when_the_client_cannot_elicit() -> None:
    server = _load_server().mcp
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("ask_visitor", {"question": "Which day?"})
    assert result.structured_content == {"asked": False, "question": "Which day?", "choices": [], "answer": None}


async def test_builtin_is_served_to_a_public_session_through_the_host(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, [], builtin_dir=BUILTINS)
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            tools = (await client.list_tools()).tools
            # Beside the other `acl: always` builtins (summarize_conversation …).
            assert "ask_visitor" in [t.name for t in tools]
            result = await client.call_tool("ask_visitor", {"question": "Coffee or tea?", "choices": ["coffee", "tea"]})
        expected: dict[str, Any] = {
            "asked": False,
            "question": "Coffee or tea?",
            "choices": ["coffee", "tea"],
            "answer": None,
        }
        assert result.structured_content == expected


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_question_reaches_the_visitors_client_through_the_host(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    asked: list[str] = []

    async def answer(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "tea"})

    settings = host_settings(tmp_path, database_url, [], builtin_dir=BUILTINS)
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session, mode, elicitation_callback=answer) as client:
            result = await client.call_tool("ask_visitor", {"question": "Coffee or tea?", "choices": ["coffee", "tea"]})
    assert asked == ["Coffee or tea? (choose one of: coffee, tea)"]
    assert result.structured_content == {"asked": True, "question": "Coffee or tea?", "answer": "tea"}
