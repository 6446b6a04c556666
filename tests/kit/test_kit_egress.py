"""`open_tunnel`: a TCP connection through the HTTP CONNECT proxy the environment names
(tests/proxy_peer.py on loopback), or directly without one; to a loopback server that greets
first and echoes, as an SMTP server speaks first."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream

from mcp_host_kit import EgressRefused, Unavailable, open_tunnel
from mcp_host_kit.egress import proxy_address
from tests.proxy_peer import REASON, running_proxy

pytestmark = pytest.mark.anyio

GREETING = b"220 hello\r\n"
NAME = "mail.egress.test"  # resolved by the proxy alone


@asynccontextmanager
async def listening(handler: Callable[[SocketStream], object]) -> AsyncIterator[int]:
    """A loopback TCP server running `handler` per connection; yields its port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, handler)
        yield listener.extra(SocketAttribute.local_port)
        tasks.cancel_scope.cancel()


async def greet_and_echo(stream: SocketStream) -> None:
    async with stream:
        await stream.send(GREETING)
        while True:
            try:
                await stream.send(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return


async def talk(sock: socket.socket) -> bytes:
    """What the server said first, then the echo of one line, read off the tunnel."""
    async with await SocketStream.from_socket(sock) as stream:
        said = b""
        while not said.endswith(b"\r\n"):
            said += await stream.receive()
        await stream.send(b"ping\r\n")
        echoed = b""
        while not echoed.endswith(b"\r\n"):
            echoed += await stream.receive()
        return said + echoed


async def test_through_the_proxy_the_server_is_reached_by_name_and_its_first_bytes_kept() -> None:
    async with listening(greet_and_echo) as port, running_proxy({NAME: "127.0.0.1"}) as proxy:
        sock = await open_tunnel(NAME, port, timeout_s=5, environ={"ALL_PROXY": proxy.url})
        assert await talk(sock) == GREETING + b"ping\r\n"
    assert proxy.requests == [f"CONNECT {NAME}:{port}"]


@pytest.mark.parametrize("variable", ["all_proxy", "ALL_PROXY", "https_proxy", "HTTPS_PROXY"])
async def test_each_proxy_variable_is_read_and_an_ipv6_destination_is_bracketed(variable: str) -> None:
    async with running_proxy() as proxy:
        proxy.refused.add("::1:25")
        with pytest.raises(EgressRefused):
            await open_tunnel("::1", 25, timeout_s=5, environ={variable: proxy.url})
    assert proxy.requests == ["CONNECT [::1]:25"]


async def test_a_refused_destination_is_egress_refused_naming_it_and_the_proxys_reason() -> None:
    async with running_proxy() as proxy:
        proxy.refused.add(f"{NAME}:587")
        with pytest.raises(EgressRefused) as refused:
            await open_tunnel(NAME, 587, timeout_s=5, environ={"HTTPS_PROXY": proxy.url})
    assert (refused.value.code, refused.value.destination, refused.value.reason) == (
        "unavailable",
        f"{NAME}:587",
        REASON,
    )
    assert refused.value.message == f"could not reach {NAME}:587: the host's egress proxy refused it ({REASON})"


async def test_another_answer_of_the_proxy_is_a_connection_error_not_a_refusal() -> None:
    async with running_proxy() as proxy:  # nothing listens on port 9: the proxy answers 502
        with pytest.raises(ConnectionRefusedError, match="the proxy answered 502"):
            await open_tunnel("127.0.0.1", 9, timeout_s=5, environ={"ALL_PROXY": proxy.url})


async def test_without_a_proxy_variable_or_with_no_proxy_naming_the_host_it_connects_directly() -> None:
    async with listening(greet_and_echo) as port, running_proxy() as proxy:
        direct = await open_tunnel("127.0.0.1", port, timeout_s=5, environ={})
        bypassed = await open_tunnel(
            "127.0.0.1", port, timeout_s=5, environ={"ALL_PROXY": proxy.url, "NO_PROXY": "localhost,127.0.0.1"}
        )
        assert await talk(direct) == await talk(bypassed) == GREETING + b"ping\r\n"
    assert proxy.requests == []


async def test_a_proxy_answer_and_the_servers_greeting_in_one_segment_are_split_where_the_head_ends() -> None:
    async def answer_then_greet(stream: SocketStream) -> None:
        async with stream:
            await stream.receive()
            await stream.send(b"HTTP/1.1 200 Connection established\r\nX-Via: test\r\n\r\n" + GREETING)
            await stream.send(await stream.receive())

    async with listening(answer_then_greet) as port:
        sock = await open_tunnel(NAME, 25, timeout_s=5, environ={"ALL_PROXY": f"http://127.0.0.1:{port}"})
        assert await talk(sock) == GREETING + b"ping\r\n"


async def test_a_proxy_that_never_answers_times_out_within_the_bound() -> None:
    async def silent(stream: SocketStream) -> None:
        async with stream:
            await anyio.sleep_forever()

    async with listening(silent) as port:
        with anyio.fail_after(5), pytest.raises(TimeoutError):
            await open_tunnel(NAME, 25, timeout_s=0.2, environ={"ALL_PROXY": f"127.0.0.1:{port}"})


@pytest.mark.parametrize("url", ["socks5://127.0.0.1:3128", "http://", "http://127.0.0.1:99999"])
async def test_a_proxy_variable_naming_no_http_proxy_is_unavailable_and_does_not_show_the_url(url: str) -> None:
    with pytest.raises(Unavailable) as refused:
        await open_tunnel(NAME, 25, timeout_s=5, environ={"ALL_PROXY": url})
    assert refused.value.message == "ALL_PROXY names no http:// proxy (host:port); open_tunnel speaks HTTP CONNECT only"


@pytest.mark.parametrize("host", ["mail.test\r\nX-Evil: 1", "mail test", "a/b", "", "a..b", "user@mail.test"])
async def test_a_host_that_is_no_name_or_address_is_refused_before_anything_is_sent(host: str) -> None:
    async with running_proxy() as proxy:
        with pytest.raises(ValueError, match="host must be a host name or an IP address"):
            await open_tunnel(host, 25, timeout_s=5, environ={"ALL_PROXY": proxy.url})
    assert proxy.requests == []


@pytest.mark.parametrize(
    ("host", "no_proxy", "bypassed"),
    [
        ("mail.example.com", "example.com", True),
        ("mail.example.com", ".example.com", True),
        ("example.com", "example.com", True),
        ("badexample.com", "example.com", False),
        ("mail.example.com", "other.test, mail.example.com", True),
        ("::1", "[::1]", True),
        ("anything.test", "*", True),
        ("mail.example.com", "", False),
    ],
)
def test_no_proxy_names_hosts_as_curl_reads_it(host: str, no_proxy: str, bypassed: bool) -> None:
    environ = {"all_proxy": "http://proxy.test:3128", "no_proxy": no_proxy}
    assert proxy_address(host, environ) == (None if bypassed else ("proxy.test", 3128))
