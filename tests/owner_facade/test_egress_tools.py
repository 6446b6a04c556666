"""The owner door's egress tools on a running host, through a real MCP client:
`plugin_egress_allow` / `plugin_egress_remove` store the owner's entries (canonical), restart the
plugin's running instance, answer with the plugin's egress, are audited, and show in
`capabilities_list`; an unknown or remote plugin and an entry the rules refuse are refused in one
sentence, nothing stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_host.plugins import RemoteSource, install_remote
from mcp_host.store import EgressGrants, OwnerEgress
from tests.hosting import host_settings, running_host, wait_until
from tests.owner_facade.test_plugin_tools import owner_client
from tests.plugins.test_install import owner_call
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

REMOTE = "mcp.example.com"


def _egress(owner: list[str], private: list[str] | None = None) -> dict[str, object]:
    return {"manifest": [], "owner": owner, "allow_net": False, "allow_private": private or [], "refused": []}


@needs_bwrap
async def test_allow_and_remove_restart_the_plugin_answer_its_egress_and_are_audited(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"])
    install_remote(RemoteSource(f"https://{REMOTE}/mcp", REMOTE), settings.data_dir)  # loaded at start, never called
    async with running_host(settings) as running, owner_client(running) as owner:
        async with running.client(await running.new_session()) as visitor:
            assert not (await visitor.call_tool("echo", {"text": "hi"})).is_error
        child = running.child("test.echo")
        assert child is not None and child.running

        failed, allowed = await owner_call(
            owner, "plugin_egress_allow", plugin_id="test.echo", host="API.Example.com:8443"
        )
        assert not failed, allowed
        assert running.child("test.echo") is None  # stopped: it starts again with the new egress
        await wait_until(lambda: not child.running)
        failed, private = await owner_call(
            owner, "plugin_egress_allow", plugin_id="test.echo", host="db.internal:5432", private=True
        )
        assert not failed, private
        failed, listed = await owner_call(owner, "capabilities_list")
        assert not failed, listed
        failed, removed = await owner_call(
            owner, "plugin_egress_remove", plugin_id="test.echo", host="api.example.COM:8443"
        )
        assert not failed, removed
        stored = await EgressGrants(running.sql).all()
        audit = await running.audit.list(running.owner_id)

    assert allowed == {"plugin_id": "test.echo", "egress": _egress(["api.example.com:8443"]), "restarted": 1}
    both = _egress(["api.example.com:8443", "db.internal:5432"], ["db.internal"])
    assert private == {"plugin_id": "test.echo", "egress": both, "restarted": 0}
    shown = {c["id"]: c["egress"] for c in listed["capabilities"]}
    assert shown == {"test.echo": both, REMOTE: None}
    after = _egress(["db.internal:5432"], ["db.internal"])
    assert removed == {"plugin_id": "test.echo", "egress": after, "restarted": 0, "removed": True}
    assert stored == {"test.echo": OwnerEgress(entries=("db.internal:5432",), private=("db.internal",))}
    assert [(row.tool, row.arguments, row.outcome) for row in reversed(audit) if "egress" in row.tool] == [
        ("plugin_egress_allow", {"plugin_id": "test.echo", "host": "API.Example.com:8443"}, "ok"),
        ("plugin_egress_allow", {"plugin_id": "test.echo", "host": "db.internal:5432", "private": True}, "ok"),
        ("plugin_egress_remove", {"plugin_id": "test.echo", "host": "api.example.COM:8443"}, "ok"),
    ]


async def test_an_unknown_or_remote_plugin_and_a_refused_entry_store_nothing(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"])
    install_remote(RemoteSource(f"https://{REMOTE}/mcp", REMOTE), settings.data_dir)
    async with running_host(settings) as running, owner_client(running) as owner:
        answers = [
            await owner_call(owner, "plugin_egress_allow", plugin_id="no.such", host="example.com"),
            await owner_call(owner, "plugin_egress_allow", plugin_id=REMOTE, host="example.com"),
            await owner_call(owner, "plugin_egress_allow", plugin_id="test.echo", host="*.example.com", private=True),
            await owner_call(owner, "plugin_egress_allow", plugin_id="test.echo", host="https://example.com"),
            await owner_call(owner, "plugin_egress_remove", plugin_id="test.echo", host="example.com:0"),
        ]
        stored = await EgressGrants(running.sql).all()
        audit = await running.audit.list(running.owner_id)
    assert answers == [
        (True, {"code": "invalid_arguments", "message": "plugin_id: no plugin named 'no.such' is loaded"}),
        (
            True,
            {
                "code": "invalid_arguments",
                "message": f"plugin_id: {REMOTE} is a remote server; the host reaches it at transport.allowed_hosts,"
                " and it has no egress of its own",
            },
        ),
        (
            True,
            {
                "code": "invalid_arguments",
                "message": "host: *.example.com is a wildcard; private reach is named one host at a time (allow each"
                " host --private)",
            },
        ),
        (
            True,
            {
                "code": "invalid_arguments",
                "message": "host: 'https://example.com' is not host, host:port, *.domain or *.domain:port",
            },
        ),
        (True, {"code": "invalid_arguments", "message": "host: 'example.com:0': the port must be 1 to 65535"}),
    ]
    assert stored == {}
    assert [row.outcome for row in audit if "egress" in row.tool] == ["invalid_arguments"] * 5
