"""`mcp-host plugin allow|disallow`: with no host running, on the database alone (the plugin found
as a host's start finds it, the change audited); with one, through its owner door (its running
instance restarted). An unknown or remote plugin and a bad entry: one line on stderr, exit 2,
nothing stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from mcp_host.access import OwnerStore
from mcp_host.plugins import BundleSource, RemoteSource, install_bundle, install_remote
from mcp_host.policy import AuditLog
from mcp_host.settings import Settings
from mcp_host.store import EgressGrants, OwnerEgress, open_database
from tests.app.test_plugin_commands import run, shout_bundle
from tests.hosting import host_settings, running_host
from tests.plugins.test_install_bundle import BUNDLE_ID
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

REMOTE = "mcp.example.com"


async def _stored(database_url: str, data: Path) -> tuple[dict[str, OwnerEgress], list[tuple[str, object]]]:
    async with open_database(Settings(database_url=SecretStr(database_url), data_dir=data)) as database:
        owner = await OwnerStore(database.pool).ensure_single_owner()
        rows = await AuditLog(database.pool).list(owner.id)
        return await EgressGrants(database.pool).all(), [(r.tool, r.arguments) for r in reversed(rows)]


async def test_without_a_host_the_change_goes_to_the_database_and_is_audited(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    install_bundle(BundleSource(shout_bundle(tmp_path / "shout.mcpb")), data)
    monkeypatch.setenv("MCP_HOST_DATABASE_URL", database_url)  # no host runs: the command opens it
    where = ("--data-dir", str(data))

    assert await run("plugin", "allow", BUNDLE_ID, "API.Example.com:8443", *where) == 0
    allowed = capsys.readouterr()
    assert await run("plugin", "allow", BUNDLE_ID, "db.internal:5432", "--private", *where) == 0
    private = capsys.readouterr()
    assert await run("plugin", "disallow", BUNDLE_ID, "api.example.com:8443", *where) == 0
    removed = capsys.readouterr()

    offline = f"(offline: no host runs with data directory {data}; working on the database alone)\n"
    assert (allowed.err, private.err, removed.err) == (offline, offline, offline)
    later = "  a host running with this data directory starts its children with it from its next start"
    assert allowed.out.splitlines() == [
        f"allowed API.Example.com:8443 for {BUNDLE_ID}",
        later,
        "  network: api.example.com:8443 (yours)",
    ]
    assert private.out.splitlines() == [
        f"allowed db.internal:5432 for {BUNDLE_ID}",
        later,
        "  network: api.example.com:8443 (yours), db.internal:5432 (yours)",
        "  private: db.internal (also at a private address)",
    ]
    assert removed.out.splitlines() == [
        f"disallowed api.example.com:8443 for {BUNDLE_ID}",
        later,
        "  network: db.internal:5432 (yours)",
        "  private: db.internal (also at a private address)",
    ]
    stored, audit = await _stored(database_url, data)
    assert stored == {BUNDLE_ID: OwnerEgress(entries=("db.internal:5432",), private=("db.internal",))}
    assert audit == [
        ("plugin_egress_allow", {"plugin_id": BUNDLE_ID, "host": "API.Example.com:8443", "private": False}),
        ("plugin_egress_allow", {"plugin_id": BUNDLE_ID, "host": "db.internal:5432", "private": True}),
        ("plugin_egress_remove", {"plugin_id": BUNDLE_ID, "host": "api.example.com:8443"}),
    ]


async def test_an_unknown_or_remote_plugin_and_a_bad_entry_are_one_line_and_store_nothing(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    install_remote(RemoteSource(f"https://{REMOTE}/mcp", REMOTE), data)
    monkeypatch.setenv("MCP_HOST_DATABASE_URL", database_url)
    where = ("--data-dir", str(data))
    offline = f"(offline: no host runs with data directory {data}; working on the database alone)"

    assert await run("plugin", "allow", "no.such", "example.com", *where) == 2
    unknown = capsys.readouterr().err.splitlines()
    assert await run("plugin", "allow", REMOTE, "example.com", *where) == 2
    remote = capsys.readouterr().err.splitlines()
    assert await run("plugin", "allow", REMOTE, "*.example.com", "--private", *where) == 2
    wildcard = capsys.readouterr().err.splitlines()

    assert unknown == [offline, "mcp-host: plugin_id: no plugin named 'no.such' is loaded"]
    assert remote == [
        offline,
        f"mcp-host: plugin_id: {REMOTE} is a remote server; the host reaches it at transport.allowed_hosts, and it"
        " has no egress of its own",
    ]
    assert wildcard == [  # refused before any host is asked
        "mcp-host: host: *.example.com is a wildcard; private reach is named one host at a time (allow each host"
        " --private)"
    ]
    assert await _stored(database_url, data) == ({}, [])


@needs_bwrap
async def test_with_a_host_running_the_change_goes_through_its_door_and_restarts_the_plugin(
    tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"])
    data = str(settings.data_dir)
    async with running_host(settings) as running:
        async with running.client(await running.new_session()) as visitor:
            assert not (await visitor.call_tool("echo", {"text": "hi"})).is_error
        capsys.readouterr()
        assert await run("plugin", "allow", "test.echo", "[::1]:8080", "--private", "--data-dir", data) == 0
        allowed = capsys.readouterr()
        assert running.child("test.echo") is None  # stopped: it starts again with the new egress
        assert await run("plugin", "disallow", "test.echo", "other.example.com", "--data-dir", data) == 0
        absent = capsys.readouterr()
        assert await run("plugin", "allow", "no.such", "example.com", "--data-dir", data) == 2
        unknown = capsys.readouterr()
        stored = await EgressGrants(running.sql).all()
    assert allowed.out.splitlines() == [
        "allowed [::1]:8080 for test.echo",
        f"  the host at {running.url} restarted its 1 running instance(s)",
        "  network: [::1]:8080 (yours)",
        "  private: [::1] (also at a private address)",
    ]
    assert absent.out.splitlines() == [
        "other.example.com was not among the hosts you gave test.echo",
        f"  the host at {running.url} restarted its 0 running instance(s)",
        "  network: [::1]:8080 (yours)",
        "  private: [::1] (also at a private address)",
    ]
    assert unknown.err == "mcp-host: plugin_id: no plugin named 'no.such' is loaded\n"
    assert stored == {"test.echo": OwnerEgress(entries=("[::1]:8080",), private=("[::1]",))}
