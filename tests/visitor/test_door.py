"""What a visitor session sees and what its calls carry, through a real host and real children."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot

from mcp_host.owner import PluginEgress
from mcp_host.owner.catalogue import CatalogueEntry
from mcp_host_kit.contract import Refusal, refusal_of
from tests.hosting import PLUGINS, host_settings, refusal, running_host

pytestmark = pytest.mark.anyio
NONE = Refusal(code="", message="")  # what a result that is no refusal reads as here


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_tool_list_follows_the_childs_real_list_at_once(tmp_path: Path, database_url: str, mode: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["shifty"])) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["alpha", "shift"]
            assert (await client.call_tool("shift", {})).structured_content == {"called": "shift"}
            assert [t.name for t in (await client.list_tools()).tools] == ["beta", "shift"]
            # the renamed tool is callable, the old name is gone
            assert (await client.call_tool("beta", {})).structured_content == {"called": "beta"}
            gone = await client.call_tool("alpha", {})
            assert (refusal_of(gone) or NONE).code == "unknown"


async def test_mismatch_with_manifest_is_logged_and_real_list_wins(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_host.visitor.bindings")
    async with running_host(host_settings(tmp_path, database_url, ["shifty"])) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            await client.call_tool("shift", {})
            assert [t.name for t in (await client.list_tools()).tools] == ["beta", "shift"]
    assert (
        "test.shifty: real tools differ from manifest visitor_tools (the real list wins): "
        "missing ['alpha'], undeclared ['beta']"
    ) in caplog.messages


async def test_colliding_tool_names_are_exposed_by_neither_and_catalogue_says_why(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["twin_a", "twin_b"])) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            assert sorted(t.name for t in (await client.list_tools()).tools) == ["only_a", "only_b"]
            refused = await client.call_tool("same_name", {})
            assert refusal(refused) == {
                "code": "unknown",
                "message": "no tool named 'same_name' is available in this session",
            }
        entries = {e.id: e for e in host.catalogue()}
        assert entries["test.twin_a"] == snapshot(
            CatalogueEntry(
                id="test.twin_a",
                kind="capability",
                title="Twin a (test)",
                acl="always",
                requires=[],
                visitor_tools=["same_name", "only_a"],
                status="healthy",
                cause="tool 'same_name' is also exposed by test.twin_b; neither copy is exposed",
                instances=0,
                egress=PluginEgress(manifest=[], owner=[], allow_net=False, allow_private=[], refused=[]),
            )
        )
        assert (
            entries["test.twin_b"].cause == "tool 'same_name' is also exposed by test.twin_a; neither copy is exposed"
        )


async def test_names_that_differ_only_in_case_dash_or_underscore_collide_and_catalogue_says_why(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["twin_a", "lookalike"])) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            listed = sorted(t.name for t in (await client.list_tools()).tools)
            refused = await client.call_tool("Only-A", {})
        causes = {e.id: e.cause for e in host.catalogue()}
    assert listed == ["own_tool", "same_name"]
    assert refusal(refused) == {
        "code": "unknown",
        "message": "no tool named 'Only-A' is available in this session",
    }
    assert causes == snapshot(
        {
            "test.lookalike": "tool 'Only-A' is also exposed by test.twin_a as 'only_a' (names that differ only in "
            "case, '-' or '_' collide); no copy is exposed; tool 'Send-Mail' is also exposed by test.lookalike as "
            "'send_mail' (names that differ only in case, '-' or '_' collide); no copy is exposed; tool 'send_mail' "
            "is also exposed by test.lookalike as 'Send-Mail' (names that differ only in case, '-' or '_' collide); "
            "no copy is exposed",
            "test.twin_a": "tool 'only_a' is also exposed by test.lookalike as 'Only-A' (names that differ only in "
            "case, '-' or '_' collide); no copy is exposed",
        }
    )


async def _whoami(host: Any, meta: dict[str, Any] | None) -> Any:
    session = await host.new_session({"visitor": {"name": "Ada", "email": "ada@example.org"}})
    async with host.client(session, "legacy") as client:
        result = await client.call_tool("whoami", {}, meta=meta)
    return session, result


async def test_forwarded_call_carries_the_trusted_session_scope(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session, result = await _whoami(host, {"trace": "t-1"})
        meta = result.structured_content["meta"]
        assert meta["trace"] == "t-1"
        scope = meta["mcp-host/session"]
        assert scope == {
            "owner_id": scope["owner_id"],
            "session_id": session["session_id"],
            "mode": "public",
            "subject": None,
            "visitor": {"name": "Ada", "email": "ada@example.org"},
            "role": "public",
        }
        assert "mcp-host/grant" not in meta


@pytest.mark.parametrize(
    "forged_key",
    [
        "mcp-host/session",
        "MCP-Host/session",
        "mcp-host/grant",
        "ｍｃｐ-host/session",
        "mcp\u200b-host/session",
        " mcp-host/x",
    ],
)
async def test_visitor_meta_under_the_host_prefix_is_dropped(
    tmp_path: Path, database_url: str, forged_key: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session, result = await _whoami(host, {forged_key: {"owner_id": "someone-else", "mode": "owner"}, "ok": 1})
        meta = result.structured_content["meta"]
        assert sorted(meta) == ["mcp-host/call", "mcp-host/session", "ok"]
        assert meta["mcp-host/session"]["session_id"] == session["session_id"]
        assert meta["mcp-host/session"]["mode"] == "public"


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({f"k{i}": i for i in range(17)}, "_meta has 17 keys; at most 16 are accepted"),
        ({"deep": {"a": {"b": {"c": {"d": 1}}}}}, "_meta is nested deeper than 4 levels"),
        ({"big": "x" * 5000}, "_meta is 5010 bytes; at most 4096 are accepted"),
    ],
)
async def test_visitor_meta_over_a_cap_is_refused_as_invalid_arguments(
    tmp_path: Path, database_url: str, meta: dict[str, Any], message: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        _, result = await _whoami(host, meta)
        assert result.is_error is True
        assert refusal(result) == {"code": "invalid_arguments", "message": message}


async def test_child_sees_only_declared_environment(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_HOST_TEST_CANARY", "secret-canary")
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        _, result = await _whoami(host, None)
        # PYTHONPATH: the plugin kit (command: python). No MCP_HOST_SOCKET: echo named no host ops.
        assert result.structured_content["env"] == [
            "HOME",
            "LANG",
            "PATH",
            "PWD",
            "PYTHONDONTWRITEBYTECODE",
            "PYTHONPATH",
            "PYTHONUNBUFFERED",
        ]
        assert result.structured_content["pid"] == 2  # its own pid namespace: bwrap's init is 1


async def test_role_granted_capability_is_hidden_from_public_sessions(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.visitor.door")
    granted = tmp_path / "granted"
    granted.mkdir()
    manifest = (PLUGINS / "twin_a" / "manifest.yaml").read_text()
    (granted / "manifest.yaml").write_text(manifest.replace("acl: always", "acl: role_granted"))
    (granted / "server.py").write_text((PLUGINS / "twin_a" / "server.py").read_text())
    settings = host_settings(tmp_path, database_url, ["echo"])
    settings = settings.model_copy(update={"plugins": [*settings.plugins, granted]})
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["echo", "whoami", "sleep", "die"]
            refused = await client.call_tool("only_a", {})
            missing = await client.call_tool("only_z", {})
            # exactly what a tool that exists nowhere gets (the name it was asked for aside)
            assert refusal(refused) == {
                "code": "unknown",
                "message": "no tool named 'only_a' is available in this session",
            }
            assert refusal(missing) == {
                "code": "unknown",
                "message": "no tool named 'only_z' is available in this session",
            }
            assert refused.is_error is missing.is_error is True
        assert len(host.spawned) == 1  # twin_a never started for a session that cannot see it
        # the visitor hears `unknown`, as for a tool that does not exist; the log says which it was
        assert (
            f"session {session['session_id']}: tool 'only_a' refused as unknown "
            "(declared by test.twin_a, which this session may not see)"
        ) in caplog.messages


async def test_progress_from_child_reaches_the_visitor(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        async with host.client(session, "legacy") as client:
            result = await client.call_tool("sleep", {"seconds": 0.1}, progress_callback=on_progress)
        assert result.structured_content == {"slept": 0.1}
        assert seen == [(0.0, 0.1, "sleeping")]
