"""What the host tells its operator besides the log: its Prometheus series (`HostMetrics`) and the
MCP servers' tracing (`untraced`). Free of HTTP: `prometheus_client` and OpenTelemetry only (the
`/metrics` route is `app.host_metrics`'s). Below: `errors`, `settings`. Above: every part that
counts or serves MCP.
"""

from .metrics import METRICS_CONTENT_TYPE, HostMetrics, Reading
from .tracing import tracing_configured, untraced

__all__ = ["METRICS_CONTENT_TYPE", "HostMetrics", "Reading", "tracing_configured", "untraced"]
