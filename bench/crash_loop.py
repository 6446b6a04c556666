"""A crash-looping tool called in a loop: how often the host restarts its sandbox, the backoff
delays it applies, and how long until the child is `failing` (issue 11, defect 5).

The test plugin `test.echo`'s `die` tool SIGKILLs its own process mid-call. It runs sandboxed,
launched as the host launches it (`launch_for`, real bubblewrap), in a `ChildPool` with the
host's default limits (`Settings()`: threshold, backoff base and max, stable uptime). Each
iteration does what the visitor door does for a `tools/call`: list the child if its tool list is
unknown, then call. A caller that retries every `--pause` seconds (default 0.05) keeps at it for
`--seconds` (default 30). No database, no HTTP: what is measured is `children.py`.

Usage: .venv/bin/python bench/crash_loop.py [--seconds 30] [--pause 0.05]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import anyio

from mcp_host.app.limits import child_limits
from mcp_host.children.lifecycle import ChildState
from mcp_host.children.pool import ChildPool
from mcp_host.errors import HostError
from mcp_host.plugins.loading import load_plugins
from mcp_host.sandbox.launch import Launch, launch_for
from mcp_host.settings import Settings

REPO = Path(__file__).resolve().parent.parent
ECHO = REPO / "tests" / "fixtures" / "plugins" / "echo"


async def measure(seconds: float, pause: float) -> dict[str, Any]:
    settings = Settings()
    plugin = load_plugins(None, [ECHO]).plugins[0]
    spawns: list[float] = []
    outcomes: dict[str, int] = {}
    retry_hints: list[float] = []
    refused_s: list[float] = []
    failing_at: float | None = None
    failures_seen: list[int] = []
    backoffs: list[float] = []  # the child's retry_in_s when a new failure count is first seen

    def launch() -> Launch:
        return launch_for(plugin, settings)

    def spawned(pid: int, plugin_id: str) -> None:
        spawns.append(time.monotonic())

    async with ChildPool(child_limits(settings), max_children=1, on_spawn=spawned) as pool:
        child = pool.child(plugin.manifest.id, launch)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            began = time.monotonic()
            spawned_before = len(spawns)
            try:
                if child.tools is None:
                    await child.list_tools(timeout_s=settings.children.list_timeout_s)
                await child.call_tool("die", {}, {}, timeout_s=settings.children.call_timeout_s)
                outcome = "answered"
            except HostError as exc:
                outcome = "refused (backoff)" if "retry in" in exc.message else f"{exc.code}: {exc.message}"
                if "retry in" in exc.message:
                    retry_hints.append(float(exc.message.rsplit("retry in ", 1)[1].split()[0]))
                    if len(spawns) == spawned_before:
                        refused_s.append(time.monotonic() - began)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            health = child.health()
            if not failures_seen or failures_seen[-1] != health.failures:
                failures_seen.append(health.failures)
                backoffs.append(round(health.retry_in_s, 2))
            if failing_at is None and health.state == ChildState.FAILING:
                failing_at = time.monotonic() - t0
            await anyio.sleep(pause)
        health = child.health()
    gaps = [round(b - a, 2) for a, b in zip(spawns, spawns[1:], strict=False)]
    refused_s.sort()
    return {
        "seconds": seconds,
        "pause_s": pause,
        "threshold": settings.children.crash_loop_threshold,
        "backoff_base_s": settings.children.restart_backoff_base_s,
        "backoff_max_s": settings.children.restart_backoff_max_s,
        "calls": sum(outcomes.values()),
        "outcomes": outcomes,
        "spawns": len(spawns),
        "restarts": max(0, len(spawns) - 1),
        "seconds_between_spawns": gaps,
        "failure_counts_seen": failures_seen,
        "backoff_when_seen_s": backoffs,
        "time_to_failing_s": round(failing_at, 2) if failing_at is not None else None,
        "final": {"state": health.state.value, "failures": health.failures, "cause": health.cause},
        "longest_retry_hint_s": max(retry_hints, default=None),
        "refused_call_ms_median": round(1000 * refused_s[len(refused_s) // 2], 2) if refused_s else None,
        "refused_call_ms_max": round(1000 * refused_s[-1], 2) if refused_s else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--pause", type=float, default=0.05)
    args = parser.parse_args()
    print(json.dumps(anyio.run(measure, args.seconds, args.pause), indent=2))


if __name__ == "__main__":
    main()
