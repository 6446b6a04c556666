"""The command line finds the running host from its data directory alone (`<data dir>/host.json`),
and says in one line what is wrong when it cannot: no host there, a host on another address,
no owner token yet, a token the host refuses. The stdio bridge fails like a tool (issue 12)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED

import mcp_host
from mcp_host.access.owners import OWNER_TOKEN_FILE, write_owner_token_file
from mcp_host.app.cli import _listen, main
from mcp_host.app.host_file import HOST_FILE, read_host_file
from tests.hosting import PLUGINS, RunningHost, free_port, host_settings, running_host, wait_until

MCP_HOST = Path(sys.executable).parent / "mcp-host"
CHECKOUT = Path(mcp_host.__file__).resolve().parent.parent

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("host_environment")]


async def run(*argv: str) -> int:
    """`mcp-host argv` in a worker thread: it blocks on urllib while the host answers from this loop."""
    with anyio.fail_after(30):
        return await anyio.to_thread.run_sync(main, list(argv))


@asynccontextmanager
async def serving(argv: list[str], env: dict[str, str], log: Path) -> AsyncIterator[anyio.abc.Process]:
    """`mcp-host serve` as a process, ready once it wrote `host.json`; stopped (SIGTERM) on exit."""
    data = Path(argv[argv.index("--data-dir") + 1])
    with log.open("w") as sink:
        process = await anyio.open_process(argv, env=env, stdout=sink, stderr=sink)
    try:

        def ready() -> bool:
            assert process.returncode is None, log.read_text()
            return (data / HOST_FILE).exists()

        await wait_until(ready, within_s=60)
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
        with anyio.fail_after(30):
            await process.wait()
        await process.aclose()


@asynccontextmanager
async def host_in(tmp_path: Path, database_url: str) -> AsyncIterator[RunningHost]:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        yield host


def leaves(group: BaseExceptionGroup[MCPError]) -> list[MCPError]:
    found: list[MCPError] = []
    for exc in group.exceptions:
        found += leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


def _reaped_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


async def test_serve_on_port_0_prints_and_writes_the_port_and_every_command_finds_it(
    tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    env = {
        **os.environ,
        "MCP_HOST_DATABASE_URL": database_url,
        "MCP_HOST_PRESTART_CHILDREN": "false",
    }
    argv = [str(MCP_HOST), "serve", "--port", "0", "--data-dir", str(data), "--plugins", str(PLUGINS / "echo")]
    log = tmp_path / "serve.log"
    async with serving(argv, env, log) as process:
        record = read_host_file(data)
        assert record is not None
        mode = stat.S_IMODE((data / HOST_FILE).stat().st_mode)
        token = await run("owner", "token", "--data-dir", str(data))
        printed_token = capsys.readouterr()
        listed = await run("caps", "list", "--data-dir", str(data))
        table = capsys.readouterr()
        opened = await run("session", "new", "--data-dir", str(data))
        session = json.loads(capsys.readouterr().out)
        bridge = StdioServerParameters(command=str(MCP_HOST), args=["owner", "--data-dir", str(data)])
        with anyio.fail_after(30):
            async with Client(bridge, cache=None) as client:
                owner_tools = [t.name for t in (await client.list_tools()).tools]
        process.terminate()
        with anyio.fail_after(30):
            stopped = await process.wait()

    url = record.url
    port = int(url.rsplit(":", 1)[1])
    banner = log.read_text()
    assert url == f"http://127.0.0.1:{port}" and port not in (0, 8765)
    assert (record.pid, mode) == (process.pid, 0o600)
    assert (token, printed_token) == (0, ((data / OWNER_TOKEN_FILE).read_text(), ""))
    assert (listed, table.err) == (0, "")
    assert "test.echo" in table.out
    assert opened == 0 and session["mcp_url"].startswith(f"{url}/v1/sessions/")
    assert "capabilities_list" in owner_tools
    # A clean stop: SIGTERM drains (app/drain.py), then the host stops and exits 0.
    assert stopped == 0 and not (data / HOST_FILE).exists()
    assert f"mcp-host ready on {url} " in banner
    assert f"owner endpoint: {url}/v1/owner/mcp;" in banner
    assert f"claude mcp add --transport http mcp-host {url}/v1/owner/mcp --header" in banner
    assert f"claude mcp add mcp-host-stdio -- {MCP_HOST} owner --data-dir {data}" in banner  # another name
    assert f"curl -s -X POST {url}/v1/sessions " in banner
    assert ":8765" not in banner


async def test_a_host_run_by_the_tests_writes_its_address_file_and_removes_it(
    tmp_path: Path, database_url: str
) -> None:
    async with host_in(tmp_path, database_url) as host:
        record = read_host_file(host.settings.data_dir)
    data = host.settings.data_dir

    assert record is not None
    assert (record.url, record.pid) == (host.url, os.getpid())
    assert not (data / HOST_FILE).exists()


async def test_without_a_host_each_command_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    write_owner_token_file(data, "owner-token-for-the-test-0123456789abcdef")
    # What a host killed with SIGKILL leaves: a host.json whose process is gone.
    (data / HOST_FILE).write_text(
        json.dumps({"url": f"http://127.0.0.1:{free_port()}", "pid": _reaped_pid(), "started_at": "2026-01-01T00:00Z"})
    )
    no_host = f"no host is running with data directory {data}; start one: mcp-host serve --data-dir {data}"

    session = await run("session", "new", "--data-dir", str(data))
    session_said = capsys.readouterr()
    bridge = await run("owner", "--data-dir", str(data))
    bridge_said = capsys.readouterr()
    listed = await run("caps", "list", "--data-dir", str(data), "--plugins", str(PLUGINS / "echo"))
    listed_said = capsys.readouterr()

    assert (session, session_said.out, session_said.err) == (1, "", f"mcp-host: {no_host}\n")
    assert (bridge, bridge_said.out, bridge_said.err) == (1, "", f"mcp-host: {no_host}\n")
    # caps list still shows what the manifests say, and why that is all it shows.
    assert (listed, listed_said.err) == (0, f"(manifests only: {no_host})\n")
    assert "test.echo" in listed_said.out


async def test_a_command_sent_to_another_address_says_where_the_data_dirs_host_listens(
    tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = f"http://127.0.0.1:{free_port()}"
    async with host_in(tmp_path, database_url) as host:
        data = str(host.settings.data_dir)
        capsys.readouterr()
        said = []
        for command in (["session", "new"], ["caps", "list"], ["owner"]):
            code = await run(*command, "--url", elsewhere, "--data-dir", data)
            said.append((code, *capsys.readouterr()))

    expected = (
        f"mcp-host: no host answers at {elsewhere} (Connection refused); the host of data directory {data}"
        f" listens on {host.url}: drop --url\n"
    )
    assert said == [(1, "", expected)] * 3


async def test_no_owner_token_or_a_refused_one_is_one_line(
    tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with host_in(tmp_path, database_url) as host:
        data = host.settings.data_dir
        token_file = data / OWNER_TOKEN_FILE
        capsys.readouterr()
        token_file.unlink()
        missing = []
        for command in (["owner", "token"], ["caps", "list"], ["owner"]):
            code = await run(*command, "--data-dir", str(data))
            missing.append((code, *capsys.readouterr()))
        write_owner_token_file(data, "not-this-hosts-owner-token-0123456789abcdef")
        refused = []
        for command in (["caps", "list"], ["owner"]):
            code = await run(*command, "--data-dir", str(data))
            refused.append((code, *capsys.readouterr()))

    no_token = (
        f"mcp-host: no owner token at {token_file}, and the host running there (pid {os.getpid()}) has none to"
        f" give: `mcp-host owner token --rotate --data-dir {data}` makes one\n"
    )
    not_taken = (
        f"mcp-host: the host at {host.url} refused the owner token in {token_file}: it is another host's or was"
        f" replaced (`mcp-host owner token --rotate --data-dir {data}` makes a new one)\n"
    )
    assert missing == [(1, "", no_token)] * 3
    assert refused == [(1, "", not_taken)] * 2


async def test_commands_without_a_data_dir_name_the_default_and_the_one_scripts_run_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    default = tmp_path / "xdg" / "mcp-host"
    hint = f"(the default; scripts/run uses {CHECKOUT / '.data'}: add --data-dir {CHECKOUT / '.data'})"

    token = await run("owner", "token")
    token_said = capsys.readouterr()
    session = await run("session", "new")
    session_said = capsys.readouterr()

    assert (token, token_said) == (1, ("", f"mcp-host: no owner token at {default / OWNER_TOKEN_FILE} {hint}\n"))
    assert (session, session_said) == (1, ("", f"mcp-host: no host is running with data directory {default} {hint}\n"))


async def test_the_bridge_without_a_host_exits_1_with_one_line_and_its_client_sees_a_clean_close(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    expected = f"mcp-host: no host is running with data directory {data}; start one: mcp-host serve --data-dir {data}\n"
    argv = [str(MCP_HOST), "owner", "--data-dir", str(data)]

    with anyio.fail_after(60):
        alone = await anyio.run_process(argv, stdin=subprocess.DEVNULL, check=False)
    errlog = tmp_path / "bridge.err"
    with errlog.open("w") as sink, pytest.RaisesGroup(MCPError, flatten_subgroups=True) as closed:
        with anyio.fail_after(30):
            async with Client(stdio_client(StdioServerParameters(command=argv[0], args=argv[1:]), errlog=sink)):
                pass

    assert (alone.returncode, alone.stdout, alone.stderr.decode()) == (1, b"", expected)
    assert [e.error.code for e in leaves(closed.value)] == [CONNECTION_CLOSED]
    assert errlog.read_text() == expected


def test_serve_help_names_every_option_with_its_default_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "400")  # argparse would wrap a long path at its hyphens
    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())

    assert done.value.code == 0
    for option, default, variable in [
        ("--host HOST", "default: 127.0.0.1", "env MCP_HOST_HOST"),
        ("--port PORT", "default: 8765", "env MCP_HOST_PORT"),
        ("--data-dir DIR", f"default: {tmp_path / 'xdg' / 'mcp-host'}", "env MCP_HOST_DATA_DIR"),
        ("--plugins DIR [DIR ...]", "default: none", "env MCP_HOST_PLUGINS"),
        ("--allowed-host NAME", "repeatable; default: none", "env MCP_HOST_ALLOWED_HOSTS"),
    ]:
        help_text = text.split(f" {option} ", 1)[1].split(" --", 1)[0]
        assert default in help_text and variable in help_text, option


async def test_serve_allowed_host_lets_a_proxy_name_reach_the_host(tmp_path: Path, database_url: str) -> None:
    port = free_port()
    env = {**os.environ, "MCP_HOST_DATABASE_URL": database_url, "MCP_HOST_PRESTART_CHILDREN": "false"}
    data = tmp_path / "data"
    argv = [str(MCP_HOST), "serve", "--port", str(port), "--data-dir", str(data)]
    argv += ["--allowed-host", "mcp.example.org", "--allowed-host", "other.example"]
    log = tmp_path / "serve.log"
    async with serving(argv, env, log):
        statuses = {}
        for name in ("mcp.example.org", "other.example", "evil.example"):
            statuses[name] = await anyio.to_thread.run_sync(_post_session, port, name)

    assert statuses == {"mcp.example.org": 201, "other.example": 201, "evil.example": 421}


def _post_session(port: int, host_header: str) -> int:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/v1/sessions", body=b"{}", headers={"Host": host_header})
        return connection.getresponse().status
    finally:
        connection.close()


async def test_the_socket_serve_listens_on_turns_nagle_off_for_every_connection() -> None:
    """asyncio sets TCP_NODELAY only on sockets whose proto says TCP; without it each 2026-07-28
    answer (headers and body in two writes) waited ~40 ms for the client's delayed ACK."""
    listener = _listen("127.0.0.1", 0)
    seen: list[int] = []
    accepted = anyio.Event()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            accepted.set()

    server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
    try:
        async with await anyio.connect_tcp("127.0.0.1", listener.getsockname()[1]):
            with anyio.fail_after(5):
                await accepted.wait()
    finally:
        server.close()
        await server.wait_closed()
    assert seen == [1]
