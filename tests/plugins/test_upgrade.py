"""Upgrading an installed plugin (`stage_upgrade`, `switch_upgrade`, `mcp-host plugin upgrade`):
the new version is installed beside the old one and switched only once it starts and lists its
tools; on any failure the old folder is untouched and no staging folder is left. Offline, from
npm-packed versions of the tiny-node test server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import mcp_host.app.plugin_commands as plugin_commands
from mcp_host.app.cli import main
from mcp_host.errors import InvalidArguments
from mcp_host.plugins import install_npm, stage_upgrade, switch_upgrade
from mcp_host.plugins.manifest import load_manifest
from tests.plugins.packages import NPM_SOURCE, PACKAGES, npm_pack, npm_tarball
from tests.plugins.test_install import NPM_ID, leftovers, offline
from tests.processes import needs_bwrap

needs_npm = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed (Node.js 20+ with npm)")
NEW_DESCRIPTION = "Say the text in capitals, loudly."


def tiny_node_version(folder: Path, version: str, *, description: str = NEW_DESCRIPTION, broken: bool = False) -> Path:
    """`npm pack` of tiny-node at `version` whose `shout` says `description`; `broken`: a server
    that exits at once (its tools cannot be listed)."""
    work = folder / f"tiny-node-{version}"
    shutil.copytree(PACKAGES / "tiny-node", work)
    meta = json.loads((work / "package.json").read_text())
    meta["version"] = version
    (work / "package.json").write_text(json.dumps(meta))
    server = (work / "server.js").read_text().replace("Say the text in capitals.", description)
    if broken:
        server = server.replace('"use strict";', '"use strict";\nprocess.exit(3);', 1)
    (work / "server.js").write_text(server)
    return npm_pack(work, folder)


@pytest.fixture(scope="module")
def tarballs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    folder = tmp_path_factory.mktemp("packages")
    return {
        "1.0.0": npm_tarball(folder),
        "2.0.0": tiny_node_version(folder, "2.0.0"),
        "3.0.0": tiny_node_version(folder, "3.0.0", broken=True),
    }


@needs_npm
def test_stage_then_switch_puts_the_new_version_in_place(tmp_path: Path, tarballs: dict[str, Path]) -> None:
    install_npm(NPM_SOURCE, tmp_path, spec=str(tarballs["1.0.0"]))
    staged = stage_upgrade(tmp_path, NPM_ID, "2.0.0", spec=str(tarballs["2.0.0"]))
    folder = tmp_path / "plugins" / NPM_ID
    assert staged.folder.parent == folder.parent and staged.folder.name.startswith(".")
    assert load_manifest(folder).version == "1.0.0"  # the installed one is untouched meanwhile
    assert switch_upgrade(tmp_path, NPM_ID, staged.folder) == folder
    assert load_manifest(folder).version == "2.0.0"
    header = (folder / "manifest.yaml").read_text().splitlines()[:2]
    assert header[0].startswith(f"# Installed by `mcp-host plugin add npm:{NPM_SOURCE.package}@2.0.0` on "), header
    assert "2.0.0 from npm (an upgrade)" in header[1], header
    assert leftovers(tmp_path) == [NPM_ID]


@needs_npm
def test_a_failed_install_leaves_the_old_version_and_no_staging(
    tmp_path: Path, tarballs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    offline(monkeypatch)
    install_npm(NPM_SOURCE, tmp_path, spec=str(tarballs["1.0.0"]))
    with pytest.raises(InvalidArguments, match="npm could not install"):
        stage_upgrade(tmp_path, NPM_ID, "9.9.9")  # the registry refuses every connection
    assert leftovers(tmp_path) == [NPM_ID]
    assert load_manifest(tmp_path / "plugins" / NPM_ID).version == "1.0.0"
    with pytest.raises(InvalidArguments, match="no plugin npm.nothing is installed"):
        stage_upgrade(tmp_path, "npm.nothing", None)


def _staging_from(tarballs: dict[str, Path]) -> object:
    def staged(data_dir: Path, plugin_id: str, version: str | None) -> object:
        assert version is not None
        return stage_upgrade(data_dir, plugin_id, version, spec=str(tarballs[version]))

    return staged


@needs_npm
@needs_bwrap
def test_cli_upgrade_switches_only_when_the_new_version_lists_its_tools(
    tmp_path: Path, tarballs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install_npm(NPM_SOURCE, tmp_path, spec=str(tarballs["1.0.0"]))
    monkeypatch.setattr(plugin_commands, "stage_upgrade", _staging_from(tarballs))
    folder = tmp_path / "plugins" / NPM_ID

    assert main(["plugin", "upgrade", NPM_ID, "3.0.0", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mcp-host: the new version of {NPM_ID} did not list its tools"), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert load_manifest(folder).version == "1.0.0" and leftovers(tmp_path) == [NPM_ID]

    assert main(["plugin", "upgrade", NPM_ID, "2.0.0", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"upgraded {NPM_ID} to 2.0.0" and out[2] == "  tools:   shout", out
    assert load_manifest(folder).version == "2.0.0" and leftovers(tmp_path) == [NPM_ID]
