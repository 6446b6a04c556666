"""`mcp-host` on the command line: check, caps list, owner token and session new, run as a user would."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from inline_snapshot import snapshot
from pydantic import SecretStr

from mcp_host.access.owners import OwnerStore, write_owner_token_file
from mcp_host.app.cli import main
from mcp_host.plugins.loading import load_plugins
from mcp_host.plugins.manifest import MANIFEST_NAME
from mcp_host.settings import Settings
from mcp_host.store.config import ConfigStore
from mcp_host.store.database import open_database
from mcp_host.store.plugin_store import PluginStores, store_schema
from tests.hosting import PLUGINS, free_port, host_settings, running_host
from tests.plugins.installed_once import InstalledOnce

ECHO = PLUGINS / "echo"
MCP_HOST = Path(sys.executable).parent / "mcp-host"

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("host_environment")]


def write_plugin(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True)
    (folder / MANIFEST_NAME).write_text(text, encoding="utf-8")
    return folder


def rows(table: str, tmp_path: Path) -> list[list[str]]:
    """A printed table as its cells (columns are two or more spaces apart), tmp_path as <tmp>."""
    text = table.replace(str(tmp_path.resolve()), "<tmp>")
    return [re.split(r" {2,}", line) for line in text.splitlines()]


def test_check_of_a_good_plugin_folder_prints_ok_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(ECHO)]) == 0

    out, err = capsys.readouterr()
    assert out == f"ok: {ECHO}\n"
    assert err == ""


def test_check_of_a_broken_manifest_names_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = write_plugin(tmp_path / "broken", "id: demo\ncolour: red\n")

    assert main(["check", str(broken)]) == 1

    out, err = capsys.readouterr()
    assert out == f"error: {broken.resolve() / MANIFEST_NAME}: colour: unknown key 'colour'\n"
    assert err == ""


def test_check_of_several_folders_reports_every_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_plugin(tmp_path / "many" / "a", "id: twice\n")
    write_plugin(tmp_path / "many" / "b", "id: twice\n")
    write_plugin(tmp_path / "many" / "c", "id: c\ncolour: red\nsize: 3\n")
    hostile = write_plugin(tmp_path / "hostile", 'id: hostile\ntitle: "Invoice \\u202Efdp.exe"\n')
    paths = [tmp_path / "many", hostile, ECHO, tmp_path / "missing"]

    assert main(["check", *map(str, paths)]) == 1

    out, _ = capsys.readouterr()
    assert out.replace(str(tmp_path.resolve()), "<tmp>").splitlines() == snapshot(
        [
            "error: <tmp>/many/c/manifest.yaml: colour: unknown key 'colour'",
            "error: <tmp>/many/c/manifest.yaml: size: unknown key 'size'",
            "error: <tmp>/hostile/manifest.yaml: title: title contains a bidi control (U+202E) at index 8",
            "error: <tmp>/missing: no such folder",
            "error: <tmp>/many/a/manifest.yaml: id: 'twice' is also the id of <tmp>/many/b",
            "error: <tmp>/many/b/manifest.yaml: id: 'twice' is also the id of <tmp>/many/a",
        ]
    )


def test_caps_list_without_a_host_prints_the_catalogue_from_the_manifests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["caps", "list", "--plugins", str(ECHO), "--data-dir", str(tmp_path / "data")]) == 0

    out, err = capsys.readouterr()
    assert out == snapshot("""\
ID         KIND        ACL     REQUIRES  VISITOR TOOLS          STATUS
test.echo  capability  always  -         echo,whoami,sleep,die  not_started
""")
    data = tmp_path / "data"
    assert err == (
        f"(manifests only: no host is running with data directory {data};"
        f" start one: mcp-host serve --data-dir {data})\n"
    )


def test_caps_list_shows_a_plugin_that_does_not_load_as_invalid_with_its_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = write_plugin(tmp_path / "broken", "id: demo\ncolour: red\n")
    args = ["caps", "list", "--plugins", str(ECHO), str(broken), "--data-dir", str(tmp_path / "data")]

    assert main(args) == 0

    out, _ = capsys.readouterr()
    assert rows(out, tmp_path) == snapshot(
        [
            ["ID", "KIND", "ACL", "REQUIRES", "VISITOR TOOLS", "STATUS"],
            ["test.echo", "capability", "always", "-", "echo,whoami,sleep,die", "not_started"],
            [
                "<tmp>/broken/manifest.yaml",
                "?",
                "?",
                "-",
                "-",
                "invalid: <tmp>/broken/manifest.yaml: colour: unknown key 'colour'",
            ],
        ]
    )


def test_owner_token_without_a_token_file_exits_1_saying_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["owner", "token", "--data-dir", str(tmp_path / "data")]) == 1

    out, err = capsys.readouterr()
    assert out == ""
    assert err.replace(str(tmp_path), "<tmp>") == snapshot(
        "mcp-host: no owner token yet at <tmp>/data/owner-token; start the host once with this data directory:"
        " mcp-host serve --data-dir <tmp>/data\n"
    )


def test_owner_token_prints_the_token_the_host_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = "owner-token-for-the-test-0123456789abcdef"
    write_owner_token_file(tmp_path / "data", token)

    assert main(["owner", "token", "--data-dir", str(tmp_path / "data")]) == 0

    assert capsys.readouterr() == (f"{token}\n", "")


def test_session_new_without_a_host_exits_1_saying_no_host_is_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    data = tmp_path / "data"

    assert main(["session", "new", "--url", url, "--data-dir", str(data)]) == 1

    assert capsys.readouterr() == (
        "",
        f"mcp-host: no host answers at {url} (Connection refused); no host is running with data directory {data};"
        f" start one: mcp-host serve --data-dir {data}\n",
    )


def test_console_script_prints_usage_and_passes_the_exit_status_on(tmp_path: Path) -> None:
    broken = write_plugin(tmp_path / "broken", "id: demo\ncolour: red\n")

    usage = subprocess.run([MCP_HOST, "--help"], capture_output=True, text=True, timeout=60, check=False)
    refused = subprocess.run([MCP_HOST, "check", broken], capture_output=True, text=True, timeout=60, check=False)

    # argparse wraps the usage line where it is longer than the terminal: read it whole.
    assert (usage.returncode, " ".join(usage.stdout.split("\n\n", 1)[0].split())) == (
        0,
        "usage: mcp-host [-h] {serve,check,caps,session,owner,plugin,tools,uninstall} ...",
    )
    assert (refused.returncode, refused.stdout) == (
        1,
        f"error: {broken.resolve() / MANIFEST_NAME}: colour: unknown key 'colour'\n",
    )


async def test_session_new_and_caps_list_against_a_running_host(
    tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"])
    caps_list = ["caps", "list", "--url", settings.base_url, "--data-dir", str(settings.data_dir)]
    async with running_host(settings) as host:
        capsys.readouterr()  # what the host logged while starting
        with anyio.fail_after(30):
            # The CLI blocks on urllib while the host answers from this test's event loop.
            assert await anyio.to_thread.run_sync(main, ["session", "new", "--url", host.url]) == 0
            session = json.loads(capsys.readouterr().out)
            assert await anyio.to_thread.run_sync(main, caps_list) == 0
            before = capsys.readouterr().out
            async with host.client(session) as client:
                listed = await client.list_tools()
            assert await anyio.to_thread.run_sync(main, caps_list) == 0
            after = capsys.readouterr().out

    assert sorted(session) == ["mcp_url", "session_id", "token"]
    assert session["mcp_url"] == f"{host.url}/v1/sessions/{session['session_id']}/mcp"
    assert len(session["token"]) >= 32
    assert [tool.name for tool in listed.tools] == ["echo", "whoami", "sleep", "die"]
    assert before == snapshot("""\
ID         KIND        ACL     REQUIRES  VISITOR TOOLS          STATUS
test.echo  capability  always  -         echo,whoami,sleep,die  not_started
""")
    assert after == snapshot("""\
ID         KIND        ACL     REQUIRES  VISITOR TOOLS          STATUS
test.echo  capability  always  -         echo,whoami,sleep,die  healthy
""")


async def test_owner_profile_sets_and_shows_the_profile_of_the_running_host(
    tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = host_settings(tmp_path, database_url, [])
    async with running_host(settings) as host:
        capsys.readouterr()  # what the host logged while starting
        target = ["--url", host.url, "--data-dir", str(settings.data_dir)]

        async def profile(*flags: str) -> tuple[int, str, str]:
            with anyio.fail_after(30):  # the CLI runs its own event loop in a worker thread
                code = await anyio.to_thread.run_sync(main, ["owner", "profile", *flags, *target])
            out, err = capsys.readouterr()
            return code, out, err

        fresh = await profile()
        changed = await profile("--name", "Ada Lovelace", "--email", "ada@example.org", "--timezone", "Europe/Berlin")
        refused = await profile("--timezone", "Berlin")
        unset = await profile("--email", "")
        shown = await profile()
        stored = await host.owners.get(host.owner_id)
        other = tmp_path / "another-data-dir"
        write_owner_token_file(other, "not-this-hosts-owner-token-0123456789abcdef")
        target = ["--url", host.url, "--data-dir", str(other)]
        wrong_token = await profile()

    assert fresh == (0, "name:     (not set)\nemail:    (not set)\ntimezone: (not set)\n", "")
    assert changed == (0, "name:     Ada Lovelace\nemail:    ada@example.org\ntimezone: Europe/Berlin\n", "")
    assert refused == (
        1,
        "",
        "mcp-host: invalid_arguments: timezone: 'Berlin' is not an IANA zone name such as Europe/Berlin,"
        " America/New_York or UTC\n",
    )
    assert unset == shown == (0, "name:     Ada Lovelace\nemail:    (not set)\ntimezone: Europe/Berlin\n", "")
    assert stored is not None
    assert stored.profile() == {"name": "Ada Lovelace", "email": None, "timezone": "Europe/Berlin"}
    assert wrong_token == (
        1,
        "",
        f"mcp-host: the host at {host.url} refused the owner token in {other / 'owner-token'}; is it another host's"
        " data directory? (`mcp-host owner token --rotate` issues a new one)\n",
    )


def test_owner_profile_without_a_host_or_a_token_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    url = f"http://127.0.0.1:{free_port()}"

    no_token = main(["owner", "profile", "--url", url, "--data-dir", str(data)])
    no_token_err = capsys.readouterr().err
    write_owner_token_file(data, "owner-token-for-the-test-0123456789abcdef")
    no_host = main(["owner", "profile", "--email", "ada@example.org", "--url", url, "--data-dir", str(data)])
    no_host_err = capsys.readouterr().err

    assert (no_token, no_token_err) == (1, f"mcp-host: no owner token at {data / 'owner-token'}; start the host once\n")
    assert (no_host, no_host_err) == (
        1,
        f"mcp-host: no host answered at {url}; start it with `mcp-host serve` (or pass --url)\n",
    )


def test_uninstall_asks_for_yes_before_deleting_anything(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["uninstall", "notes"]) == 1
    assert "run again with --yes" in capsys.readouterr().err


@pytest.mark.anyio
async def test_uninstall_drops_the_plugins_store_and_config_and_nothing_else(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_HOST_DATABASE_URL", database_url)
    settings = Settings(database_url=SecretStr(database_url), data_dir=tmp_path)
    notes = load_plugins(None, [PLUGINS / "notes"]).plugins[0]
    async with open_database(settings) as database:
        owner = await OwnerStore(database.pool).ensure_single_owner()
        stores = PluginStores(database.pool)
        for plugin_id in ("notes", "forger"):
            await (await stores.ensure("capability", plugin_id)).insert(owner.id, "things", {"n": 1})
        await (
            ConfigStore(database.pool)
            .for_plugin("notes", notes.manifest)
            .set(owner.id, "owner", "", {"greeting": "hi"})
        )

        code = await anyio.to_thread.run_sync(
            main, ["uninstall", "notes", "--yes", "--data-dir", str(tmp_path)], abandon_on_cancel=False
        )

        assert code == 0
        assert capsys.readouterr().out == "uninstalled notes: dropped its store; deleted 1 config row(s)\n"
        schemas = {r["nspname"] for r in await database.pool.fetch("SELECT nspname FROM pg_namespace")}
        assert store_schema("capability", "notes") not in schemas
        assert await stores.bound("capability", "forger").count(owner.id, "things") == 1
        assert await ConfigStore(database.pool).for_plugin("notes", notes.manifest).get(owner.id, "owner") == {
            "greeting": "hello",
            "page_size": 10,
        }


def test_check_warns_of_manifest_limits_above_this_hosts_ceilings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_HOST_CHILD_CPU_SECONDS", "100")
    greedy = write_plugin(
        tmp_path / "greedy", "id: greedy\ntransport: {command: node}\nlimits: {memory_mb: 2048, cpu_seconds: 60}\n"
    )

    assert main(["check", str(greedy)]) == 0

    out, _ = capsys.readouterr()
    assert out.splitlines() == [
        "warning: greedy: limits.memory_mb 2048 is above the host's ceiling (MCP_HOST_CHILD_MEMORY_BYTES);"
        " it gets 1024",
        f"ok: {greedy}",
    ]


def test_check_warns_of_egress_limits_above_this_hosts_ceilings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_HOST_EGRESS_CONNECTIONS", "8")
    greedy = write_plugin(
        tmp_path / "greedy",
        "id: greedy\ntransport: {command: node, sandbox: {egress: [api.example.com]}}\n"
        "limits: {egress_connections: 64, egress_mb_per_minute: 10}\n",
    )

    assert main(["check", str(greedy)]) == 0

    out, _ = capsys.readouterr()
    assert out.splitlines() == [
        "warning: greedy: limits.egress_connections 64 is above the host's ceiling (MCP_HOST_EGRESS_CONNECTIONS);"
        " it gets 8",
        f"ok: {greedy}",
    ]


# -- check over what `plugin add` installs ------------------------------------------------------


def installed_of_each_source(tmp_path: Path, installed_once: InstalledOnce) -> dict[str, Path]:
    """One plugin folder of each source the host takes: a folder with its own manifest, and one
    install each from npm (the local tarball; npm needed), PyPI (a local wheel) and a registry
    server.json (naming a wheel), each the run's one install copied (`installed_once`), an MCP
    Bundle and a remote server's URL, into `tmp_path`/data. They run at once, each in a thread:
    the first asker of the run makes the shared installs, and npm and pip wait for idle CPU."""
    from mcp_host.plugins import (
        BundleSource,
        RemoteSource,
        install_bundle,
        install_remote,
        parse_add_source,
    )
    from tests.plugins.packages import greeter_bundle

    data = tmp_path / "data"
    remote = parse_add_source("https://mcp.example.com/mcp")
    assert isinstance(remote, RemoteSource)
    installs: dict[str, Callable[[], Path]] = {
        "pypi": lambda: installed_once.copy_into(data, "pypi"),
        "mcpb": lambda: install_bundle(BundleSource(greeter_bundle(tmp_path / "greeter.mcpb")), data).folder,
        "server.json": lambda: installed_once.copy_into(data, "server.json"),
        "remote": lambda: install_remote(remote, data).folder,
    }
    if shutil.which("npm") is not None:
        installs["npm"] = lambda: installed_once.copy_into(data, "npm")
    with ThreadPoolExecutor(len(installs)) as pool:
        running = {source: pool.submit(install) for source, install in installs.items()}
        return {"folder": ECHO} | {source: future.result() for source, future in running.items()}


@pytest.mark.e2e  # installs with npm or pip
@pytest.mark.timeout(300)
def test_check_passes_every_plugin_the_host_installs_and_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], installed_once: InstalledOnce
) -> None:
    folders = installed_of_each_source(tmp_path, installed_once)
    verdicts = {}
    for source, folder in folders.items():
        code = main(["check", str(folder), "--data-dir", str(tmp_path / "data")])
        out, _ = capsys.readouterr()
        verdicts[source] = (code, out)
    expected = {source: (0, f"ok: {folder}\n") for source, folder in folders.items()}
    assert verdicts == expected
    if "npm" not in folders:
        pytest.skip("npm is not installed: the npm install was not checked")


def check_lines(out: str, tmp_path: Path, url: str) -> list[str]:
    """`check`'s lines with the test's folders, the host's URL and the console script shortened."""
    text = out.replace(str(tmp_path.resolve()), "<tmp>").replace(str(PLUGINS), "<plugins>").replace(url, "<url>")
    return text.replace(str(MCP_HOST), "mcp-host").splitlines()


async def test_check_says_what_each_plugin_still_needs_on_the_running_host(
    tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mcp_host.plugins import BundleSource, install_bundle
    from tests.plugins.packages import greeter_bundle
    from tests.plugins.test_install_bundle import owner_tool

    fixtures = [PLUGINS / "echo", PLUGINS / "envy", PLUGINS / "scheduler"]
    settings = host_settings(tmp_path, database_url, [], pin_tools=True).model_copy(update={"plugins": fixtures})
    bundle = install_bundle(BundleSource(greeter_bundle(tmp_path / "greeter.mcpb")), settings.data_dir).folder
    elsewhere = PLUGINS / "notes"  # a folder this host was not started with
    command = ["check", str(bundle), *map(str, fixtures), str(elsewhere), "--data-dir", str(settings.data_dir)]
    async with running_host(settings) as host:
        capsys.readouterr()  # the host's banner
        before = await anyio.to_thread.run_sync(main, command)
        said_before = capsys.readouterr()
        review = await owner_tool(host, "tools_pending")
        for entry in review["pending"]:
            await owner_tool(host, "tool_approve", capability=entry["capability"], tool=entry["tool"])
        await owner_tool(host, "role_put", id="guests", capabilities=["mcpb.greeter"])
        after = await anyio.to_thread.run_sync(main, command)
        said_after = capsys.readouterr()
    assert (before, said_before.err, after, said_after.err) == (0, "", 0, "")
    assert check_lines(said_before.out, tmp_path, host.url) == snapshot(
        [
            "ok: <tmp>/data/plugins/mcpb.greeter, <plugins>/echo, <plugins>/envy, <plugins>/scheduler, <plugins>/notes",
            "mcpb.greeter: 3 steps before a visitor can use it",
            "  approve its pending tools (greet):",
            "    mcp-host tools approve mcpb.greeter --all --data-dir <tmp>/data",
            "  grant it to a role (here guests, or any of roles_list):",
            '    owner tool role_put {"id": "guests", "capabilities": ["mcpb.greeter"]}',
            "  make an access code of role guests for a visitor (its text is shown once):",
            '    owner tool code_create {"role": "guests"}',
            "notes: the host at <url> does not run it; serve it with --plugins <plugins>/notes",
            "scheduler: 2 steps before a visitor can use it",
            "  approve its pending tools (mail_send, meeting_book, meta_seen, slots_busy):",
            "    mcp-host tools approve scheduler --all --data-dir <tmp>/data",
            "  connect a connector of category calendar:",
            '    owner tool connector_connect {"connector": "…", "settings": {}}',
            "test.echo: 1 step before a visitor can use it",
            "  approve its pending tools (die, echo, sleep, whoami):",
            "    mcp-host tools approve test.echo --all --data-dir <tmp>/data",
            "test.envy: 1 step before a visitor can use it",
            "  set its required setting api_token:",
            '    owner tool config_set {"capability": "test.envy", "scope": "owner", "values": {"api_token": "…"}}',
            "(owner tool: ask your agent connected to the owner door, or use the console at <url>/owner/)",
        ]
    )
    assert check_lines(said_after.out, tmp_path, host.url) == snapshot(
        [
            "ok: <tmp>/data/plugins/mcpb.greeter, <plugins>/echo, <plugins>/envy, <plugins>/scheduler, <plugins>/notes",
            "mcpb.greeter: 1 step before a visitor can use it",
            "  make an access code of role guests for a visitor (its text is shown once):",
            '    owner tool code_create {"role": "guests"}',
            "notes: the host at <url> does not run it; serve it with --plugins <plugins>/notes",
            "scheduler: 1 step before a visitor can use it",
            "  connect a connector of category calendar:",
            '    owner tool connector_connect {"connector": "…", "settings": {}}',
            "test.echo: a visitor can use it now (a public session sees it)",
            "test.envy: 1 step before a visitor can use it",
            "  set its required setting api_token:",
            '    owner tool config_set {"capability": "test.envy", "scope": "owner", "values": {"api_token": "…"}}',
            "(owner tool: ask your agent connected to the owner door, or use the console at <url>/owner/)",
        ]
    )


def test_check_with_a_data_dir_no_host_runs_with_says_the_manifests_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(ECHO), "--data-dir", str(tmp_path)]) == 0

    out, err = capsys.readouterr()
    assert (out, err) == (f"ok: {ECHO}\n", f"(manifests only: no host is running with data directory {tmp_path})\n")
