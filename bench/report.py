"""Turning samples into numbers: per-leg statistics, ratios, targets, the printed table."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from legs import ERAS, Leg

__all__ = ["Target", "print_report", "ratios", "stats", "targets"]

# The targets (issue 18's numbers): host/SDK-HTTP latency ratio, warm and first tools/list.
MAX_C_OVER_B = 1.0
MAX_WARM_LIST_MS = 5.0
MAX_WARM_LIST_P99_MS = 15.0
MAX_FIRST_LIST_S = 1.0


def stats(samples_ns: list[int], rounds: int = 1) -> dict[str, Any]:
    """n, median, p99 (nearest rank), mean, min, max and each round's median, in milliseconds.

    `samples_ns` holds `rounds` equal runs one after another (how the bench records them).
    """
    ms = sorted(s / 1e6 for s in samples_ns)
    n = len(ms)
    per = max(1, len(samples_ns) // rounds)
    chunks = [samples_ns[i : i + per] for i in range(0, len(samples_ns), per)]
    return {
        "round_medians_ms": [statistics.median(c) / 1e6 for c in chunks if c],
        "n": n,
        "median_ms": statistics.median(ms),
        "p99_ms": ms[max(0, math.ceil(0.99 * n) - 1)],
        "mean_ms": statistics.fmean(ms),
        "min_ms": ms[0],
        "max_ms": ms[-1],
    }


def _median(legs: dict[str, Leg], letter: str, era: str) -> float | None:
    leg = legs.get(f"{letter}.{era}")
    return statistics.median(leg.samples) if leg and leg.samples else None


def _p99(legs: dict[str, Leg], letter: str, era: str) -> float | None:
    leg = legs.get(f"{letter}.{era}")
    if not leg or not leg.samples:
        return None
    ordered = sorted(leg.samples)
    return float(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))])


def ratios(legs: dict[str, Leg]) -> dict[str, float]:
    """Median ratios per era: c/b, c/a, c/f, f/b, c/p and p/b (those whose legs ran)."""
    out: dict[str, float] = {}
    for era in ERAS:
        for top, bottom in (("c", "b"), ("c", "a"), ("c", "f"), ("f", "b"), ("c", "p"), ("p", "b")):
            t, b = _median(legs, top, era), _median(legs, bottom, era)
            if t is not None and b:
                out[f"{top}/{bottom} {era}"] = t / b
    return out


@dataclass(frozen=True)
class Target:
    name: str
    value: str
    status: str
    """PASS, MISS or SKIP."""


def _check(name: str, value: float | None, ok: bool, fmt: str, why_skip: str = "leg did not run") -> Target:
    if value is None:
        return Target(name, why_skip, "SKIP")
    return Target(name, fmt.format(value), "PASS" if ok else "MISS")


def targets(legs: dict[str, Leg], first_list_s: list[float], skipped: dict[str, str]) -> list[Target]:
    """Each target with its measured value and PASS/MISS (SKIP when its legs did not run)."""
    found = ratios(legs)
    out: list[Target] = []
    for era in ERAS:
        r = found.get(f"c/b {era}")
        out.append(_check(f"c/b <= {MAX_C_OVER_B} ({era})", r, r is not None and r <= MAX_C_OVER_B, "{:.2f}"))
    for era in ERAS:
        d = _median(legs, "d", era)
        d_ms = d / 1e6 if d is not None else None
        ok = d_ms is not None and d_ms <= MAX_WARM_LIST_MS
        out.append(_check(f"tools/list, 5 warm caps <= {MAX_WARM_LIST_MS:g} ms ({era})", d_ms, ok, "{:.2f} ms"))
        p99 = _p99(legs, "d", era)
        p99_ms = p99 / 1e6 if p99 is not None else None
        ok = p99_ms is not None and p99_ms <= MAX_WARM_LIST_P99_MS
        out.append(
            _check(f"tools/list, 5 warm caps p99 <= {MAX_WARM_LIST_P99_MS:g} ms ({era})", p99_ms, ok, "{:.2f} ms")
        )
    first = statistics.median(first_list_s) if first_list_s else None
    ok = first is not None and first <= MAX_FIRST_LIST_S
    out.append(_check(f"first tools/list after start <= {MAX_FIRST_LIST_S:g} s", first, ok, "{:.3f} s"))
    for letter, peer in (("f", "FastMCP proxy"), ("p", "mcp-proxy")):
        for era in ERAS:
            r = found.get(f"c/{letter} {era}")
            why = skipped.get(f"{letter}.{era}", skipped.get(letter, "leg did not run"))
            name = f"host ahead of {peer}, tools/call p50 ({era})"
            out.append(_check(name, r, r is not None and r < 1.0, f"c/{letter} {{:.2f}}", why))
    return out


def print_report(result: dict[str, Any]) -> None:
    """The human summary of `result` (the dict written to latest.json)."""
    print()
    print(f"{'leg':<42} {'era':<11} {'n':>5} {'median ms':>10} {'p99 ms':>8}  {'per-round medians'}")
    for key, leg in result["legs"].items():
        title = f"{key[0]}  {leg['title']}"
        rounds = " / ".join(f"{m:.2f}" for m in leg["round_medians_ms"])
        print(f"{title:<42} {leg['era']:<11} {leg['n']:>5} {leg['median_ms']:>10.3f} {leg['p99_ms']:>8.2f}  {rounds}")
    for key, why in result["skipped"].items():
        print(f"{key:<44} skipped: {why}")
    print()
    print("ratios of medians: " + ", ".join(f"{k} {v:.2f}" for k, v in result["ratios"].items()))
    first = result["first_list"]
    if first["samples_s"]:
        samples = ", ".join(f"{s:.3f}" for s in first["samples_s"])
        ready = ", ".join(f"{s:.2f}" for s in first["host_ready_s"])
        print(
            f"first tools/list after /readyz ({len(first['samples_s'])} starts): "
            f"median {first['median_s']:.3f} s  [{samples}]"
        )
        print(f"host spawn -> /healthz 200: [{ready}] s")
        if first.get("host_readyz_s"):
            readyz = ", ".join(f"{s:.2f}" for s in first["host_readyz_s"])
            print(f"host spawn -> /readyz 200 (first lists done): [{readyz}] s")
    print()
    for target in result["targets"]:
        print(f"  {target['status']:<4}  {target['name']}: {target['value']}")
    print()


def target_dicts(found: list[Target]) -> list[dict[str, str]]:
    return [asdict(t) for t in found]
