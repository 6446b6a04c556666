"""The owner door speaks plainly to the model using it: every argument is described, a change
shows at once, and a mistake is an error — through a real owner MCP client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hosting import host_settings, running_host
from tests.owner_facade.test_door import UNKNOWN, call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]


def _properties(schema: dict[str, Any], at: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of `schema` and of the object schemas within it, by dotted path."""
    for name, sub in schema.get("properties", {}).items():
        yield f"{at}{name}", sub
        yield from _properties(sub, f"{at}{name}.")
    for name, sub in schema.get("$defs", {}).items():
        yield from _properties(sub, f"$defs.{name}.")


async def test_every_owner_tools_input_schema_describes_each_property(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, [])) as running:
        async with owner_client(running) as client:
            tools = (await client.list_tools()).tools

    undescribed = [
        f"{tool.name}: {path}"
        for tool in tools
        for path, schema in _properties(tool.input_schema)
        if not str(schema.get("description", "")).strip()
    ]
    assert undescribed == []
    assert sum(1 for tool in tools for _ in _properties(tool.input_schema)) > 40  # the walk found them


async def test_capabilities_list_reflects_a_tool_approve_at_once(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"], pin_tools=True)
    async with running_host(settings) as running:
        session = await running.new_session()
        async with running.client(session) as visitor:
            await visitor.list_tools()  # starts the child: its tools wait for approval
        async with owner_client(running) as client:
            _, before = await call(client, "capabilities_list")
            _, pending = await call(client, "tools_pending")
            for tool in pending["pending"]:
                await call(client, "tool_approve", capability="test.echo", tool=tool["tool"])
            _, after = await call(client, "capabilities_list")

    def echo(listed: dict[str, Any]) -> tuple[str, str | None]:
        entry = next(c for c in listed["capabilities"] if c["id"] == "test.echo")
        return entry["status"], entry["cause"]

    status, cause = echo(before)
    assert status == "healthy" and cause is not None and "'echo' is pending owner approval" in cause
    assert echo(after) == ("healthy", None)


async def test_revoking_an_unknown_code_or_key_is_an_error_revoking_one_twice_is_not(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, [])) as running:
        async with owner_client(running) as client:
            _, code = await call(client, "code_create", role="public")
            first = await call(client, "code_revoke", code=code["code"])
            again = await call(client, "code_revoke", code=code["id"])
            unknown_code = await call(client, "code_revoke", code="no-such-code")
            _, key = await call(client, "api_key_create", role="public")
            key_first = await call(client, "api_key_revoke", id=key["id"])
            key_again = await call(client, "api_key_revoke", id=key["id"])
            unknown_key = await call(client, "api_key_revoke", id="k_" + "0" * 16)
            unknown_session = await call(client, "session_end", session_id="nope")

    assert (first, again) == ((False, {"revoked": True}), (False, {"revoked": False}))
    assert unknown_code == (True, {"code": UNKNOWN, "message": "no access code of yours is that code or id"})
    assert (key_first, key_again) == ((False, {"revoked": True}), (False, {"revoked": False}))
    assert unknown_key == (True, {"code": UNKNOWN, "message": "no API key of yours has the id 'k_0000000000000000'"})
    assert unknown_session[0] is True and unknown_session[1]["code"] == UNKNOWN  # the same kind of answer
