"""The plugin-admin service (`PluginAdmin`) with an in-memory installer that copies the echo test
plugin (no npm, no pip, no child: the trial is the test's): an add that is not accepted, and an
upgrade whose trial fails, leave `<data dir>/plugins` as it was; an upgrade switches only after
its trial; a remove runs `stopping` before the folder goes; the listing names each folder's
recorded source."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import Installed, Plugin, PluginAdmin, load_plugins
from tests.hosting import PLUGINS
from tests.plugins.test_install import leftovers

ECHO = "test.echo"


class CopiedEcho:
    """Installs the echo test plugin by copying it, its manifest headed as `plugin add` heads it;
    stages `version` of it in a hidden folder beside it (`id`: the id the staged copy names)."""

    def __init__(self, id: str = ECHO) -> None:
        self.id = id

    def install(self, source: str, data_dir: Path, plugin_id: str | None) -> Installed:
        return self._copy(data_dir / "plugins" / (plugin_id or ECHO), source, "1.0.0", plugin_id or ECHO)

    def stage_upgrade(self, data_dir: Path, plugin_id: str, version: str | None, source: str | None) -> Installed:
        return self._copy(data_dir / "plugins" / ".staging-test", f"npm:echo@{version}", version or "2.0.0", self.id)

    def _copy(self, folder: Path, source: str, version: str, plugin_id: str) -> Installed:
        shutil.copytree(PLUGINS / "echo", folder)
        manifest = folder / "manifest.yaml"
        body = manifest.read_text().replace(f"id: {ECHO}", f"id: {plugin_id}")
        header = f"# Installed by `mcp-host plugin add {source}` on 2026-12-07:\n"
        manifest.write_text(f"{header}{body}version: '{version}'\n")
        return Installed(plugin_id, folder, "python", ("server.py",), version)


def _refuse(plugin: Plugin) -> None:
    raise InvalidArguments(f"{plugin.manifest.id} is not wanted here")


async def _tools(plugin: Plugin) -> list[str]:
    return list(plugin.manifest.visitor_tools)


async def _fails(plugin: Plugin) -> list[str]:
    raise InvalidArguments("the new version did not list its tools")


@pytest.mark.anyio
async def test_an_add_is_loaded_and_one_not_accepted_leaves_nothing(tmp_path: Path) -> None:
    admin = PluginAdmin(tmp_path, CopiedEcho())
    taken: list[str] = []

    async def refuse(plugin: Plugin) -> None:
        taken.append(plugin.manifest.id)
        _refuse(plugin)

    with pytest.raises(InvalidArguments, match="test.echo is not wanted here"):
        await admin.add("npm:echo", accept=refuse)
    assert taken == [ECHO] and leftovers(tmp_path) == []

    added = await admin.add("npm:echo")
    assert (added.plugin.manifest.id, added.installed.version) == (ECHO, "1.0.0")
    assert [(p.id, p.source, p.manifest.version if p.manifest else None) for p in await admin.listed()] == [
        (ECHO, "npm:echo", "1.0.0")
    ]


@pytest.mark.anyio
async def test_an_upgrade_switches_only_after_its_trial_and_a_failure_leaves_the_old_version(tmp_path: Path) -> None:
    admin = PluginAdmin(tmp_path, CopiedEcho())
    await admin.add("npm:echo")
    folder = tmp_path / "plugins" / ECHO
    switched: list[str] = []

    with pytest.raises(InvalidArguments, match="did not list its tools"):
        await admin.upgrade(ECHO, "2.0.0", None, trial=_fails, switching=switched.append)
    with pytest.raises(InvalidArguments, match="is not wanted here"):
        await admin.upgrade(ECHO, "2.0.0", None, trial=_tools, check=_refuse, switching=switched.append)
    assert switched == [] and leftovers(tmp_path) == [ECHO]
    assert load_plugins(None, [folder]).plugins[0].manifest.version == "1.0.0"

    upgraded = await admin.upgrade(ECHO, "2.0.0", None, trial=_tools, switching=switched.append)
    assert switched == [ECHO] and leftovers(tmp_path) == [ECHO]
    assert (upgraded.version, upgraded.folder, upgraded.tools) == ("2.0.0", folder, ["echo", "whoami", "sleep", "die"])
    assert upgraded.plugin.manifest.version == "2.0.0"


@pytest.mark.anyio
async def test_a_new_version_that_names_itself_otherwise_is_refused(tmp_path: Path) -> None:
    await PluginAdmin(tmp_path, CopiedEcho()).add("npm:echo")
    with pytest.raises(InvalidArguments, match="the new version of test.echo names itself test.other"):
        await PluginAdmin(tmp_path, CopiedEcho("test.other")).upgrade(ECHO, "2.0.0", None, trial=_tools)
    assert leftovers(tmp_path) == [ECHO]


@pytest.mark.anyio
async def test_a_remove_stops_the_plugin_first_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    admin = PluginAdmin(tmp_path, CopiedEcho())
    await admin.add("npm:echo")
    stopped: list[tuple[str, bool]] = []

    def stopping(plugin_id: str) -> None:
        stopped.append((plugin_id, (tmp_path / "plugins" / plugin_id).is_dir()))

    assert await admin.remove(ECHO, stopping=stopping) == tmp_path / "plugins" / ECHO
    assert stopped == [(ECHO, True)] and leftovers(tmp_path) == []
    with pytest.raises(InvalidArguments, match=f"no plugin {ECHO} is installed in"):
        await admin.remove(ECHO, stopping=stopping)
    assert len(stopped) == 1
