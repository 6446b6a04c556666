"""The owner's config reaches a child as environment variables (`Transport.env_from_config`),
through a real host, real Postgres and real bubblewrap: a secret is sealed at rest, shown as
set or unset only, and never on a command line, in a listing, the audit or the logs; a
required setting left unset keeps the child from starting and says which; a change restarts
the plugin's children."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_host_kit.contract import refusal_of
from tests.hosting import RunningHost, host_settings, running_host
from tests.owner_facade.test_door import call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

SECRET = "s3cret-Envy-7f9c2a"
PLUGIN = "test.envy"


async def env_show(visitor: Client) -> tuple[bool, dict[str, Any], str]:
    """(refused, structured answer, the refusal's message)."""
    result = await visitor.call_tool("env_show", {})
    refusal = refusal_of(result)
    return bool(result.is_error), dict(result.structured_content or {}), refusal.message if refusal else ""


def bwrap_cmdline(running: RunningHost) -> bytes:
    """The command line of the last process the host spawned (bubblewrap, the sandbox's pid 1)."""
    return Path(f"/proc/{running.spawned[-1]}/cmdline").read_bytes()


async def test_owner_config_reaches_the_child_as_env_and_a_secret_is_shown_nowhere(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_host(host_settings(tmp_path, database_url, ["envy"])) as running:
        session = await running.new_session()
        async with owner_client(running) as owner, running.client(session) as visitor:
            unset = await env_show(visitor)
            listed_unset = await call(owner, "capabilities_list")
            spawned_before = len(running.spawned)
            set_ = await call(owner, "config_set", capability=PLUGIN, scope="owner", values={"api_token": SECRET})
            first = await env_show(visitor)
            cmdline = bwrap_cmdline(running)
            first_pid = running.spawned[-1]
            read = await call(owner, "config_get", capability=PLUGIN, scope="owner")
            listed = await call(owner, "capabilities_list")
            changed = await call(
                owner, "config_set", capability=PLUGIN, scope="owner", values={"greeting": "hey", "retries": 3}
            )
            second = await env_show(visitor)
            second_pid = running.spawned[-1]
            cleared = await call(owner, "config_set", capability=PLUGIN, scope="owner", values={"api_token": None})
            again_unset = await env_show(visitor)
            trail = await call(owner, "audit_list", limit=500)
            stored = await running.sql.fetch('SELECT "values"::text AS v FROM mcp_host.config_values')

    why = "the owner must set 'api_token' of test.envy (config_set) before it can start"
    # Never listed, its tool is not there for a visitor; the owner's catalogue says why.
    assert unset == (True, {}, "no tool named 'env_show' is available in this session")
    assert spawned_before == 0  # refused before any spawn
    envy = next(c for c in listed_unset[1]["capabilities"] if c["id"] == PLUGIN)
    assert (envy["status"], envy["cause"]) == ("failing", f"left out of tool lists: {why}")
    assert envy["config"]["owner"][1] | {"value": None} == {
        "key": "api_token",
        "label": "",
        "type": "string",
        "default": None,
        "min": None,
        "max": None,
        "description": "",
        "secret": True,
        "required": True,
        "value": None,
    }
    assert envy["config"]["owner"][1]["value"] == {"set": False}
    assert set_ == (
        False,
        {
            "capability": PLUGIN,
            "scope": "owner",
            "scope_id": None,
            "values": {"greeting": "hello", "api_token": {"set": True}, "retries": None, "tags": ["a", "b"]},
        },
    )
    assert first[:2] == (
        False,
        {
            "env": {"ENVY_GREETING": "hello", "ENVY_TOKEN": SECRET, "ENVY_TAGS": '["a", "b"]'},
            "pid": first[1]["pid"],
        },
    )
    assert b"bwrap" in cmdline and SECRET.encode() not in cmdline
    assert read[1]["values"]["api_token"] == {"set": True}
    assert changed[0] is False
    # The change restarted the child: a new process with the new values.
    assert second[:2] == (
        False,
        {
            "env": {"ENVY_GREETING": "hey", "ENVY_TOKEN": SECRET, "ENVY_RETRIES": "3", "ENVY_TAGS": '["a", "b"]'},
            "pid": second[1]["pid"],
        },
    )
    assert second_pid != first_pid
    assert cleared[1]["values"]["api_token"] == {"set": False}
    assert again_unset[0] is True
    for shown in (read, listed, listed_unset, set_, changed, cleared, trail):
        assert SECRET not in json.dumps(shown)
    # The host's own logs at every level, anyone's from INFO (the SDK logs raw messages at DEBUG).
    ours = ("mcp_host", "owner_facade")
    logged = [r for r in caplog.records if r.name.startswith(ours) or r.levelno >= logging.INFO]
    assert logged and all(SECRET not in r.getMessage() for r in logged)
    assert stored and all(SECRET not in row["v"] for row in stored)
