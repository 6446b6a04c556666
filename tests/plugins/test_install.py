"""Installing plugins from npm and PyPI into the data directory, offline from local packages
(tests/plugins/packages.py), through a running host to a visitor's call, and the failures that
leave nothing behind. One test installs @modelcontextprotocol/server-memory from the real
registry, skipped when the registry cannot be reached."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import (
    Manifest,
    NpmSource,
    PypiSource,
    RemoteSource,
    install_npm,
    install_pypi,
    install_remote,
    installed,
    installed_root,
    installer_output,
    reach,
    remove,
)
from mcp_host.plugins.manifest import load_manifest
from mcp_host_kit.contract import refusal_of
from owner_facade import OWNER_PATH
from tests.hosting import RunningHost, host_settings, running_host
from tests.plugins.installed_once import InstalledOnce
from tests.plugins.packages import NPM_SOURCE, PYPI_SOURCE, npm_tarball, wheel
from tests.processes import needs_bwrap

needs_npm = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed (Node.js 20+ with npm)")
NPM_ID = "npm.tiny_test.shout_server"
PYPI_ID = "pypi.whisper_server"


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("packages")
    made = {"wheel": wheel(folder)}
    if shutil.which("npm") is not None:
        made["tgz"] = npm_tarball(folder)
    return made


def leftovers(data_dir: Path) -> list[str]:
    root = data_dir / "plugins"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """npm and pip see a registry that refuses every connection."""
    for name, value in {
        "npm_config_registry": "http://127.0.0.1:9/",
        "npm_config_fetch_retries": "0",
        "npm_config_fetch_timeout": "2000",
        "npm_config_offline": "false",
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
        "PIP_NO_CACHE_DIR": "1",
    }.items():
        monkeypatch.setenv(name, value)


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
def test_npm_package_becomes_a_plugin_folder_with_a_manifest_that_grants_nothing(
    tmp_path: Path, packages: dict[str, Path]
) -> None:
    done = install_npm(NPM_SOURCE, tmp_path, spec=str(packages["tgz"]))
    assert (done.id, done.folder, done.command, done.version) == (
        NPM_ID,
        tmp_path / "plugins" / NPM_ID,
        "node",
        "1.0.0",
    )
    assert done.args == ("node_modules/@tiny-test/shout-server/server.js",)
    assert (done.folder / done.args[0]).is_file()
    manifest = load_manifest(done.folder)
    assert manifest.id == NPM_ID and manifest.title == "@tiny-test/shout-server" and manifest.version == "1.0.0"
    assert manifest.description.startswith("A tiny stdio MCP server")
    assert manifest.acl == "role_granted" and manifest.per_session and manifest.instances == "per_session"
    assert manifest.transport is not None
    assert manifest.transport.sandbox.allow_net is False and manifest.transport.sandbox.host_ops == ()
    assert manifest.transport.sandbox.workspace is False
    text = (done.folder / "manifest.yaml").read_text()
    assert text.startswith("# Installed by `mcp-host plugin add npm:@tiny-test/shout-server` on ")
    assert "@tiny-test/shout-server 1.0.0 from npm." in text.splitlines()[1]
    assert leftovers(tmp_path) == [NPM_ID]  # no staging folder
    assert installed_root(tmp_path) == tmp_path / "plugins"


@pytest.mark.e2e  # installs with npm or pip
def test_pypi_package_gets_its_own_venv_and_its_console_script_answers(
    tmp_path: Path, packages: dict[str, Path]
) -> None:
    done = install_pypi(PYPI_SOURCE, tmp_path, spec=str(packages["wheel"]))
    assert (done.id, done.command, done.args, done.version) == (
        PYPI_ID,
        "venv/bin/python",
        ("venv/bin/whisper-server",),
        "1.0.0",
    )
    manifest = load_manifest(done.folder)
    assert manifest.title == "whisper-server" and manifest.description.startswith("A tiny stdio MCP server")
    assert manifest.acl == "role_granted" and manifest.instances == "per_session"
    request = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n'
    answer = subprocess.run(
        [done.command, *done.args], cwd=done.folder, input=request, capture_output=True, text=True, timeout=30
    )
    assert '"whisper"' in answer.stdout
    assert leftovers(tmp_path) == [PYPI_ID]


@pytest.mark.e2e  # installs with npm or pip
def test_each_line_pip_prints_reaches_installer_output_as_it_comes(tmp_path: Path, packages: dict[str, Path]) -> None:
    lines: list[str] = []
    with installer_output(lines.append):
        install_pypi(PYPI_SOURCE, tmp_path, spec=str(packages["wheel"]))
    install_pypi(PYPI_SOURCE, tmp_path, plugin_id="pypi.again", spec=str(packages["wheel"]))  # outside: none
    assert all(line.startswith("pip: ") for line in lines), lines  # venv prints nothing
    assert lines[-2:] == [
        "pip: Installing collected packages: whisper-server",
        "pip: Successfully installed whisper-server-1.0.0",
    ]
    assert f"pip: Processing {packages['wheel']}" in lines


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
def test_each_line_npm_prints_reaches_installer_output(tmp_path: Path, packages: dict[str, Path]) -> None:
    lines: list[str] = []
    with installer_output(lines.append):
        install_npm(NPM_SOURCE, tmp_path, spec=str(packages["tgz"]))
    assert all(line.startswith("npm: ") and not line.startswith("npm: npm ") for line in lines), lines
    assert not any("http cache" in line for line in lines), lines  # its cache-hit echo of each tarball
    assert any(re.fullmatch(r"npm: added 1 package in \S+", line) for line in lines), lines


def test_reach_says_what_a_remote_networked_or_offline_server_reaches(tmp_path: Path) -> None:
    remote = install_remote(RemoteSource("https://mcp.example.com/mcp", "mcp.example.com"), tmp_path)
    networked = Manifest.model_validate(
        {"id": "x.net", "transport": {"command": "node", "args": ["a b.js"], "sandbox": {"allow_net": True}}}
    )
    assert reach(load_manifest(remote.folder), remote.folder) == [
        "runs elsewhere: the host calls https://mcp.example.com/mcp and may reach mcp.example.com only"
    ]
    assert reach(networked, tmp_path)[0] == "runs node 'a b.js' in its sandbox, in /plugin"
    assert reach(networked, tmp_path)[2] == (
        "network: any public address (transport.sandbox.allow_net) through the host's egress proxy (more:"
        " mcp-host plugin allow x.net HOST)"
    )
    named = Manifest.model_validate(
        {
            "id": "x.api",
            "transport": {"command": "node", "sandbox": {"egress": ["api.example.com", "*.cdn.example:8443"]}},
        }
    )
    assert reach(named, tmp_path)[2] == (
        "network: api.example.com, *.cdn.example:8443 through the host's egress proxy (more: mcp-host plugin allow"
        " x.api HOST)"
    )
    offline = Manifest.model_validate({"id": "x.off", "transport": {"command": "node", "args": ["a.js"]}})
    assert reach(offline, tmp_path)[2] == (
        "network: none — give it a host with `mcp-host plugin allow x.off HOST` (or the owner tool"
        ' plugin_egress_allow {"plugin_id": "x.off", "host": "HOST"}); HOST: host, host:port or *.domain'
    )


@pytest.mark.e2e  # installs with npm or pip
def test_id_override_list_and_remove(tmp_path: Path, packages: dict[str, Path]) -> None:
    done = install_pypi(PYPI_SOURCE, tmp_path, plugin_id="mine.whisper", spec=str(packages["wheel"]))
    assert done.id == "mine.whisper" and load_manifest(done.folder).id == "mine.whisper"
    assert [(name, m.id if m else None) for name, _, m in installed(tmp_path)] == [("mine.whisper", "mine.whisper")]
    with pytest.raises(InvalidArguments, match="already installed"):
        install_pypi(PYPI_SOURCE, tmp_path, plugin_id="mine.whisper", spec=str(packages["wheel"]))
    assert leftovers(tmp_path) == ["mine.whisper"]  # the refused one left nothing
    assert remove(tmp_path, "mine.whisper") == done.folder
    assert leftovers(tmp_path) == [] and installed(tmp_path) == [] and installed_root(tmp_path) is None
    with pytest.raises(InvalidArguments, match="no plugin mine.whisper is installed"):
        remove(tmp_path, "mine.whisper")
    for bad in ("../x", "Mine", ".staging-x", ""):
        with pytest.raises(InvalidArguments, match="is not a plugin id"):
            remove(tmp_path, bad)
        with pytest.raises(InvalidArguments, match="is not a plugin id"):
            install_pypi(PYPI_SOURCE, tmp_path, plugin_id=bad, spec=str(packages["wheel"]))
    assert leftovers(tmp_path) == []


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
def test_unknown_npm_package_offline_fails_in_one_sentence_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline(monkeypatch)
    with pytest.raises(InvalidArguments) as caught:
        install_npm(NpmSource("@tiny-test/no-such-package"), tmp_path)
    assert caught.value.message.startswith("npm could not install npm:@tiny-test/no-such-package: ")
    assert "\n" not in caught.value.message
    assert leftovers(tmp_path) == []


@pytest.mark.e2e  # installs with npm or pip
def test_unknown_pypi_package_offline_fails_in_one_sentence_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline(monkeypatch)
    with pytest.raises(InvalidArguments) as caught:
        install_pypi(PypiSource("no-such-package-for-tests"), tmp_path)
    assert caught.value.message.startswith("pip could not install pypi:no-such-package-for-tests: ")
    assert "\n" not in caught.value.message
    assert leftovers(tmp_path) == []


@pytest.mark.e2e  # installs with npm or pip
def test_a_package_without_a_console_script_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    bare = wheel(tmp_path, scripts={})
    with pytest.raises(InvalidArguments, match="declares no console script"):
        install_pypi(PYPI_SOURCE, tmp_path / "data", spec=str(bare))
    assert leftovers(tmp_path / "data") == []


# -- through a running host --------------------------------------------------------------------


async def owner_call(client: Client, name: str, /, **arguments: Any) -> tuple[bool, Any]:
    result = await client.call_tool(name, arguments)
    found = refusal_of(result)
    if found is not None:
        return True, found.model_dump()
    return bool(result.is_error), result.structured_content


async def review_and_grant(running: RunningHost) -> dict[str, Any]:
    """The owner approves the installed plugins' pending tools and makes a code whose role
    grants both; returns a visitor session of that code."""
    headers = {"Authorization": f"Bearer {running.owner_token()}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http,
        Client(streamable_http_client(f"{running.url}{OWNER_PATH}", http_client=http), cache=None) as owner,
    ):
        failed, review = await owner_call(owner, "tools_pending")
        assert not failed, review
        pending = {(e["capability"], e["tool"]): e for e in review["pending"]}
        assert {(NPM_ID, "shout"), (PYPI_ID, "whisper")} <= set(pending)
        for (capability, tool), entry in pending.items():
            failed, answer = await owner_call(
                owner, "tool_approve", capability=capability, tool=tool, live_sha256=entry["live_sha256"]
            )
            assert not failed, answer
        failed, answer = await owner_call(owner, "role_put", id="friends", capabilities=[NPM_ID, PYPI_ID])
        assert not failed, answer
        _, code = await owner_call(owner, "code_create", role="friends")
    return await running.new_session({"code": code["code"]})


@needs_npm
@needs_bwrap
@pytest.mark.anyio
async def test_installed_plugins_are_pending_at_start_then_a_visitor_calls_them(
    tmp_path: Path, database_url: str, installed_once: InstalledOnce
) -> None:
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    installed_once.copy_into(settings.data_dir, "npm")  # installed as the tests above install
    installed_once.copy_into(settings.data_dir, "pypi")
    async with running_host(settings) as running:
        session = await review_and_grant(running)
        async with running.client(session) as visitor:
            listed = {tool.name for tool in (await visitor.list_tools()).tools}
            shout = await visitor.call_tool("shout", {"text": "hello"})
            whisper = await visitor.call_tool("whisper", {"text": "HELLO"})
    assert {"shout", "whisper"} <= listed
    assert not shout.is_error and shout.content[0].text == "HELLO"  # type: ignore[union-attr]
    assert not whisper.is_error and whisper.content[0].text == "hello"  # type: ignore[union-attr]


def registry_reachable() -> bool:
    try:
        with socket.create_connection(("registry.npmjs.org", 443), timeout=5):
            return True
    except OSError:
        return False


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
@pytest.mark.timeout(300)
def test_server_memory_installs_from_the_real_registry(tmp_path: Path) -> None:
    if not registry_reachable():
        pytest.skip("registry.npmjs.org cannot be reached from here")
    done = install_npm(NpmSource("@modelcontextprotocol/server-memory"), tmp_path)
    assert done.id == "npm.modelcontextprotocol.server_memory"
    assert done.command == "node"
    assert done.args[0].startswith("node_modules/@modelcontextprotocol/server-memory/")
    assert (done.folder / done.args[0]).is_file()
    raw = yaml.safe_load((done.folder / "manifest.yaml").read_text())
    assert raw["acl"] == "role_granted" and raw["transport"]["sandbox"] == {"allow_net": False}
    assert leftovers(tmp_path) == [done.id]
