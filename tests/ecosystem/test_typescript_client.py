"""The host's own refusal of a tool that declares a strict `outputSchema` (a `held` call of the
`strict` test plugin's destructive `erase`) through the official TypeScript SDK client (1.32.2,
which speaks 2025-11-25) and the MCP Inspector CLI (2.12.0, on @modelcontextprotocol/client
2.3.1: legacy 2025-11-25 and modern 2026-07-28): both show the code and the message, and the
code stays machine-readable in `_meta["mcp-host/error"]`. Before, both failed the call with
-32602 "Structured content does not match the tool's output schema".

Node helpers: tests/ecosystem/support.py (`typescript_visitor`, `inspector`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_host_kit.contract import ERROR_KEY, HELD
from tests.ecosystem.support import inspector, typescript_visitor
from tests.hosting import RunningHost, host_fixture

pytestmark = pytest.mark.anyio

host = host_fixture(["strict"], scope="module")


def _held(result: dict[str, Any]) -> str:
    """The message of a `held` refusal as a client printed it (JSON): checks its whole shape."""
    meta = result.get("_meta", {}).get(ERROR_KEY, {})
    assert (result.get("isError"), meta.get("code"), "structuredContent" in result) == (True, HELD, False), result
    message = str(meta.get("message"))
    assert [block.get("text") for block in result["content"]] == [f"{HELD}: {message}"]
    return message


async def test_the_typescript_sdk_client_shows_a_refusal_of_a_tool_with_an_output_schema(host: RunningHost) -> None:
    session = await host.new_session()

    answer = await typescript_visitor(session, [{"name": "erase", "arguments": {"target": "x"}}])

    assert answer["protocolVersion"] == "2025-11-25"
    assert "erase" in answer["tools"]
    (call,) = answer["calls"]
    assert "error" not in call, call  # was -32602: structured content does not match the schema
    assert "owner" in _held(call["result"])


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_the_inspector_cli_shows_a_refusal_of_a_tool_with_an_output_schema(
    host: RunningHost, era: str, tmp_path: Path
) -> None:
    session = await host.new_session()

    run = await inspector(
        session, era, tmp_path, "--method", "tools/call", "--tool-name", "erase", "--tool-arg", "target=x"
    )

    # Exit 5 and `tool_is_error` are the Inspector's for a call answered with `isError`; the
    # result itself is on stdout (a schema mismatch failed the call instead, with no result).
    assert (run.returncode, json.loads(run.stderr)["error"]["code"]) == (5, "tool_is_error"), run.stderr[-2000:]
    assert "owner" in _held(run.json()["result"])
