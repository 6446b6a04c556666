"""The owner door's `plugin_add` and `plugin_upgrade` with an MCP Bundle and a registry
`server.json` on a running host, offline: a bundle zipped in the test and a server.json pointing
at the npm-packed tiny-node tarballs. Each is added with its tool pending, approved and called by
a visitor, then upgraded (a new .mcpb; the server.json read again with a new pinned version):
the changed tool is pending again. A source of another kind, a new version that cannot list its
tools, a bundle with a path outside its root and an oversize one are refused in one sentence with
nothing left in <data dir>/plugins."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client

from tests.hosting import host_settings, running_host
from tests.owner_facade.test_plugin_tools import approve_all, owner_client
from tests.plugins.installers import LocalPackages
from tests.plugins.packages import NPM_SOURCE
from tests.plugins.test_install import NPM_ID, leftovers, offline, owner_call
from tests.plugins.test_install_bundle import BUNDLE_ID, make_bundle, server_json
from tests.plugins.test_upgrade import NEW_DESCRIPTION, shout_bundle, tarballs
from tests.processes import needs_bwrap

__all__ = ["tarballs"]  # a fixture this module uses, defined in test_upgrade

needs_npm = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed (Node.js 20+ with npm)")


async def grant(owner: Client, capability: str) -> str:
    """A code whose role grants `capability`; its text."""
    failed, answer = await owner_call(owner, "role_put", id="friends", capabilities=[capability])
    assert not failed, answer
    _, code = await owner_call(owner, "code_create", role="friends")
    return str(code["code"])


def one_sentence(refusal: dict[str, Any]) -> str:
    message = str(refusal["message"])
    assert refusal["code"] == "invalid_arguments" and "\n" not in message and "Traceback" not in message, refusal
    return message


@needs_bwrap
@pytest.mark.anyio
async def test_a_bundle_is_added_called_and_upgraded_from_a_new_mcpb(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline(monkeypatch)
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    folder = settings.data_dir / "plugins" / BUNDLE_ID
    async with running_host(settings) as running, owner_client(running) as owner:
        failed, added = await owner_call(owner, "plugin_add", source=str(shout_bundle(tmp_path / "v1.mcpb", "1.2.0")))
        assert not failed, added
        assert (added["capability"], added["version"], added["pending_tools"]) == (BUNDLE_ID, "1.2.0", ["shout"])
        assert await approve_all(owner, BUNDLE_ID) == ["shout"]
        session = await running.new_session({"code": await grant(owner, BUNDLE_ID)})
        async with running.client(session) as visitor:
            shout = await visitor.call_tool("shout", {"text": "hello"})
            assert not shout.is_error and shout.content[0].text == "HELLO"  # type: ignore[union-attr]

            failed, refusal = await owner_call(owner, "plugin_upgrade", id=BUNDLE_ID, version="1.3.0")
            assert failed and one_sentence(refusal).endswith("give the new .mcpb as the source"), refusal
            failed, refusal = await owner_call(owner, "plugin_upgrade", id=BUNDLE_ID, source="npm:left-pad@1.3.0")
            assert failed and one_sentence(refusal).endswith("too, not from npm"), refusal
            broken = shout_bundle(tmp_path / "broken.mcpb", "1.3.0", broken=True)
            failed, refusal = await owner_call(owner, "plugin_upgrade", id=BUNDLE_ID, source=str(broken))
            assert failed and "did not list its tools" in one_sentence(refusal), refusal
            assert leftovers(settings.data_dir) == [BUNDLE_ID]
            still = await visitor.call_tool("shout", {"text": "still"})
            assert not still.is_error and still.content[0].text == "STILL"  # type: ignore[union-attr]

            new = shout_bundle(tmp_path / "v2.mcpb", "1.3.0", description=NEW_DESCRIPTION)
            failed, upgraded = await owner_call(owner, "plugin_upgrade", id=BUNDLE_ID, source=str(new))
            assert not failed, upgraded
            assert (upgraded["from_version"], upgraded["version"]) == ("1.2.0", "1.3.0"), upgraded
            assert upgraded["tools"] == ["shout"] and upgraded["pending_tools"] == ["shout"], upgraded
            assert leftovers(settings.data_dir) == [BUNDLE_ID]
            header = (folder / "manifest.yaml").read_text().splitlines()[0]
            assert header.startswith(f"# Installed by `mcp-host plugin add {new}` on "), header

            assert "shout" not in {tool.name for tool in (await visitor.list_tools()).tools}
            assert await approve_all(owner, BUNDLE_ID) == ["shout"]
            tools = {tool.name: tool for tool in (await visitor.list_tools()).tools}
            assert tools["shout"].description == NEW_DESCRIPTION
            loud = await visitor.call_tool("shout", {"text": "new"})
            assert not loud.is_error and loud.content[0].text == "NEW"  # type: ignore[union-attr]


@pytest.fixture
def entry_installs(monkeypatch: pytest.MonkeyPatch, tarballs: dict[str, Path]) -> LocalPackages:
    """The owner door installs a server.json's npm package from the local tarball of the version
    it pins (registries refuse every connection); anything else as the real installer does."""
    offline(monkeypatch)
    return LocalPackages(tarballs)


@needs_npm
@needs_bwrap
@pytest.mark.anyio
async def test_a_server_json_is_added_called_and_upgraded_when_its_pinned_version_changes(
    tmp_path: Path, database_url: str, entry_installs: LocalPackages
) -> None:
    entry = server_json(tmp_path / "entry", "npm", NPM_SOURCE.package)
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    folder = settings.data_dir / "plugins" / NPM_ID
    async with running_host(settings, entry_installs) as running, owner_client(running) as owner:
        failed, added = await owner_call(owner, "plugin_add", source=str(entry.path))
        assert not failed, added
        assert (added["capability"], added["version"], added["pending_tools"]) == (NPM_ID, "1.0.0", ["shout"])
        assert await approve_all(owner, NPM_ID) == ["shout"]
        session = await running.new_session({"code": await grant(owner, NPM_ID)})
        async with running.client(session) as visitor:
            shout = await visitor.call_tool("shout", {"text": "hello"})
            assert not shout.is_error and shout.content[0].text == "HELLO"  # type: ignore[union-attr]

            failed, refusal = await owner_call(owner, "plugin_upgrade", id=NPM_ID, version="2.0.0")
            assert failed and "give the new server.json as the source" in one_sentence(refusal), refusal
            bundle = shout_bundle(tmp_path / "v.mcpb", "2.0.0")
            failed, refusal = await owner_call(owner, "plugin_upgrade", id=NPM_ID, source=str(bundle))
            assert failed and one_sentence(refusal).endswith("too, not from an MCP Bundle (.mcpb)"), refusal
            assert leftovers(settings.data_dir) == [NPM_ID]

            server_json(tmp_path / "entry", "npm", NPM_SOURCE.package, version="2.0.0")  # pins 2.0.0 now
            failed, upgraded = await owner_call(owner, "plugin_upgrade", id=NPM_ID)
            assert not failed, upgraded
            assert (upgraded["from_version"], upgraded["version"]) == ("1.0.0", "2.0.0"), upgraded
            assert upgraded["pending_tools"] == ["shout"], upgraded
            assert leftovers(settings.data_dir) == [NPM_ID]
            origin = (folder / "manifest.yaml").read_text().splitlines()[1]
            assert f"npm:{NPM_SOURCE.package}@2.0.0 as the registry entry" in origin, origin

            assert (await visitor.call_tool("shout", {"text": "b"})).is_error  # pending again
            assert await approve_all(owner, NPM_ID) == ["shout"]
            tools = {tool.name: tool for tool in (await visitor.list_tools()).tools}
            assert tools["shout"].description == NEW_DESCRIPTION
            loud = await visitor.call_tool("shout", {"text": "new"})
            assert not loud.is_error and loud.content[0].text == "NEW"  # type: ignore[union-attr]


def oversize(bundle: Path, member: str, size: int) -> Path:
    """`bundle` with the central directory claiming `member` unpacks to `size` bytes."""
    data = bytearray(bundle.read_bytes())
    at = data.find(b"PK\x01\x02")
    while at != -1:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + name_length] == member.encode():
            struct.pack_into("<I", data, at + 24, size)
            bundle.write_bytes(bytes(data))
            return bundle
        at = data.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"no {member} in {bundle}")


@pytest.mark.anyio
async def test_a_hostile_or_oversize_bundle_is_refused_and_leaves_nothing(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline(monkeypatch)
    escape = shout_bundle(tmp_path / "escape.mcpb", "1.0.0", escape=True)
    absolute = make_bundle(tmp_path / "absolute.mcpb", {"name": "x"}, {"/etc/evil.js": (b"x", 0o644)})
    big = make_bundle(tmp_path / "big.mcpb", {"name": "x"}, {"big.bin": (b"x" * 64, 0o644)})
    oversize(big, "big.bin", 300 * 1024 * 1024)
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    async with running_host(settings) as running, owner_client(running) as owner:
        for bundle, message in [
            (escape, "the bundle's member '../escape.js' "),
            (absolute, "the bundle's member '/etc/evil.js' is absolute."),
            (big, "the bundle's member 'big.bin' is 314572800 bytes; the limit is 268435456."),
        ]:
            failed, refusal = await owner_call(owner, "plugin_add", source=str(bundle))
            assert failed and one_sentence(refusal).startswith(message), refusal
            assert leftovers(settings.data_dir) == []  # no folder, no .staging-* one either
        failed, listed = await owner_call(owner, "plugins_list")
        assert not failed and listed["plugins"] == [], listed
