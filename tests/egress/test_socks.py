"""SOCKS5 on the same socket as HTTP: CONNECT without authentication to a name, an IPv4 or
an IPv6 address, the policy's refusals (reply 0x02), and what the proxy does not serve
(another method, command or address type) answered with RFC 1928's codes."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from mcp_host.egress import EgressCaps, EgressProxy, HostsFileResolver, Refusal, SystemResolver
from mcp_host.plugins import EgressPolicy
from tests.egress.loopback import ask, echo_server, read_all, short_folder, write_hosts

pytestmark = pytest.mark.anyio

CAPS = EgressCaps(connections=8, bytes_per_minute=10_000_000, idle_s=30.0)
GREETING = b"\x05\x01\x00"
CHOSEN = b"\x05\x00"
REPLY_OK = b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00"


def _reply(code: int) -> bytes:
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


@asynccontextmanager
async def proxy(tmp_path: Path) -> AsyncIterator[tuple[EgressProxy, list[Refusal]]]:
    refusals: list[Refusal] = []
    with short_folder() as folder:
        resolver = HostsFileResolver(write_hosts(tmp_path), SystemResolver())
        async with EgressProxy(folder, resolver, on_refused=refusals.append) as running:
            yield running, refusals


def _by_name(name: str, port: int) -> bytes:
    return b"\x05\x01\x00\x03" + bytes([len(name)]) + name.encode() + port.to_bytes(2, "big")


def _by_address(address: str, port: int) -> bytes:
    packed = ipaddress.ip_address(address).packed
    return b"\x05\x01\x00" + (b"\x01" if len(packed) == 4 else b"\x04") + packed + port.to_bytes(2, "big")


@pytest.mark.parametrize(
    ("server", "entry", "private", "request_for"),
    [
        (
            "127.0.0.1",
            "site.example.test:{port}",
            "site.example.test",
            lambda port: _by_name("site.example.test", port),
        ),
        ("127.0.0.1", "127.0.0.1:{port}", "127.0.0.1", lambda port: _by_address("127.0.0.1", port)),
        ("::1", "[::1]:{port}", "[::1]", lambda port: _by_address("::1", port)),
        ("::1", "six.example.test:{port}", "six.example.test", lambda port: _by_name("six.example.test", port)),
    ],
    ids=["name", "ipv4", "ipv6", "name at an ipv6 address"],
)
async def test_socks5_connect_tunnels_to_a_name_an_ipv4_or_an_ipv6_address(
    tmp_path: Path, server: str, entry: str, private: str, request_for: object
) -> None:
    async with echo_server(server) as peer, proxy(tmp_path) as (running, _):
        policy = EgressPolicy.of([entry.format(port=peer.port)], allow_private=[private])
        gate = await running.open("web", None, policy, CAPS)
        with anyio.fail_after(10):
            async with await anyio.connect_unix(gate.path) as stream:
                await stream.send(GREETING + request_for(peer.port))  # type: ignore[operator]
                assert await _exactly(stream, 12) == CHOSEN + REPLY_OK
                await stream.send(b"socks!")
                assert await stream.receive() == b"socks!"
        assert gate.stats.connections_total == 1


async def _exactly(stream: anyio.abc.ByteStream, count: int) -> bytes:
    got = b""
    while len(got) < count:
        got += await stream.receive(count - len(got))
    return got


async def test_a_refused_socks5_destination_is_replied_0x02_and_reported(tmp_path: Path) -> None:
    async with echo_server() as peer, proxy(tmp_path) as (running, refusals):
        gate = await running.open("web", "s9", EgressPolicy.of([f"evil.example.test:{peer.port}"]), CAPS)
        answer = await ask(gate.path, GREETING + _by_name("evil.example.test", peer.port))
        metadata = await ask(gate.path, GREETING + _by_address("169.254.169.254", 80))
    assert answer == CHOSEN + _reply(0x02)
    assert metadata == CHOSEN + _reply(0x02)
    assert [r.destination for r in refusals] == [f"evil.example.test:{peer.port}", "169.254.169.254:80"]
    assert peer.connections == 0


@pytest.mark.parametrize(
    ("sent", "answer"),
    [
        (b"\x05\x01\x02", b"\x05\xff"),  # only username/password offered
        (GREETING + b"\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50", CHOSEN + _reply(0x07)),  # BIND
        (GREETING + b"\x05\x03\x00\x01\x7f\x00\x00\x01\x00\x50", CHOSEN + _reply(0x07)),  # UDP ASSOCIATE
        (GREETING + b"\x05\x01\x00\x09\x00\x50", CHOSEN + _reply(0x08)),  # no such address type
        (GREETING + b"\x05\x01\x00\x03\x00\x00\x50", CHOSEN + _reply(0x08)),  # an empty name
        (GREETING + b"\x05\x01\x00\x03\x03\xff\xfe\xfd\x00\x50", CHOSEN + _reply(0x08)),  # not ASCII
        (GREETING + b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x00", CHOSEN + _reply(0x01)),  # port 0
        (GREETING + b"\x04\x01\x00\x01\x7f\x00\x00\x01\x00\x50", CHOSEN + _reply(0x01)),  # SOCKS4 after a greeting
        (b"\x05\x05\x00", b""),  # fewer methods than it said, then nothing
    ],
    ids=["auth only", "bind", "udp", "address type", "empty name", "non-ascii name", "port 0", "socks4", "short"],
)
async def test_what_socks5_does_not_serve_is_answered_with_its_code_and_closed(
    tmp_path: Path, sent: bytes, answer: bytes
) -> None:
    async with proxy(tmp_path) as (running, refusals):
        gate = await running.open("web", None, EgressPolicy.of([], allow_net=True), CAPS)
        with anyio.fail_after(10):
            async with await anyio.connect_unix(gate.path) as stream:
                await stream.send(sent)
                await stream.send_eof()
                assert await read_all(stream) == answer
    assert refusals == []
    assert gate.stats.refused == 1
