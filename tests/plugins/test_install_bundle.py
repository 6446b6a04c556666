"""Installing plugins from an MCP Bundle (`.mcpb`) and a registry `server.json`, offline: a
bundle zipped here from tests/fixtures/packages/tiny-node (and one packed with the official
`mcpb` CLI when npm can fetch it), a server.json pointing at the local tarball or wheel; through
a running host to a visitor's call; hostile and unsupported sources leave nothing behind."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import BundleSource, RegistryEntrySource, install_bundle, install_registry_entry
from mcp_host.plugins.manifest import load_manifest
from owner_facade import OWNER_PATH
from tests.hosting import RunningHost, host_settings, running_host
from tests.plugins.installed_once import InstalledOnce
from tests.plugins.packages import PACKAGES, greeter_bundle, npm_tarball, wheel
from tests.plugins.test_install import leftovers, owner_call, registry_reachable
from tests.processes import needs_bwrap

needs_npm = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed (Node.js 20+ with npm)")
MCPB_CLI = "@anthropic-ai/mcpb@2.1.2"
BUNDLE_ID = "mcpb.shout_bundle"
ENTRY_ID = "pypi.whisper_server"


def bundle_manifest(**changes: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "manifest_version": "0.3",
        "name": "shout-bundle",
        "display_name": "Shout",
        "version": "1.2.0",
        "description": "The tiny shout server as an MCP Bundle.",
        "author": {"name": "tests"},
        "server": {
            "type": "node",
            "entry_point": "server/index.js",
            "mcp_config": {
                "command": "node",
                "args": ["${__dirname}/server/index.js"],
                "env": {"SHOUT_MODE": "${user_config.mode}"},
            },
        },
        "user_config": {
            "mode": {"type": "string", "title": "Mode", "description": "How loud.", "default": "loud"},
            "api_key": {"type": "string", "title": "API key", "description": "For the service.", "sensitive": True},
            "Max-Items": {"type": "number", "title": "Max items", "description": "At most.", "default": 5},
            "folders": {"type": "directory", "title": "Folders", "description": "Where.", "multiple": True},
        },
        "tools": [{"name": "shout", "description": "Say it loud."}],
    }
    manifest.update(changes)
    return manifest


def node_server(command: str, args: list[str]) -> dict[str, Any]:
    """A bundle's `server`: a node server at server/index.js started with `command` and `args`."""
    return {"type": "node", "entry_point": "server/index.js", "mcp_config": {"command": command, "args": args}}


def make_bundle(path: Path, manifest: dict[str, Any], extra: dict[str, tuple[bytes, int]] | None = None) -> Path:
    """A .mcpb at `path`: `manifest` as manifest.json, tiny-node's server as server/index.js,
    and `extra` members (name -> (data, mode))."""
    members = {"server/index.js": ((PACKAGES / "tiny-node" / "server.js").read_bytes(), 0o644)}
    members.update(extra or {})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.json", json.dumps(manifest))
        for name, (data, mode) in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16  # type bits too: a symbolic link
            archive.writestr(info, data)
    return path


def server_json(path: Path, registry: str, identifier: str, **package: Any) -> RegistryEntrySource:
    entry = {
        "name": "io.github.tests/tiny",
        "title": "Tiny",
        "description": "A tiny server from a registry entry.",
        "version": "1.0.0",
        "packages": [
            {
                "registryType": registry,
                "identifier": identifier,
                "version": "1.0.0",
                "transport": {"type": "stdio"},
                **package,
            }
        ],
    }
    path.mkdir(parents=True, exist_ok=True)
    (path / "server.json").write_text(json.dumps(entry))
    return RegistryEntrySource(path / "server.json")


def test_bundle_becomes_a_plugin_with_declared_config_that_grants_nothing(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "shout.mcpb", bundle_manifest())
    done = install_bundle(BundleSource(bundle), tmp_path / "data")
    assert (done.id, done.command, done.args, done.version) == (
        BUNDLE_ID,
        "node",
        ("/plugin/server/index.js",),
        "1.2.0",
    )
    assert (done.folder / "server" / "index.js").is_file() and (done.folder / "manifest.json").is_file()
    manifest = load_manifest(done.folder)
    assert (manifest.title, manifest.version) == ("Shout", "1.2.0")
    assert manifest.description == "The tiny shout server as an MCP Bundle."
    assert manifest.acl == "role_granted" and manifest.instances == "per_session"
    assert manifest.transport is not None and manifest.transport.env == {}
    assert manifest.transport.env_from_config == {"SHOUT_MODE": "mode"}  # the owner's value, else "loud"
    assert manifest.transport.sandbox.allow_net is False and manifest.transport.sandbox.host_ops == ()
    config = {field.key: field for field in manifest.config}
    assert set(config) == {"mode", "api_key", "max_items", "folders"}
    assert (config["mode"].type, config["mode"].default, config["mode"].label) == ("string", "loud", "Mode")
    assert config["api_key"].type == "string" and config["api_key"].description == "For the service. (A secret.)"
    assert (config["max_items"].type, config["max_items"].default) == ("int", 5)
    assert config["folders"].type == "string_list"
    header = (done.folder / "manifest.yaml").read_text().splitlines()
    assert header[0].startswith(f"# Installed by `mcp-host plugin add {bundle}` on ")
    assert header[1] == "# shout-bundle 1.2.0 from the MCP Bundle shout.mcpb."
    assert leftovers(tmp_path / "data") == [BUNDLE_ID]


def test_python_and_binary_bundles_start_as_their_runtime_needs(tmp_path: Path) -> None:
    plain = bundle_manifest(
        name="py-plain",
        server={
            "type": "python",
            "entry_point": "server/index.js",
            "mcp_config": {"command": "python3", "args": ["${__dirname}/server/index.js"]},
        },
    )
    done = install_bundle(BundleSource(make_bundle(tmp_path / "a.mcpb", plain)), tmp_path)
    assert (done.id, done.command, done.args) == ("mcpb.py_plain", "python", ("/plugin/server/index.js",))
    shipped = bundle_manifest(
        name="py-shipped",
        server={
            "type": "python",
            "entry_point": "server/index.js",
            "mcp_config": {"command": "python3", "env": {"PYTHONPATH": "${__dirname}/server/lib"}},
        },
    )
    done = install_bundle(BundleSource(make_bundle(tmp_path / "b.mcpb", shipped)), tmp_path)
    assert done.command == "python3"
    assert load_manifest(done.folder).transport.env == {"PYTHONPATH": "/plugin/server/lib"}  # type: ignore[union-attr]
    binary = bundle_manifest(
        name="bin",
        server={"type": "binary", "entry_point": "server/run", "mcp_config": {"command": "${__dirname}/server/run"}},
    )
    done = install_bundle(
        BundleSource(make_bundle(tmp_path / "c.mcpb", binary, {"server/run": (b"#!/bin/sh\n", 0o755)})), tmp_path
    )
    assert (done.command, done.args) == ("server/run", ())
    assert leftovers(tmp_path) == ["mcpb.bin", "mcpb.py_plain", "mcpb.py_shipped"]


@pytest.mark.parametrize(
    ("manifest", "extra", "message"),
    [
        (
            bundle_manifest(
                user_config={"token": {"type": "string", "title": "Token", "sensitive": True}},
                server=node_server("node", ["--token", "${user_config.token}"]),
            ),
            {},
            "the bundle passes its secret setting 'token' as an argument; a secret never goes on a command line,"
            " so it is refused.",
        ),
        (
            bundle_manifest(server=node_server("${user_config.mode}", ["${__dirname}/server/index.js"])),
            {},
            "the bundle's command uses the setting 'mode'; the host starts a fixed command, so it is refused.",
        ),
        (
            bundle_manifest(server={"type": "uv", "entry_point": "server/index.js"}),
            {},
            "the bundle is a uv server, which needs the network to start; it is not supported.",
        ),
        (bundle_manifest(), {"../escape.js": (b"x", 0o644)}, "the bundle's member '../escape.js' has an empty"),
        (
            bundle_manifest(),
            {"server/link": (b"/etc/passwd", stat.S_IFLNK | 0o777)},
            "the bundle's member 'server/link' is a symbolic link.",
        ),
        (bundle_manifest(), {"/abs.js": (b"x", 0o644)}, "the bundle's member '/abs.js' is absolute."),
        (
            bundle_manifest(
                server={"type": "binary", "entry_point": "server/index.js", "mcp_config": {"command": "/bin/sh"}}
            ),
            {},
            "the bundle's command '/bin/sh' is not a file in the bundle.",
        ),
        (
            bundle_manifest(server=node_server("sh", ["${__dirname}/server/index.js"])),
            {},
            "the bundle is a node server whose mcp_config does not start node.",
        ),
    ],
    ids=[
        "secret-argument",
        "setting-in-command",
        "uv",
        "dotdot",
        "symlink",
        "absolute",
        "binary-outside",
        "node-not-node",
    ],
)
def test_refused_bundles_leave_nothing_behind(
    tmp_path: Path, manifest: dict[str, Any], extra: dict[str, tuple[bytes, int]], message: str
) -> None:
    bundle = make_bundle(tmp_path / "bad.mcpb", manifest, extra)
    with pytest.raises(InvalidArguments) as caught:
        install_bundle(BundleSource(bundle), tmp_path / "data")
    assert caught.value.message.startswith(message), caught.value.message
    assert leftovers(tmp_path / "data") == []


@pytest.mark.parametrize(
    "extra",
    [
        {"manifest.yaml/": (b"", 0o40755)},
        {"manifest.yaml/notes.txt": (b"x", 0o644)},
    ],
    ids=["folder", "file-in-folder"],
)
def test_a_bundle_with_a_folder_named_like_the_hosts_manifest_is_refused_and_leaves_nothing(
    tmp_path: Path, extra: dict[str, tuple[bytes, int]]
) -> None:
    # It once reached the manifest's write: IsADirectoryError, a traceback on the command line
    # and an internal error through the owner door.
    bundle = make_bundle(tmp_path / "bad.mcpb", bundle_manifest(), extra)
    with pytest.raises(InvalidArguments) as caught:
        install_bundle(BundleSource(bundle), tmp_path / "data")
    assert caught.value.message == "the bundle has a folder named manifest.yaml, the name of the host's manifest."
    assert leftovers(tmp_path / "data") == []


def test_a_bundle_that_is_not_a_zip_or_is_missing_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "junk.mcpb").write_bytes(b"not a zip")
    with pytest.raises(InvalidArguments, match="not a readable zip archive"):
        install_bundle(BundleSource(tmp_path / "junk.mcpb"), tmp_path / "data")
    assert leftovers(tmp_path / "data") == []
    with pytest.raises(InvalidArguments, match="is not a file"):
        install_bundle(BundleSource(tmp_path / "missing.mcpb"), tmp_path / "other")
    assert not (tmp_path / "other").exists()


@pytest.mark.e2e  # installs with npm or pip
def test_server_json_pypi_package_with_arguments_and_environment(tmp_path: Path) -> None:
    source = server_json(
        tmp_path / "entry",
        "pypi",
        "whisper-server",
        packageArguments=[
            {"type": "named", "name": "--level", "default": "low"},
            {"type": "positional", "value": "extra"},
            {"type": "positional", "valueHint": "optional"},
        ],
        environmentVariables=[
            {"name": "WHISPER_MODE", "default": "soft"},
            {"name": "UNSET_OPTIONAL", "description": "left out"},
        ],
    )
    done = install_registry_entry(source, tmp_path / "data", spec=str(wheel(tmp_path)))
    assert (done.id, done.command, done.version) == (ENTRY_ID, "venv/bin/python", "1.0.0")
    assert done.args == ("venv/bin/whisper-server", "--level", "${config.level}", "extra")
    manifest = load_manifest(done.folder)
    assert (manifest.title, manifest.description) == ("Tiny", "A tiny server from a registry entry.")
    assert manifest.transport is not None and manifest.transport.env == {}
    assert manifest.transport.env_from_config == {"WHISPER_MODE": "whisper_mode", "UNSET_OPTIONAL": "unset_optional"}
    assert [(f.key, f.default, f.required) for f in manifest.config] == [
        ("level", "low", False),
        ("whisper_mode", "soft", False),
        ("unset_optional", None, False),
    ]
    assert manifest.acl == "role_granted" and manifest.transport.sandbox.allow_net is False
    header = (done.folder / "manifest.yaml").read_text().splitlines()[1]
    assert header == "# pypi:whisper-server==1.0.0 as the registry entry io.github.tests/tiny describes."


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
def test_server_json_npm_package_from_the_local_tarball(tmp_path: Path) -> None:
    source = server_json(tmp_path / "entry", "npm", "@tiny-test/shout-server")
    done = install_registry_entry(source, tmp_path / "data", spec=str(npm_tarball(tmp_path)))
    assert (done.id, done.command) == ("npm.tiny_test.shout_server", "node")
    assert done.args == ("node_modules/@tiny-test/shout-server/server.js",)
    assert leftovers(tmp_path / "data") == ["npm.tiny_test.shout_server"]


@pytest.mark.parametrize(
    ("package", "message"),
    [
        (
            {"packageArguments": [{"type": "named", "name": "--token", "isSecret": True}]},
            "the server.json's argument '--token' is a secret the owner gives; a secret never goes on a command"
            " line, so it is refused.",
        ),
        ({"registryBaseUrl": "https://evil.example/simple"}, "the server.json's package comes from"),
        ({"transport": {"type": "streamable-http"}}, "the server.json of 'io.github.tests/tiny' has no npm or PyPI"),
    ],
    ids=["secret-arg", "other-registry", "http-only"],
)
def test_refused_server_json_runs_nothing_and_leaves_nothing(
    tmp_path: Path, package: dict[str, Any], message: str
) -> None:
    source = server_json(tmp_path / "entry", "pypi", "whisper-server", **package)
    with pytest.raises(InvalidArguments) as caught:
        install_registry_entry(source, tmp_path / "data", spec="/nonexistent.whl")
    assert caught.value.message.startswith(message), caught.value.message
    assert leftovers(tmp_path / "data") == []


def test_a_hostile_identifier_is_refused_by_the_source_grammar(tmp_path: Path) -> None:
    source = server_json(tmp_path / "entry", "npm", "--registry=http://evil")
    with pytest.raises(InvalidArguments, match="is not an npm package name"):
        install_registry_entry(source, tmp_path / "data")
    assert leftovers(tmp_path / "data") == []


@pytest.mark.e2e  # installs with npm or pip
@needs_npm
@pytest.mark.timeout(300)
def test_a_bundle_packed_by_the_official_mcpb_cli_installs(tmp_path: Path) -> None:
    work = tmp_path / "bundle"
    (work / "server").mkdir(parents=True)
    shutil.copy(PACKAGES / "tiny-node" / "server.js", work / "server" / "index.js")
    manifest = bundle_manifest()
    (work / "manifest.json").write_text(json.dumps(manifest))
    npx = shutil.which("npx")
    assert npx is not None
    packed = subprocess.run(
        [npx, "--yes", MCPB_CLI, "pack", str(work), str(tmp_path / "cli.mcpb")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if packed.returncode != 0 and not registry_reachable():
        pytest.skip(f"npx could not fetch {MCPB_CLI}: registry.npmjs.org cannot be reached from here")
    assert packed.returncode == 0, (packed.stdout + packed.stderr)[-2000:]
    done = install_bundle(BundleSource(tmp_path / "cli.mcpb"), tmp_path / "data")
    assert (done.id, done.command, done.args) == (BUNDLE_ID, "node", ("/plugin/server/index.js",))
    assert (done.folder / "server" / "index.js").is_file()


# -- through a running host --------------------------------------------------------------------


async def review_and_grant(running: RunningHost, ids: set[str], tools: set[tuple[str, str]]) -> dict[str, Any]:
    """The owner approves the pending tools of `ids` and makes a code whose role grants them;
    returns a visitor session of that code."""
    headers = {"Authorization": f"Bearer {running.owner_token()}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http,
        Client(streamable_http_client(f"{running.url}{OWNER_PATH}", http_client=http), cache=None) as owner,
    ):
        failed, review = await owner_call(owner, "tools_pending")
        assert not failed, review
        pending = {(e["capability"], e["tool"]): e for e in review["pending"]}
        assert tools <= set(pending)
        for (capability, tool), entry in pending.items():
            failed, answer = await owner_call(
                owner, "tool_approve", capability=capability, tool=tool, live_sha256=entry["live_sha256"]
            )
            assert not failed, answer
        failed, answer = await owner_call(owner, "role_put", id="friends", capabilities=sorted(ids))
        assert not failed, answer
        _, code = await owner_call(owner, "code_create", role="friends")
    return await running.new_session({"code": code["code"]})


@needs_bwrap
@pytest.mark.anyio
async def test_a_bundle_and_a_registry_entry_are_pending_at_start_then_a_visitor_calls_them(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    install_bundle(BundleSource(make_bundle(tmp_path / "shout.mcpb", bundle_manifest())), settings.data_dir)
    entry = server_json(tmp_path / "entry", "pypi", "whisper-server")
    install_registry_entry(entry, settings.data_dir, spec=str(wheel(tmp_path)))
    async with running_host(settings) as running:
        session = await review_and_grant(running, {BUNDLE_ID, ENTRY_ID}, {(BUNDLE_ID, "shout"), (ENTRY_ID, "whisper")})
        async with running.client(session) as visitor:
            listed = {tool.name for tool in (await visitor.list_tools()).tools}
            shout = await visitor.call_tool("shout", {"text": "hello"})
            whisper = await visitor.call_tool("whisper", {"text": "HELLO"})
    assert {"shout", "whisper"} <= listed
    assert not shout.is_error and shout.content[0].text == "HELLO"  # type: ignore[union-attr]
    assert not whisper.is_error and whisper.content[0].text == "hello"  # type: ignore[union-attr]


def test_a_bundle_setting_only_the_owner_gives_becomes_config_that_reaches_the_env(tmp_path: Path) -> None:
    manifest = bundle_manifest(
        server={
            "type": "node",
            "entry_point": "server/index.js",
            "mcp_config": {
                "command": "node",
                "args": ["${__dirname}/server/index.js"],
                "env": {"SHOUT_MODE": "${user_config.mode}", "API_KEY": "${user_config.api_key}", "HOME_DIR": "x"},
            },
        },
        user_config={
            "mode": {"type": "string", "title": "Mode", "default": "loud"},
            "api_key": {"type": "string", "title": "API key", "sensitive": True, "required": True},
        },
    )
    done = install_bundle(BundleSource(make_bundle(tmp_path / "s.mcpb", manifest)), tmp_path / "data")
    loaded = load_manifest(done.folder)
    assert loaded.transport is not None
    assert loaded.transport.env == {"HOME_DIR": "x"}
    assert loaded.transport.env_from_config == {"SHOUT_MODE": "mode", "API_KEY": "api_key"}
    assert [(f.key, f.type, f.default, f.secret, f.required) for f in loaded.config] == [
        ("mode", "string", "loud", False, False),
        ("api_key", "string", None, True, True),
    ]


@pytest.mark.e2e  # installs with npm or pip
def test_server_json_secret_and_required_variables_become_config_that_reaches_the_env(tmp_path: Path) -> None:
    source = server_json(
        tmp_path / "entry",
        "pypi",
        "whisper-server",
        environmentVariables=[
            {"name": "API_KEY", "isSecret": True, "isRequired": True, "description": "The service's key."},
            {"name": "BASE", "isRequired": True},
            {"name": "WHISPER_MODE", "default": "soft"},
        ],
    )
    done = install_registry_entry(source, tmp_path / "data", spec=str(wheel(tmp_path)))
    loaded = load_manifest(done.folder)
    assert loaded.transport is not None
    assert loaded.transport.env == {}
    assert loaded.transport.env_from_config == {"API_KEY": "api_key", "BASE": "base", "WHISPER_MODE": "whisper_mode"}
    assert [(f.key, f.label, f.description, f.secret, f.required) for f in loaded.config] == [
        ("api_key", "API_KEY", "The service's key.", True, True),
        ("base", "BASE", "", False, True),
        ("whisper_mode", "WHISPER_MODE", "", False, False),
    ]


# -- the owner's settings reach the child ------------------------------------------------------

GREETER_BUNDLE_ID = "mcpb.greeter"
GREETER_ENTRY_ID = "pypi.greeter_server"


async def owner_tool(running: RunningHost, name: str, /, **arguments: Any) -> Any:
    """Call owner tool `name` on `running`'s owner door; its answer (a refusal fails the test)."""
    headers = {"Authorization": f"Bearer {running.owner_token()}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http,
        Client(streamable_http_client(f"{running.url}{OWNER_PATH}", http_client=http), cache=None) as owner,
    ):
        failed, answer = await owner_call(owner, name, **arguments)
    assert not failed, answer
    return answer


async def greetings_before_and_after(
    running: RunningHost, plugin_id: str, values: dict[str, str]
) -> tuple[str, str, Any]:
    """A visitor's `greet` of Ada, then the owner's config_set of `values` (the visitor's child
    running), then the same call: both answers and the owner's config as config_get reads it."""
    session = await review_and_grant(running, {plugin_id}, {(plugin_id, "greet")})
    async with running.client(session) as visitor:
        before = await visitor.call_tool("greet", {"name": "Ada"})
        await owner_tool(running, "config_set", capability=plugin_id, scope="owner", values=values)
        after = await visitor.call_tool("greet", {"name": "Ada"})
    stored = await owner_tool(running, "config_get", capability=plugin_id, scope="owner")
    assert not before.is_error and not after.is_error, (before, after)
    return before.content[0].text, after.content[0].text, stored  # type: ignore[union-attr]


def test_a_bundle_setting_with_a_default_is_referenced_not_frozen(tmp_path: Path) -> None:
    done = install_bundle(BundleSource(greeter_bundle(tmp_path / "greeter.mcpb")), tmp_path / "data")
    loaded = load_manifest(done.folder)
    assert loaded.transport is not None
    assert (loaded.transport.command, loaded.transport.args) == (
        "python",
        ("/plugin/server/greeter_server.py", "--mark", "${config.mark}"),
    )
    assert (loaded.transport.env, loaded.transport.env_from_config) == ({}, {"GREETING": "greeting"})
    assert [(f.key, f.default) for f in loaded.config] == [("greeting", "Hello"), ("mark", "!")]


def test_a_secret_bundle_setting_is_written_nowhere_in_the_manifest(tmp_path: Path) -> None:
    manifest = bundle_manifest(
        server={
            "type": "node",
            "entry_point": "server/index.js",
            "mcp_config": {
                "command": "node",
                "args": ["${__dirname}/server/index.js"],
                "env": {"AUTH": "Bearer ${user_config.token}"},
            },
        },
        user_config={"token": {"type": "string", "title": "Token", "sensitive": True, "default": "tok-3f9a1c"}},
    )
    done = install_bundle(BundleSource(make_bundle(tmp_path / "s.mcpb", manifest)), tmp_path / "data")
    assert "tok-3f9a1c" not in (done.folder / "manifest.yaml").read_text()
    loaded = load_manifest(done.folder)
    assert loaded.transport is not None and loaded.transport.env == {"AUTH": "Bearer ${config.token}"}
    assert [(f.key, f.secret, f.default) for f in loaded.config] == [("token", True, None)]


@needs_bwrap
@pytest.mark.anyio
async def test_the_owners_bundle_setting_reaches_the_running_child(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    install_bundle(BundleSource(greeter_bundle(tmp_path / "greeter.mcpb")), settings.data_dir)
    async with running_host(settings) as running:
        before, after, stored = await greetings_before_and_after(running, GREETER_BUNDLE_ID, {"greeting": "Howdy"})
    assert (before, after) == ("Hello, Ada!", "Howdy, Ada!")
    assert stored["values"] == {"greeting": "Howdy", "mark": "!"}  # the console shows what the child got


@needs_bwrap
@pytest.mark.anyio
async def test_the_owners_server_json_settings_reach_the_running_child(
    tmp_path: Path, database_url: str, installed_once: InstalledOnce
) -> None:
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    installed_once.copy_into(settings.data_dir, "server.json")  # GREETER's, as the tests above install it
    async with running_host(settings) as running:
        values = {"greeting": "Howdy", "mark": "?"}
        before, after, stored = await greetings_before_and_after(running, GREETER_ENTRY_ID, values)
    assert (before, after) == ("Hello, Ada!", "Howdy, Ada?")
    assert stored["values"] == values
