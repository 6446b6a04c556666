"""The owner reviews before the visitors: `tools_pending` right after start, whatever the acl,
and the tools the host rejects listed with their causes."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot

from tests.hosting import RunningHost, host_settings, running_host, wait_until
from tests.owner_facade.test_door import INVALID_ARGUMENTS, call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]


async def _reviewed(running: RunningHost, *plugin_ids: str) -> None:
    """Until the host's own listing at start has recorded each plugin's tools (no session asked)."""

    def reviewed() -> bool:
        causes = {e.id: e.cause or "" for e in running.catalogue()}
        return all("pending owner approval" in causes[p] for p in plugin_ids)

    await wait_until(reviewed, within_s=30)


async def test_tools_pending_lists_a_fresh_plugins_tools_before_any_session_whatever_its_acl(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["echo", "guarded"], pin_tools=True)
    async with running_host(settings) as running:
        # Asked at once: the answer waits for the host's listing at start, not the owner.
        async with owner_client(running) as client:
            failed, pending = await call(client, "tools_pending")
            _, sessions = await call(client, "sessions_list")

    assert not failed
    assert sessions["sessions"] == []
    assert pending["pinning"] is True
    assert [(p["capability"], p["tool"], p["approved"]) for p in pending["pending"]] == snapshot(
        [
            ("test.echo", "die", None),
            ("test.echo", "echo", None),
            ("test.echo", "sleep", None),
            ("test.echo", "whoami", None),
            ("test.guarded", "guarded_hello", None),
            ("test.guarded", "guarded_scope", None),
        ]
    )
    assert pending["rejected"] == []


async def test_a_rejected_tool_is_listed_with_its_cause_and_cannot_be_approved(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["dialects"], pin_tools=True)
    async with running_host(settings) as running:
        await _reviewed(running, "test.dialects")
        async with owner_client(running) as client:
            _, pending = await call(client, "tools_pending")
            refused, why = await call(client, "tool_approve", capability="test.dialects", tool="remote_dialect")
            failed, _ = await call(client, "tool_approve", capability="test.dialects", tool="ts_style")
        session = await running.new_session()
        async with running.client(session) as visitor:
            listed = [t.name for t in (await visitor.list_tools()).tools]
            called = await visitor.call_tool("ts_style", {"who": "ann", "point": [1, 2], "unit": "m"})

    assert [p["tool"] for p in pending["pending"]] == ["plain", "ts_style"]
    assert pending["rejected"] == snapshot(
        [
            {
                "capability": "test.dialects",
                "tool": "evil\\x1b[2Jname",
                "cause": "its name is not ^[a-zA-Z0-9_-]{1,64}$",
                "status": "rejected",
            },
            {
                "capability": "test.dialects",
                "tool": "old_output",
                "cause": "output schema refused: $schema 'http://json-schema.org/draft-04/schema#' is not an "
                "accepted dialect (JSON Schema draft-07, 2019-09 or 2020-12)",
                "status": "rejected",
            },
            {
                "capability": "test.dialects",
                "tool": "remote_dialect",
                "cause": "input schema refused: $schema 'https://evil.example/meta' is not an accepted dialect "
                "(JSON Schema draft-07, 2019-09 or 2020-12)",
                "status": "rejected",
            },
        ]
    )
    assert refused and why == snapshot(
        {
            "code": INVALID_ARGUMENTS,
            "message": "'remote_dialect' of 'test.dialects' is rejected (input schema refused: $schema "
            "'https://evil.example/meta' is not an accepted dialect (JSON Schema draft-07, 2019-09 or 2020-12)); "
            "it cannot be approved",
        }
    )
    assert not failed
    assert listed == ["ts_style"]
    assert called.structured_content == {"called": "ts_style"}
