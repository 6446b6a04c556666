"""The owner's door over real HTTP: the owner token, the tools, owner context, audit, the
stdio bridge — with a real host, real Postgres, real children and real SDK clients."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcp_host_kit.contract import Refusal, refusal_of
from owner_facade import OWNER_PATH
from tests.hosting import BUILTINS, PLUGINS, RunningHost, host_settings, running_host
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

MCP_HOST = Path(sys.executable).parent / "mcp-host"
UNKNOWN = "unknown"
INVALID_ARGUMENTS = "invalid_arguments"
OWNER_TOOLS = [
    "capabilities_list",
    "capability_invoke",
    "capability_next_steps",
    "capability_logs",
    "connectors_list",
    "connector_invoke",
    "connector_connect",
    "connector_disconnect",
    "remote_connect",
    "remote_status",
    "remote_disconnect",
    "config_get",
    "config_set",
    "role_put",
    "roles_list",
    "code_create",
    "codes_list",
    "code_revoke",
    "api_key_create",
    "api_keys_list",
    "api_key_revoke",
    "sessions_list",
    "session_end",
    "oauth_grants_list",
    "oauth_grant_revoke",
    "tools_pending",
    "tool_approve",
    "tools_approve",
    "holds_list",
    "hold_decide",
    "app_contents",
    "plugin_add",
    "plugins_list",
    "plugin_remove",
    "plugin_upgrade",
    "plugin_egress_allow",
    "plugin_egress_remove",
    "rules_get",
    "rules_set",
    "grant_create",
    "grants_list",
    "grant_revoke",
    "audit_list",
    "host_settings_get",
    "host_settings_set",
    "owner_profile_get",
    "owner_profile_set",
]
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


def owner_token(running: RunningHost) -> str:
    return running.owner_token()


@asynccontextmanager
async def owner_client(running: RunningHost, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {owner_token(running)}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        transport = streamable_http_client(f"{running.url}{OWNER_PATH}", http_client=http)
        async with Client(transport, mode=mode, cache=None) as client:
            yield client


async def call(client: Client, name: str, /, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(name, arguments)
    return bool(result.is_error), dict(result.structured_content or {})


async def audit(client: Client) -> list[tuple[str, str]]:
    """The audit trail as (tool, outcome), oldest first."""
    _, answer = await call(client, "audit_list", limit=500)
    return [(row["tool"], row["outcome"]) for row in reversed(answer["entries"])]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_owner_lists_tools_and_capabilities_without_starting_a_child(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes", "echo"])) as running:
        async with owner_client(running, mode) as client:
            tools = (await client.list_tools()).tools
            failed, listed = await call(client, "capabilities_list")
            trail = await audit(client)
        assert running.spawned == []

    assert [t.name for t in tools] == OWNER_TOOLS
    assert all(t.input_schema.get("additionalProperties") is False for t in tools)
    assert not failed
    notes = next(c for c in listed["capabilities"] if c["id"] == "notes")
    assert notes["kind"] == "capability"
    assert notes["status"] == "not_started"
    assert notes["requires"] == []
    assert notes["owner_tools"] == [
        {
            "name": "notes.whoami",
            "description": "The call scope as the plugin sees it.",
            "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
        },
        {
            "name": "notes.add",
            "description": "Keep a note as the owner.",
            "input_schema": {
                "type": "object",
                "properties": {"text": {"type": "string", "minLength": 1}},
                "required": ["text"],
                "additionalProperties": False,
            },
        },
    ]
    assert [(f["key"], f["value"]) for f in notes["config"]["owner"]] == [("greeting", "hello"), ("page_size", 10)]
    assert [f["key"] for f in notes["config"]["code"]] == ["max_notes"]
    assert notes["config"]["role"] == []
    assert notes["quota"] == {
        "config_key": "max_notes",
        "collection": "notes",
        "subject_field": "subject_id",
        "tools": [],
    }
    assert notes["claim_gate"] is None
    assert notes["instances"] is None  # a kit plugin: one child for every session
    assert trail == [("capabilities_list", "ok")]


async def test_capabilities_list_counts_a_per_session_plugins_running_instances(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["sessionless"])) as running:
        async with owner_client(running) as client:
            _, before = await call(client, "capabilities_list")
            for _ in range(2):  # two visitor sessions, each with its own instance
                async with running.client(await running.new_session()) as visitor:
                    await visitor.call_tool("count", {})
            _, after = await call(client, "capabilities_list")
    shown = [
        {k: c[k] for k in ("id", "status", "instances")} for c in (*before["capabilities"], *after["capabilities"])
    ]
    assert shown == [
        {"id": "test.sessionless", "status": "not_started", "instances": 0},  # no review without pinning
        {"id": "test.sessionless", "status": "healthy", "instances": 2},
    ]


async def test_owner_tool_runs_in_owner_context_after_its_arguments_pass_the_schema(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        async with owner_client(running) as client:
            undeclared = await call(client, "capability_invoke", capability="notes", tool="note_list")
            bad = await call(client, "capability_invoke", capability="notes", tool="notes.add", arguments={})
            nameless = await call(client, "capability_invoke", capability="nope", tool="notes.add")
            spawned_before = list(running.spawned)
            who = await call(client, "capability_invoke", capability="notes", tool="notes.whoami")
            added = await call(
                client, "capability_invoke", capability="notes", tool="notes.add", arguments={"text": "x"}
            )
            no_such = await call(client, "no_such_tool")
            extra = await call(client, "roles_list", colour="red")
            trail = await audit(client)

    assert undeclared == (True, {"code": UNKNOWN, "message": "notes declares no owner tool named 'note_list'"})
    assert bad == (True, {"code": INVALID_ARGUMENTS, "message": "arguments: 'text' is a required property"})
    assert nameless == (True, {"code": UNKNOWN, "message": "no capability named 'nope' is loaded"})
    assert spawned_before == []  # refused before any child started
    assert who == (
        False,
        {
            "owner_id": running.owner_id,
            "session_id": None,
            "mode": "owner",
            "subject": None,
            "visitor": None,
            "role": None,
        },
    )
    assert added[0] is False and isinstance(added[1]["id"], str)
    assert no_such == (True, {"code": UNKNOWN, "message": "no owner tool named 'no_such_tool'"})
    assert extra[0] is True and extra[1]["code"] == INVALID_ARGUMENTS and "colour" in extra[1]["message"]
    assert trail == [
        ("capability_invoke", UNKNOWN),
        ("capability_invoke", INVALID_ARGUMENTS),
        ("capability_invoke", UNKNOWN),
        ("capability_invoke", "ok"),
        ("capability_invoke", "ok"),
        ("no_such_tool", UNKNOWN),
        ("roles_list", INVALID_ARGUMENTS),
    ]


async def test_config_set_by_the_owner_is_what_a_visitors_next_call_reads(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        session = await running.new_session()
        async with owner_client(running) as client, running.client(session) as visitor:
            before = await visitor.call_tool("config_show", {})
            changed = await call(client, "config_set", capability="notes", scope="owner", values={"greeting": "hi"})
            after = await visitor.call_tool("config_show", {})
            wrong = await call(client, "config_set", capability="notes", scope="owner", values={"page_size": "ten"})
            undeclared = await call(client, "config_set", capability="notes", scope="owner", values={"colour": 1})
            read = await call(client, "config_get", capability="notes", scope="owner")
            trail = await audit(client)

    assert (before.structured_content or {})["config"] == {"greeting": "hello", "page_size": 10}
    assert changed == (
        False,
        {"capability": "notes", "scope": "owner", "scope_id": None, "values": {"greeting": "hi", "page_size": 10}},
    )
    assert (after.structured_content or {})["config"] == {"greeting": "hi", "page_size": 10}
    assert wrong == (
        True,
        {"code": INVALID_ARGUMENTS, "message": 'page_size: must be an integer (type int), got "ten"'},
    )
    assert undeclared[1]["code"] == INVALID_ARGUMENTS and undeclared[1]["message"].startswith("colour:")
    assert read[1]["values"] == {"greeting": "hi", "page_size": 10}
    assert trail == [
        ("config_set", "ok"),
        ("config_set", INVALID_ARGUMENTS),
        ("config_set", INVALID_ARGUMENTS),
        ("config_get", "ok"),
    ]


async def test_the_owner_profile_round_trips_and_plugins_read_it(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        session = await running.new_session()
        async with owner_client(running) as client, running.client(session) as visitor:
            fresh = await call(client, "owner_profile_get")
            before = await visitor.call_tool("owner_timezone", {})
            full = await call(
                client, "owner_profile_set", name=" Ada Lovelace ", email="ada@example.org", timezone="Europe/Berlin"
            )
            partly = await call(client, "owner_profile_set", timezone="America/New_York")
            read = await call(client, "owner_profile_get")
            after = await visitor.call_tool("owner_timezone", {})
            unset = await call(client, "owner_profile_set", name=None, email="")
            trail = await audit(client)
        stored = await running.owners.get(running.owner_id)

    assert fresh == (False, {"name": None, "email": None, "timezone": None})
    assert (before.structured_content or {}) == {"timezone": None}
    assert full == (False, {"name": "Ada Lovelace", "email": "ada@example.org", "timezone": "Europe/Berlin"})
    assert (
        partly
        == read
        == (
            False,
            {"name": "Ada Lovelace", "email": "ada@example.org", "timezone": "America/New_York"},
        )
    )
    assert (after.structured_content or {}) == {"timezone": "America/New_York"}  # owner.meta reads the profile
    assert unset == (False, {"name": None, "email": None, "timezone": "America/New_York"})
    assert stored is not None and stored.profile() == unset[1]
    assert trail == [
        ("owner_profile_get", "ok"),
        ("owner_profile_set", "ok"),
        ("owner_profile_set", "ok"),
        ("owner_profile_get", "ok"),
        ("owner_profile_set", "ok"),
    ]


async def test_an_invalid_email_timezone_or_name_is_refused_and_nothing_changes(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, [])) as running:
        async with owner_client(running) as client:
            kept = await call(client, "owner_profile_set", email="ada@example.org", timezone="UTC")
            refused = [
                await call(client, "owner_profile_set", **arguments)
                for arguments in (
                    {"email": "Ada <ada@example.org>"},
                    {"email": "ada@example.org", "timezone": "Mars/Olympus_Mons"},
                    {"timezone": "localtime"},
                    {"timezone": "../../etc/passwd"},
                    {"name": "x" * 129},
                    {"name": "Ada\u202eLovelace"},
                    {"colour": "red"},
                    {"email": 7},
                )
            ]
            read = await call(client, "owner_profile_get")

    assert kept == (False, {"name": None, "email": "ada@example.org", "timezone": "UTC"})
    assert [r[1]["code"] for r in refused] == [INVALID_ARGUMENTS] * 8
    assert [r[1]["message"] for r in refused[:6]] == [
        "email: 'Ada <ada@example.org>' is not one plain address such as ada@example.com",
        "timezone: 'Mars/Olympus_Mons' is not an IANA zone name such as Europe/Berlin, America/New_York or UTC",
        "timezone: 'localtime' is not an IANA zone name such as Europe/Berlin, America/New_York or UTC",
        "timezone: '../../etc/passwd' is not an IANA zone name such as Europe/Berlin, America/New_York or UTC",
        "name: at most 128 characters, not 129",
        "name contains a bidi control (U+202E) at index 3",
    ]
    assert read == kept


async def test_a_code_the_owner_creates_opens_a_visitor_session_and_no_secret_is_audited(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        async with owner_client(running) as client:
            created = await call(client, "code_create", role="public", max_uses=2)
            code = created[1]["code"]
            opened = await running.http.post(f"{running.url}/v1/sessions", json={"code": code})
            by_text = await call(
                client, "config_set", capability="notes", scope="code", scope_id=code, values={"max_notes": 3}
            )
            live = await call(client, "sessions_list")
            key = await call(client, "api_key_create", role="public")
            codes = await call(client, "codes_list")
            session_id = opened.json()["session_id"]
            ended = await call(client, "session_end", session_id=session_id)
            ended_again = await call(client, "session_end", session_id=session_id)
            revoked = await call(client, "code_revoke", code=code)
            settings = await call(client, "host_settings_set", public_sessions=False)
            public = await running.http.post(f"{running.url}/v1/sessions", json={})
            _, rows = await call(client, "audit_list")

    assert created[0] is False and created[1]["role"] == "public" and created[1]["max_uses"] == 2
    assert opened.status_code == 201
    code_id = created[1]["id"]
    assert by_text[1]["scope_id"] == code_id and by_text[1]["values"] == {"max_notes": 3}
    assert [(s["session_id"], s["mode"], s["subject"], s["role"]) for s in live[1]["sessions"]] == [
        (session_id, "code", {"kind": "code", "id": code_id}, "public")
    ]
    assert key[1]["key"].startswith("mcphk_")
    assert [(c["id"], c["uses"]) for c in codes[1]["codes"]] == [(code_id, 1)]
    assert ended == (False, {"ended": True})
    assert ended_again == (False, {"ended": False})
    assert revoked == (False, {"revoked": True})
    assert settings[1]["public_sessions"] is False
    assert public.status_code == 401
    audited = str(rows)
    assert code not in audited and key[1]["key"] not in audited
    assert [(r["tool"], r["outcome"]) for r in reversed(rows["entries"])] == [
        ("code_create", "ok"),
        ("config_set", "ok"),
        ("sessions_list", "ok"),
        ("api_key_create", "ok"),
        ("codes_list", "ok"),
        ("session_end", "ok"),
        ("session_end", "ok"),
        ("code_revoke", "ok"),
        ("host_settings_set", "ok"),
    ]
    config_row = rows["entries"][-2]
    assert config_row["arguments"]["scope_id"] == "[redacted]"


async def test_owner_and_visitor_tokens_open_only_their_own_door(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as running:
        session = await running.new_session()
        owner_url = f"{running.url}{OWNER_PATH}"
        cases = {
            "missing": {},
            "wrong": {"Authorization": "Bearer not-the-token"},
            "visitor's": {"Authorization": f"Bearer {session['token']}"},
        }
        answers = {
            label: (await running.http.post(owner_url, json=INITIALIZE, headers={**MCP_HEADERS, **auth})).status_code
            for label, auth in cases.items()
        }
        owner_auth = {"Authorization": f"Bearer {owner_token(running)}"}
        on_visitor = await running.http.post(session["mcp_url"], json=INITIALIZE, headers={**MCP_HEADERS, **owner_auth})
        foreign = await running.http.post(
            owner_url, json=INITIALIZE, headers={**MCP_HEADERS, **owner_auth, "Origin": "http://evil.example"}
        )
        rebound = await running.http.post(
            owner_url, json=INITIALIZE, headers={**MCP_HEADERS, **owner_auth, "Host": "evil.example:8765"}
        )
        ok = await running.http.post(owner_url, json=INITIALIZE, headers={**MCP_HEADERS, **owner_auth})

    assert answers == {"missing": 401, "wrong": 401, "visitor's": 401}
    assert on_visitor.status_code == 401
    assert foreign.status_code == 403
    assert rebound.status_code == 421  # DNS rebinding: a Host that is not ours
    assert ok.status_code == 200


async def test_the_stdio_bridge_serves_the_owner_tools(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["notes"])
    async with running_host(settings) as running:
        bridge = StdioServerParameters(
            command=str(MCP_HOST), args=["owner", "--url", running.url, "--data-dir", str(settings.data_dir)]
        )
        async with Client(bridge, cache=None) as client:
            tools = (await client.list_tools()).tools
            failed, who = await call(client, "capability_invoke", capability="notes", tool="notes.whoami")
        async with owner_client(running) as direct:
            trail = await audit(direct)

    assert [t.name for t in tools] == OWNER_TOOLS
    assert (failed, who["mode"]) == (False, "owner")
    assert trail == [("capability_invoke", "ok")]


async def test_connector_secrets_are_write_only_and_never_audited(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, [], builtin_dir=BUILTINS)
    values = {"url": "http://127.0.0.1:9/cal/", "username": "ada", "password": "canary-secret-1"}
    async with running_host(settings) as running:
        async with owner_client(running) as client:
            wrong = await call(client, "connector_connect", connector="caldav", settings={"colour": "red"})
            connected = await call(client, "connector_connect", connector="caldav", settings=values)
            listed = await call(client, "connectors_list")
            dropped = await call(client, "connector_disconnect", category="calendar")
            unconfigured = await call(client, "connector_invoke", category="calendar", verb="freebusy", args={})
            _, rows = await call(client, "audit_list")

    assert wrong[1]["code"] == INVALID_ARGUMENTS and "colour" in wrong[1]["message"]
    assert connected[0] is False
    connection = connected[1]["connection"]
    assert (connection["category"], connection["connector"], connection["secrets_set"]) == (
        "calendar",
        "caldav",
        ["password"],
    )
    assert connection["settings"] == {"url": values["url"], "username": "ada"}
    assert "connected" in connected[1]  # the connector's own word, whatever it is
    caldav = next(c for c in listed[1]["connectors"] if c["id"] == "caldav")
    assert caldav["connection"]["secrets_set"] == ["password"]
    assert dropped == (False, {"disconnected": True})
    assert unconfigured[1]["code"] == "unconfigured"
    assert "canary-secret-1" not in str(listed) + str(rows)
    assert [(r["tool"], r["outcome"]) for r in reversed(rows["entries"])] == [
        ("connector_connect", INVALID_ARGUMENTS),
        ("connector_connect", "ok"),
        ("connectors_list", "ok"),
        ("connector_disconnect", "ok"),
        ("connector_invoke", "unconfigured"),
    ]


async def test_owner_sees_a_pending_tool_side_by_side_and_approving_shows_it_to_visitors(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"], pin_tools=True)
    async with running_host(settings) as running:
        session = await running.new_session()
        async with running.client(session) as visitor:
            before = [t.name for t in (await visitor.list_tools()).tools]
        async with owner_client(running) as client:
            _, pending = await call(client, "tools_pending")
            stale, changed = await call(
                client, "tool_approve", capability="test.echo", tool="echo", live_sha256="0" * 64
            )
            live = next(p["live_sha256"] for p in pending["pending"] if p["tool"] == "echo")
            failed, approved = await call(client, "tool_approve", capability="test.echo", tool="echo", live_sha256=live)
            refused, unknown = await call(client, "tool_approve", capability="test.echo", tool="nope")
            _, after_approval = await call(client, "tools_pending")
            trail = await audit(client)
        async with running.client(session) as visitor:
            after = [t.name for t in (await visitor.list_tools()).tools]

    assert before == []  # a --plugins capability starts pending: all hidden
    assert pending["pinning"] is True
    echo = next(p for p in pending["pending"] if p["tool"] == "echo")
    assert (echo["capability"], echo["approved"], echo["live"]["name"]) == ("test.echo", None, "echo")
    assert set(echo["live"]) == {"name", "title", "description", "inputSchema", "outputSchema", "annotations"}
    assert stale and changed["code"] == INVALID_ARGUMENTS and "changed since it was listed" in changed["message"]
    assert not failed and approved["approved"]["definition"] == echo["live"]
    assert refused and unknown["code"] == UNKNOWN
    assert "echo" not in [p["tool"] for p in after_approval["pending"]]
    assert after == ["echo"]
    assert trail[-4:] == [
        ("tool_approve", INVALID_ARGUMENTS),
        ("tool_approve", "ok"),
        ("tool_approve", "unknown"),
        ("tools_pending", "ok"),
    ]


async def test_approving_a_tool_that_collides_with_a_builtins_says_what_it_hides_and_needs_consent(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["twin_b"], builtin_dir=PLUGINS / "twin_a", pin_tools=True)
    async with running_host(settings) as running:
        session = await running.new_session()
        async with running.client(session) as visitor:
            before = sorted(t.name for t in (await visitor.list_tools()).tools)
        async with owner_client(running) as client:
            _, pending = await call(client, "tools_pending")
            refused, why = await call(client, "tool_approve", capability="test.twin_b", tool="same_name")
            _, plain = await call(client, "tool_approve", capability="test.twin_b", tool="only_b")
            async with running.client(session) as visitor:
                unchanged = sorted(t.name for t in (await visitor.list_tools()).tools)
            failed, approved = await call(
                client, "tool_approve", capability="test.twin_b", tool="same_name", hide_colliding=True
            )
        async with running.client(session) as visitor:
            after = sorted(t.name for t in (await visitor.list_tools()).tools)

    assert before == ["only_a", "same_name"]  # the builtin's; twin b's wait for approval
    shown = {p["tool"]: (p["collides_with"], p.get("warning")) for p in pending["pending"]}
    twin_a = {"capability": "test.twin_a", "tool": "same_name", "builtin": True}
    warning = (
        "approving 'same_name' of 'test.twin_b' hides it and 'same_name' of test.twin_a (builtin) from every "
        "session that can see both (tool names that differ only in case, '-' or '_' collide, and a collision "
        "exposes neither)"
    )
    assert shown == {"same_name": ([twin_a], warning), "only_b": ([], None)}
    assert refused and why == {
        "code": INVALID_ARGUMENTS,
        "message": f"{warning}; to approve it anyway, call again with hide_colliding: true",
    }
    assert plain["hidden"] == []
    assert unchanged == ["only_a", "only_b", "same_name"]  # the refused approval changed nothing
    assert not failed and approved["hidden"] == [twin_a]
    assert after == ["only_a", "only_b"]


async def test_roles_keys_and_their_config_are_administered_through_the_door(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["guarded"])) as running:
        async with owner_client(running) as client:
            put_ok, role = await call(
                client, "role_put", id="staff", capabilities=["test.guarded"], config={"test.guarded": {"max_items": 7}}
            )
            _, roles = await call(client, "roles_list")
            _, role_config = await call(client, "config_get", capability="test.guarded", scope="role", scope_id="staff")
            key_ok, made = await call(
                client, "api_key_create", role="staff", config={"test.guarded": {"priority": True}}
            )
            _, key_config = await call(
                client, "config_get", capability="test.guarded", scope="key", scope_id=made["id"]
            )
            bad, refused = await call(
                client,
                "config_set",
                capability="test.guarded",
                scope="key",
                scope_id=made["id"],
                values={"priority": 1},
            )
            _, keys = await call(client, "api_keys_list")
            _, revoked = await call(client, "api_key_revoke", id=made["id"])
            _, keys_after = await call(client, "api_keys_list")
        opened = await running.http.post(
            f"{running.url}/v1/sessions", headers={"Authorization": f"Bearer {made['key']}"}, json={}
        )

    assert put_ok is False and role["id"] == "staff" and role["capabilities"] == ["test.guarded"]
    assert "staff" in [r["id"] for r in roles["roles"]]
    assert role_config["values"] == {"greeting": "hello", "max_items": 7}
    assert key_ok is False and made["key"].startswith("mcphk_") and made["role"] == "staff"
    assert key_config["values"] == {"label": None, "priority": True}
    assert bad and refused["code"] == INVALID_ARGUMENTS and "priority" in refused["message"]
    assert [k["id"] for k in keys["api_keys"]] == [made["id"]]
    assert revoked == {"revoked": True}
    assert [k["status"] for k in keys_after["api_keys"] if k["id"] == made["id"]] == ["revoked"]
    assert made["key"] not in str(keys) and opened.status_code == 401


async def test_an_owner_only_tool_is_never_shown_to_or_called_by_a_visitor(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["owned"])) as running:
        session = await running.new_session()
        async with running.client(session) as visitor:
            names = [t.name for t in (await visitor.list_tools()).tools]
            refused = await visitor.call_tool("purge", {})
        async with owner_client(running) as owner:
            failed, purged = await call(owner, "capability_invoke", capability="test.owned", tool="owned.purge")
    assert names == ["greet"]
    assert refused.is_error is True
    assert refusal_of(refused) == Refusal(code="unknown", message="no tool named 'purge' is available in this session")
    assert (failed, purged) == (False, {"purged": True, "mode": "owner"})
