"""`mcp-host plugin add|list|remove` on a data directory: what each prints, and refusals as one
line on stderr with exit status 2. With a host running there, they go through its owner door: the
added plugin's tools are pending at once, the list is the host's, remove stops it; a stale host
file (nothing answers) means the offline path, said in one line."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from pydantic import SecretStr

from mcp_host.access import OwnerStore, write_owner_token_file
from mcp_host.app.cli import main
from mcp_host.app.host_file import write_host_file
from mcp_host.plugins import BundleSource, install_bundle
from mcp_host.plugins.manifest import load_manifest
from mcp_host.settings import Settings
from mcp_host.store import ConfigStore, SecretBox, load_host_key, open_database
from tests.hosting import free_port, host_settings, running_host
from tests.owner_facade.test_plugin_tools import (
    SHOUT,
    approve_all,
    local_npm,
    needs_npm,
    owner_client,
    reaches,
    tarball,
)
from tests.owner_facade.test_plugin_upgrade import versions
from tests.plugins.installed_once import InstalledOnce
from tests.plugins.installers import LocalPackages
from tests.plugins.packages import PACKAGES
from tests.plugins.test_install import NPM_ID, leftovers, owner_call
from tests.plugins.test_install_bundle import BUNDLE_ID, bundle_manifest, make_bundle
from tests.processes import needs_bwrap

__all__ = ["local_npm", "tarball", "versions"]  # fixtures of the owner door's tests, used here too
CLI = Path(sys.executable).parent / "mcp-host"  # what the commands print for a line to copy


def test_add_refuses_a_hostile_source_and_a_missing_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugin", "add", "npm:--registry=http://evil", "--data-dir", str(tmp_path)]) == 2
    assert main(["plugin", "add", "x.mcpb", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("mcp-host: '--registry=http://evil' is not an npm package name")
    assert err[1:] == [  # a well-formed source is installed offline when no host runs there: said first
        f"(offline: no host runs with data directory {tmp_path}; working on the plugin folders alone)",
        "mcp-host: the bundle 'x.mcpb' is not a file.",
    ]
    assert not (tmp_path / "plugins").exists()


@pytest.mark.e2e  # installs with npm or pip
def test_list_and_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str], installed_once: InstalledOnce) -> None:
    assert main(["plugin", "list", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no plugins installed in {tmp_path / 'plugins'}\n"
    installed_once.copy_into(tmp_path, "pypi")
    assert main(["plugin", "list", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "pypi.whisper_server  1.0.0  whisper-server\n"
    assert main(["plugin", "remove", "pypi.whisper_server", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(
        f"removed pypi.whisper_server ({tmp_path / 'plugins' / 'pypi.whisper_server'})"
    )
    assert main(["plugin", "remove", "pypi.whisper_server", "--data-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"(offline: no host runs with data directory {tmp_path}; working on the plugin folders alone)",
        f"mcp-host: no plugin pypi.whisper_server is installed in {tmp_path / 'plugins'}",
    ]


# -- through a running host ---------------------------------------------------------------------


async def run(*argv: str) -> int:
    """`mcp-host argv` in a worker thread: it runs its own event loop while the host answers from this one."""
    with anyio.fail_after(120):
        return await anyio.to_thread.run_sync(main, list(argv))


def shout_bundle(path: Path) -> Path:
    """A node .mcpb of tiny-node's `shout` with no settings to fill in."""
    server = {
        "type": "node",
        "entry_point": "server/index.js",
        "mcp_config": {"command": "node", "args": ["${__dirname}/server/index.js"]},
    }
    return make_bundle(path, bundle_manifest(user_config={}, server=server))


@needs_npm
@needs_bwrap
@pytest.mark.anyio
async def test_add_list_remove_go_through_the_running_host_without_a_restart(
    tmp_path: Path,
    database_url: str,
    local_npm: LocalPackages,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    data = str(settings.data_dir)
    shout_bundle(tmp_path / "shout.mcpb")
    monkeypatch.chdir(tmp_path)  # the bundle is named relative to here; the host gets its absolute path
    async with running_host(settings, local_npm) as running, owner_client(running) as owner:
        capsys.readouterr()
        assert await run("plugin", "add", SHOUT, "--data-dir", data) == 0
        added = capsys.readouterr()
        assert await run("plugin", "add", "shout.mcpb", "--data-dir", data) == 0
        bundled = capsys.readouterr()
        failed, review = await owner_call(owner, "tools_pending")
        assert not failed
        assert sorted((e["capability"], e["tool"]) for e in review["pending"]) == [
            (BUNDLE_ID, "shout"),
            (NPM_ID, "shout"),
        ]

        assert await run("plugin", "list", "--data-dir", data) == 0
        listed = capsys.readouterr()
        assert await run("plugin", "add", "shout.mcpb", "--data-dir", data) == 2
        again = capsys.readouterr()

        assert running.child(NPM_ID) is not None  # listed in owner context when added
        assert await run("plugin", "remove", NPM_ID, "--purge", "--data-dir", data) == 0
        removed = capsys.readouterr()
        assert running.child(NPM_ID) is None  # its child stopped
        failed, left = await owner_call(owner, "plugins_list")
        assert not failed and [p["id"] for p in left["plugins"]] == [BUNDLE_ID]

    url = running.url
    folder = settings.data_dir / "plugins" / NPM_ID
    assert added.out.splitlines() == [
        f"installed {NPM_ID} 1.0.0",
        f"  folder:  {folder}",
        *[f"  {line}" for line in reaches(folder, "node node_modules/@tiny-test/shout-server/server.js")],
        "  pending: shout",
        f"the host at {url} serves it now",
        "next:",
        "  1. approve its pending tools (shout):",
        f"       {CLI} tools approve {NPM_ID} --all --data-dir {data}",
        "  2. grant it to a role (here guests, or any of roles_list):",
        f'       owner tool role_put {{"id": "guests", "capabilities": ["{NPM_ID}"]}}',
        "  3. make an access code of role guests for a visitor (its text is shown once):",
        '       owner tool code_create {"role": "guests"}',
        f"then a visitor: {CLI} session new --data-dir {data} --code CODE  (CODE: the text code_create showed)",
        f"(owner tool: ask your agent connected to the owner door, or use the console at {url}/owner/)",
    ]
    # npm's own lines as they came (and one a second while the test's installer pauses)
    progress = added.err.splitlines()
    assert all(re.fullmatch(rf"  … installing {SHOUT}: \d+ s|  … npm: .+", line) for line in progress), progress
    assert any(re.fullmatch(r"  … npm: added 1 package in \S+", line) for line in progress), progress
    assert bundled.out.splitlines()[:2] == [
        f"installed {BUNDLE_ID} 1.2.0",
        f"  folder:  {settings.data_dir / 'plugins' / BUNDLE_ID}",
    ]
    assert "  pending: shout" in bundled.out.splitlines()
    assert listed.out.splitlines() == [
        f"{BUNDLE_ID}  1.2.0  loaded  {tmp_path / 'shout.mcpb'}",
        f"{NPM_ID}  1.0.0  loaded  {SHOUT}",
    ]
    assert (listed.err, again.out) == ("", "")
    assert again.err.startswith("mcp-host: ") and again.err.count("\n") == 1 and "Traceback" not in again.err
    assert removed.out.splitlines() == [
        f"removed {NPM_ID} ({settings.data_dir / 'plugins' / NPM_ID}); the host at {url} stopped it",
        "  purged: it had no store; deleted 0 config row(s) and 1 tool approval(s)",
    ]


def test_a_stale_host_file_means_the_offline_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A host file whose process lives (here: this test's) but where nothing listens."""
    data = tmp_path / "data"
    data.mkdir()
    url = f"http://127.0.0.1:{free_port()}"
    write_host_file(data, url)
    write_owner_token_file(data, "a-token-nobody-checks")
    bundle = shout_bundle(tmp_path / "shout.mcpb")
    assert main(["plugin", "add", str(bundle), "--data-dir", str(data)]) == 0
    added = capsys.readouterr()
    assert main(["plugin", "list", "--data-dir", str(data)]) == 0
    listed = capsys.readouterr()
    stale = f"(offline: the host in {data / 'host.json'} (pid {os.getpid()}) does not answer at {url};"
    assert added.err.startswith(stale) and added.err.count("\n") == 1, added.err
    assert added.out.startswith(f"installed {BUNDLE_ID} 1.2.0\n")
    assert "picks it up at its next start" in added.out
    assert listed.err.startswith(stale)
    assert listed.out == f"{BUNDLE_ID}  1.2.0  Shout\n"


@pytest.mark.e2e  # installs with npm or pip
def test_remove_purge_without_a_host_is_refused_and_removes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], installed_once: InstalledOnce
) -> None:
    installed_once.copy_into(tmp_path, "pypi")
    assert main(["plugin", "remove", "pypi.whisper_server", "--purge", "--data-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "mcp-host: --purge needs the running host; without one: `mcp-host plugin remove pypi.whisper_server`,"
        " then `mcp-host uninstall pypi.whisper_server --yes`"
    )
    assert (tmp_path / "plugins" / "pypi.whisper_server").is_dir()


@needs_npm
@needs_bwrap
@pytest.mark.anyio
async def test_upgrade_goes_through_the_running_host_and_a_changed_tool_is_pending_again(
    tmp_path: Path, database_url: str, local_npm: LocalPackages, versions: None, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    data = str(settings.data_dir)
    async with running_host(settings, local_npm) as running, owner_client(running) as owner:
        assert await run("plugin", "add", SHOUT, "--data-dir", data) == 0
        assert await approve_all(owner, NPM_ID) == ["shout"]  # its tool was pending, now approved
        failed, pending = await owner_call(owner, "tools_pending")
        assert not failed and pending["pending"] == [], pending
        capsys.readouterr()

        assert await run("plugin", "upgrade", NPM_ID, "2.0.0", "--data-dir", data) == 0  # description changed
        upgraded = capsys.readouterr()
        failed, pending = await owner_call(owner, "tools_pending")
        assert not failed and [(e["capability"], e["tool"]) for e in pending["pending"]] == [(NPM_ID, "shout")]
        failed, listed = await owner_call(owner, "plugins_list")
        assert not failed and [(p["id"], p["version"], p["loaded"]) for p in listed["plugins"]] == [
            (NPM_ID, "2.0.0", True)
        ]
    assert upgraded.out.splitlines() == [
        f"upgraded {NPM_ID} from 1.0.0 to 2.0.0",
        f"  folder:  {settings.data_dir / 'plugins' / NPM_ID}",
        "  tools:   shout",
        "  pending: shout",
        f"  the host at {running.url} serves it now; changed tools wait in tools_pending for your approval",
    ]
    assert load_manifest(settings.data_dir / "plugins" / NPM_ID).version == "2.0.0"
    assert leftovers(settings.data_dir) == [NPM_ID]


def keyed_bundle(path: Path, version: str) -> Path:
    """A node .mcpb of tiny-node's `shout` whose server exits at start unless SHOUT_KEY, from a
    sensitive user_config the owner must give, is in its environment."""
    server = {
        "type": "node",
        "entry_point": "server/index.js",
        "mcp_config": {
            "command": "node",
            "args": ["${__dirname}/server/index.js"],
            "env": {"SHOUT_KEY": "${user_config.api_key}"},
        },
    }
    secret = {
        "type": "string",
        "title": "API key",
        "description": "For the service.",
        "sensitive": True,
        "required": True,
    }
    manifest = bundle_manifest(version=version, user_config={"api_key": secret}, server=server)
    code = (PACKAGES / "tiny-node" / "server.js").read_text()
    code = code.replace('"use strict";', '"use strict";\nif (!process.env.SHOUT_KEY) process.exit(3);', 1)
    return make_bundle(path, manifest, {"server/index.js": (code.encode(), 0o644)})


@needs_bwrap
@pytest.mark.anyio
async def test_offline_upgrade_starts_the_new_version_with_the_owners_setting(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    install_bundle(BundleSource(keyed_bundle(tmp_path / "v1.mcpb", "1.2.0")), data)
    new = keyed_bundle(tmp_path / "v2.mcpb", "1.3.0")
    folder = data / "plugins" / BUNDLE_ID
    assert load_manifest(folder).transport.env_from_config == {"SHOUT_KEY": "api_key"}  # type: ignore[union-attr]
    monkeypatch.setenv("MCP_HOST_DATABASE_URL", database_url)  # no host runs: the command opens it
    upgrade = ("plugin", "upgrade", BUNDLE_ID, str(new), "--data-dir", str(data))

    assert await run(*upgrade) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"mcp-host: the new version of {BUNDLE_ID} cannot start: the owner must set 'api_key' of {BUNDLE_ID}"
        " (config_set) before it can start; the old one stays"
    ), err
    assert load_manifest(folder).version == "1.2.0" and leftovers(data) == [BUNDLE_ID]

    async with open_database(Settings(database_url=SecretStr(database_url), data_dir=data)) as database:
        owner = await OwnerStore(database.pool).ensure_single_owner()
        config = ConfigStore(database.pool, box=SecretBox(load_host_key(data, None)))
        await config.for_plugin(BUNDLE_ID, load_manifest(folder)).set(owner.id, "owner", "", {"api_key": "k-1"})
    assert await run(*upgrade) == 0  # the new version's trial start gets SHOUT_KEY: it lists its tools
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"upgraded {BUNDLE_ID} to 1.3.0" and out[2] == "  tools:   shout", out
    assert load_manifest(folder).version == "1.3.0" and leftovers(data) == [BUNDLE_ID]


def test_add_help_names_every_source_and_role(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plugin", "add", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "or add a remote MCP server by its https:// URL" in said
    assert (
        "npm:<package>[@<version>], pypi:<package>[==<version>], a path to an .mcpb or to a registry entry"
        " (server.json, x.server.json, any .json), or the https:// URL of a remote MCP server (streamable HTTP;"
        " http:// only to a loopback host)"
    ) in said
    assert "--role ROLE grant the new capability to this existing role now (needs the running host)" in said


def test_role_and_approval_need_the_running_host_and_nothing_is_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugin", "add", "npm:@tiny-test/shout-server", "--role", "friends", "--data-dir", str(tmp_path)]) == 2
    added = capsys.readouterr()
    assert main(["tools", "approve", NPM_ID, "--all", "--data-dir", str(tmp_path)]) == 2
    approved = capsys.readouterr()
    assert added.err.splitlines() == [
        f"(offline: no host runs with data directory {tmp_path}; working on the plugin folders alone)",
        "mcp-host: --role needs the running host (roles live in its database); nothing was installed: start it"
        f" ({CLI} serve --data-dir {tmp_path}) or leave --role out",
    ]
    assert approved.err.splitlines() == [
        f"mcp-host: tools approve needs the running host; none runs with data directory {tmp_path}: start it with"
        f" {CLI} serve --data-dir {tmp_path}",
    ]
    assert (added.out, approved.out) == ("", "")
    assert not (tmp_path / "plugins").exists()


def _review_lines(entry: dict[str, object]) -> list[str]:
    live = json.dumps(entry["live"], indent=2, sort_keys=True, ensure_ascii=True).splitlines()
    return [f"{entry['tool']}  (new)  sha256 {entry['live_sha256']}", *[f"    {line}" for line in live]]


@needs_npm
@needs_bwrap
@pytest.mark.anyio
async def test_add_with_a_role_and_tools_approve_name_each_step_down_to_the_visitors_call(
    tmp_path: Path,
    database_url: str,
    local_npm: LocalPackages,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    data = str(settings.data_dir)
    shout_bundle(tmp_path / "shout.mcpb")
    monkeypatch.chdir(tmp_path)
    async with running_host(settings, local_npm) as running, owner_client(running) as owner:
        failed, answer = await owner_call(owner, "role_put", id="friends", capabilities=[])
        assert not failed, answer
        capsys.readouterr()
        assert await run("plugin", "add", SHOUT, "--role", "friends", "--data-dir", data) == 0
        added = capsys.readouterr()
        _, review = await owner_call(owner, "tools_pending")
        [entry] = [e for e in review["pending"] if e["capability"] == NPM_ID]
        assert await run("tools", "approve", NPM_ID, "--data-dir", data) == 0  # shown, not approved
        shown = capsys.readouterr()
        assert await run("tools", "approve", NPM_ID, "--all", "--data-dir", data) == 0
        approved = capsys.readouterr()
        assert await run("tools", "approve", NPM_ID, "--all", "--data-dir", data) == 0
        again = capsys.readouterr()
        _, code = await owner_call(owner, "code_create", role="friends")
        session = await running.new_session({"code": code["code"]})
        async with running.client(session) as visitor:
            shout = await visitor.call_tool("shout", {"text": "hi"})

        # The public role: once approved, a public session reaches it with no code (the npm one
        # goes first: two tools named shout would hide each other).
        assert await run("plugin", "remove", NPM_ID, "--data-dir", data) == 0
        assert await run("plugin", "add", "shout.mcpb", "--role", "public", "--data-dir", data) == 0
        capsys.readouterr()
        _, review = await owner_call(owner, "tools_pending")
        [bundled] = [e for e in review["pending"] if e["capability"] == BUNDLE_ID]
        assert await run("tools", "approve", BUNDLE_ID, "--all", "--data-dir", data) == 0
        public = capsys.readouterr()
        async with running.client(await running.new_session()) as visitor:
            public_shout = await visitor.call_tool("shout", {"text": "all"})

    url, folder = running.url, settings.data_dir / "plugins" / NPM_ID
    code_step = [
        "  1. make an access code of role friends for a visitor (its text is shown once):",
        '       owner tool code_create {"role": "friends"}',
        f"then a visitor: {CLI} session new --data-dir {data} --code CODE  (CODE: the text code_create showed)",
        f"(owner tool: ask your agent connected to the owner door, or use the console at {url}/owner/)",
    ]
    assert added.out.splitlines() == [
        f"installed {NPM_ID} 1.0.0",
        f"  folder:  {folder}",
        *[f"  {line}" for line in reaches(folder, "node node_modules/@tiny-test/shout-server/server.js")],
        "  pending: shout",
        "  role:    friends grants it now (its sessions see its tools once you approve them)",
        f"the host at {url} serves it now",
        "next:",
        "  1. approve its pending tools (shout):",
        f"       {CLI} tools approve {NPM_ID} --all --data-dir {data}",
        "  2. make an access code of role friends for a visitor (its text is shown once):",
        '       owner tool code_create {"role": "friends"}',
        f"then a visitor: {CLI} session new --data-dir {data} --code CODE  (CODE: the text code_create showed)",
        f"(owner tool: ask your agent connected to the owner door, or use the console at {url}/owner/)",
    ]
    assert shown.out.splitlines() == [
        *_review_lines(entry),
        f"approve these 1: {CLI} tools approve {NPM_ID} --all --data-dir {data}",
    ]
    assert approved.out.splitlines() == [
        *_review_lines(entry),
        f"approved shout  sha256 {entry['live_sha256']}",
        "next:",
        *code_step,
    ]
    assert again.out.splitlines() == [f"no tool of {NPM_ID} waits for your approval", "next:", *code_step]
    assert not shout.is_error and shout.content[0].text == "HI"  # type: ignore[union-attr]
    assert public.out.splitlines() == [
        *_review_lines(bundled),
        f"approved shout  sha256 {bundled['live_sha256']}",
        f"a visitor reaches it now: {CLI} session new --data-dir {data}",  # nothing left to do
    ]
    assert not public_shout.is_error and public_shout.content[0].text == "ALL"  # type: ignore[union-attr]
