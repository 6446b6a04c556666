"""The benchmark behind `scripts/bench`: the host's per-call overhead and tools/list latency.

Legs, all against the same trivial echo child (bench/echo_plugin), each era where it applies:
  a  SDK client -> echo child over stdio
  b  SDK client -> echo child served over streamable HTTP by the SDK (uvicorn, own process)
  c  SDK client -> the host's visitor endpoint -> echo child (sandboxed, stdio)
  d  visitor tools/list through the host over 5 warm capabilities
  e  the first visitor tools/list after a fresh host start says it is ready (/readyz 200: the
     first lists at start done; 5 capabilities)
  f  SDK client -> FastMCP's proxy (own venv) -> echo child over stdio
  p  SDK client -> mcp-proxy (PyPI, own venv; the bare pass-through peer) -> echo child over stdio;
     2025-11-25 only (mcp-proxy is built on the SDK v1, which does not speak 2026-07-28)
Each era is `mode="legacy"` (2025-11-25) and `mode="2026-07-28"`, with `cache=None`.

Order: e first (host restarts on an otherwise idle machine; the last start stays up for d),
then warm-up, then `--rounds` rounds of every a/b/c/d/f/p leg; within a round the legs take
turns in batches of 10 calls, and the order rotates each round, so machine noise lands on all
legs alike. Statistics are over all rounds' samples. Results go to
bench-results/latest.json. Every process started is stopped, on error and Ctrl-C too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, NoReturn

import anyio
import anyio.to_thread
from fixtures import PluginDirs, ensure_fastmcp_venv, ensure_mcp_proxy, make_plugins, package_version
from legs import ERAS, Leg, call_echo, http_client, list_tools, stdio_client, timed
from procs import Processes
from report import print_report, ratios, stats, target_dicts, targets
from servers import REPO, RunningHost, Visitor, start_echo_http, start_fastmcp_proxy, start_host, start_mcp_proxy

BATCH = 10
FIVE_TOOLS = {f"echo_{i}" for i in range(1, 6)}
FASTMCP_VENV = REPO / ".bench" / "fastmcp-venv"
MCP_PROXY_VENV = REPO / ".bench" / "mcp-proxy-venv"
PEERS = {"f": "FastMCP proxy", "p": "mcp-proxy"}
"""The peer proxies' leg letters and names."""
RESULTS = REPO / "bench-results" / "latest.json"


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=300, help="calls per leg per round (default 300)")
    p.add_argument("--quick", action="store_true", help="n=50 (overrides -n)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of all legs (default 3)")
    p.add_argument("--warmup", type=int, default=50, help="warm-up calls per leg (default 50)")
    p.add_argument("--starts", type=int, default=5, help="fresh host starts for leg e (default 5)")
    p.add_argument("--no-fastmcp", action="store_true", help="skip leg f")
    p.add_argument("--no-peer", action="store_true", help="skip leg p (mcp-proxy)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (logs) afterwards")
    args = p.parse_args(argv)
    if args.quick:
        args.n = 50
    return args


async def _first_lists(
    args: argparse.Namespace, procs: Processes, workdir: Path, plugins: PluginDirs
) -> tuple[list[dict[str, float]], RunningHost]:
    """Leg e: start the 5-capability host `--starts` times; time its first tools/list each time.

    The last host is left running for leg d.
    """
    runs: list[dict[str, float]] = []
    for i in range(args.starts):
        host = await start_host(
            procs,
            f"host-five-{i + 1}",
            plugins=plugins.five,
            data_dir=workdir / "data-five",
            readiness=True,
        )
        visitor = await host.open_session()
        async with AsyncExitStack() as stack:
            client = await http_client(stack, visitor.mcp_url, "2026-07-28", visitor.token)
            started = time.perf_counter()
            await list_tools(client, FIVE_TOOLS)()
            first_s = time.perf_counter() - started
        assert host.readyz_s is not None
        runs.append({"first_list_s": first_s, "host_ready_s": host.ready_s, "host_readyz_s": host.readyz_s})
        print(
            f"[bench] start {i + 1}/{args.starts}: healthy after {host.ready_s:.2f} s, ready after"
            f" {host.readyz_s:.2f} s, first tools/list {first_s:.3f} s"
        )
        if i + 1 < args.starts:
            await anyio.to_thread.run_sync(procs.stop, host.proc)
    return runs, host


async def _fastmcp_urls(procs: Processes, python: Path | None, echo_server: Path) -> dict[str, str]:
    """One FastMCP proxy per era: a proxy whose callers switch eras respawns its stdio backend.

    (FastMCP mirrors the caller's era onto the backend session; seen: ~0.9 s on the first call
    after every switch.) Steady-state latency is what leg f compares, so each era gets its own.
    """
    if python is None:
        return {}
    return {era: await start_fastmcp_proxy(procs, python, echo_server, era) for era in ERAS}


async def _peer_urls(
    procs: Processes, peers: dict[str, tuple[Path | None, str]], echo_server: Path, skipped: dict[str, str]
) -> dict[str, dict[str, str]]:
    """Each installed peer's MCP URL per era, by leg letter; a peer that does not start is
    skipped (its reason in `skipped`), not the bench. One mcp-proxy serves every era: its one
    stdio session to the child does not follow the caller's era."""
    urls: dict[str, dict[str, str]] = {}
    for letter, (path, _) in peers.items():
        if path is None:
            continue
        try:
            if letter == "f":
                urls[letter] = await _fastmcp_urls(procs, path, echo_server)
            else:
                url = await start_mcp_proxy(procs, path, echo_server, "all")
                urls[letter] = dict.fromkeys(ERAS, url)
        except RuntimeError as exc:
            skipped[letter] = f"the {PEERS[letter]} did not start: {str(exc).splitlines()[0]}"
    return urls


async def _peer_legs(
    stack: AsyncExitStack, era: str, urls: dict[str, dict[str, str]], skipped: dict[str, str]
) -> list[Leg]:
    """The peers' legs of one era. Each peer answers one call first: one that cannot serve this
    era (mcp-proxy at 2026-07-28) is skipped with its answer, not failed mid-round."""
    legs: list[Leg] = []
    for letter, by_era in urls.items():
        try:
            op = call_echo(await http_client(stack, by_era[era], era))
            await op()
        except Exception as exc:  # a peer's failure skips its leg, not the bench
            why = str(exc).splitlines()[0] if str(exc) else ""
            skipped[f"{letter}.{era}"] = f"{PEERS[letter]} failed: {type(exc).__name__}: {why}"
            continue
        legs.append(Leg(f"{letter}.{era}", f"HTTP -> {PEERS[letter]} -> echo child", era, op))
    return legs


async def _legs(
    stack: AsyncExitStack, era: str, plugins: PluginDirs, echo_url: str, one: Visitor, five: Visitor
) -> list[Leg]:
    """Legs a to d of one era, each on its own connected client (closed with `stack`)."""
    a = await stdio_client(stack, plugins.echo_server, era)
    b = await http_client(stack, echo_url, era)
    c = await http_client(stack, one.mcp_url, era, one.token)
    d = await http_client(stack, five.mcp_url, era, five.token)
    return [
        Leg(f"a.{era}", "stdio -> echo child", era, call_echo(a)),
        Leg(f"b.{era}", "HTTP -> SDK echo server", era, call_echo(b)),
        Leg(f"c.{era}", "HTTP -> host -> echo child", era, call_echo(c)),
        Leg(f"d.{era}", "tools/list via host, 5 warm caps", era, list_tools(d, FIVE_TOOLS)),
    ]


async def bench(
    args: argparse.Namespace,
    procs: Processes,
    workdir: Path,
    plugins: PluginDirs,
    peers: dict[str, tuple[Path | None, str]],
) -> dict[str, Any]:
    """Run every leg; the result dict (minus the bits `main` adds).

    `peers`, by leg letter: FastMCP's venv python and the `mcp-proxy` command (None: skip that
    leg), each with a note saying why or which.
    """
    runs, five_host = await _first_lists(args, procs, workdir, plugins)
    echo_url = await start_echo_http(procs, plugins.echo_server)
    one_host = await start_host(procs, "host-one", plugins=plugins.one, data_dir=workdir / "data-one")
    skipped = {letter: note for letter, (path, note) in peers.items() if path is None}
    peer_urls = await _peer_urls(procs, peers, plugins.echo_server, skipped)
    one_visitor, five_visitor = await one_host.open_session(), await five_host.open_session()

    async with AsyncExitStack() as stack:
        legs: list[Leg] = []
        for era in ERAS:
            legs += await _legs(stack, era, plugins, echo_url, one_visitor, five_visitor)
            legs += await _peer_legs(stack, era, peer_urls, skipped)

        print(f"[bench] warm-up: {args.warmup} calls on each of {len(legs)} legs")
        for leg in legs:
            await timed(leg.op, args.warmup)
        for r in range(args.rounds):
            shift = (r * len(legs)) // args.rounds
            order = legs[shift:] + legs[:shift]
            print(f"[bench] round {r + 1}/{args.rounds}: {args.n} calls on each leg, starting with {order[0].key}")
            # Legs take turns in batches of BATCH calls, so a burst of machine noise (this is a
            # shared 2-core VM) lands on every leg alike instead of on whichever ran then.
            for done in range(0, args.n, BATCH):
                for leg in order:
                    leg.samples += await timed(leg.op, min(BATCH, args.n - done))

    by_key = {leg.key: leg for leg in sorted(legs, key=lambda leg: (leg.key[0], ERAS.index(leg.era)))}
    first_s = [r["first_list_s"] for r in runs]
    return {
        "legs": {
            k: {
                "title": leg.title,
                "era": leg.era,
                **stats(leg.samples, rounds=args.rounds),
                "samples_us": [s // 1000 for s in leg.samples],
            }
            for k, leg in by_key.items()
        },
        "skipped": skipped,
        "ratios": ratios(by_key),
        "first_list": {
            "samples_s": first_s,
            "median_s": statistics.median(first_s) if first_s else None,
            "host_ready_s": [r["host_ready_s"] for r in runs],
            "host_readyz_s": [r["host_readyz_s"] for r in runs],
            "era": "2026-07-28",
        },
        "targets": target_dicts(targets(by_key, first_s, skipped)),
    }


def _interrupt(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    began = time.perf_counter()
    # Short and under /tmp: the embedded PostgreSQL's unix socket path must fit in 107 bytes.
    workdir = Path(tempfile.mkdtemp(prefix="mcpb-", dir="/tmp"))
    procs = Processes(workdir)
    load_before = os.getloadavg()
    try:
        plugins = make_plugins(workdir)
        fastmcp, fastmcp_note = (None, "--no-fastmcp") if args.no_fastmcp else ensure_fastmcp_venv(FASTMCP_VENV)
        mcp_proxy, mcp_proxy_note = (None, "--no-peer") if args.no_peer else ensure_mcp_proxy(MCP_PROXY_VENV)
        print(f"[bench] workdir {workdir}; FastMCP: {fastmcp_note}; mcp-proxy: {mcp_proxy_note}")
        peers = {"f": (fastmcp, fastmcp_note), "p": (mcp_proxy, mcp_proxy_note)}
        result = anyio.run(bench, args, procs, workdir, plugins, peers)
    except KeyboardInterrupt:
        print("\n[bench] interrupted; stopping everything it started")
        return 130
    finally:
        procs.close()
        if args.keep:
            print(f"[bench] kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    result |= {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "duration_s": round(time.perf_counter() - began, 1),
        "config": {
            "n_per_round": args.n,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "starts": args.starts,
            "host": "mcp-host serve, embedded PostgreSQL, sandbox on (bubblewrap)",
            "builtins": "the bench's echo plugins are the host's builtin folder (so tool pinning, on, approves them)",
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "versions": {
            "mcp": package_version(Path(sys.executable), "mcp"),
            "fastmcp": package_version(fastmcp, "fastmcp") if fastmcp else None,
            "fastmcp_venv_mcp": package_version(fastmcp, "mcp") if fastmcp else None,
            "mcp_proxy": package_version(mcp_proxy.with_name("python"), "mcp-proxy") if mcp_proxy else None,
            "mcp_proxy_venv_mcp": package_version(mcp_proxy.with_name("python"), "mcp") if mcp_proxy else None,
        },
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print_report(result)
    print(f"[bench] {result['duration_s']} s; results in {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
