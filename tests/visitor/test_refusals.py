"""The host's own refusals, as a Python SDK client sees them through a real host and a real
child, both eras: `{code, message}` always in `_meta["mcp-host/error"]` and as text; as
structured content only where every client accepts it there (no `outputSchema`, or one it fits);
and a child cannot pass its result off as a host refusal. The TypeScript SDK client and the MCP
Inspector: tests/ecosystem/test_typescript_client.py.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
import pytest
from inline_snapshot import snapshot

from mcp_host.errors import error_result
from mcp_host.visitor.door import Called
from mcp_host_kit.contract import ERROR_KEY, HELD, UNKNOWN, refusal_of
from tests.hosting import RunningHost, host_fixture

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "2026-07-28"]

host = host_fixture(["strict", "vault"], scope="module")


def _shape(result: types.CallToolResult) -> dict[str, Any]:
    """The parts of a refusal a client reads: error flag, text, structured content, the host key."""
    return {
        "is_error": result.is_error,
        "text": [block.text for block in result.content if isinstance(block, types.TextContent)],
        "structured": result.structured_content,
        "meta": (result.meta or {}).get(ERROR_KEY),
    }


@pytest.mark.parametrize("mode", ERAS)
async def test_a_refusal_of_a_tool_with_a_strict_output_schema_leaves_structured_content_out(
    host: RunningHost, mode: str
) -> None:
    async with host.client(await host.new_session(), mode) as client:
        refused = await client.call_tool("erase", {"target": "x"})

    refusal = refusal_of(refused)
    assert refusal is not None and refusal.code == HELD
    assert _shape(refused) == {
        "is_error": True,
        "text": [f"held: {refusal.message}"],
        "structured": None,
        "meta": {"code": HELD, "message": refusal.message},
    }


@pytest.mark.parametrize("mode", ERAS)
async def test_a_refusal_of_a_tool_without_an_output_schema_or_with_one_it_fits_stays_structured(
    host: RunningHost, mode: str
) -> None:
    async with host.client(await host.new_session(), mode) as client:
        plain = await client.call_tool("erase_plain", {"target": "x"})
        loose = await client.call_tool("wipe", {"target": "x"})  # MCPServer's `-> dict`: any object

    for refused in (plain, loose):
        refusal = refusal_of(refused)
        assert refusal is not None and refusal.code == HELD
        assert _shape(refused) == {
            "is_error": True,
            "text": [f"held: {refusal.message}"],
            "structured": {"code": HELD, "message": refusal.message},
            "meta": {"code": HELD, "message": refusal.message},
        }


@pytest.mark.parametrize("mode", ERAS)
async def test_a_name_the_host_does_not_resolve_is_refused_without_structured_content(
    host: RunningHost, mode: str
) -> None:
    async with host.client(await host.new_session(), mode) as client:
        refused = await client.call_tool("no_such_tool", {})

    assert _shape(refused) == snapshot(
        {
            "is_error": True,
            "text": ["unknown: no tool named 'no_such_tool' is available in this session"],
            "structured": None,
            "meta": {"code": "unknown", "message": "no tool named 'no_such_tool' is available in this session"},
        }
    )
    assert refusal_of(refused) is not None and refusal_of(refused).code == UNKNOWN  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_child_cannot_forge_the_hosts_refusal_key(host: RunningHost, mode: str) -> None:
    async with host.client(await host.new_session(), mode) as client:
        forged = await client.call_tool("forge", {})

    assert forged.is_error is True
    assert forged.meta is None or not any(key.casefold() == ERROR_KEY for key in forged.meta)
    assert all(block.meta is None or ERROR_KEY not in block.meta for block in forged.content)
    # What remains is the child's own data: a plugin's refusal, read as one (never as the host's).
    assert forged.structured_content == {"code": "held", "message": "forged by the child"}


def _tool(output_schema: dict[str, Any] | None) -> types.Tool:
    return types.Tool(name="t", input_schema={"type": "object"}, output_schema=output_schema)


def _refusal() -> types.CallToolResult:
    return error_result("held", "wait", structured=False)


@pytest.mark.parametrize(
    ("tool", "accepted"),
    [
        (None, False),  # not resolved: a client may hold a schema for the name
        (_tool(None), True),
        (_tool({"type": "object", "additionalProperties": True}), True),
        (_tool({"type": "object", "properties": {"erased": {"type": "string"}}, "required": ["erased"]}), False),
        (_tool({"type": "object", "properties": {"code": {"type": "integer"}}}), False),
        (_tool({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}), True),
        (_tool({"$schema": "https://example.com/unknown-dialect", "type": "object"}), False),
    ],
)
def test_structured_content_goes_only_where_the_tools_output_schema_admits_it(
    tool: types.Tool | None, accepted: bool
) -> None:
    assert Called(tool).accepts(_refusal()) is accepted
