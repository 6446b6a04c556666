"""Tracing and log lines of a real `mcp-host serve` (app/telemetry.py): with `OTEL_*` pointing at
an OTLP/HTTP receiver on loopback, a visitor's call to the `notes` plugin (built on the kit) is
one trace — the visitor endpoint's span, the call forwarded to the child, the host op the child
ran on the back-channel and the SQL it ran — and `MCP_HOST_LOG_FORMAT=json` writes JSON lines."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider

from mcp_host.app.telemetry import JsonLines, start_tracing
from mcp_host.settings import OtelSettings
from tests.hosting import PLUGINS, free_port, wait_serving, wait_until
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

MCP_HOST = Path(sys.executable).parent / "mcp-host"


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str


class Receiver:
    """Spans POSTed to `/v1/traces` (OTLP/HTTP protobuf), decoded."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            for resource_spans in request.resource_spans:
                attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                service = attributes.get("service.name", "")
                for scope in resource_spans.scope_spans:
                    self.spans.extend(
                        Span(s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), service)
                        for s in scope.spans
                    )

    def exported(self, calls: int) -> bool:
        """Whether the SQL spans of `calls` calls (the last of each trace) have arrived."""
        return len(self.named("store.insert")) >= calls

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name]


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Receiver]]:
    """An OTLP/HTTP receiver on loopback; yields its base URL and what it received."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/v1/traces":
                receiver.take(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
            else:
                answer = b""
                self.send_response(404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", receiver
    finally:
        server.shutdown()
        server.server_close()


@asynccontextmanager
async def traced_host(tmp_path: Path, database_url: str, endpoint: str) -> AsyncIterator[tuple[str, Path]]:
    """`mcp-host serve` with the `notes` plugin, exporting to `endpoint` and logging JSON lines;
    yields its base URL and the file its stderr goes to."""
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MCP_HOST_", "OTEL_"))},
        "MCP_HOST_DATABASE_URL": database_url,
        "MCP_HOST_PRESTART_CHILDREN": "false",
        "MCP_HOST_BUILTIN_DIR": str(PLUGINS / "notes"),
        "MCP_HOST_LOG_FORMAT": "json",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "mcp-host-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: the batch goes out soon after the call
    }
    argv = [str(MCP_HOST), "serve", "--port", str(port), "--data-dir", str(tmp_path / "data")]
    log = tmp_path / "host.log"
    with log.open("wb") as stderr:
        process = await anyio.open_process(argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_serving(url, lambda: process.returncode is None)
        yield url, log
    finally:
        process.terminate()
        with anyio.fail_after(30):
            await process.wait()
        await process.aclose()


async def add_note(url: str, mode: str) -> Any:
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(f"{url}/v1/sessions", json={})
        assert response.status_code == 201, response.text
        session = response.json()
        headers = {"Authorization": f"Bearer {session['token']}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as client_http:
            transport = streamable_http_client(session["mcp_url"], http_client=client_http)
            async with Client(transport, mode=mode, cache=None) as client:
                return await client.call_tool("note_add", {"text": f"traced ({mode})"})


@needs_bwrap
async def test_a_visitor_call_is_one_trace_through_child_host_op_and_sql(tmp_path: Path, database_url: str) -> None:
    modes = ["2026-07-28", "legacy"]  # a request of its own, and a 2025-11-25 session
    with otlp_receiver() as (endpoint, receiver):
        async with traced_host(tmp_path, database_url, endpoint) as (url, log):
            for n, mode in enumerate(modes, start=1):
                result = await add_note(url, mode)
                assert not result.is_error, result
                # Spans arrive from the host's exporter thread, which no event here can signal.
                await wait_until(partial(receiver.exported, n), within_s=20)
        lines = log.read_text().splitlines()

    traces = []
    for sql in receiver.named("store.insert"):  # the plugin store's statements, one per call
        spans = {s.span_id: s for s in receiver.spans if s.trace_id == sql.trace_id}
        op = spans[sql.parent_id]  # the back-channel's span for the host op
        forwarded = spans[op.parent_id]  # the child continued the context of the call it was sent
        visitor = spans[forwarded.parent_id]  # the visitor endpoint's span
        assert visitor.parent_id == ""  # the visitor sent no trace: the host's span starts it
        traces.append([visitor.name, forwarded.name, op.name, sql.name])
        assert {s.service for s in (visitor, forwarded, op, sql)} == {"mcp-host-test"}
    chain = ["tools/call note_add", "MCP send tools/call note_add", "tools/call store.insert", "store.insert"]
    assert traces == [chain] * len(modes)

    records = [json.loads(line) for line in lines if line.strip()]  # every line is one JSON object
    assert records and all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(r["logger"] == "mcp_host.app.telemetry" and "OTLPSpanExporter" in r["message"] for r in records)


def test_json_lines_carry_the_current_trace_id() -> None:
    tracer = TracerProvider().get_tracer("test")  # not the process's provider: nothing global changes
    record = logging.LogRecord("mcp_host.x", logging.WARNING, __file__, 1, "hello %s", ("there",), None)
    outside = json.loads(JsonLines().format(record))
    with tracer.start_as_current_span("call") as span:
        inside = json.loads(JsonLines().format(record))
    context = span.get_span_context()

    assert outside.keys() == {"time", "level", "logger", "message"}
    assert (outside["level"], outside["logger"], outside["message"]) == ("WARNING", "mcp_host.x", "hello there")
    assert inside["trace_id"] == f"{context.trace_id:032x}"
    assert inside["span_id"] == f"{context.span_id:016x}"


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"traces_exporter": "none", "exporter_otlp_endpoint": "http://x"},
        {"sdk_disabled": True, "traces_exporter": "otlp"},
    ],
)
def test_tracing_is_off_unless_an_exporter_or_endpoint_is_set(values: dict[str, Any]) -> None:
    assert start_tracing(OtelSettings(**values)) is None
