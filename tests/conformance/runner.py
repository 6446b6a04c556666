"""Run the MCP conformance suite's server scenarios against a URL and read back each result.

Each scenario runs as its own CLI process (`conformance server --url U --scenario S -o DIR`,
several at once), which writes its checks to `DIR/server-S-<time>/checks.json`: a list of
`{id, name, description, status, errorMessage?, ...}` with status SUCCESS, FAILURE, WARNING
or INFO. A scenario *passes* when none of its checks failed (the CLI's own exit status);
WARNINGs (SHOULDs) are reported beside it. A run that leaves no checks behind (a crash, a
timeout) counts as one failed check that says so.

Above: `tests/test_conformance.py` and `score.py`. Below: `suite.py` (the installed CLI).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from tests.conformance.suite import Suite

__all__ = ["Check", "ScenarioResult", "list_server_scenarios", "run_scenario", "run_scenarios"]

SCENARIO_TIMEOUT_S = 60.0
PARALLEL = 4
_LISTED = re.compile(r"^\s+- (\S+)$")


@dataclass(frozen=True)
class Check:
    id: str
    status: str
    description: str
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def line(self) -> str:
        return f"{self.id}: {self.error or self.description}"


@dataclass(frozen=True)
class ScenarioResult:
    scenario: str
    checks: tuple[Check, ...]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "FAILURE"]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status == "WARNING"]

    def detail(self, check_id: str, key: str) -> Any:
        """`details[key]` of the check `check_id`, or None."""
        return next((c.details.get(key) for c in self.checks if c.id == check_id), None)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def outcome(self) -> str:
        """`pass`, `pass (N warnings)` or `FAIL`."""
        if self.failures:
            return "FAIL"
        return f"pass ({len(self.warnings)} warnings)" if self.warnings else "pass"


async def list_server_scenarios(suite: Suite) -> list[str]:
    """Every server scenario the suite knows, active and pending, in its own order."""
    listed = await anyio.run_process([suite.node, str(suite.cli), "list", "--server"])
    return [m[1] for line in listed.stdout.decode().splitlines() if (m := _LISTED.match(line))]


def _checks(raw: list[dict[str, Any]]) -> tuple[Check, ...]:
    return tuple(
        Check(
            str(c.get("id", "?")),
            str(c.get("status", "?")),
            str(c.get("description", "")),
            c.get("errorMessage"),
            dict(c.get("details") or {}),
        )
        for c in raw
    )


def _saved_checks(out: str, scenario: str) -> tuple[Check, ...] | None:
    saved = sorted(Path(out).glob(f"server-{scenario}-*/checks.json"))
    return _checks(json.loads(saved[-1].read_text())) if saved else None


async def run_scenario(
    suite: Suite, url: str, scenario: str, *, timeout_s: float = SCENARIO_TIMEOUT_S
) -> ScenarioResult:
    """One scenario against `url`, in a CLI process of its own."""
    with tempfile.TemporaryDirectory(prefix="conformance-") as out:
        argv = [suite.node, str(suite.cli), "server", "--url", url, "--scenario", scenario, "-o", out]
        completed: subprocess.CompletedProcess[bytes] | None = None
        with anyio.move_on_after(timeout_s):
            completed = await anyio.run_process(argv, check=False)
        checks = _saved_checks(out, scenario)
        if checks is not None:
            return ScenarioResult(scenario, checks)
    if completed is None:
        why = f"the scenario did not finish within {timeout_s:.0f} s"
    else:
        why = f"the CLI left no checks (exit {completed.returncode}): {completed.stderr.decode()[-500:].strip()}"
    return ScenarioResult(scenario, (Check(scenario, "FAILURE", "scenario run", why),))


async def run_scenarios(
    suite: Suite, url: str, scenarios: Iterable[str], *, parallel: int = PARALLEL
) -> dict[str, ScenarioResult]:
    """Every scenario against `url`, `parallel` at a time; results in the order given."""
    names = list(scenarios)
    results: dict[str, ScenarioResult] = {}
    limiter = anyio.CapacityLimiter(parallel)

    async def one(name: str) -> None:
        async with limiter:
            results[name] = await run_scenario(suite, url, name)

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(one, name)
    return {name: results[name] for name in names}
