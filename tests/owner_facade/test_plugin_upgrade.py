"""The owner door's `plugin_upgrade` on a running host (offline, npm-packed tiny-node versions):
a new version that cannot list its tools is refused and the old one keeps serving the visitor,
with nothing left on disk; a new version whose tool description changed is switched in, and
that tool is pending again: the visitor cannot call it until the owner approves it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mcp_host.plugins import Installed
from tests.hosting import PLUGINS, host_settings, running_host
from tests.owner_facade.test_plugin_tools import SHOUT, approve_all, local_npm, owner_client, tarball
from tests.plugins.installers import LocalPackages
from tests.plugins.packages import npm_tarball
from tests.plugins.test_install import NPM_ID, leftovers, owner_call
from tests.plugins.test_upgrade import NEW_DESCRIPTION, tiny_node_version
from tests.processes import needs_bwrap

__all__ = ["local_npm", "tarball"]  # fixtures this module uses, defined in test_plugin_tools

needs_npm = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed (Node.js 20+ with npm)")


@pytest.fixture
def versions(tmp_path_factory: pytest.TempPathFactory, local_npm: LocalPackages) -> None:
    """The owner door's installer (`local_npm`) upgrades to 2.0.0 (shout's description changed)
    or 3.0.0 (a server that exits at start) from local tarballs."""
    folder = tmp_path_factory.mktemp("versions")
    made = {"1.0.0": npm_tarball(folder), "2.0.0": tiny_node_version(folder, "2.0.0")}
    made["3.0.0"] = tiny_node_version(folder, "3.0.0", broken=True)
    local_npm.tarballs.update(made)


@needs_npm
@needs_bwrap
@pytest.mark.anyio
async def test_upgrade_switches_only_when_listed_and_a_changed_tool_is_pending_again(
    tmp_path: Path, database_url: str, local_npm: LocalPackages, versions: None
) -> None:
    settings = host_settings(tmp_path, database_url, [str(PLUGINS / "echo")], pin_tools=True)
    async with running_host(settings, local_npm) as running, owner_client(running) as owner:
        failed, added = await owner_call(owner, "plugin_add", source=SHOUT)
        assert not failed and added["version"] == "1.0.0", added
        assert await approve_all(owner, NPM_ID) == ["shout"]
        failed, answer = await owner_call(owner, "role_put", id="friends", capabilities=[NPM_ID])
        assert not failed, answer
        _, code = await owner_call(owner, "code_create", role="friends")
        session = await running.new_session({"code": code["code"]})
        async with running.client(session) as visitor:
            assert not (await visitor.call_tool("shout", {"text": "a"})).is_error

            failed, refusal = await owner_call(owner, "plugin_upgrade", id=NPM_ID, version="3.0.0")
            assert failed and refusal["code"] == "invalid_arguments", refusal
            assert "did not list its tools" in refusal["message"] and "old one keeps running" in refusal["message"]
            assert leftovers(settings.data_dir) == [NPM_ID]
            still = await visitor.call_tool("shout", {"text": "still"})
            assert not still.is_error and still.content[0].text == "STILL"  # type: ignore[union-attr]

            seen: list[tuple[float, float | None, str | None]] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append((progress, total, message))

            result = await owner.call_tool(
                "plugin_upgrade", {"id": NPM_ID, "version": "2.0.0"}, progress_callback=on_progress
            )
            assert not result.is_error, result.content
            upgraded = result.structured_content
            assert upgraded is not None and upgraded["from_version"] == "1.0.0" and upgraded["version"] == "2.0.0"
            # npm's own lines reach the owner as progress while the new version installs, as for plugin_add
            assert [(progress, total) for progress, total, _ in seen] == [(n, None) for n in range(1, len(seen) + 1)]
            messages = [message or "" for _, _, message in seen]
            assert all(re.fullmatch(rf"upgrading {NPM_ID}: \d+ s|npm: .+", m) for m in messages), messages
            assert any(re.fullmatch(r"npm: added 1 package in \S+", m) for m in messages), messages
            assert upgraded["tools"] == ["shout"] and upgraded["pending_tools"] == ["shout"], upgraded
            assert leftovers(settings.data_dir) == [NPM_ID]
            header = (settings.data_dir / "plugins" / NPM_ID / "manifest.yaml").read_text().splitlines()[1]
            assert "2.0.0 from npm" in header, header
            failed, review = await owner_call(owner, "tools_pending")
            entry = next(e for e in review["pending"] if e["capability"] == NPM_ID)
            assert NEW_DESCRIPTION in str(entry), entry

            assert "shout" not in {tool.name for tool in (await visitor.list_tools()).tools}
            assert (await visitor.call_tool("shout", {"text": "b"})).is_error
            assert await approve_all(owner, NPM_ID) == ["shout"]
            tools = {tool.name: tool for tool in (await visitor.list_tools()).tools}
            assert tools["shout"].description == NEW_DESCRIPTION
            loud = await visitor.call_tool("shout", {"text": "new"})
            assert not loud.is_error and loud.content[0].text == "NEW"  # type: ignore[union-attr]


def needy(folder: Path, version: str) -> Path:
    """A copy of the envy test plugin at `version` whose server exits at start unless its
    required secret setting (api_token, as ENVY_TOKEN) reaches its environment."""
    shutil.copytree(PLUGINS / "envy", folder)
    manifest = folder / "manifest.yaml"
    manifest.write_text(manifest.read_text() + f"version: '{version}'\n")
    server = folder / "server.py"
    exits = 'import os, sys\nif not os.environ.get("ENVY_TOKEN"):\n    sys.exit("ENVY_TOKEN is not set")\n'
    server.write_text(exits + server.read_text())
    return folder


class Needy:
    """An installer of `needy` copies of the envy test plugin: version 1 installed, 2 staged."""

    def install(self, source: str, data_dir: Path, plugin_id: str | None) -> Installed:
        folder = needy(data_dir / "plugins" / "test.envy", "1")
        return Installed("test.envy", folder, "python", ("server.py",), "1")

    def stage_upgrade(self, data_dir: Path, plugin_id: str, version: str | None, source: str | None) -> Installed:
        folder = needy(data_dir / "plugins" / ".staging-needy", "2")
        return Installed(plugin_id, folder, "python", ("server.py",), "2")


@needs_bwrap
@pytest.mark.anyio
async def test_a_plugin_that_needs_the_owners_setting_upgrades_with_it(tmp_path: Path, database_url: str) -> None:
    # The new version's trial start gets the owner's config as a real start does: without the
    # owner's api_token it would exit at start and the upgrade would be refused.
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    async with running_host(settings, Needy()) as running, owner_client(running) as owner:
        failed, added = await owner_call(owner, "plugin_add", source="npm:needy")
        assert not failed, added
        # It cannot start (no api_token): nothing pending yet, and the first step is the setting.
        assert (added["pending_tools"], added["next"]) == (
            [],
            [
                {
                    "step": "set its required setting api_token",
                    "tool": "config_set",
                    "arguments": {"capability": "test.envy", "scope": "owner", "values": {"api_token": "…"}},
                }
            ],
        )
        failed, refusal = await owner_call(owner, "plugin_upgrade", id="test.envy", version="2")
        assert failed and "the owner must set 'api_token' of test.envy" in refusal["message"], refusal
        assert leftovers(settings.data_dir) == ["test.envy"]

        values = {"api_token": "tok-123"}
        failed, answer = await owner_call(owner, "config_set", capability="test.envy", scope="owner", values=values)
        assert not failed, answer
        failed, upgraded = await owner_call(owner, "plugin_upgrade", id="test.envy", version="2")
        assert not failed, upgraded
        assert (upgraded["from_version"], upgraded["version"], upgraded["tools"]) == ("1", "2", ["env_show"])
        assert leftovers(settings.data_dir) == ["test.envy"]
