"""A node's call to a parent capability against the same call made on the parent directly
(issue 17, item 2): both medians, same run.

Two real hosts (`mcp-host serve`, each with its own embedded PostgreSQL) on loopback: the parent
with the bench's echo capability; the node started with `MCP_HOST_PARENT_URL` and a grant's
token (`grant_create` on the parent's owner door), its owner approving the lent tool and letting
its public role use it. Legs, `-n` calls each, one after another, 2026-07-28 era:
- `p_parent_direct`: a visitor of the parent calls `echo`;
- `q_node_to_parent`: a visitor of the node calls the same `echo`, which the node forwards to the
  parent's `/v1/node/mcp/bench.echo`, decided there (grant, rules, budget spent in one UPDATE).
Prints the medians and their difference; writes bench-results/node.json.
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
from fixtures import ECHO_PLUGIN
from legs import call_echo, http_client, timed
from procs import Processes
from servers import REPO, start_host

RESULTS = REPO / "bench-results" / "node.json"
ERA = "2026-07-28"


def _ms(samples_ns: list[int]) -> dict[str, float]:
    ms = sorted(s / 1e6 for s in samples_ns)
    return {"median_ms": round(statistics.median(ms), 3), "p90_ms": round(ms[int(len(ms) * 0.9)], 3), "n": len(ms)}


async def _owner(stack: AsyncExitStack, url: str, data_dir: Path) -> Any:
    token = (data_dir / "owner-token").read_text().strip()
    return await http_client(stack, f"{url}/v1/owner/mcp", ERA, token)


async def _tool(client: Any, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    if result.is_error:
        raise RuntimeError(f"{name} answered {result!r}")
    return dict(result.structured_content or {})


async def bench(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    plugins = workdir / "plugins"
    shutil.copytree(ECHO_PLUGIN, plugins / "echo")
    empty = workdir / "empty"
    empty.mkdir()
    parent = await start_host(procs, "parent", plugins=plugins, data_dir=workdir / "p")
    result: dict[str, Any] = {}
    async with AsyncExitStack() as stack:
        parent_owner = await _owner(stack, parent.url, workdir / "p")
        grant = await _tool(parent_owner, "grant_create", capabilities=["bench.echo"], budget={"calls": 10_000_000})
        settings = {"MCP_HOST_PARENT_URL": parent.url, "MCP_HOST_PARENT_TOKEN": grant["token"]}
        node = await start_host(procs, "node", plugins=empty, data_dir=workdir / "n", settings=settings)
        node_owner = await _owner(stack, node.url, workdir / "n")
        for pending in (await _tool(node_owner, "tools_pending"))["pending"]:
            await _tool(node_owner, "tool_approve", capability=pending["capability"], tool=pending["tool"])
        await _tool(node_owner, "role_put", id="public", capabilities=["bench.echo"])
        direct_visitor = await parent.open_session()
        direct = await http_client(stack, direct_visitor.mcp_url, ERA, direct_visitor.token)
        node_visitor = await node.open_session()
        via_node = await http_client(stack, node_visitor.mcp_url, ERA, node_visitor.token)
        for client in (direct, via_node):
            await timed(call_echo(client), args.warmup)
        # Interleaved rounds, so both legs see the same machine load.
        p: list[int] = []
        q: list[int] = []
        for _ in range(args.rounds):
            p += await timed(call_echo(direct), args.n // args.rounds)
            q += await timed(call_echo(via_node), args.n // args.rounds)
        result["p_parent_direct"] = _ms(p)
        result["q_node_to_parent"] = _ms(q)
        listed = await _tool(parent_owner, "grants_list")
        result["grant_calls_used"] = listed["grants"][0]["budget"]["used"]
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/node.py", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=1000, help="calls per leg (default 1000)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="n=200")
    args = p.parse_args(argv)
    if args.quick:
        args.n = 200
    workdir = Path(tempfile.mkdtemp(prefix="mcpn-", dir="/tmp"))
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
    direct, node = result["p_parent_direct"], result["q_node_to_parent"]
    print("[bench] a node's call to its parent vs the same call on the parent (2026-07-28 era, medians)")
    print(f"  p parent, direct                  {direct['median_ms']:8.2f} ms  (p90 {direct['p90_ms']:.2f})")
    print(f"  q node -> parent                  {node['median_ms']:8.2f} ms  (p90 {node['p90_ms']:.2f})")
    print(f"  q - p                             {node['median_ms'] - direct['median_ms']:8.2f} ms")
    print(
        f"[bench] {result['duration_s']} s; grant calls used {result['grant_calls_used']};"
        " results in bench-results/node.json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
