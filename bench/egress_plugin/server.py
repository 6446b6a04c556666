"""The bench's egress plugin: `egress_timing` times, inside the child, one large GET and then
`small` small GETs on one httpx client as it comes (trust_env: behind the host's egress proxy
when the host set the proxy variables, straight out otherwise). An https site is trusted by the
certificate the bench put in this folder (`site-cert.pem`)."""

from __future__ import annotations

import ssl
import time
from pathlib import Path
from typing import Any

import httpx2
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("bench_egress", version="1", log_level="WARNING")
CERT = Path(__file__).resolve().parent / "site-cert.pem"


@mcp.tool()
async def egress_timing(base: str, small: int) -> dict[str, Any]:
    """GET `base`/big once, then `base`/small `small` times: the nanoseconds of each part."""
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(CERT)) if base.startswith("https") else True
    async with httpx2.AsyncClient(verify=verify, timeout=60) as client:
        started = time.perf_counter_ns()
        big = await client.get(f"{base}/big")
        big_ns = time.perf_counter_ns() - started
        big.raise_for_status()
        started = time.perf_counter_ns()
        for _ in range(small):
            (await client.get(f"{base}/small")).raise_for_status()
        small_ns = time.perf_counter_ns() - started
    return {"big_ns": big_ns, "big_bytes": len(big.content), "small_ns": small_ns}


if __name__ == "__main__":
    mcp.run()
