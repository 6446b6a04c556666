"""The whole way out, end to end: a Python child in a real bubblewrap sandbox (its own network
namespace, loopback only), `urllib` with the `HTTP_PROXY` the sandbox sets, the bridge at
127.0.0.1:3128 inside, the gate's unix socket, the proxy, and a uvicorn server on the host's
loopback. An allowed url is fetched; a name outside the egress gets the proxy's 403 line; the
host's loopback is not reachable directly."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_host.egress import EgressCaps, EgressProxy, HostsFileResolver, SystemResolver
from mcp_host.plugins import EgressPolicy
from mcp_host.sandbox.bwrap import Limits, SandboxSpec, build_command
from mcp_host.sandbox.seccomp import program
from tests.egress.loopback import short_folder, write_hosts
from tests.hosting import free_port, serving
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

MiB = 1024 * 1024
LIMITS = Limits(memory_bytes=512 * MiB, max_processes=64, max_open_files=256, cpu_seconds=60, max_file_bytes=16 * MiB)
SECCOMP_FD = 3
FETCH = """
import json, sys, urllib.error, urllib.request
out = []
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for url in sys.argv[1:]:
    opener = direct if url.startswith("direct:") else urllib.request.build_opener()
    try:
        with opener.open(url.removeprefix("direct:"), timeout=20) as response:
            out.append([response.status, response.read().decode()])
    except urllib.error.HTTPError as refused:
        out.append([refused.code, refused.read().decode()])
    except OSError as failed:
        out.append(["failed", type(failed).__name__])
print(json.dumps(out))
"""


async def _hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = f"hello from {scope['path']}".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def test_a_sandboxed_child_reaches_its_egress_through_the_bridge_and_nothing_else(tmp_path: Path) -> None:
    port = free_port()
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    with tempfile.TemporaryFile() as seccomp:
        seccomp.write(program())
        seccomp.seek(0)
        with short_folder() as folder:
            resolver = HostsFileResolver(write_hosts(tmp_path), SystemResolver())
            async with serving(_hello, port, lifespan="off"), EgressProxy(folder, resolver) as running:
                policy = EgressPolicy.of([f"site.example.test:{port}"], allow_private=["site.example.test"])
                caps = EgressCaps(connections=8, bytes_per_minute=10 * MiB, idle_s=30.0)
                gate = await running.open("web", None, policy, caps)
                spec = SandboxSpec(
                    plugin_dir=plugin,
                    command=sys.executable,
                    args=(
                        "-c",
                        FETCH,
                        f"http://site.example.test:{port}/page",
                        f"http://evil.example.test:{port}/",
                        f"direct:http://127.0.0.1:{port}/",
                    ),
                    env={},
                    limits=LIMITS,
                    extra_ro_binds=tuple(dict.fromkeys((Path(sys.prefix), Path(sys.base_prefix)))),
                    egress_socket=gate.path,
                )
                argv = build_command(spec, seccomp_fd=SECCOMP_FD)
                with anyio.fail_after(60):
                    done = await anyio.run_process(
                        ["/bin/sh", "-c", f'exec "$@" {SECCOMP_FD}<&0', "sh", *argv],
                        stdin=seccomp.fileno(),
                        check=False,
                        stderr=subprocess.PIPE,
                    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert json.loads(done.stdout) == [
        [200, "hello from /page"],
        [403, f"evil.example.test:{port} is not in the plugin's egress\n"],
        ["failed", "URLError"],  # the sandbox's own loopback: connection refused
    ]
    assert gate.stats.connections_total == 2
