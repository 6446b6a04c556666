"""`kit.connection(ctx)`: the owner's connection a connector's call carries in `_meta`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import mcp.types as types
import pytest
from inline_snapshot import snapshot
from mcp import Client
from mcp.server import Server, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer

from mcp_host_kit import (
    CONNECTION_KEY,
    SOCKET_ENV,
    ConnectionInfo,
    HostOpError,
    Kit,
    Unconfigured,
    tool_errors,
)
from mcp_host_kit.errors import error_for

pytestmark = pytest.mark.anyio

CONNECTOR = Path(__file__).resolve().parent  # any folder: reading a connection needs no manifest
SECRET = "Pa55-b7e1c0"
CONNECTION = {
    "owner_id": "owner-1",
    "category": "calendar",
    "settings": {"url": "https://cal.example.test/owner/work/", "username": "owner", "password": SECRET},
}


def _meta() -> types.RequestParamsMeta:
    """A call's _meta as the host sends it (cast: a TypedDict literal would need a literal key)."""
    return cast(types.RequestParamsMeta, {CONNECTION_KEY: CONNECTION})


def _connector(kit: Kit) -> MCPServer:
    server = MCPServer("connector")

    @server.tool()
    @tool_errors
    async def whoami(ctx: Context) -> dict[str, Any]:
        connection = kit.connection(ctx)
        return {"owner_id": connection.owner_id, "category": connection.category, "keys": sorted(connection.settings)}

    return server


@pytest.mark.parametrize("environ", [{}, {SOCKET_ENV: "/unused.sock"}], ids=["standalone", "hosted"])
async def test_a_tool_reads_its_connection_from_the_call(environ: dict[str, str]) -> None:
    async with Client(_connector(Kit(CONNECTOR, environ=environ))) as client:
        result = await client.call_tool("whoami", {}, meta=_meta())
    assert (result.is_error, result.structured_content) == snapshot(
        (False, {"owner_id": "owner-1", "category": "calendar", "keys": ["password", "url", "username"]})
    )


async def test_a_call_without_a_connection_is_refused_as_unconfigured() -> None:
    async with Client(_connector(Kit(CONNECTOR, environ={}))) as client:
        result = await client.call_tool("whoami", {})
    assert (result.is_error, result.structured_content) == snapshot(
        (
            True,
            {
                "code": "unconfigured",
                "message": "this call carries no connection: the owner has not connected this service",
            },
        )
    )


@pytest.mark.parametrize(
    "connection",
    [
        "owner-1",
        {"owner_id": "owner-1", "category": "calendar"},
        {"owner_id": "owner-1", "category": "calendar", "settings": ["url", SECRET]},
        {"owner_id": None, "category": "calendar", "settings": {"password": SECRET}},
    ],
)
def test_a_malformed_connection_is_unconfigured_and_logged_without_its_values(
    connection: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_host_kit")
    with pytest.raises(Unconfigured) as refused:
        Kit(CONNECTOR, environ={}).connection({CONNECTION_KEY: connection})
    assert (refused.value.code, refused.value.message) == ("unconfigured", "this call's connection is malformed")
    [record] = caplog.records
    assert record.getMessage().startswith(f"the call's {CONNECTION_KEY} is malformed (fields: ")
    assert SECRET not in caplog.text


def test_the_settings_stay_out_of_the_repr() -> None:
    connection = Kit(CONNECTOR, environ={}).connection({CONNECTION_KEY: CONNECTION})
    assert connection == ConnectionInfo.model_validate(CONNECTION)
    assert connection.settings["password"] == SECRET
    assert repr(connection) == snapshot("ConnectionInfo(owner_id='owner-1', category='calendar')")
    assert SECRET not in str(connection)


def test_keys_a_newer_host_adds_are_ignored() -> None:
    connection = Kit(CONNECTOR, environ={}).connection({CONNECTION_KEY: {**CONNECTION, "connected_at": "2030"}})
    assert connection == ConnectionInfo.model_validate(CONNECTION)


async def test_a_lowlevel_server_handler_reads_the_connection_from_its_context() -> None:
    kit = Kit(CONNECTOR, environ={})

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return types.CallToolResult(content=[], structured_content={"owner_id": kit.connection(ctx).owner_id})

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="whoami", input_schema={"type": "object"})])

    async with Client(Server("connector", on_call_tool=call_tool, on_list_tools=list_tools)) as client:
        result = await client.call_tool("whoami", {}, meta=_meta())
    assert result.structured_content == {"owner_id": "owner-1"}


def test_unconfigured_is_the_error_for_its_code() -> None:
    error = error_for("unconfigured", "connect the calendar first")
    assert isinstance(error, Unconfigured) and isinstance(error, HostOpError)
    assert (error.code, error.message) == ("unconfigured", "connect the calendar first")
