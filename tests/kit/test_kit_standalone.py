"""Standalone mode end to end: the `notes` test plugin as a stdio child, driven by a real MCP
client, with no `MCP_HOST_SOCKET` — as its author runs it with `python server.py`."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot
from mcp import Client
from mcp.client.stdio import StdioServerParameters

import mcp_host_kit
from tests.hosting import PLUGINS

pytestmark = pytest.mark.anyio

NOTES = PLUGINS / "notes"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")


def notes_server() -> StdioServerParameters:
    kit_root = str(Path(mcp_host_kit.__file__).resolve().parent.parent)
    # The SDK passes an allow-listed environment only; MCP_HOST_SOCKET is not in it.
    return StdioServerParameters(command=sys.executable, args=["server.py"], cwd=NOTES, env={"PYTHONPATH": kit_root})


def stable(value: Any) -> Any:
    """`value` with generated ids and times replaced by placeholders, for snapshots."""
    if isinstance(value, dict):
        return {key: stable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [stable(item) for item in value]
    if isinstance(value, str):
        return _TIME.sub("<time>", _UUID.sub("<id>", value))
    return value


async def test_every_tool_of_the_notes_plugin_works_standalone() -> None:
    outcomes: list[tuple[str, bool, Any]] = []
    async with Client(notes_server(), read_timeout_seconds=30) as client:

        async def call(tool: str, **arguments: Any) -> Any:
            result = await client.call_tool(tool, arguments)
            outcomes.append((tool, bool(result.is_error), stable(result.structured_content)))
            return result.structured_content

        first = (await call("note_add", text="buy milk"))["id"]
        await call("note_add", text="call Ada")
        await call("note_list")
        await call("note_update", id=first, text="buy oat milk")
        await call("note_update", id="0f8fad5b-d9cb-469f-a165-70867728950e", text="x")
        await call("note_update", id="no-such-note", text="x")
        await call("note_count")
        await call("note_delete", id=first)
        await call("note_list")
        await call("slot_claim", key="2026-12-01T10:00", ttl_s=60)
        await call("slot_claim", key="2026-12-01T10:00", ttl_s=60)
        await call("slot_release", key="2026-12-01T10:00")
        await call("slot_claim", key="2026-12-01T10:00", ttl_s=301)
        await call("config_show")
        await call("owner_timezone")
        await call("whoami")

    assert outcomes == snapshot(
        [
            ("note_add", False, {"id": "<id>"}),
            ("note_add", False, {"id": "<id>"}),
            (
                "note_list",
                False,
                {
                    "notes": [
                        {"id": "<id>", "text": "buy milk", "subject_id": None, "created_at": "<time>"},
                        {"id": "<id>", "text": "call Ada", "subject_id": None, "created_at": "<time>"},
                    ]
                },
            ),
            ("note_update", False, {"updated": True}),
            ("note_update", False, {"updated": False}),
            (
                "note_update",
                True,
                {"code": "invalid_arguments", "message": "id is not a record id (a UUID such as <id>)"},
            ),
            ("note_count", False, {"count": 2}),
            ("note_delete", False, {"deleted": 1}),
            (
                "note_list",
                False,
                {"notes": [{"id": "<id>", "text": "call Ada", "subject_id": None, "created_at": "<time>"}]},
            ),
            ("slot_claim", False, {"claimed": True}),
            ("slot_claim", False, {"claimed": False}),
            ("slot_release", False, {"released": True}),
            (
                "slot_claim",
                True,
                {
                    "code": "invalid_arguments",
                    "message": "ttl_s must be an integer from 1 to 300",
                },
            ),
            (
                "config_show",
                False,
                {
                    "config": {"greeting": "hello", "page_size": 10},
                    "code_config": {"max_notes": None},
                    "role_config": {},
                    "key_config": {"max_notes": None},
                },
            ),
            ("owner_timezone", False, {"timezone": "UTC"}),
            (
                "whoami",
                False,
                {
                    "owner_id": "test-owner",
                    "session_id": "standalone",
                    "mode": "public",
                    "subject": None,
                    "visitor": None,
                    "role": "public",
                },
            ),
        ]
    )


async def test_the_session_in_meta_is_the_one_the_plugin_sees_standalone() -> None:
    who = {
        "owner_id": "owner-7",
        "session_id": "0123456789abcdef0123456789abcdef",
        "mode": "api_key",
        "subject": {"kind": "api_key", "id": "k1"},
        "visitor": {"name": "Ada", "email": "ada@example.test"},
        "role": "partners",
    }
    async with Client(notes_server(), read_timeout_seconds=30) as client:
        seen = await client.call_tool("whoami", {}, meta={mcp_host_kit.SESSION_KEY: who})  # type: ignore[arg-type]
        await client.call_tool("note_add", {"text": "mine"}, meta={mcp_host_kit.SESSION_KEY: who})  # type: ignore[arg-type]
        listed = await client.call_tool("note_list", {}, meta={mcp_host_kit.SESSION_KEY: who})  # type: ignore[arg-type]
        others = await client.call_tool("note_count", {})

    assert seen.structured_content == who
    assert stable(listed.structured_content) == snapshot(
        {"notes": [{"id": "<id>", "text": "mine", "subject_id": "k1", "created_at": "<time>"}]}
    )
    assert others.structured_content == {"count": 0}  # the test owner's store is another owner's
