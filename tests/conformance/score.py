"""Print the conformance score of the test plugin served directly and through the host.

    scripts/conformance [--direct] [--through-host] [--scenario NAME]... [--verbose]

With neither `--direct` nor `--through-host`, both run. Through the host, PostgreSQL is an
embedded server in a temporary folder (or `MCP_HOST_TEST_DATABASE_URL`, whose database is
used as it is). Exit status 1 when a scenario that passes directly fails through the host.

Above: a person at a shell, and `tests/test_conformance.py` (`score_table`, `regressions`).
Below: `runner.py`, `targets.py`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import anyio

from mcp_host.store.embedded_postgres import embedded_postgres
from tests.conformance.runner import ScenarioResult, list_server_scenarios, run_scenarios
from tests.conformance.suite import Suite, find_suite
from tests.conformance.targets import direct_plugin, through_host

__all__ = ["regressions", "score_table"]

Results = Mapping[str, ScenarioResult]


def _score(results: Results) -> str:
    return f"{sum(r.passed for r in results.values())}/{len(results)}"


def score_table(direct: Results | None, host: Results | None, *, verbose: bool = False) -> str:
    """One line per scenario: its outcome in each run given, then what failed through the host."""
    names = list((direct or host or {}).keys())
    width = max((len(n) for n in names), default=8)
    header = f"{'scenario':<{width}}  {'direct':<22}  {'through host':<22}"
    lines = [header, "-" * len(header)]
    for name in names:
        row = f"{name:<{width}}  {direct[name].outcome if direct else '':<22}  {host[name].outcome if host else '':<22}"
        lines.append(row.rstrip())
        shown = [r for r in (host, direct if verbose else None) if r is not None]
        for result in shown:
            lines += [f"{'':<{width}}    ✗ {check.line()}" for check in result[name].failures]
            if verbose:
                lines += [f"{'':<{width}}    ~ {check.line()}" for check in result[name].warnings]
    totals = [f"direct {_score(direct)}" if direct else "", f"through host {_score(host)}" if host else ""]
    lines += ["-" * len(header), "passed: " + ", ".join(t for t in totals if t)]
    return "\n".join(lines)


# Listing scenarios pass on any well-formed list, even an empty one; through the host the
# list must also name what the plugin lists directly (the host passes names and URIs through).
LISTINGS = {"tools-list": "tools", "resources-list": "resources", "prompts-list": "prompts"}


def regressions(direct: Results, host: Results) -> list[str]:
    """The scenarios that pass directly and not through the host, each with what went wrong."""
    found = [
        f"{name}: " + "; ".join(c.line() for c in host[name].failures)
        for name, result in direct.items()
        if result.passed and not host[name].passed
    ]
    for name, key in LISTINGS.items():
        if name in direct and direct[name].passed and host[name].passed:
            listed, relayed = direct[name].detail(name, key), host[name].detail(name, key)
            if sorted(listed or []) != sorted(relayed or []):
                found.append(f"{name}: the host lists {key} {relayed}, the plugin {listed}")
    return found


@asynccontextmanager
async def _database() -> AsyncIterator[str]:
    external = os.environ.get("MCP_HOST_TEST_DATABASE_URL")
    if external:
        yield external
        return
    folder = Path(tempfile.mkdtemp(prefix="mcp-host-conformance-pg-"))
    try:
        async with embedded_postgres(folder / "data") as dsn:
            yield dsn
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _run(suite: Suite, target: Callable[[], AbstractAsyncContextManager[str]], names: list[str]) -> Results:
    async with target() as url:
        return await run_scenarios(suite, url, names)


async def _main(args: argparse.Namespace) -> int:
    suite = find_suite()
    if isinstance(suite, str):
        print(f"cannot run: {suite}", file=sys.stderr)  # noqa: T201 - a command-line report
        return 2
    names = args.scenario or await list_server_scenarios(suite)
    both = not (args.direct or args.through_host)
    started = time.monotonic()
    direct = await _run(suite, direct_plugin, names) if args.direct or both else None
    host: Results | None = None
    if args.through_host or both:
        with tempfile.TemporaryDirectory(prefix="mcp-host-conformance-") as tmp:
            async with _database() as dsn:
                host = await _run(suite, lambda: through_host(Path(tmp), dsn), names)
    report = score_table(direct, host, verbose=args.verbose)
    took = time.monotonic() - started
    lost = regressions(direct, host) if direct and host else []
    report += "".join(f"\nregression: {line}" for line in lost)
    print(f"MCP conformance suite {suite.version}, {len(names)} server scenarios, {took:.0f} s\n{report}")  # noqa: T201
    return 1 if lost else 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description="The MCP conformance score of the test plugin, direct and via the host"
    )
    parser.add_argument("--direct", action="store_true", help="run against the plugin served directly")
    parser.add_argument("--through-host", action="store_true", help="run through a host's visitor session")
    parser.add_argument("--scenario", action="append", help="run only this scenario (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="show warnings, and direct failures too")
    sys.exit(anyio.run(_main, parser.parse_args()))


if __name__ == "__main__":
    main()
