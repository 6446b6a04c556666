"""The two servers the suite is run against, both serving the `conformance` test plugin.

- `direct_plugin`: the plugin on its own, as a streamable-HTTP server on loopback — the
  baseline (what the Python SDK alone achieves).
- `through_host`: a real host (`tests/hosting.py`: uvicorn, Postgres, bubblewrap) whose only
  plugin is that one (no builtins), a visitor session opened on it, and `shim.header_shim`
  in front of the session's endpoint to add the session's bearer token the CLI cannot send.

Each yields the MCP URL to give the suite.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio

from tests.conformance.shim import header_shim
from tests.hosting import PLUGINS, free_port, host_settings, running_host

__all__ = ["PLUGIN", "direct_plugin", "through_host"]

PLUGIN = PLUGINS / "conformance"
START_TIMEOUT_S = 30.0


async def _wait_for_port(port: int, process: anyio.abc.Process) -> None:
    with anyio.fail_after(START_TIMEOUT_S):
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"the plugin exited ({process.returncode}) before it listened")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)  # no event exists for another process starting to listen
                continue
            await stream.aclose()
            return


@asynccontextmanager
async def direct_plugin() -> AsyncIterator[str]:
    """The plugin served directly over streamable HTTP; yields its MCP URL."""
    port = free_port()
    argv = [sys.executable, "server.py", "--http", str(port)]
    quiet = subprocess.DEVNULL
    process = await anyio.open_process(argv, cwd=PLUGIN, stdin=quiet, stdout=quiet, stderr=None)
    async with process:
        try:
            await _wait_for_port(port, process)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            with anyio.move_on_after(10, shield=True):
                await process.wait()
            if process.returncode is None:
                process.kill()


@asynccontextmanager
async def through_host(tmp_path: Path, database_url: str) -> AsyncIterator[str]:
    """A visitor session of a real host whose one capability is the plugin; yields the shim's MCP URL."""
    async with header_shim() as shim:
        # The shim is where the suite connects, so its address is one the host must accept.
        allowed = [f"127.0.0.1:{shim.port}", f"localhost:{shim.port}"]
        settings = host_settings(tmp_path, database_url, ["conformance"], allowed_hosts=allowed)
        async with running_host(settings) as host:
            session = await host.new_session()
            endpoint = urlsplit(session["mcp_url"])
            assert endpoint.hostname is not None and endpoint.port is not None
            shim.route(endpoint.hostname, endpoint.port, {"Authorization": f"Bearer {session['token']}"})
            yield urlunsplit(endpoint._replace(netloc=f"127.0.0.1:{shim.port}"))
