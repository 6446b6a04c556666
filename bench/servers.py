"""Starting the servers under test as separate processes: the host, the SDK echo, the peer proxies
(FastMCP's and mcp-proxy)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
from procs import Proc, Processes, free_port, wait_http

__all__ = [
    "RunningHost",
    "Visitor",
    "bare_host",
    "start_echo_http",
    "start_fastmcp_proxy",
    "start_host",
    "start_mcp_proxy",
]

REPO = Path(__file__).resolve().parent.parent
MCP_HOST = REPO / ".venv" / "bin" / "mcp-host"
FASTMCP_PROXY = Path(__file__).resolve().parent / "fastmcp_proxy.py"


@dataclass(frozen=True)
class Visitor:
    """A visitor session opened on a host: where its MCP endpoint is and its bearer token."""

    mcp_url: str
    token: str


@dataclass(frozen=True)
class RunningHost:
    proc: Proc
    url: str
    ready_s: float
    """Seconds from the spawn to the first `GET /healthz` answered 200."""
    readyz_s: float | None = None
    """Seconds from the spawn to the first `GET /readyz` answered 200 (when asked to wait for it:
    the first tool lists at start done, issue 31)."""

    async def open_session(self) -> Visitor:
        """`POST /v1/sessions`: a public visitor session."""
        async with httpx2.AsyncClient(timeout=30) as http:
            response = await http.post(f"{self.url}/v1/sessions", json={"visitor": {"name": "bench"}})
        if response.status_code != 201:
            raise RuntimeError(f"POST /v1/sessions answered {response.status_code}: {response.text}")
        body = response.json()
        return Visitor(mcp_url=body["mcp_url"], token=body["token"])


def _host_env(builtin_dir: Path, settings: Mapping[str, str]) -> dict[str, str]:
    """The bench's environment without any MCP_HOST_ setting, plus the builtin folder and
    `settings` (`MCP_HOST_…` variables).

    So, unless `settings` says otherwise: no MCP_HOST_DATABASE_URL (the embedded PostgreSQL),
    sandbox and tool pinning on (the defaults), and no limit to the public sessions one address
    opens a minute nor to the requests it sends a second: the bench is one client at 127.0.0.1,
    so every public session it opens is one principal, whose fair share (20 requests a second,
    issue 26) would be what the throughput legs measure (`bench/fairness.py` sets the defaults
    back).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_HOST_")}
    env["MCP_HOST_BUILTIN_DIR"] = str(builtin_dir)
    env["MCP_HOST_PRINCIPAL_PUBLIC_SESSIONS_PER_MINUTE"] = "1000000"
    env["MCP_HOST_PRINCIPAL_REQUESTS_PER_S"] = "1000000"
    env["MCP_HOST_PRINCIPAL_REQUESTS_BURST"] = "1000000"
    env.update(settings)
    return env


async def start_host(
    procs: Processes,
    name: str,
    *,
    plugins: Path,
    data_dir: Path,
    settings: Mapping[str, str] | None = None,
    readiness: bool = False,
) -> RunningHost:
    """`mcp-host serve` on a free loopback port with `plugins` as its builtin folder and the
    environment variables `settings`; returns once `/healthz` answers 200 (`readiness`: and then
    `/readyz`, which waits for the first tool lists, as a load balancer does).

    Builtins, not `--plugins`: tool pinning (on, as by default) approves a builtin's tools on
    first sight, as for an install's own plugins, while `--plugins` tools would wait for the
    owner's approval and stay hidden.
    """
    port = free_port()
    argv = [str(MCP_HOST), "serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir)]
    proc = procs.spawn(name, argv, env=_host_env(plugins, settings or {}))
    url = f"http://127.0.0.1:{port}"
    ready_s = await wait_http(proc, f"{url}/healthz", want=200)
    readyz_s = await wait_http(proc, f"{url}/readyz", want=200) if readiness else None
    return RunningHost(proc, url, ready_s, readyz_s)


@asynccontextmanager
async def bare_host(prefix: str, settings: Mapping[str, str] | None = None) -> AsyncIterator[RunningHost]:
    """A host with no plugins (an empty builtin folder) and `settings`, in a fresh folder under
    /tmp named `prefix…`; every process it started is stopped when the block ends."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    procs = Processes(workdir)
    try:
        empty = workdir / "plugins"
        empty.mkdir()
        yield await start_host(procs, "host", plugins=empty, data_dir=workdir / "d", settings=settings)
    finally:
        procs.close()


async def start_echo_http(procs: Processes, echo_server: Path) -> str:
    """The echo child served by the SDK (`streamable_http_app()` under uvicorn); its MCP URL."""
    port = free_port()
    env = dict(os.environ, ECHO_TOOL_NAME="echo")
    proc = procs.spawn("echo-http", [sys.executable, str(echo_server), "--http", str(port)], env=env)
    url = f"http://127.0.0.1:{port}/mcp"
    await wait_http(proc, url)
    return url


async def start_fastmcp_proxy(procs: Processes, fastmcp_python: Path, echo_server: Path, tag: str) -> str:
    """FastMCP's proxy (in its own venv) in front of the echo child over stdio; its MCP URL."""
    port = free_port()
    argv = [str(fastmcp_python), str(FASTMCP_PROXY), str(port), sys.executable, str(echo_server)]
    proc = procs.spawn(f"fastmcp-proxy-{tag}", argv, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}/mcp"
    await wait_http(proc, url)
    return url


async def start_mcp_proxy(procs: Processes, mcp_proxy: Path, echo_server: Path, tag: str) -> str:
    """`mcp-proxy` (PyPI, its own venv) in front of the echo child over stdio; its MCP URL.

    The peer as its README runs it: `mcp-proxy --port P -- command args`, streamable HTTP at
    `/mcp` (stateful, JSON answers). It starts the child once, with the host's python, and every
    HTTP session shares that one stdio session. It is built on the SDK v1 (mcp 1.x), which speaks
    the 2025-11-25 era only.
    """
    port = free_port()
    argv = [
        str(mcp_proxy),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "WARNING",
        "--env",
        "ECHO_TOOL_NAME",
        "echo",
        "--cwd",
        str(echo_server.parent),
        "--",
        sys.executable,
        str(echo_server),
    ]
    proc = procs.spawn(f"mcp-proxy-{tag}", argv, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}/mcp"
    await wait_http(proc, f"http://127.0.0.1:{port}/status", want=200)
    return url
