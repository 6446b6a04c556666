"""Installing a plugin on a running host (issue 15, "Measured"): how long until its tools are
pending, and whether the host keeps serving other sessions meanwhile.

Legs (one host, sandbox on, embedded PostgreSQL, tool pinning on, the echo child as a builtin):
  p  owner door `plugin_add {source}` until it answers with the plugin's tools pending (the
     answer comes after the host has listed them for the owner's review); `tools_pending` is
     checked to hold them, then `plugin_remove {id, purge}` before the next run. Sources:
     local  `npm:@tiny-test/shout-server`, npm-packed from tests/fixtures/packages/tiny-node and
            served by a registry on 127.0.0.1 the bench runs (npm's `registry` pointed at it):
            offline, always;
     memory `npm:@modelcontextprotocol/server-memory@2026.8.31` (the pin of
            scripts/install-ecosystem) from registry.npmjs.org, skipped with the reason when it
            cannot be reached.
     npm's cache is a fresh folder of the bench's, so a source's first run downloads and later
     ones do not; the first run and the median are reported.
  q  meanwhile: `--visitors` public visitor sessions each call the builtin `echo` in a loop (a
     call, then 10 ms); their calls' p50/p99 in the `--window` seconds before each `plugin_add`
     and during it (calls started while it ran), over all runs of a source, and during/before.
  r  `mcp-host plugin add` (the command line, no host) of the local source: wall time, a fresh
     data directory per run.
Results go to bench-results/install.json. Run by `scripts/bench`; `--quick` for fewer runs.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import yaml
from fixtures import ECHO_PLUGIN
from legs import call_echo, http_client
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from procs import Processes
from servers import MCP_HOST, REPO, start_host

RESULTS = REPO / "bench-results" / "install.json"
TINY_NODE = REPO / "tests" / "fixtures" / "packages" / "tiny-node"
LOCAL_SOURCE = "npm:@tiny-test/shout-server"
MEMORY_SOURCE = "npm:@modelcontextprotocol/server-memory@2026.8.31"  # scripts/install-ecosystem's pin
NPM_REGISTRY = "https://registry.npmjs.org/"
OWNER_PATH = "/v1/owner/mcp"
ERA = "2026-07-28"
PAUSE_S = 0.01  # between a visitor's calls


def _plugins(workdir: Path) -> Path:
    """A builtin folder with the echo child (`bench.echo`, tool `echo`), shared."""
    dest = workdir / "plugins" / "echo"
    shutil.copytree(ECHO_PLUGIN, dest, ignore=shutil.ignore_patterns("__pycache__"))
    manifest: dict[str, Any] = yaml.safe_load((ECHO_PLUGIN / "manifest.yaml").read_text())
    manifest |= {"id": "bench.echo", "visitor_tools": ["echo"]}
    manifest["transport"]["env"] = {"ECHO_TOOL_NAME": "echo"}
    (dest / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return dest.parent


def _npm_pack(workdir: Path) -> Path:
    """`npm pack` of tiny-node (as tests/plugins/packages.py makes it); the .tgz's path."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed (Node.js 20+ with npm)")
    work = workdir / "tiny-node"
    shutil.copytree(TINY_NODE, work)
    done = subprocess.run(
        [npm, "pack", "--pack-destination", str(workdir), "--loglevel=error"],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return workdir / done.stdout.strip().splitlines()[-1]


@contextmanager
def local_registry(tarball: Path) -> Iterator[str]:
    """An npm registry on 127.0.0.1 holding one package, tiny-node's tarball; its URL."""
    meta = json.loads((TINY_NODE / "package.json").read_text())
    data = tarball.read_bytes()
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    version = {
        **meta,
        "dist": {
            "tarball": f"{url}{tarball.name}",
            "shasum": hashlib.sha1(data).hexdigest(),  # noqa: S324 - npm's own field
            "integrity": "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode(),
        },
    }
    packument = json.dumps(
        {"name": meta["name"], "dist-tags": {"latest": meta["version"]}, "versions": {meta["version"]: version}}
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = urllib.parse.unquote(self.path.split("?")[0]).lstrip("/")
            body, kind = (
                (packument, "application/json")
                if path == meta["name"]
                else (data, "application/octet-stream")
                if path == tarball.name
                else (b"{}", "application/json")
            )
            self.send_response(200 if body != b"{}" else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def npm_reachable() -> str | None:
    """None when the npm registry answers for server-memory; otherwise why not."""
    try:
        with urllib.request.urlopen(f"{NPM_REGISTRY}@modelcontextprotocol%2fserver-memory", timeout=10) as answer:
            return None if answer.status == 200 else f"registry.npmjs.org answered {answer.status}"
    except OSError as exc:
        return f"registry.npmjs.org cannot be reached ({type(exc).__name__})"


def _ms(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    if not ordered:
        return {"n": 0}
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 2),
    }


class Visitors:
    """Visitor sessions calling `echo` in a loop; each call's start (perf_counter) and latency."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []
        self.running = True

    async def loop(self, client: Client) -> None:
        op = call_echo(client, "echo")
        while self.running:
            started = time.perf_counter()
            await op()
            self.calls.append((started, time.perf_counter() - started))
            await anyio.sleep(PAUSE_S)

    def between(self, begin: float, end: float) -> list[float]:
        return [took for started, took in self.calls if begin <= started < end]


async def _owner_call(owner: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await owner.call_tool(tool, arguments)
    if result.is_error or result.structured_content is None:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise RuntimeError(f"owner {tool} {arguments} failed: {text[:300]}")
    return dict(result.structured_content)


async def _installs(owner: Client, visitors: Visitors, source: str, runs: int, window_s: float) -> dict[str, Any]:
    """`runs` times: a window of visitor calls, `plugin_add`, checks, `plugin_remove`."""
    took: list[float] = []
    before: list[float] = []
    during: list[float] = []
    pending: list[str] = []
    for _ in range(runs):
        begin = time.perf_counter()
        await anyio.sleep(window_s)
        started = time.perf_counter()
        added = await _owner_call(owner, "plugin_add", source=source)
        ended = time.perf_counter()
        took.append(ended - started)
        before += visitors.between(begin, started)
        during += visitors.between(started, ended)
        pending = list(added["pending_tools"])
        review = await _owner_call(owner, "tools_pending")
        listed = {e["tool"] for e in review["pending"] if e["capability"] == added["capability"]}
        if not pending or not set(pending) <= listed:
            raise RuntimeError(f"{source}: pending {pending}, tools_pending lists {sorted(listed)}")
        await _owner_call(owner, "plugin_remove", id=added["capability"], purge=True)
    b, d = _ms(before), _ms(during)
    return {
        "source": source,
        "runs_s": [round(t, 2) for t in took],
        "first_s": round(took[0], 2),
        "median_s": round(statistics.median(took), 2),
        "pending_tools": len(pending),
        "calls_before": b,
        "calls_during": d,
        "p99_ratio": round(d["p99_ms"] / b["p99_ms"], 2) if d["n"] and b["n"] else None,
    }


async def bench(args: argparse.Namespace, procs: Processes, workdir: Path, registry: str) -> dict[str, Any]:
    settings = _npm_env(workdir, registry)
    data_dir = workdir / "d"
    host = await start_host(procs, "host-install", plugins=_plugins(workdir), data_dir=data_dir, settings=settings)
    result: dict[str, Any] = {"host_ready_s": round(host.ready_s, 2)}
    token = (data_dir / "owner-token").read_text().strip()
    visitors = Visitors()
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300))
        )
        owner = await stack.enter_async_context(
            Client(streamable_http_client(f"{host.url}{OWNER_PATH}", http_client=http), cache=None)
        )
        clients = []
        for _ in range(args.visitors):
            visitor = await host.open_session()
            clients.append(await http_client(stack, visitor.mcp_url, ERA, visitor.token))
            await call_echo(clients[-1], "echo")()
        async with anyio.create_task_group() as tg:
            for client in clients:
                tg.start_soon(visitors.loop, client)
            result["p_local"] = await _installs(owner, visitors, LOCAL_SOURCE, args.runs, args.window)
            why = npm_reachable()
            if why is not None:
                result["p_memory"] = {"source": MEMORY_SOURCE, "skipped": why}
            else:
                result["p_memory"] = await _installs(owner, visitors, MEMORY_SOURCE, args.runs, args.window)
            visitors.running = False
    return result


def _npm_env(workdir: Path, registry: str) -> dict[str, str]:
    """npm's settings, from the environment the host passes on to it: the local registry for
    the @tiny-test scope only (every other package from npm's default registry), and a cache
    of the bench's own (so each source's first install downloads)."""
    return {"npm_config_@tiny-test:registry": registry, "npm_config_cache": str(workdir / "npm-cache")}


def cli_add(workdir: Path, registry: str, runs: int) -> dict[str, Any]:
    """`mcp-host plugin add LOCAL_SOURCE --data-dir D`: wall time per run, each in a fresh D."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_HOST_")}
    env |= _npm_env(workdir, registry)
    took: list[float] = []
    for i in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [str(MCP_HOST), "plugin", "add", LOCAL_SOURCE, "--data-dir", str(workdir / f"cli-{i}")],
            env=env,
            check=True,
            capture_output=True,
            timeout=300,
        )
        took.append(time.perf_counter() - started)
    return {"runs_s": [round(t, 2) for t in took], "median_s": round(statistics.median(took), 2)}


def _print(result: dict[str, Any]) -> None:
    print("[bench] plugin installs on a running host (owner door plugin_add -> tools pending)")
    for key, label in (("p_local", "local tarball"), ("p_memory", "server-memory")):
        p = result[key]
        if "skipped" in p:
            print(f"  p {label:14} skipped: {p['skipped']}")
            continue
        print(
            f"  p {label:14} median {p['median_s']:6.2f} s  first {p['first_s']:6.2f} s  "
            f"runs {p['runs_s']}  ({p['pending_tools']} tools pending)"
        )
        b, d = p["calls_before"], p["calls_during"]
        print(
            f"  q   visitors' echo  before p50 {b['p50_ms']:6.1f} ms p99 {b['p99_ms']:6.1f} ms ({b['n']} calls)  "
            f"during p50 {d['p50_ms']:6.1f} ms p99 {d['p99_ms']:6.1f} ms ({d['n']} calls)  "
            f"p99 during/before {p['p99_ratio']}"
        )
    r = result["r_cli_local"]
    print(f"  r `mcp-host plugin add` local tarball: median {r['median_s']:.2f} s  runs {r['runs_s']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/install.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="installs per source (default 5)")
    p.add_argument("--visitors", type=int, default=4, help="visitor sessions calling echo (default 4)")
    p.add_argument("--window", type=float, default=3.0, help="seconds of visitor calls before each install")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (the host's log)")
    p.add_argument("--quick", action="store_true", help="3 runs per source, a 1.5 s window")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.window = 3, 1.5
    workdir = Path(tempfile.mkdtemp(prefix="mcpn-", dir="/tmp"))
    procs = Processes(workdir)
    began = time.perf_counter()
    try:
        tarball = _npm_pack(workdir)
        with local_registry(tarball) as registry:
            result = anyio.run(bench, args, procs, workdir, registry)
            result["r_cli_local"] = cli_add(workdir, registry, args.runs)
    finally:
        procs.close()
        if args.keep:
            print(f"[bench] kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    result["duration_s"] = round(time.perf_counter() - began, 1)
    result["loadavg"] = os.getloadavg()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    _print(result)
    print(f"[bench] {result['duration_s']} s; results in {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
