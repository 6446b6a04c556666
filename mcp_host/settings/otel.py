"""`OtelSettings`: the OpenTelemetry variables the host reads itself."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["OtelSettings"]


class OtelSettings(BaseSettings):
    """The OpenTelemetry variables that decide whether the host traces (app/telemetry.py);
    the SDK and its exporter read the rest themselves (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_HEADERS,
    OTEL_BSP_*, OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES). Unset, nothing is traced."""

    model_config = SettingsConfigDict(env_prefix="OTEL_", extra="ignore", frozen=True)

    sdk_disabled: bool = False
    # `otlp` (OTLP over HTTP/protobuf), `console` (stderr, to try it) or `none`; unset, `otlp`
    # when an OTLP endpoint is set.
    traces_exporter: str | None = None
    exporter_otlp_endpoint: str | None = None
    exporter_otlp_traces_endpoint: str | None = None
