"""Quota, config and claims through the host: real children (the `notes` plugin, built on the
plugin kit), real Postgres, real concurrency — including a second host process sharing the
database.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest
from inline_snapshot import snapshot

from mcp_host.store.config import PluginConfig
from tests.hosting import PLUGINS, RunningHost, free_port, host_settings, running_host, wait_serving
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

MCP_HOST = Path(sys.executable).parent / "mcp-host"


async def new_code(running: RunningHost, max_notes: int | None = None) -> tuple[str, str]:
    """A new access code (of the `public` role) and its id; `max_notes` goes into its code_config."""
    config = {"notes": {"max_notes": max_notes}} if max_notes is not None else None
    text, code = await running.access.create_code(running.owner_id, "public", config)
    return text, code.id


async def code_session(running: RunningHost, code: str, base_url: str | None = None) -> dict[str, Any]:
    """A session opened with access code `code` through `POST /v1/sessions` (of `base_url`'s host)."""
    url = (base_url or running.url).rstrip("/")
    response = await running.http.post(f"{url}/v1/sessions", json={"code": code})
    assert response.status_code == 201, response.text
    return dict(response.json())


def notes_config(running: RunningHost) -> PluginConfig:
    plugin = running.plugin("notes")
    return running.config.for_plugin("notes", plugin.manifest)


async def call(running: RunningHost, session: dict[str, Any], tool: str, **arguments: Any) -> tuple[bool, Any]:
    async with running.client(session) as client:
        result = await client.call_tool(tool, arguments)
    return bool(result.is_error), result.structured_content


async def test_quota_exhausted_hides_tool_and_refuses_call(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        code, _ = await new_code(running, max_notes=2)
        session = await code_session(running, code)
        async with running.client(session) as client:
            added = await client.call_tool("note_add", {"text": "one"})
            # An update cannot move the row out of the subject's count.
            await client.call_tool("note_update", {"id": (added.structured_content or {})["id"], "text": "uno"})
            before = await client.session.list_tools()
            await client.call_tool("note_add", {"text": "two"})
            after = await client.session.list_tools()
            refused = await client.call_tool("note_add", {"text": "three"})

        assert "note_add" in [t.name for t in before.tools]
        assert (before.meta or {})["mcp-host/quota"] == {"notes": {"limit": 2, "used": 1, "remaining": 1}}
        assert [t.name for t in after.tools] == []
        assert (after.meta or {})["mcp-host/quota"] == {"notes": {"limit": 2, "used": 2, "remaining": 0}}
        assert refused.is_error and refused.structured_content == {
            "code": "quota_exhausted",
            "message": "this access code's quota for notes is used up (2 of 2); the owner can raise it",
        }


async def test_a_quota_refusal_says_whose_quota_it_is(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        key, _ = await running.access.create_api_key(running.owner_id, "public", {"notes": {"max_notes": 1}})
        opened = await running.http.post(
            f"{running.url}/v1/sessions", headers={"Authorization": f"Bearer {key}"}, json={}
        )
        session = dict(opened.json())
        outcomes = [await call(running, session, "note_add", text=str(n)) for n in range(2)]

    assert outcomes[0][0] is False
    assert outcomes[1] == (
        True,
        {
            "code": "quota_exhausted",
            "message": "this API key's quota for notes is used up (1 of 1); the owner can raise it",
        },
    )


async def test_public_sessions_and_unset_limits_are_never_counted(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        zero_code, _ = await new_code(running, max_notes=0)
        unset_code, _ = await new_code(running)
        public = await running.new_session()
        unset = await code_session(running, unset_code)
        zero = await code_session(running, zero_code)
        for session in (public, unset, zero):
            outcomes = [await call(running, session, "note_add", text=str(n)) for n in range(3)]
            assert [error for error, _ in outcomes] == [False, False, False]
            async with running.client(session) as client:
                listed = await client.session.list_tools()
            assert "note_add" in [t.name for t in listed.tools]
            assert listed.meta is None or "mcp-host/quota" not in listed.meta


async def test_quota_that_cannot_be_read_hides_the_tools_and_says_why(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        code, code_id = await new_code(running, max_notes=5)
        session = await code_session(running, code)
        await running.stores.drop("capability", "notes")  # the count now fails
        caplog.set_level(logging.WARNING, "mcp_host")

        async with running.client(session) as client:
            listed = await client.session.list_tools()
            refused = await client.call_tool("note_add", {"text": "x"})

        assert [t.name for t in listed.tools] == []
        assert refused.is_error and (refused.structured_content or {})["code"] == "unavailable"
        assert any("notes: quota of subject" in r.getMessage() and code_id in r.getMessage() for r in caplog.records)


@asynccontextmanager
async def second_host(tmp_path: Path, database_url: str) -> AsyncIterator[str]:
    """Another `mcp-host serve` process on the same database; yields its base URL."""
    port = free_port()
    env = {
        **os.environ,
        "MCP_HOST_DATABASE_URL": database_url,
        "MCP_HOST_PRESTART_CHILDREN": "false",
        "MCP_HOST_BUILTIN_DIR": str(PLUGINS / "notes"),
    }
    argv = [str(MCP_HOST), "serve", "--port", str(port), "--data-dir", str(tmp_path / "second")]
    process = await anyio.open_process(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_serving(url, lambda: process.returncode is None, what="the second host")
        yield url
    finally:
        process.terminate()
        with anyio.fail_after(30):
            await process.wait()
        await process.aclose()


async def test_quota_race_across_two_host_processes_has_exactly_n_winners(tmp_path: Path, database_url: str) -> None:
    cap, callers = 5, 16
    async with (
        running_host(host_settings(tmp_path, database_url, ["notes"])) as running,
        second_host(tmp_path, database_url) as other_url,
    ):
        code, code_id = await new_code(running, max_notes=cap)
        sessions = [await code_session(running, code, other_url if n % 2 else None) for n in range(callers)]
        # Warm both hosts' children first, so the calls below really overlap.
        for session in sessions[:2]:
            async with running.client(session) as client:
                await client.session.list_tools()
        outcomes: list[tuple[bool, Any]] = []
        connected: list[int] = []
        all_connected, ready = anyio.Event(), anyio.Event()

        async def add(session: dict[str, Any], n: int) -> None:
            async with running.client(session) as client:
                connected.append(n)
                if len(connected) == callers:
                    all_connected.set()
                await ready.wait()
                result = await client.call_tool("note_add", {"text": f"note {n}"})
            outcomes.append((bool(result.is_error), (result.structured_content or {}).get("code")))

        async with anyio.create_task_group() as tg:
            for n, session in enumerate(sessions):
                tg.start_soon(add, session, n)
            with anyio.fail_after(30):
                await all_connected.wait()  # every client connected: the calls then start together
            ready.set()

        assert sorted(outcomes, key=str) == sorted(
            [(False, None)] * cap + [(True, "quota_exhausted")] * (callers - cap), key=str
        )
        store = running.stores.bound("capability", "notes")
        assert await store.count(running.owner_id, "notes", {"subject_id": code_id}) == cap


async def test_concurrent_claims_through_the_host_have_one_winner(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        sessions = [await running.new_session() for _ in range(8)]
        claimed: list[bool] = []

        async def claim(session: dict[str, Any]) -> None:
            error, answer = await call(running, session, "slot_claim", key="2026-12-01T10:00", ttl_s=60)
            assert not error, answer
            claimed.append(answer["claimed"])

        async with anyio.create_task_group() as tg:
            for session in sessions:
                tg.start_soon(claim, session)

        assert sorted(claimed) == [False] * 7 + [True]


async def test_plugin_reads_declared_config_at_its_scopes_with_defaults(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        config = notes_config(running)
        await config.set(running.owner_id, "owner", "", {"greeting": "welcome"})
        code, code_id = await new_code(running)
        await config.set(running.owner_id, "code", code_id, {"max_notes": 3})
        session = await code_session(running, code)

        error, answer = await call(running, session, "config_show")

        assert not error
        assert answer == snapshot(
            {
                "config": {"greeting": "welcome", "page_size": 10},
                "code_config": {"max_notes": 3},
                "role_config": {},
                "key_config": {"max_notes": None},
            }
        )


async def test_plugin_sees_the_trusted_session_and_the_owner_fields(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("UPDATE mcp_host.owners SET timezone = 'Europe/Paris'")
        finally:
            await conn.close()
        code, code_id = await new_code(running)
        session = await code_session(running, code)

        _, who = await call(running, session, "whoami")
        _, timezone = await call(running, session, "owner_timezone")

        assert who == {
            "owner_id": running.owner_id,
            "session_id": session["session_id"],
            "mode": "code",
            "subject": {"kind": "code", "id": code_id},
            "visitor": None,
            "role": "public",
        }
        assert timezone == {"timezone": "Europe/Paris"}
