"""`plugin add https://…/mcp`: a remote MCP server becomes a plugin folder with a manifest only
(an http transport to that URL, its host the only one allowed, one optional secret setting sent
as Authorization), granting nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import RemoteSource, install_remote, parse_add_source
from mcp_host.plugins.manifest import load_manifest


def test_a_remote_url_writes_a_manifest_that_reaches_that_host_only(tmp_path: Path) -> None:
    source = parse_add_source("https://mcp.example.com/v1/mcp")
    assert isinstance(source, RemoteSource)
    done = install_remote(source, tmp_path)

    manifest = load_manifest(done.folder)
    assert (done.id, done.folder, manifest.id) == ("mcp.example.com", tmp_path / "plugins" / "mcp.example.com", done.id)
    assert (manifest.acl, manifest.instances, manifest.visitor_tools, manifest.requires) == (
        "role_granted",
        "per_session",
        (),
        (),
    )
    transport = manifest.transport
    assert transport is not None
    assert (transport.kind, transport.url, transport.allowed_hosts) == (
        "http",
        "https://mcp.example.com/v1/mcp",
        ("mcp.example.com",),
    )
    assert (transport.headers, transport.headers_from_config) == ({}, {"Authorization": "authorization"})
    [auth] = manifest.config
    assert (auth.key, auth.secret, auth.required) == ("authorization", True, False)
    header = (done.folder / "manifest.yaml").read_text().splitlines()[0]
    assert header.startswith("# Installed by `mcp-host plugin add https://mcp.example.com/v1/mcp` on ")


def test_a_taken_id_is_refused_and_another_can_be_chosen(tmp_path: Path) -> None:
    source = parse_add_source("http://127.0.0.1:8000/mcp")
    assert isinstance(source, RemoteSource)
    install_remote(source, tmp_path)
    with pytest.raises(InvalidArguments, match="already installed"):
        install_remote(source, tmp_path)
    again = install_remote(source, tmp_path, plugin_id="local.mcp")
    transport = load_manifest(again.folder).transport
    assert transport is not None and transport.allowed_hosts == ("127.0.0.1",)
    assert sorted(p.name for p in (tmp_path / "plugins").iterdir()) == ["ip_127_0_0_1", "local.mcp"]
