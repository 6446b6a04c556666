"""Seeded hostile bytes against one gate: valid HTTP and SOCKS5 heads mutated (bytes flipped,
cut, repeated, control characters and non-ASCII inserted, numbers made huge). The proxy passes
when every case is answered (or closed) within its bound, every HTTP answer is one of the
proxy's statuses with a one-line body, nothing is logged with a traceback, and the gate still
opens a normal tunnel afterwards."""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path

import anyio
import pytest

from mcp_host.egress import EgressCaps, EgressProxy, HostsFileResolver, SystemResolver
from mcp_host.plugins import EgressPolicy
from tests.egress.loopback import echo_server, open_tunnel, read_all, short_folder, write_hosts

pytestmark = pytest.mark.anyio

SEED = 20261207
CASES = 400
_FORWARDED_RE = re.compile(rb"\A[A-Z]{1,16} /[!-~]* HTTP/1\.[01]\r\nHost: ")
_ANSWER_RE = re.compile(rb"\AHTTP/1\.1 (200|400|403|408|429|431|502) [A-Za-z ]+\r\n")


def _templates(port: int) -> list[bytes]:
    name = b"site.example.test"
    return [
        b"CONNECT site.example.test:%d HTTP/1.1\r\nHost: site.example.test\r\n\r\n" % port,
        b"GET http://site.example.test:%d/a?b=c HTTP/1.1\r\nAccept: */*\r\nProxy-Authorization: x\r\n\r\n" % port,
        b"POST http://[::1]:%d/ HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi" % port,
        b"\x05\x01\x00\x05\x01\x00\x03" + bytes([len(name)]) + name + port.to_bytes(2, "big"),
        b"\x05\x02\x00\x02\x05\x01\x00\x01\x7f\x00\x00\x01" + port.to_bytes(2, "big"),
        b"\x05\x01\x00\x05\x01\x00\x04" + b"\x00" * 15 + b"\x01" + port.to_bytes(2, "big"),
    ]


def _mutated(template: bytes, rng: random.Random) -> bytes:
    data = bytearray(template)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(6)
        at = rng.randrange(len(data) + 1)
        if kind == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:
            del data[at:]
        elif kind == 2:
            data[at:at] = bytes([rng.choice([0, 9, 10, 13, 127, 0x80, 0xFF, 0x05])]) * rng.randint(1, 8)
        elif kind == 3:
            data[at:at] = data[at : at + rng.randint(1, 40)] * rng.randint(2, 500)
        elif kind == 4:
            data[at:at] = str(rng.choice([0, -1, 65536, 2**64, 10**400])).encode()[:600]
        else:
            data[at:at] = rng.choice([b"\r\n", b"\r\n\r\n", b":", b"[", b"]", b"@", b"%", b"*."])
    return bytes(data[: 40 * 1024])


@pytest.mark.timeout(300)
async def test_hostile_bytes_leave_the_gate_answering_and_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "mcp_host.egress")
    rng = random.Random(SEED)
    caps = EgressCaps(connections=64, bytes_per_minute=50_000_000, idle_s=5.0)
    odd: list[tuple[bytes, bytes]] = []
    with short_folder() as folder:
        resolver = HostsFileResolver(write_hosts(tmp_path), SystemResolver())
        async with echo_server() as peer, EgressProxy(folder, resolver, head_timeout_s=2.0) as running:
            policy = EgressPolicy.of([f"site.example.test:{peer.port}"], allow_private=["site.example.test"])
            gate = await running.open("web", None, policy, caps)
            templates = _templates(peer.port)

            async def one(case: bytes) -> None:
                with anyio.fail_after(20):
                    async with await anyio.connect_unix(gate.path) as stream:
                        try:
                            await stream.send(case)
                            await stream.send_eof()
                        except anyio.BrokenResourceError:
                            pass  # the gate answered and closed before reading it all
                        answer = await read_all(stream)
                if not _well_formed(answer):
                    odd.append((case[:200], answer[:300]))

            for _ in range(CASES // 20):
                async with anyio.create_task_group() as batch:
                    for _case in range(20):
                        batch.start_soon(one, _mutated(rng.choice(templates), rng))
            stream = await open_tunnel(gate.path, peer.port)
            async with stream:
                await stream.send(b"after the fuzz")
                with anyio.fail_after(5):
                    assert await stream.receive() == b"after the fuzz"
    assert odd == []
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


def _well_formed(answer: bytes) -> bool:
    """An answer of the proxy's, or an echo through a tunnel it opened, or nothing."""
    if not answer or answer.startswith(b"\x05"):
        return True
    if _FORWARDED_RE.match(answer):  # the echo server sent back the request the proxy forwarded
        head = answer.partition(b"\r\n\r\n")[0].lower()
        return b"\r\nproxy-" not in head and head.endswith(b"\r\nconnection: close")
    found = _ANSWER_RE.match(answer)
    if found is None:
        return False
    if found[1] == b"200":
        return True  # a tunnel or a forwarded request: what follows is the echo server's
    body = answer.partition(b"\r\n\r\n")[2]
    return body.endswith(b"\n") and body.count(b"\n") == 1 and b"Error" not in body and b"Traceback" not in body
