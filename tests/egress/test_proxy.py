"""The egress proxy with real peers on loopback: a child's CONNECT tunnel to an allowed name,
an absolute-form request forwarded in origin form (written by hand, and by `urllib` and httpx
through a TCP bridge as a sandboxed child's tools would), and the policy's refusals, each told
to the child in one line, logged once and reported once per gate."""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from inline_snapshot import snapshot

from mcp_host.egress import EgressCaps, EgressGate, EgressProxy, GateStats, HostsFileResolver, Refusal, SystemResolver
from mcp_host.observe import HostMetrics
from mcp_host.plugins import EgressPolicy
from tests.egress.loopback import ask, echo_server, read_all, short_folder, tcp_bridge, write_hosts
from tests.hosting import free_port, serving

pytestmark = pytest.mark.anyio

CAPS = EgressCaps(connections=8, bytes_per_minute=10_000_000, idle_s=30.0)


@asynccontextmanager
async def proxy(tmp_path: Path, **options: Any) -> AsyncIterator[tuple[EgressProxy, list[Refusal]]]:
    """A running proxy resolving the test names of `loopback.write_hosts`; and what it refused."""
    refusals: list[Refusal] = []
    resolver = HostsFileResolver(write_hosts(tmp_path), SystemResolver())
    with short_folder() as folder:
        async with EgressProxy(folder, resolver, on_refused=refusals.append, **options) as running:
            yield running, refusals


def policy(
    *entries: str, allow_private: tuple[str, ...] = ("site.example.test", "a.example.test"), **kw: Any
) -> EgressPolicy:
    return EgressPolicy.of(entries, allow_private=allow_private, **kw)


async def test_connect_to_an_allowed_name_tunnels_bytes_both_ways(tmp_path: Path) -> None:
    async with echo_server() as peer, proxy(tmp_path) as (running, refusals):
        gate = await running.open("web", "s1", policy(f"site.example.test:{peer.port}"), CAPS)
        with anyio.fail_after(10):
            async with await anyio.connect_unix(gate.path) as stream:
                await stream.send(f"CONNECT site.example.test:{peer.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert await stream.receive() == b"HTTP/1.1 200 Connection established\r\n\r\n"
                await stream.send(b"hello through the tunnel")
                assert await stream.receive() == b"hello through the tunnel"
                assert gate.stats.connections_now == 1
                await stream.send_eof()
                assert await read_all(stream) == b""
        await _until(lambda: gate.stats.connections_now == 0)
        assert gate.stats == GateStats(connections_now=0, connections_total=1, refused=0, bytes_up=24, bytes_down=24)
        assert refusals == []


async def _until(condition: Any) -> None:
    with anyio.fail_after(5):
        while not condition():  # noqa: ASYNC110 - the gate's counters signal no event
            await anyio.sleep(0.01)


async def _seen(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An HTTP app that answers with what it was asked: method, target and headers."""
    if scope["type"] != "http":
        return
    query = scope["query_string"].decode()
    body = json.dumps(
        {
            "method": scope["method"],
            "target": scope["raw_path"].decode() + (f"?{query}" if query else ""),
            "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def test_an_absolute_form_request_goes_on_in_origin_form_without_proxy_headers(tmp_path: Path) -> None:
    port = free_port()
    async with serving(_seen, port, lifespan="off"), proxy(tmp_path) as (running, _):
        gate = await running.open("web", None, policy(f"site.example.test:{port}"), CAPS)
        answer = await ask(
            gate.path,
            f"GET http://Site.Example.Test:{port}/page?q=1 HTTP/1.1\r\nHost: elsewhere.example\r\n"
            "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\n"
            "Accept: text/plain\r\n\r\n".encode(),
        )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert json.loads(body) == snapshot(
        {
            "method": "GET",
            "target": "/page?q=1",
            "headers": [["host", f"site.example.test:{port}"], ["accept", "text/plain"], ["connection", "close"]],
        }
    )


async def test_a_forwarded_request_head_is_counted_as_bytes_up(tmp_path: Path) -> None:
    """The head the proxy sends on in origin form counts as the child's bytes (stats and metrics),
    as the body pumped after it does."""
    metrics = HostMetrics()
    async with echo_server() as peer, proxy(tmp_path, metrics=metrics) as (running, _):
        gate = await running.open("web", None, policy(f"site.example.test:{peer.port}"), CAPS)
        with anyio.fail_after(10):
            async with await anyio.connect_unix(gate.path) as stream:
                asked = f"POST http://site.example.test:{peer.port}/a HTTP/1.1\r\nProxy-Authorization: x\r\n\r\n"
                await stream.send(asked.encode() + b"body")
                await stream.send_eof()
                echoed = await read_all(stream)
        await _until(lambda: gate.stats.connections_now == 0)
    forwarded = f"POST /a HTTP/1.1\r\nHost: site.example.test:{peer.port}\r\nConnection: close\r\n\r\nbody".encode()
    assert echoed == forwarded
    size = len(forwarded)
    assert gate.stats == GateStats(connections_total=1, bytes_up=size, bytes_down=size)
    exposed = metrics.registry.get_sample_value
    assert exposed("mcp_host_egress_bytes_total", {"plugin": "web", "direction": "up"}) == size


async def test_urllib_and_httpx_use_a_gate_as_their_http_proxy_through_a_tcp_bridge(tmp_path: Path) -> None:
    port = free_port()
    async with serving(_seen, port, lifespan="off"), proxy(tmp_path) as (running, _):
        gate = await running.open("web", None, policy(f"site.example.test:{port}"), CAPS)
        async with tcp_bridge(gate.path) as bridge:
            url = f"http://site.example.test:{port}/from-urllib"
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{bridge}"}))

            def fetch() -> Any:
                with opener.open(url, timeout=10) as response:
                    return json.loads(response.read())

            seen = await anyio.to_thread.run_sync(fetch)
            assert (seen["method"], seen["target"]) == ("GET", "/from-urllib")
            async with httpx2.AsyncClient(proxy=f"http://127.0.0.1:{bridge}", timeout=10) as client:
                response = await client.post(f"http://site.example.test:{port}/from-httpx", content=b"x" * 3000)
            assert response.status_code == 200
            assert (response.json()["method"], response.json()["target"]) == ("POST", "/from-httpx")
        assert gate.stats.connections_total == 2


@pytest.mark.parametrize(
    ("entries", "asked", "allow_net", "reason"),
    [
        pytest.param(
            ("site.example.test",),
            "site.example.test:22",
            False,
            "site.example.test:22 is not in the plugin's egress",
            id="a port the entry does not allow",
        ),
        pytest.param(
            ("a.example.test:1",),
            "evil.example.test:1",
            False,
            "evil.example.test:1 is not in the plugin's egress",
            id="a name not in the egress",
        ),
        pytest.param(
            ("evil.example.test:1",),
            "evil.example.test:1",
            False,
            "evil.example.test resolves to 127.0.0.1, a loopback or private address; name evil.example.test or"
            " 127.0.0.1 in transport.sandbox.allow_private to reach it",
            id="a name resolving to loopback",
        ),
        pytest.param(
            (),
            "169.254.169.254:80",
            True,
            "169.254.169.254 is a link-local or cloud-metadata address; it is reached only when"
            " transport.sandbox.allow_private names that address itself",
            id="the metadata address with allow_net",
        ),
        pytest.param(
            (),
            "[::ffff:127.0.0.1]:80",  # written so; read as its canonical form
            True,
            "[::ffff:7f00:1] is a loopback or private address; name [::ffff:7f00:1] in"
            " transport.sandbox.allow_private to reach it",
            id="loopback mapped into IPv6",
        ),
        pytest.param(
            (),
            "[::1]:80",
            True,
            "[::1] is a loopback or private address; name [::1] in transport.sandbox.allow_private to reach it",
            id="an IPv6 loopback literal",
        ),
    ],
)
async def test_a_destination_the_policy_refuses_is_answered_403_with_its_reason_once_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, entries: tuple[str, ...], asked: str, allow_net: bool, reason: str
) -> None:
    caplog.set_level(logging.WARNING, "mcp_host.egress")
    async with echo_server() as peer, proxy(tmp_path) as (running, refusals):
        gate = await running.open("web", "s1", policy(*entries, allow_net=allow_net), CAPS)
        for _ in range(2):
            answer = await ask(gate.path, f"CONNECT {asked} HTTP/1.1\r\n\r\n".encode())
            assert answer == _http(403, "Forbidden", reason)
    assert peer.connections == 0
    shown = asked.replace("::ffff:127.0.0.1", "::ffff:7f00:1")
    assert refusals == [Refusal("web", "s1", shown, reason)]
    assert [r.getMessage() for r in caplog.records] == [f"plugin web: egress to {shown} refused: {reason}"]
    assert gate.stats == GateStats(connections_total=2, refused=2)


def _http(status: int, phrase: str, line: str) -> bytes:
    body = line.encode() + b"\n"
    return (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


async def test_an_ipv6_literal_named_in_allow_private_is_reached(tmp_path: Path) -> None:
    async with echo_server("::1") as peer, proxy(tmp_path) as (running, _):
        gate = await running.open("web", None, policy(f"[::1]:{peer.port}", allow_private=("[::1]",)), CAPS)
        with anyio.fail_after(10):
            async with await anyio.connect_unix(gate.path) as stream:
                await stream.send(f"CONNECT [::1]:{peer.port} HTTP/1.1\r\n\r\n".encode())
                assert await stream.receive() == b"HTTP/1.1 200 Connection established\r\n\r\n"
                await stream.send(b"six")
                assert await stream.receive() == b"six"


async def test_gates_of_one_proxy_keep_their_own_policy_and_counts_and_close_alone(tmp_path: Path) -> None:
    metrics = HostMetrics()
    async with echo_server() as peer, proxy(tmp_path, metrics=metrics) as (running, _):
        allowed: EgressGate = await running.open("web", None, policy(f"site.example.test:{peer.port}"), CAPS)
        other = await running.open("mail", None, policy(), CAPS)
        assert (running.gates_of("web"), running.gates_of("mail")) == ([allowed.path], [other.path])
        connect = f"CONNECT site.example.test:{peer.port} HTTP/1.1\r\n\r\n".encode()
        assert (await ask(other.path, connect)).startswith(b"HTTP/1.1 403 ")
        async with await anyio.connect_unix(allowed.path) as stream:
            await stream.send(connect + b"ping")
            assert await stream.receive() == b"HTTP/1.1 200 Connection established\r\n\r\n"
            with anyio.fail_after(5):
                assert await stream.receive() == b"ping"
            await other.aclose()
            assert not other.path.exists()
            assert (running.gates_of("web"), running.gates_of("mail")) == ([allowed.path], [])
            await stream.send(b"pong")
            with anyio.fail_after(5):
                assert await stream.receive() == b"pong"
            await allowed.aclose()
            with anyio.fail_after(5):
                assert await read_all(stream) == b""  # its tunnel closed with it
        assert not allowed.path.exists()
        with pytest.raises(OSError):
            await anyio.connect_unix(allowed.path)
    exposed = metrics.registry.get_sample_value
    assert exposed("mcp_host_egress_connections_total", {"plugin": "web", "outcome": "allowed"}) == 1
    assert exposed("mcp_host_egress_connections_total", {"plugin": "mail", "outcome": "refused"}) == 1
    assert exposed("mcp_host_egress_bytes_total", {"plugin": "web", "direction": "up"}) == 8
    assert exposed("mcp_host_egress_bytes_total", {"plugin": "web", "direction": "down"}) == 8
