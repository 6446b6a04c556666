"""Soak (issue 18): does the host's memory stay flat over many calls?

One host (the bench's echo capability, embedded PostgreSQL, sandbox on), `--sessions` visitor
sessions split between the eras (2025-11-25 and 2026-07-28), one SDK client each with
`--in-flight` calls at a time, `tools/call echo` until `--calls` calls are made. The host
process's RSS is read every `--every` calls. The first interval is warm-up; the target is every
later reading within +-5 MB of the first reading after warm-up. Also: errors, calls/s per
interval, and the RSS slope over the post-warm-up readings (MB per 10,000 calls).
Default 20,000 calls; `--long` 100,000 (the issue's soak); `--quick` 5,000, read every 1,000.
`--era legacy` or `--era 2026-07-28` puts every session in one era (to tell which one grows).
Results go to bench-results/soak.json. Run by `scripts/bench` (`--long` passes on to this leg only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from fixtures import make_plugins
from legs import ERAS, call_echo, http_client
from load import MiB, Run, in_flight, rss_mib, run_leg, said_where
from procs import Processes
from servers import REPO, start_host

RESULTS = REPO / "bench-results" / "soak.json"
MAX_DRIFT_MB = 5.0
MB = 1e6


def _slope_mb_per_10k(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of (calls, RSS MiB) in MB per 10,000 calls."""
    if len(points) < 2:
        return None
    calls = [c for c, _ in points]
    rss = [r * MiB / MB for _, r in points]
    return round(statistics.linear_regression(calls, rss).slope * 10_000, 3)


async def bench(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    plugins = make_plugins(workdir, count=1)
    host = await start_host(procs, "host-soak", plugins=plugins.one, data_dir=workdir / "d")
    pid = host.proc.popen.pid
    readings: list[dict[str, Any]] = [{"calls": 0, "rss_mib": rss_mib(pid)}]
    total = Run()
    async with AsyncExitStack() as stack:
        slots = []
        for i in range(args.sessions):
            eras = ERAS if args.era == "both" else (args.era,)
            era = eras[i % len(eras)]
            visitor = await host.open_session()
            op = call_echo(await http_client(stack, visitor.mcp_url, era, visitor.token))
            slots += [op] * args.in_flight
        done = 0
        while done < args.calls:
            run = await in_flight(slots, min(args.every, args.calls - done))
            done += args.every
            total.merge(run)
            interval = run.summary()
            readings.append({"calls": min(done, args.calls), "rss_mib": rss_mib(pid), "interval": interval})
            print(
                f"[bench] soak: {readings[-1]['calls']:>7} calls, host RSS {readings[-1]['rss_mib']:7.1f} MiB, "
                f"{interval['calls_per_s']:.0f} calls/s, p99 {interval['p99_ms']} ms, {interval['errors']} errors"
            )
    after_warmup = readings[1:]  # readings[0] is before any call; the first interval is warm-up
    base = after_warmup[0]["rss_mib"] if after_warmup else None
    drift = [round((r["rss_mib"] - base) * MiB / MB, 1) for r in after_warmup] if base is not None else []
    late = drift[len(drift) // 2 :]
    return {
        "readings": readings,
        "total": total.summary(),
        "baseline_rss_mib": base,
        "drift_mb": drift,
        "max_abs_drift_mb": max((abs(d) for d in drift), default=None),
        # Growth that stops (allocator and caches filling) against growth that goes on (a leak):
        "second_half_spread_mb": round(max(late) - min(late), 1) if late else None,
        "slope_mb_per_10k_calls": _slope_mb_per_10k([(r["calls"], r["rss_mib"]) for r in after_warmup]),
    }


def _target(result: dict[str, Any], calls: int) -> tuple[str, str, str]:
    drift = result["max_abs_drift_mb"]
    ok = drift is not None and drift <= MAX_DRIFT_MB and result["total"]["errors"] == 0
    name = f"host RSS flat within +-{MAX_DRIFT_MB:g} MB after warm-up over {calls} calls"
    slope = result["slope_mb_per_10k_calls"]
    half = result["second_half_spread_mb"]
    value = f"max drift {drift} MB, slope {slope} MB/10k calls, second half spread {half} MB"
    value += f", errors {result['total']['errors']}"
    return ("PASS" if ok else "MISS", name, value)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/soak.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20_000, help="calls in all (default 20000)")
    p.add_argument("--every", type=int, default=5_000, help="calls between RSS readings (default 5000)")
    p.add_argument("--sessions", type=int, default=4, help="visitor sessions, eras alternating (default 4)")
    p.add_argument("--in-flight", type=int, default=4, help="calls in flight per session (default 4)")
    p.add_argument("--era", choices=["both", *ERAS], default="both", help="the sessions' era (default both)")
    p.add_argument("--long", action="store_true", help="100000 calls (the issue's soak)")
    p.add_argument("--quick", action="store_true", help="5000 calls, read every 1000")
    args = p.parse_args(argv)
    if args.long:
        args.calls = 100_000
    elif args.quick:
        args.calls, args.every = 5_000, 1_000
    result = run_leg(
        "s", bench, args, RESULTS, lambda found: {"targets": [_target(found, args.calls)], "config": vars(args)}
    )
    total = result["total"]
    print(
        f"[bench] soak: {total['calls']} calls at {total['calls_per_s']} calls/s (summed per interval), "
        f"p50 {total['median_ms']} ms, p99 {total['p99_ms']} ms; drift after warm-up {result['drift_mb']} MB"
    )
    for status, name, value in result["targets"]:
        print(f"  {status:<4}  {name}: {value}")
    print(said_where(result, RESULTS, REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
