"""`HostMetrics`: the host's Prometheus series, in one registry per host (`GET /metrics`).

Above: the parts that count (`children.ChildPool`: starts, crashes, restarts;
`visitor.VisitorDoor`: tool calls and quota refusals; `backchannel.BackChannel`: host ops;
`egress.EgressGate`: connections and bytes through the egress proxy),
the composition root (which makes one `HostMetrics` per host and registers the gauges read at
scrape time) and `app.host_metrics` (the route). Below: `prometheus_client`.

One `CollectorRegistry` per host, never the library's global one: the tests run several hosts
in one process, and each host's `/metrics` shows its own figures only.

Counters and histograms are updated where things happen. Figures that are cheap to read are
not updated on every change but read when scraped (`gauge`): each reader is awaited by
`exposition` (some ask the database), bounded by a timeout; one that fails or times out is left
out of that scrape (logged at debug), the rest are answered.

The hot path (`tool_call`, once per visitor call) costs one dict lookup of the label values'
child (made on first use) and one histogram observation; no label is ever a value a visitor
chose: a tool name that did not resolve is counted with empty capability and tool labels.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import anyio
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["METRICS_CONTENT_TYPE", "HostMetrics", "Reading"]

logger = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format `exposition` writes."""

# From a fast in-process call (~1 ms) to the call timeout's order (a minute).
_CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# How long one scrape-time reading may take (a database count) before it is left out.
_READ_TIMEOUT_S = 2.0

Reading = float | Mapping[tuple[str, ...], float]
"""A gauge's value when scraped: one number, or one per label values."""


@dataclass(frozen=True)
class _Gauge:
    name: str
    documentation: str
    labels: tuple[str, ...]
    read: Callable[[], Awaitable[Reading]]


class _Readings(Collector):
    """The scrape-time gauges: the values `exposition` read last, as metric families."""

    def __init__(self) -> None:
        self.gauges: list[_Gauge] = []
        self.values: dict[str, Reading] = {}

    def describe(self) -> Iterable[Metric]:
        return []  # registered before anything is read; names are checked at `gauge`

    def collect(self) -> Iterable[Metric]:
        for gauge in self.gauges:
            value = self.values.get(gauge.name)
            if value is None:
                continue
            family = GaugeMetricFamily(gauge.name, gauge.documentation, labels=gauge.labels)
            if isinstance(value, Mapping):
                for labels, number in value.items():
                    family.add_metric(list(labels), number)
            else:
                family.add_metric([], value)
            yield family


class HostMetrics:
    """Every series of one host (README.md, "Metrics", names them all)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.tool_calls = Histogram(
            "mcp_host_tool_call_duration_seconds",
            "Tool calls answered by a door, by capability, tool and outcome (ok, tool_error, or the "
            "host's refusal code); _count is the number of calls.",
            ["door", "capability", "tool", "outcome"],
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.child_starts = Counter(
            "mcp_host_child_starts", "Child processes spawned, by plugin.", ["plugin"], registry=r
        )
        self.child_crashes = Counter(
            "mcp_host_child_crashes",
            "Child runs that ended other than stopped or idle (crashed, or failed to start), by plugin.",
            ["plugin"],
            registry=r,
        )
        self.child_restarts = Counter(
            "mcp_host_child_restarts",
            "Child processes spawned again after the same instance's previous run crashed, by plugin.",
            ["plugin"],
            registry=r,
        )
        self.quota_refusals = Counter(
            "mcp_host_quota_refusals",
            "Quota refusals, by capability and stage (call: a visitor's call answered quota_exhausted; "
            "insert: a host op store.insert refused at the cap).",
            ["capability", "stage"],
            registry=r,
        )
        self.backchannel_ops = Counter(
            "mcp_host_backchannel_ops",
            "Host ops called on the back-channel, by op and outcome (ok or the refusal code).",
            ["op", "outcome"],
            registry=r,
        )
        self.egress_connections = Counter(
            "mcp_host_egress_connections",
            "Connections a sandboxed child made through the egress proxy, by plugin and outcome "
            "(allowed: a tunnel opened; refused: answered without one; capped: over the plugin's "
            "connection limit).",
            ["plugin", "outcome"],
            registry=r,
        )
        self.egress_bytes = Counter(
            "mcp_host_egress_bytes",
            "Bytes through the egress proxy's tunnels, by plugin and direction (up: from the child).",
            ["plugin", "direction"],
            registry=r,
        )
        self._calls: dict[tuple[str, str, str, str], Histogram] = {}
        self._egress_bytes: dict[tuple[str, str], Counter] = {}
        self._readings = _Readings()
        r.register(self._readings)

    def tool_call(self, door: str, capability: str, tool: str, outcome: str, seconds: float) -> None:
        """One tool call answered (the hot path: see the module docstring)."""
        key = (door, capability, tool, outcome)
        child = self._calls.get(key)
        if child is None:
            child = self._calls[key] = self.tool_calls.labels(*key)
        child.observe(seconds)

    def child_started(self, plugin_id: str, *, restart: bool) -> None:
        self.child_starts.labels(plugin_id).inc()
        if restart:
            self.child_restarts.labels(plugin_id).inc()

    def child_crashed(self, plugin_id: str) -> None:
        self.child_crashes.labels(plugin_id).inc()

    def quota_refused(self, capability: str, stage: str) -> None:
        self.quota_refusals.labels(capability, stage).inc()

    def backchannel_op(self, op: str, outcome: str) -> None:
        self.backchannel_ops.labels(op, outcome).inc()

    def egress_connection(self, plugin_id: str, outcome: str) -> None:
        """One connection through the egress proxy; never labelled with where it went."""
        self.egress_connections.labels(plugin_id, outcome).inc()

    def egress_bytes_carried(self, plugin_id: str, direction: str, count: int) -> None:
        """Bytes of one chunk through an egress tunnel (per chunk: the label values' child is kept)."""
        key = (plugin_id, direction)
        child = self._egress_bytes.get(key)
        if child is None:
            child = self._egress_bytes[key] = self.egress_bytes.labels(*key)
        child.inc(count)

    def gauge(
        self,
        name: str,
        documentation: str,
        read: Callable[[], Awaitable[Reading]],
        labels: Sequence[str] = (),
    ) -> None:
        """A gauge read when scraped: `read()` gives one number, or one per label values."""
        if any(g.name == name for g in self._readings.gauges):
            raise ValueError(f"gauge {name} is already registered")
        self._readings.gauges.append(_Gauge(name, documentation, tuple(labels), read))

    async def exposition(self) -> bytes:
        """Every series in the Prometheus text format, the scrape-time gauges read now."""
        values: dict[str, Reading] = {}

        async def read(gauge: _Gauge) -> None:
            try:
                with anyio.fail_after(_READ_TIMEOUT_S):
                    value = await gauge.read()
            except Exception:  # one figure missing from a scrape beats a failed scrape
                logger.debug("metric %s could not be read", gauge.name, exc_info=True)
                return
            if isinstance(value, Mapping) or not math.isnan(value):
                values[gauge.name] = value

        async with anyio.create_task_group() as tg:
            for gauge in self._readings.gauges:
                tg.start_soon(read, gauge)
        self._readings.values = values
        return generate_latest(self.registry)
