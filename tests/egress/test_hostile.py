"""What a hostile child may write to its gate, and what it gets: a malformed head is answered
400 in one line (never an exception's text), an https:// url in a request 400, a host written
as a number or in another of `inet_aton`'s forms 400 before any lookup, a head over 16 KiB 431,
a slow one 408; a thousand connections at once are capped while another gate keeps serving; a
flood of bytes is held at the byte budget; a tunnel ends when its child hangs up or goes idle."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream

from mcp_host.egress import EgressCaps, EgressGate, EgressProxy, HostsFileResolver, SystemResolver
from mcp_host.observe import HostMetrics
from mcp_host.plugins import EgressPolicy, PrivateReach
from tests.egress.loopback import ask, echo_server, open_tunnel, read_all, short_folder, sink_server, write_hosts

pytestmark = pytest.mark.anyio

CAPS = EgressCaps(connections=8, bytes_per_minute=10_000_000, idle_s=30.0)


@asynccontextmanager
async def proxy(tmp_path: Path, **options: Any) -> AsyncIterator[EgressProxy]:
    resolver = HostsFileResolver(write_hosts(tmp_path), SystemResolver())
    with short_folder() as folder:
        async with EgressProxy(folder, resolver, **options) as running:
            yield running


def to_site(port: int, **kw: Any) -> EgressPolicy:
    return EgressPolicy.of([f"site.example.test:{port}"], allow_private=["site.example.test"], **kw)


def _status_and_body(answer: bytes) -> tuple[str, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body.decode()


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (b"\r\n\r\n", "the request line is not METHOD TARGET HTTP/1.x"),
        (b"GET\r\n\r\n", "the request line is not METHOD TARGET HTTP/1.x"),
        (b"get http://site.example.test/ HTTP/1.1\r\n\r\n", "the request line is not METHOD TARGET HTTP/1.x"),
        (b"GET http://site.example.test/ HTTP/2\r\n\r\n", "the request line is not METHOD TARGET HTTP/1.x"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", "the request head is not ASCII"),
        (
            b"GET / HTTP/1.1\r\nHost: site.example.test\r\n\r\n",
            "this is a proxy: ask for CONNECT host:port or an absolute http:// url",
        ),
        (
            b"GET ftp://site.example.test/ HTTP/1.1\r\n\r\n",
            "this is a proxy: ask for CONNECT host:port or an absolute http:// url",
        ),
        (
            b"GET https://site.example.test/ HTTP/1.1\r\n\r\n",
            "an https:// url goes through the proxy as CONNECT host:443, not as a request",
        ),
        (b"CONNECT site.example.test HTTP/1.1\r\n\r\n", "the destination needs a port from 1 to 65535"),
        (b"CONNECT site.example.test:0 HTTP/1.1\r\n\r\n", "the destination needs a port from 1 to 65535"),
        (b"CONNECT site.example.test:99999 HTTP/1.1\r\n\r\n", "the destination needs a port from 1 to 65535"),
        (b"CONNECT [::1:80 HTTP/1.1\r\n\r\n", "the destination is not host:port with a host name or an IP address"),
        (b"CONNECT ::1:80 HTTP/1.1\r\n\r\n", "the destination is not host:port with a host name or an IP address"),
        (
            b"CONNECT [fe80::1%25eth0]:80 HTTP/1.1\r\n\r\n",
            "the destination is not host:port with a host name or an IP address",
        ),
        (b"CONNECT a..b:80 HTTP/1.1\r\n\r\n", "the destination is not host:port with a host name or an IP address"),
        (b"CONNECT %00evil:80 HTTP/1.1\r\n\r\n", "the destination is not host:port with a host name or an IP address"),
        (
            b"GET http://user:pw@site.example.test/ HTTP/1.1\r\n\r\n",
            "a url with user:password@ is not proxied",
        ),
        (
            b"GET http://site.example.test/ HTTP/1.1\r\nX-Folded: a\r\n  b\r\n\r\n",
            "the request has a malformed header line or over 100 headers",
        ),
        (
            b"GET http://site.example.test/ HTTP/1.1\r\nBad Name: a\r\n\r\n",
            "the request has a malformed header line or over 100 headers",
        ),
        (
            b"GET http://site.example.test/ HTTP/1.1\r\n" + b"X: 1\r\n" * 101 + b"\r\n",
            "the request has a malformed header line or over 100 headers",
        ),
        (
            b"POST http://site.example.test/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "the request has both Transfer-Encoding and Content-Length",
        ),
        (b"CONNECT site.example.test:80 HTTP/1.1\r\n", "the connection closed before the request head ended"),
    ],
    ids=lambda v: v.decode("ascii", "replace")[:40] if isinstance(v, bytes) else None,
)
async def test_a_malformed_head_is_answered_400_in_one_line(tmp_path: Path, head: bytes, reason: str) -> None:
    async with echo_server() as peer, proxy(tmp_path) as running:
        gate = await running.open("web", None, to_site(peer.port, allow_net=True), CAPS)
        with anyio.fail_after(10):
            async with await anyio.connect_unix(gate.path) as stream:
                await stream.send(head)
                if not head.endswith(b"\r\n\r\n"):
                    await stream.send_eof()
                answer = await read_all(stream)
    assert _status_and_body(answer) == ("HTTP/1.1 400 Bad Request", reason + "\n")
    assert peer.connections == 0
    assert gate.stats.refused == 1


@pytest.mark.parametrize(
    "host", ["2130706433", "0x7f000001", "0x7f.1", "127.1", "0177.0.0.1", "017700000001", "127.0.0.1."]
)
async def test_a_host_in_another_form_of_an_ipv4_address_is_refused_before_any_lookup(
    tmp_path: Path, host: str
) -> None:
    async with echo_server() as peer, proxy(tmp_path) as running:
        gate = await running.open("web", None, EgressPolicy.of([], allow_net=True), CAPS)
        answer = await ask(gate.path, f"CONNECT {host}:{peer.port} HTTP/1.1\r\n\r\n".encode())
        socks = await ask(
            gate.path,
            b"\x05\x01\x00\x05\x01\x00\x03" + bytes([len(host)]) + host.encode() + peer.port.to_bytes(2, "big"),
        )
    assert _status_and_body(answer) == (
        "HTTP/1.1 400 Bad Request",
        "the destination is not host:port with a host name or an IP address\n",
    )
    assert socks == b"\x05\x00" + b"\x05\x08\x00\x01\x00\x00\x00\x00\x00\x00"
    assert peer.connections == 0


async def test_a_head_over_16_kib_is_answered_431(tmp_path: Path) -> None:
    async with proxy(tmp_path) as running:
        gate = await running.open("web", None, EgressPolicy.of([], allow_net=True), CAPS)
        answer = await ask(gate.path, b"GET http://site.example.test/ HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n")
    assert _status_and_body(answer) == (
        "HTTP/1.1 431 Request Header Fields Too Large",
        "the request head is over 16384 bytes\n",
    )


@pytest.mark.parametrize("drip", [b"", b"CONNECT site.example.test:80 HTTP/1.1\r\nX: "])
async def test_a_head_that_drips_in_too_slowly_is_answered_408(tmp_path: Path, drip: bytes) -> None:
    async with proxy(tmp_path, head_timeout_s=0.5) as running:
        gate = await running.open("web", None, EgressPolicy.of([], allow_net=True), CAPS)
        with anyio.fail_after(10):
            async with await anyio.connect_unix(gate.path) as stream:
                await stream.send(drip)
                started = anyio.current_time()
                with suppress(anyio.BrokenResourceError):  # the gate hung up
                    while anyio.current_time() - started < 1:  # a byte a tenth of a second
                        await stream.send(b"a")
                        await anyio.sleep(0.1)
                answer = await read_all(stream)
    assert _status_and_body(answer) == ("HTTP/1.1 408 Request Timeout", "the request head took over 0.5 s\n")


async def test_connections_past_the_cap_are_answered_429_until_one_closes(tmp_path: Path) -> None:
    caps = EgressCaps(connections=2, bytes_per_minute=10_000_000, idle_s=30.0)
    async with echo_server() as peer, proxy(tmp_path) as running:
        gate = await running.open("web", None, to_site(peer.port), caps)
        first, second = await open_tunnel(gate.path, peer.port), await open_tunnel(gate.path, peer.port)
        answer = await ask(gate.path, f"CONNECT site.example.test:{peer.port} HTTP/1.1\r\n\r\n".encode())
        assert _status_and_body(answer) == (
            "HTTP/1.1 429 Too Many Requests",
            "the plugin has 2 connections open, its limit\n",
        )
        await first.aclose()
        with anyio.fail_after(5):
            while gate.stats.connections_now == 2:  # noqa: ASYNC110 - the gate's counters signal no event
                await anyio.sleep(0.01)
        third = await open_tunnel(gate.path, peer.port)
        await third.send(b"still")
        with anyio.fail_after(5):
            assert await third.receive() == b"still"
        await second.aclose()
        await third.aclose()


async def test_a_thousand_connections_at_once_are_capped_while_another_gate_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "mcp_host.egress")
    metrics = HostMetrics()
    caps = EgressCaps(connections=4, bytes_per_minute=10_000_000, idle_s=30.0)
    answers: list[bytes] = []
    async with echo_server() as peer, proxy(tmp_path, metrics=metrics) as running:
        flooded = await running.open("flood", None, to_site(peer.port), caps)
        other = await running.open("calm", None, to_site(peer.port), CAPS)
        release = anyio.Event()

        async def one() -> None:
            try:
                async with await anyio.connect_unix(flooded.path) as stream:
                    await stream.send(f"CONNECT site.example.test:{peer.port} HTTP/1.1\r\n\r\n".encode())
                    first = await _first_answer(stream)
                    answers.append(first)
                    if first.startswith(b"HTTP/1.1 200"):
                        await release.wait()
            except OSError:
                answers.append(b"backlog full")  # refused by the kernel, never seen by the gate

        with anyio.fail_after(60):
            async with anyio.create_task_group() as flood:
                for _ in range(1000):
                    flood.start_soon(one)
                calm = await open_tunnel(other.path, peer.port)
                await calm.send(b"served")
                with anyio.fail_after(5):
                    assert await calm.receive() == b"served"
                await calm.aclose()
                while len(answers) < 1000:  # noqa: ASYNC110 - the clients signal no event
                    await anyio.sleep(0.05)
                assert flooded.stats.connections_now == 4
                release.set()
    opened = [a for a in answers if a.startswith(b"HTTP/1.1 200")]
    capped = [a for a in answers if a.startswith(b"HTTP/1.1 429")]
    assert len(opened) == 4
    closed = answers.count(b"")  # closed at once, past twice the cap
    assert len(opened) + len(capped) + closed + answers.count(b"backlog full") == 1000
    assert len(capped) >= 1
    counted = metrics.registry.get_sample_value(
        "mcp_host_egress_connections_total", {"plugin": "flood", "outcome": "capped"}
    )
    assert counted == len(capped) + closed
    assert [r.getMessage() for r in caplog.records] == [
        "plugin flood: egress connections refused at the limit of 4 open"
    ]


async def _first_answer(stream: SocketStream) -> bytes:
    try:
        return await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return b""


async def test_a_flood_of_bytes_is_held_at_the_budget(tmp_path: Path) -> None:
    caps = EgressCaps(connections=4, bytes_per_minute=50_000, idle_s=30.0)
    async with sink_server() as peer, proxy(tmp_path) as running:
        gate = await running.open("web", None, to_site(peer.port), caps)
        stream = await open_tunnel(gate.path, peer.port)
        async with stream, anyio.create_task_group() as tasks:

            async def flood() -> None:
                for _ in range(40):
                    await stream.send(b"x" * 10_000)

            tasks.start_soon(flood)
            await _until(lambda: peer.received >= 50_000 and gate.stats.throttled >= 1)
            await anyio.sleep(0.3)  # long enough for more to pass, were it let through
            assert peer.received == 50_000
            assert gate.stats.bytes_up == 50_000
            tasks.cancel_scope.cancel()


async def test_a_forwarded_request_head_is_spent_from_the_byte_budget(tmp_path: Path) -> None:
    """An absolute-form request's head, sent on by the proxy, spends the budget: the bytes after
    it wait, and so does the next connection's head (else a child could send a head per
    connection past any budget)."""
    async with sink_server() as peer, proxy(tmp_path) as running:
        asked = f"GET http://site.example.test:{peer.port}/ HTTP/1.1\r\n\r\n".encode()
        forwarded = f"GET / HTTP/1.1\r\nHost: site.example.test:{peer.port}\r\nConnection: close\r\n\r\n"
        caps = EgressCaps(connections=4, bytes_per_minute=len(forwarded), idle_s=30.0)
        gate = await running.open("web", None, to_site(peer.port), caps)
        async with await anyio.connect_unix(gate.path) as first, await anyio.connect_unix(gate.path) as second:
            await first.send(asked)
            await _until(lambda: peer.received == len(forwarded))
            await first.send(b"more")
            await _until(lambda: gate.stats.throttled >= 2)  # the tunnel's two ways wait for room
            await second.send(asked)
            await _until(lambda: peer.connections == 2 and gate.stats.throttled >= 3)
            assert peer.received == len(forwarded)
            assert gate.stats.bytes_up == len(forwarded)


async def _until(condition: Any) -> None:
    with anyio.fail_after(10):
        while not condition():  # noqa: ASYNC110 - the counters signal no event
            await anyio.sleep(0.01)


async def test_a_child_that_hangs_up_mid_tunnel_closes_its_destination(tmp_path: Path) -> None:
    async with echo_server() as peer, proxy(tmp_path) as running:
        gate = await running.open("web", None, to_site(peer.port), CAPS)
        stream = await open_tunnel(gate.path, peer.port)
        await stream.send(b"half a message")
        await stream.aclose()
        with anyio.fail_after(5):
            await peer.closed.wait()
        await _until(lambda: gate.stats.connections_now == 0)


async def test_an_idle_tunnel_is_closed(tmp_path: Path) -> None:
    caps = EgressCaps(connections=4, bytes_per_minute=10_000_000, idle_s=0.3)
    async with echo_server() as peer, proxy(tmp_path) as running:
        gate: EgressGate = await running.open("web", None, to_site(peer.port), caps)
        stream = await open_tunnel(gate.path, peer.port)
        async with stream:
            await stream.send(b"one")
            assert await stream.receive() == b"one"
            with anyio.fail_after(5):
                assert await read_all(stream) == b""
        with anyio.fail_after(5):
            await peer.closed.wait()


class _BrokenResolver:
    """A resolver with a fault of its own (not a failed lookup): what a bug would look like."""

    async def resolve(self, host: str, port: int) -> list[Any]:
        raise RuntimeError("internal detail that must not reach a child")


async def test_a_fault_in_the_proxy_ends_that_connection_only_and_says_nothing_of_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with echo_server() as peer:
        with short_folder() as folder:
            async with EgressProxy(folder, _BrokenResolver()) as running:
                policy = EgressPolicy.of([f"site.example.test:{peer.port}", f"127.0.0.1:{peer.port}"])
                gate = await running.open("web", None, EgressPolicy(policy.rules, reach=_LOOPBACK), CAPS)
                answer = await ask(gate.path, f"CONNECT site.example.test:{peer.port} HTTP/1.1\r\n\r\n".encode())
                assert answer == b""
                stream = await open_tunnel(gate.path, peer.port, name="127.0.0.1")
                async with stream:
                    await stream.send(b"still serving")
                    with anyio.fail_after(5):
                        assert await stream.receive() == b"still serving"
    faults = [r for r in caplog.records if r.exc_info]
    assert [r.getMessage() for r in faults] == ["plugin web: an egress connection failed"]


_LOOPBACK = PrivateReach.of(["127.0.0.1"])


def test_caps_are_positive() -> None:
    with pytest.raises(ValueError, match="egress caps are positive"):
        EgressCaps(connections=0, bytes_per_minute=1, idle_s=1.0)
    with pytest.raises(ValueError, match="egress caps are positive"):
        EgressCaps(connections=1, bytes_per_minute=1, idle_s=float("nan"))
