"""Per-session instances (issue 14): what a visitor's own child costs, against a shared child.

Legs (one host, sandbox on, embedded PostgreSQL, default settings):
  i  shared child: `tools/call echo` through a visitor session to a child every session shares
     (`instances: shared`), warm — the same measurement as leg c of bench/run.py, repeated here
     beside the per-session legs so the three compare in one run.
  j  per-session child, cold: a new visitor session's first `tools/call` (its own instance
     starts: bwrap, the interpreter, initialize), one new session per sample.
  k  per-session child, warm: later calls of those sessions, on their running instances.
  m  memory per idle per-session instance, Python (the echo child) and Node
     (@modelcontextprotocol/server-memory from .cache/ecosystem, when installed): N sessions
     each start their instance; the sandbox's processes (bwrap, prlimit, the server) are summed
     per instance, RSS and PSS (PSS splits shared pages fairly: what an instance really adds).
     "Fit in 1 GiB" is 1 GiB over the median PSS; each session's first call (its instance
     starting) is timed too. The instances of leg j count among the Python ones.
Results go to bench-results/instances.json. Run by `scripts/bench`; `--quick` for fewer samples.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import psutil
import yaml
from fixtures import ECHO_PLUGIN
from legs import call_echo, http_client, timed
from procs import Processes
from servers import REPO, RunningHost, start_host

RESULTS = REPO / "bench-results" / "instances.json"
NODE_MEMORY = REPO / ".cache" / "ecosystem" / "plugins" / "memory"
GiB = 1024**3
MiB = 1024**2
ERA = "2026-07-28"


def _plugins(workdir: Path) -> Path:
    """A plugins root: the echo child shared (`bench.shared`, tool `echo_shared`) and per session
    (`bench.own`, tool `echo_own`), and the Node memory server when it is installed."""
    root = workdir / "plugins"
    for plugin_id, tool, instances in (
        ("bench.shared", "echo_shared", "shared"),
        ("bench.own", "echo_own", "per_session"),
    ):
        dest = root / tool
        shutil.copytree(ECHO_PLUGIN, dest, ignore=shutil.ignore_patterns("__pycache__"))
        manifest: dict[str, Any] = yaml.safe_load((ECHO_PLUGIN / "manifest.yaml").read_text())
        manifest |= {"id": plugin_id, "visitor_tools": [tool], "instances": instances}
        manifest["transport"]["env"] = {"ECHO_TOOL_NAME": tool}
        (dest / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    if (NODE_MEMORY / "node_modules").is_dir():
        (root / "memory").symlink_to(NODE_MEMORY)
    return root


def _ms(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered) / 1e6, 3),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] / 1e6, 3),
    }


def _sandboxes(host_pid: int, marker: str) -> list[dict[str, float]]:
    """Each sandbox under the host whose processes' command lines contain `marker`: its RSS and
    PSS summed over every process in it (bwrap's two, prlimit's exec, the server)."""
    out: list[dict[str, float]] = []
    host = psutil.Process(host_pid)
    for top in host.children():  # each sandbox's outer bwrap is a direct child of the host
        try:
            procs = [top, *top.children(recursive=True)]
            if not any(marker in " ".join(p.cmdline()) for p in procs):
                continue
            infos = [p.memory_full_info() for p in procs]
        except psutil.Error:
            continue
        out.append({"rss": sum(i.rss for i in infos), "pss": sum(i.pss for i in infos)})
    return out


async def _cold_and_warm(host: RunningHost, sessions: int, warm_calls: int) -> tuple[list[int], list[int]]:
    cold: list[int] = []
    warm: list[int] = []
    async with AsyncExitStack() as stack:
        for _ in range(sessions):
            visitor = await host.open_session()
            client = await http_client(stack, visitor.mcp_url, ERA, visitor.token)
            await client.list_tools()
            cold += await timed(call_echo(client, "echo_own"), 1)
            warm += await timed(call_echo(client, "echo_own"), warm_calls)
    return cold, warm


async def _memory(host: RunningHost, tool: str, marker: str, sessions: int) -> dict[str, Any]:
    """Open `sessions` sessions, start each one's instance with one call, measure, end them."""
    first_ns: list[int] = []
    async with AsyncExitStack() as stack:
        for _ in range(sessions):
            visitor = await host.open_session()
            client = await http_client(stack, visitor.mcp_url, ERA, visitor.token)
            await client.list_tools()
            started = time.perf_counter_ns()
            if tool == "read_graph":
                result = await client.call_tool(tool, {})
                if result.is_error:
                    raise RuntimeError(f"{tool} answered {result!r}")
            else:
                await call_echo(client, tool)()
            first_ns.append(time.perf_counter_ns() - started)
        await anyio.sleep(1.0)  # let each instance settle after its first call
        found = _sandboxes(host.proc.popen.pid, marker)
    if not found:
        raise RuntimeError(f"no sandbox of {marker!r} found under the host")
    pss = statistics.median(s["pss"] for s in found)
    return {
        "first_call_ms_median": round(statistics.median(first_ns) / 1e6, 1),
        "instances": len(found),
        "rss_mib_median": round(statistics.median(s["rss"] for s in found) / MiB, 1),
        "pss_mib_median": round(pss / MiB, 1),
        "fit_in_1_gib": int(GiB // pss),
    }


async def bench(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    plugins = _plugins(workdir)
    # The per-session caps are raised above the sessions the memory legs open at once: host-wide
    # and, since every session here is the bench's one address (one principal), that principal's
    # share and its starts a minute (issue 26: 4 and 4 by default, which refuse the fifth cold start).
    cap = str(max(64, args.sessions + 8))
    settings = {
        "MCP_HOST_MAX_SESSION_INSTANCES": cap,
        "MCP_HOST_PRINCIPAL_SESSION_INSTANCES": cap,
        "MCP_HOST_PRINCIPAL_INSTANCE_STARTS_PER_MINUTE": "1000000",
    }
    host = await start_host(procs, "host-instances", plugins=plugins, data_dir=workdir / "d", settings=settings)
    result: dict[str, Any] = {}
    async with AsyncExitStack() as stack:
        visitor = await host.open_session()
        shared = await http_client(stack, visitor.mcp_url, ERA, visitor.token)
        await timed(call_echo(shared, "echo_shared"), 50)
        result["i_shared_warm"] = _ms(await timed(call_echo(shared, "echo_shared"), args.n))
    cold, warm = await _cold_and_warm(host, args.cold, max(1, args.n // args.cold))
    result["j_per_session_cold"] = _ms(cold)
    result["k_per_session_warm"] = _ms(warm)
    result["m_python"] = await _memory(host, "echo_own", "server.py", args.sessions)
    if (plugins / "memory").exists():
        result["m_node"] = await _memory(host, "read_graph", "server-memory", args.sessions)
    else:
        result["m_node"] = {"skipped": "scripts/install-ecosystem has not installed the Node servers"}
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/instances.py", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=300, help="warm calls per leg (default 300)")
    p.add_argument("--cold", type=int, default=20, help="sessions whose first call is timed (default 20)")
    p.add_argument("--sessions", type=int, default=20, help="idle instances measured per runtime (default 20)")
    p.add_argument("--quick", action="store_true", help="n=100, 8 cold sessions, 8 idle instances")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.cold, args.sessions = 100, 8, 8
    workdir = Path(tempfile.mkdtemp(prefix="mcpi-", dir="/tmp"))
    procs = Processes(workdir)
    began = time.perf_counter()
    try:
        result = anyio.run(bench, args, procs, workdir)
    finally:
        procs.close()
        shutil.rmtree(workdir, ignore_errors=True)
    result["duration_s"] = round(time.perf_counter() - began, 1)
    result["loadavg"] = os.getloadavg()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    shared, cold, warm = result["i_shared_warm"], result["j_per_session_cold"], result["k_per_session_warm"]
    print("[bench] per-session instances (2026-07-28 era, medians)")
    print(f"  i shared child, warm call         {shared['median_ms']:8.2f} ms")
    print(f"  j per-session child, first call   {cold['median_ms']:8.2f} ms  (cold: its instance starts)")
    ratio = warm["median_ms"] / shared["median_ms"]
    print(f"  k per-session child, warm call    {warm['median_ms']:8.2f} ms  (k/i {ratio:.2f})")
    for key, label in (("m_python", "Python (echo)"), ("m_node", "Node (server-memory)")):
        m = result[key]
        if "skipped" in m:
            print(f"  m {label}: skipped, {m['skipped']}")
        else:
            print(
                f"  m {label}: first call {m['first_call_ms_median']} ms; "
                f"{m['instances']} idle instances, RSS {m['rss_mib_median']} MiB, "
                f"PSS {m['pss_mib_median']} MiB each; {m['fit_in_1_gib']} fit in 1 GiB"
            )
    print(f"[bench] {result['duration_s']} s; results in {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
