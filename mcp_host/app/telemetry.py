"""The host's OpenTelemetry tracer provider, set up once from the standard `OTEL_*` variables,
and its log lines (plain, or JSON objects carrying the trace id).

Above: `cli.serve`, which calls `configure_logging` and `start_tracing` before the app is built
(`observe.untraced` decides, as each MCP server is built, whether the SDK's span middleware stays)
and `Tracing.shutdown` at exit, which flushes the spans still batched. Below: the OpenTelemetry
SDK and its OTLP/HTTP exporter, which read their own variables (`OTEL_EXPORTER_OTLP_HEADERS`,
`OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).

Tracing is on when `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`) or an OTLP
endpoint is set, and off with `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Off, no
tracer provider is set: the SDK's middleware is taken off the servers and every span the host
starts is OpenTelemetry's non-recording one. On, a visitor's call is one trace: the visitor
endpoint's span for `tools/call`, the SDK client's span for the call forwarded to the child
(whose `_meta` carries `traceparent`), the back-channel's span for each host op the child runs
(the kit passes the context on in the op's `_meta`) and the plugin store's span for its SQL.
Children never export: they run without the network, and get no `OTEL_*` variables.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from mcp_host.settings import OtelSettings

__all__ = ["JsonLines", "Tracing", "configure_logging", "start_tracing"]

logger = logging.getLogger(__name__)

_PLAIN = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Tracing:
    """The tracer provider the host set up; `shutdown` exports what is batched, then stops."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider

    def shutdown(self) -> None:
        self.provider.shutdown()


def start_tracing(otel: OtelSettings) -> Tracing | None:
    """Set the process's tracer provider as `otel` says; None when tracing is off (or the
    exporter is one the host does not ship, which is logged). Call once, before the app is built."""
    exporter = _exporter(otel)
    if exporter is None:
        return None
    # `Resource.create` reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; when neither names
    # the service, the SDK's `unknown_service:<executable>` becomes `mcp-host`.
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "mcp-host"}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    logger.info("tracing: spans are exported (%s)", type(exporter).__name__)
    return Tracing(provider)


def _exporter(otel: OtelSettings) -> SpanExporter | None:
    if otel.sdk_disabled:
        return None
    endpoint = otel.exporter_otlp_traces_endpoint or otel.exporter_otlp_endpoint
    kind = (otel.traces_exporter or ("otlp" if endpoint else "none")).strip().lower()
    if kind == "none":
        return None
    if kind == "console":
        return ConsoleSpanExporter()
    if kind != "otlp":
        logger.warning("tracing is off: OTEL_TRACES_EXPORTER=%r is not one of otlp, console, none", kind[:40])
        return None
    # Imported only when used: the exporter pulls in protobuf and requests.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # the endpoint, headers and timeout from OTEL_EXPORTER_OTLP_*


class JsonLines(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, `trace_id` and
    `span_id` when a recording span is current, `exception` when the record carries one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            line["trace_id"] = trace.format_trace_id(span.trace_id)
            line["span_id"] = trace.format_span_id(span.span_id)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(log_format: Literal["text", "json"]) -> None:
    """The root logger at INFO, writing plain lines or (`json`) `JsonLines` to stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter(_PLAIN))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
