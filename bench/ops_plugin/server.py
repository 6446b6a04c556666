"""The bench's host-op plugin: `ops_timing` runs host ops back to back inside the child and
returns each round trip (child -> host -> Postgres -> child) in nanoseconds; `ping` does
nothing, so the host's own work around a call (e.g. the quota gate) is all there is to time.
"""

from __future__ import annotations

import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_host_kit import Kit, tool_errors

mcp = MCPServer("bench_ops", version="1", log_level="WARNING")
kit = Kit(__file__)


@mcp.tool()
@tool_errors
async def ops_timing(op: str, n: int, ctx: Context) -> dict[str, Any]:
    """Run `op` (count | insert | config) n times; the round trip of each, in ns."""
    host = kit.host(ctx)
    samples: list[int] = []
    for i in range(n):
        start = time.perf_counter_ns()
        if op == "count":
            await host.store.count("things", {"k": 1})
        elif op == "insert":
            await host.store.insert("things", {"k": i})
        else:
            await host.config.get()
        samples.append(time.perf_counter_ns() - start)
    return {"ns": samples}


@mcp.tool()
def ping() -> dict[str, Any]:
    """Answer at once."""
    return {"ok": True}


if __name__ == "__main__":
    mcp.run()
