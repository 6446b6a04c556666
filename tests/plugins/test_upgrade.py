"""Upgrading an installed plugin (`stage_upgrade`, `switch_upgrade`, `mcp-host plugin upgrade`):
the new version is installed beside the old one and switched only once it starts and lists its
tools; on any failure the old folder is untouched and no staging folder is left. Offline, from
npm-packed versions of the tiny-node test server, bundles zipped here and server.json entries
pointing at those tarballs. A source of another kind than the installed one is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mcp_host.app.cli import main
from mcp_host.errors import InvalidArguments
from mcp_host.plugins import (
    BundleSource,
    install_bundle,
    install_registry_entry,
    stage_upgrade,
    switch_upgrade,
    upgrade_argument,
)
from mcp_host.plugins.manifest import load_manifest
from tests.plugins.installed_once import InstalledOnce
from tests.plugins.installers import LocalPackages
from tests.plugins.packages import NPM_SOURCE, PACKAGES, npm_pack, npm_tarball
from tests.plugins.test_install import NPM_ID, leftovers, offline
from tests.plugins.test_install_bundle import BUNDLE_ID, bundle_manifest, make_bundle, server_json
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


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
def test_stage_then_switch_puts_the_new_version_in_place(
    tmp_path: Path, tarballs: dict[str, Path], installed_once: InstalledOnce
) -> None:
    installed_once.copy_into(tmp_path, "npm")  # 1.0.0, installed as test_install installs it
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


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
def test_a_failed_install_leaves_the_old_version_and_no_staging(
    tmp_path: Path, tarballs: dict[str, Path], installed_once: InstalledOnce, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline(monkeypatch)
    installed_once.copy_into(tmp_path, "npm")  # 1.0.0, installed as test_install installs it
    with pytest.raises(InvalidArguments, match="npm could not install"):
        stage_upgrade(tmp_path, NPM_ID, "9.9.9")  # the registry refuses every connection
    assert leftovers(tmp_path) == [NPM_ID]
    assert load_manifest(tmp_path / "plugins" / NPM_ID).version == "1.0.0"
    with pytest.raises(InvalidArguments, match="no plugin npm.nothing is installed"):
        stage_upgrade(tmp_path, "npm.nothing", None)


@needs_npm
@needs_bwrap
def test_cli_upgrade_switches_only_when_the_new_version_lists_its_tools(
    tmp_path: Path, tarballs: dict[str, Path], installed_once: InstalledOnce, capsys: pytest.CaptureFixture[str]
) -> None:
    installed_once.copy_into(tmp_path, "npm")  # 1.0.0, installed as test_install installs it
    local = LocalPackages(tarballs)
    folder = tmp_path / "plugins" / NPM_ID

    assert main(["plugin", "upgrade", NPM_ID, "3.0.0", "--data-dir", str(tmp_path)], installer=local) == 2
    err = capsys.readouterr().err  # no host runs: the command says it works on the folders alone
    offline_line, *installing, refusal = err.splitlines()
    assert offline_line.startswith("(offline: no host runs with data directory"), err
    assert installing and all(line.startswith("  … npm: ") for line in installing), err  # npm's own, as they came
    assert refusal.startswith(f"mcp-host: the new version of {NPM_ID} did not list its tools"), err
    assert "Traceback" not in err
    assert load_manifest(folder).version == "1.0.0" and leftovers(tmp_path) == [NPM_ID]

    assert main(["plugin", "upgrade", NPM_ID, "2.0.0", "--data-dir", str(tmp_path)], installer=local) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"upgraded {NPM_ID} to 2.0.0" and out[2] == "  tools:   shout", out
    assert load_manifest(folder).version == "2.0.0" and leftovers(tmp_path) == [NPM_ID]


def shout_bundle(
    path: Path, version: str, *, description: str | None = None, escape: bool = False, broken: bool = False
) -> Path:
    """A node bundle of tiny-node's server at `version` (no user_config); `description`: shout's
    new description; `escape`: with a member outside the bundle's root; `broken`: a server that
    exits at once."""
    manifest = bundle_manifest(version=version, user_config={})
    manifest["server"]["mcp_config"].pop("env")
    extra: dict[str, tuple[bytes, int]] = {"../escape.js": (b"x", 0o644)} if escape else {}
    server = (PACKAGES / "tiny-node" / "server.js").read_text()
    if description is not None:
        server = server.replace("Say the text in capitals.", description)
    if broken:
        server = server.replace('"use strict";', '"use strict";\nprocess.exit(3);', 1)
    extra["server/index.js"] = (server.encode(), 0o644)
    return make_bundle(path, manifest, extra)


def test_a_bundle_upgrades_from_a_new_mcpb_and_only_from_one(tmp_path: Path) -> None:
    install_bundle(BundleSource(shout_bundle(tmp_path / "v1.mcpb", "1.2.0")), tmp_path / "data")
    folder = tmp_path / "data" / "plugins" / BUNDLE_ID
    for version, source, message in [
        ("1.3.0", None, f"{BUNDLE_ID} was installed from an MCP Bundle (.mcpb); give the new .mcpb as the source"),
        (None, None, f"{BUNDLE_ID} was installed from an MCP Bundle; give the new .mcpb as the source"),
        (
            None,
            "npm:@tiny-test/shout-server@2.0.0",
            f"{BUNDLE_ID} was installed from an MCP Bundle (.mcpb), so it upgrades only",
        ),
        (
            None,
            str(tmp_path / "entry" / "server.json"),
            f"{BUNDLE_ID} was installed from an MCP Bundle (.mcpb), so it upgrades only from an MCP Bundle (.mcpb)"
            " too, not from an MCP registry server.json",
        ),
        ("1.3.0", str(tmp_path / "v2.mcpb"), "give a version or a source to upgrade from, not both"),
        (None, str(shout_bundle(tmp_path / "bad.mcpb", "1.3.0", escape=True)), "the bundle's member '../escape.js'"),
    ]:
        with pytest.raises(InvalidArguments) as caught:
            stage_upgrade(tmp_path / "data", BUNDLE_ID, version, source=source)
        assert caught.value.message.startswith(message) and "\n" not in caught.value.message, caught.value.message
        assert leftovers(tmp_path / "data") == [BUNDLE_ID] and load_manifest(folder).version == "1.2.0"

    new = shout_bundle(tmp_path / "v2.mcpb", "1.3.0", description=NEW_DESCRIPTION)
    staged = stage_upgrade(tmp_path / "data", BUNDLE_ID, source=str(new))
    assert staged.folder.name.startswith(".staging-new-") and load_manifest(folder).version == "1.2.0"
    assert switch_upgrade(tmp_path / "data", BUNDLE_ID, staged.folder) == folder
    assert load_manifest(folder).version == "1.3.0" and leftovers(tmp_path / "data") == [BUNDLE_ID]
    assert NEW_DESCRIPTION in (folder / "server" / "index.js").read_text()
    header = (folder / "manifest.yaml").read_text().splitlines()[0]
    assert header.startswith(f"# Installed by `mcp-host plugin add {new}` on "), header


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
def test_a_server_json_upgrades_from_its_file_read_again_or_a_new_one(
    tmp_path: Path, tarballs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = server_json(tmp_path / "entry", "npm", NPM_SOURCE.package)
    monkeypatch.chdir(tmp_path)  # installed from a relative path: recorded absolute, read again from anywhere
    install_registry_entry(type(entry)(Path("entry/server.json")), tmp_path / "data", spec=str(tarballs["1.0.0"]))
    monkeypatch.chdir(tmp_path / "entry")
    folder = tmp_path / "data" / "plugins" / NPM_ID
    header = (folder / "manifest.yaml").read_text().splitlines()[0]
    assert header.startswith(f"# Installed by `mcp-host plugin add {entry.path}` on "), header

    with pytest.raises(InvalidArguments, match=f"^{NPM_ID} was installed from an MCP registry server.json; give"):
        stage_upgrade(tmp_path / "data", NPM_ID, "2.0.0")
    with pytest.raises(InvalidArguments, match=r"too, not from an MCP Bundle \(\.mcpb\)$"):
        stage_upgrade(tmp_path / "data", NPM_ID, source=str(shout_bundle(tmp_path / "v.mcpb", "1.0.0")))
    assert leftovers(tmp_path / "data") == [NPM_ID]

    server_json(tmp_path / "entry", "npm", NPM_SOURCE.package, version="2.0.0")  # the entry pins 2.0.0 now
    staged = stage_upgrade(tmp_path / "data", NPM_ID, spec=str(tarballs["2.0.0"]))
    switch_upgrade(tmp_path / "data", NPM_ID, staged.folder)
    assert load_manifest(folder).version == "2.0.0" and leftovers(tmp_path / "data") == [NPM_ID]
    origin = (folder / "manifest.yaml").read_text().splitlines()[1]
    assert f"npm:{NPM_SOURCE.package}@2.0.0 as the registry entry" in origin, origin

    moved = server_json(tmp_path / "moved", "npm", NPM_SOURCE.package, version="3.0.0")
    staged = stage_upgrade(tmp_path / "data", NPM_ID, source=str(moved.path), spec=str(tarballs["3.0.0"]))
    switch_upgrade(tmp_path / "data", NPM_ID, staged.folder)
    assert load_manifest(folder).version == "3.0.0"
    header = (folder / "manifest.yaml").read_text().splitlines()[0]
    assert header.startswith(f"# Installed by `mcp-host plugin add {moved.path}` on "), header

    (tmp_path / "moved" / "server.json").unlink()
    with pytest.raises(InvalidArguments, match=f"^the server.json {NPM_ID} was installed from is gone"):
        stage_upgrade(tmp_path / "data", NPM_ID)
    assert leftovers(tmp_path / "data") == [NPM_ID]


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
def test_an_npm_plugin_is_not_upgraded_from_a_bundle_or_another_package(
    tmp_path: Path, tarballs: dict[str, Path], installed_once: InstalledOnce
) -> None:
    installed_once.copy_into(tmp_path, "npm")  # 1.0.0, installed as test_install installs it
    bundle = shout_bundle(tmp_path / "v.mcpb", "2.0.0")
    with pytest.raises(InvalidArguments) as caught:
        stage_upgrade(tmp_path, NPM_ID, source=str(bundle))
    assert caught.value.message == (
        f"{NPM_ID} was installed from npm, so it upgrades only from npm too, not from an MCP Bundle (.mcpb)"
    )
    with pytest.raises(InvalidArguments, match="add other-package under another id"):
        stage_upgrade(tmp_path, NPM_ID, source="npm:other-package@1.0.0")
    staged = stage_upgrade(tmp_path, NPM_ID, source=f"npm:{NPM_SOURCE.package}@2.0.0", spec=str(tarballs["2.0.0"]))
    switch_upgrade(tmp_path, NPM_ID, staged.folder)
    assert load_manifest(tmp_path / "plugins" / NPM_ID).version == "2.0.0" and leftovers(tmp_path) == [NPM_ID]


def test_the_command_line_word_is_a_source_only_when_it_names_one() -> None:
    assert upgrade_argument(None) == (None, None)
    assert upgrade_argument("2.0.0") == ("2.0.0", None)
    assert upgrade_argument("latest") == ("latest", None)
    assert upgrade_argument("new/shout.mcpb") == (None, "new/shout.mcpb")
    assert upgrade_argument("server.json") == (None, "server.json")
    assert upgrade_argument("entry/server.json") == (None, "entry/server.json")
    assert upgrade_argument("time.server.json") == (None, "time.server.json")
    assert upgrade_argument("entries/time.json") == (None, "entries/time.json")
    assert upgrade_argument("npm:x@2.0.0") == (None, "npm:x@2.0.0")


@needs_bwrap
def test_cli_upgrades_a_bundle_from_a_new_mcpb_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install_bundle(BundleSource(shout_bundle(tmp_path / "v1.mcpb", "1.2.0")), tmp_path / "data")
    shout_bundle(tmp_path / "v2.mcpb", "1.3.0", description=NEW_DESCRIPTION)
    monkeypatch.chdir(tmp_path)
    data = ["--data-dir", str(tmp_path / "data")]
    assert main(["plugin", "upgrade", BUNDLE_ID, "1.3.0", *data]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"mcp-host: {BUNDLE_ID} was installed from an MCP Bundle (.mcpb); give the new .mcpb as the source"
    )
    assert main(["plugin", "upgrade", BUNDLE_ID, "v2.mcpb", *data]) == 0  # a path relative to here
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"upgraded {BUNDLE_ID} to 1.3.0" and out[2] == "  tools:   shout", out
    folder = tmp_path / "data" / "plugins" / BUNDLE_ID
    assert load_manifest(folder).version == "1.3.0" and leftovers(tmp_path / "data") == [BUNDLE_ID]
    header = (folder / "manifest.yaml").read_text().splitlines()[0]
    assert header.startswith(f"# Installed by `mcp-host plugin add {tmp_path / 'v2.mcpb'}` on "), header
