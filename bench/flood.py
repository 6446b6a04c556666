"""What a child that writes 64 MiB with no newline costs the host: the SDK's stdio client
against the host's bounded framing (docs/security.md A2). Run by `scripts/bench`.

Each side runs in a fresh process (so RSS and CPU are its own), calls the hostile test
plugin's `flood` tool once, and reports the CPU it spent, its RSS growth and how the call
ended. The child runs unsandboxed here: what is measured is the reading side. Both sides
import everything before measuring, so import costs are not counted.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from mcp_host.children.lifecycle import ChildLimits
from mcp_host.children.pool import ChildPool
from mcp_host.errors import HostError
from mcp_host.sandbox.launch import Launch

REPO = Path(__file__).resolve().parent.parent
FLOOD = REPO / "tests" / "fixtures" / "plugins" / "flood" / "server.py"
WINDOW_S = 15.0


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _sdk() -> str:
    params = StdioServerParameters(command=sys.executable, args=[str(FLOOD)], cwd=str(FLOOD.parent))
    async with Client(params, mode="legacy", read_timeout_seconds=WINDOW_S) as client:
        try:
            result = await client.call_tool("flood", {})
        except Exception as exc:  # the measurement records how the call ended, whatever it was
            return f"{type(exc).__name__}: {exc}"[:120]
        return f"result is_error={result.is_error}"


async def _host() -> str:
    limits = ChildLimits(
        start_timeout_s=10,
        idle_timeout_s=300,
        max_line_bytes=8 << 20,
        stderr_lines_per_s=20,
        stderr_line_bytes=2048,
        backoff_max_s=30,
        crash_loop_threshold=5,
        timeouts_before_recycle=3,
    )
    launch = Launch(argv=[sys.executable, str(FLOOD)], cwd=FLOOD.parent, env={"PATH": "/usr/bin:/bin"})
    async with ChildPool(limits, max_children=4) as pool:
        child = pool.child("flood", lambda: launch)
        try:
            await child.call_tool("flood", {}, {}, timeout_s=WINDOW_S)
        except HostError as exc:
            return f"{exc.code}: {exc.message}"
        return "answered"


def measure(side: str) -> dict[str, Any]:
    rss0, cpu0, t0 = _peak_rss(), _cpu(), time.monotonic()
    outcome = anyio.run(_sdk if side == "sdk" else _host)
    return {
        "side": side,
        "outcome": outcome,
        "cpu_s": round(_cpu() - cpu0, 3),
        "peak_rss_growth_mib": round((_peak_rss() - rss0) / 2**20, 1),
        "wall_s": round(time.monotonic() - t0, 2),
    }


def main() -> None:
    if len(sys.argv) == 2:
        print(json.dumps(measure(sys.argv[1])))
        return
    rows = []
    for side in ("sdk", "host"):
        done = subprocess.run(
            [sys.executable, __file__, side], capture_output=True, text=True, timeout=WINDOW_S + 60, check=True
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("\nchild writes 64 MiB with no newline (one call, unsandboxed child):")
    print(f"{'reader':<28}{'host CPU s':>11}{'peak RSS +MiB':>16}{'wall s':>8}  outcome")
    names = {"sdk": "SDK stdio_client", "host": "host framing (8 MiB cap)"}
    for row in rows:
        cells = f"{row['cpu_s']:>11}{row['peak_rss_growth_mib']:>16}{row['wall_s']:>8}"
        print(f"{names[row['side']]:<28}{cells}  {row['outcome']}")
    out = REPO / "bench-results" / "flood.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
