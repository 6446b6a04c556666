"""The owner's rules: what deciding a call costs (issue 17, target: 20 rules ≤ 0.2 ms median).

Legs, each `--runs` calls, median and p90 in milliseconds:
- `evaluate_20`: the 20 rules below (none matches, so all 20 run; one searches the arguments as
  JSON, one reads the counts) over one call's variables, built per call (`now` included), as
  `RuleGate.admit` does after its read; compiled once, as at `rules_set`. The target applies here.
- `gate_no_rules`, `gate_20`, `gate_20_counting`: `RuleGate.admit` on PostgreSQL with the gate
  listening for the rules' change notices, as a host runs it (the rule set's version and the
  owner's timezone from memory; no rules; 20 rules without `recent`; the same 20 with the
  counting rule: the subject's lock, its counts and the record of the call, one transaction).
- `gate_no_rules_read`: no rules, the gate not listening (as in an outage of its channel): the
  version and timezone read per call.
An embedded PostgreSQL of its own unless `--database-url` names a server. Prints the report and
PASS/MISS; writes bench-results/rules.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from pydantic import SecretStr

from mcp_host.access.owners import OwnerStore
from mcp_host.access.sessions import RoleSnapshot, Session, Subject, Visitor
from mcp_host.policy.rules import RuleGate, check_rules, evaluate, the_time, visitor_call
from mcp_host.settings import Settings
from mcp_host.store.database import open_database
from mcp_host.store.embedded_postgres import embedded_postgres
from mcp_host.store.rules import RuleStore

RESULTS = Path(__file__).resolve().parent.parent / "bench-results" / "rules.json"
TARGET_MS = 0.2

COUNTING = {"when": "session.mode == 'code' && recent.hour[capability] >= 1000000", "effect": "refuse"}
RULES: list[dict[str, Any]] = [
    {"when": "session.mode == 'public' && capability == 'mail.send' && tool == 'send_email'", "effect": "hold"},
    {"when": "now.hour < 0 || now.hour >= 24", "effect": "refuse"},
    {"when": "text(arguments).matches('https?://')", "effect": "hold"},
    *[
        {"when": f"capability == 'cap.{n}' && tool in ['a', 'b', 'c'] && session.role != 'public'", "effect": "allow"}
        for n in range(10)
    ],
    {"when": "'destructiveHint' in annotations && annotations.destructiveHint == true", "effect": "hold"},
    {"when": "session.visitor.email != null && session.visitor.email.endsWith('@blocked.example')", "effect": "refuse"},
    {"when": "size(arguments) > 50", "effect": "refuse"},
    {"when": "'target' in arguments && arguments.target.startsWith('/etc')", "effect": "refuse"},
    {"when": "now.weekday > 7", "effect": "refuse"},
    {"when": "session.subject_kind == 'api_key' && session.subject == 'k_none'", "effect": "refuse"},
]
ARGUMENTS = {"target": "notes/today.md", "text": "a short note about the plan for the week " * 4, "tags": ["a", "b"]}


def _session() -> Session:
    return Session(
        id="0" * 32,
        owner_id="bench",
        mode="code",
        subject=Subject(kind="code", id="c_bench"),
        visitor=Visitor(name="Ada", email="ada@example.org"),
        role=RoleSnapshot(id="friends", capabilities=("notes",), config={}),
        created_at=datetime.now(UTC),
    )


def _timed(run: Callable[[], Any], runs: int) -> dict[str, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return _figures(times)


async def _timed_async(run: Callable[[], Awaitable[Any]], runs: int) -> dict[str, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        await run()
        times.append((time.perf_counter() - start) * 1000)
    return _figures(times)


def _figures(times: list[float]) -> dict[str, float]:
    times.sort()
    return {"median_ms": round(statistics.median(times), 4), "p90_ms": round(times[int(len(times) * 0.9)], 4)}


def _evaluate_leg(runs: int) -> dict[str, float]:
    rules = [*RULES, COUNTING]
    assert len(rules) == 20
    _, compiled = check_rules(rules)
    tool = types.Tool(name="note_add", input_schema={})
    facts = visitor_call(_session(), "notes", tool, ARGUMENTS)

    def once() -> None:
        data = {
            "capability": facts.capability,
            "tool": facts.tool,
            "annotations": facts.annotations,
            "arguments": facts.arguments,
            "session": facts.session,
            "grant": None,
            "now": the_time("Europe/Berlin"),
            "recent": {"minute": {"notes": 3}, "hour": {"notes": 12}},
        }
        assert evaluate(compiled, data).effect is None  # all 20 ran

    once()
    return _timed(once, runs)


async def _gate_legs(dsn: str, runs: int, data_dir: Path) -> dict[str, Any]:
    settings = Settings(database_url=SecretStr(dsn), data_dir=data_dir)
    async with open_database(settings) as database:
        owner = await OwnerStore(database.pool).ensure_single_owner()
        gate = RuleGate(RuleStore(database.pool), None, None)
        tool = types.Tool(name="note_add", input_schema={})
        session = _session().model_copy(update={"owner_id": owner.id})
        facts = visitor_call(session, "notes", tool, ARGUMENTS)
        report: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            await tg.start(gate.listen)
            for label, rules in (
                ("gate_no_rules", []),
                ("gate_20", [*RULES, RULES[0]]),
                ("gate_20_counting", [*RULES, COUNTING]),
            ):
                await gate.set(owner.id, rules)
                await gate.admit(facts)  # compiled and cached
                report[label] = await _timed_async(lambda: gate.admit(facts), runs)
            gate.stop_listening()
        await gate.set(owner.id, [])
        report["gate_no_rules_read"] = await _timed_async(lambda: gate.admit(facts), runs)
        report["counted_rows"] = await database.pool.fetchval("SELECT count(*) FROM mcp_host.rule_calls")
        return report


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--gate-runs", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="500 and 200 runs")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    runs, gate_runs = (500, 200) if args.quick else (args.runs, args.gate_runs)
    report: dict[str, Any] = {"rules": 20, "evaluate_20": _evaluate_leg(runs)}
    with tempfile.TemporaryDirectory(prefix="mcp-host-bench-rules-") as tmp:
        if args.database_url:
            report |= await _gate_legs(args.database_url, gate_runs, Path(tmp))
        else:
            async with embedded_postgres(Path(tmp) / "pg") as dsn:
                report |= await _gate_legs(dsn, gate_runs, Path(tmp))
    median = report["evaluate_20"]["median_ms"]
    report["target"] = {"evaluate_20_median_ms": TARGET_MS, "met": median <= TARGET_MS}
    print(json.dumps(report, indent=2))  # noqa: T201 - a bench prints its report
    verdict = "PASS" if median <= TARGET_MS else "MISS"
    print(f"{verdict} rules: 20 rules per call {median:.3f} ms median (target ≤ {TARGET_MS} ms)")  # noqa: T201
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    anyio.run(main)
